"""The SparkSession every slot runs with: RocksDB state with changelog checkpointing (Baton's store: RocksDB's
with a cache of the last batch's rows for its lookups)."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from baton.apps import AppDefinition
from baton.driver_wrapper import JVM_TMPDIR_ENV
from baton.launch_tmp import crash_log_of

# Jobs a slot runs beside its query (state digests) go to this pool; the query's batches run in the
# default pool, which comes first whenever it has a task waiting (FAIR scheduling: a pool running
# fewer tasks than its minShare is served first). Under FIFO scheduling every task of a digest job
# (one per state partition, seconds each) went before the tasks of a batch that came after it, so
# the active's next batch waited for task slots. The pool does not make a digest cheaper: on a
# saturated machine its CPU still slows the batches (the rolling-upgrade bench's worst latency is
# still while both slots digest).
BACKGROUND_POOL = "baton-background"
SCHEDULER_POOLS = f"""<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FIFO</schedulingMode><weight>1000</weight><minShare>1000</minShare></pool>
  <pool name="{BACKGROUND_POOL}"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def session_conf(app: AppDefinition) -> dict[str, str]:
    conf = {
        # The state's partitions (baton.apps.StateSettings.partitions): a new checkpoint takes them, a
        # running one keeps its own (tests/integration/spark_apps/runtime/test_state_partitions.py).
        "spark.sql.shuffle.partitions": str(app.state.partitions),
        "spark.sql.streaming.stateStore.providerClass": state_store_provider(),
        CACHE_KEYS_CONF: str(app.state.cache_keys),
        # Changelog checkpointing: a batch uploads only its changes; a snapshot is taken every
        # minDeltasForSnapshot batches and uploaded by the maintenance task, so a restart loads the
        # last uploaded snapshot and replays the changelogs after it (the app's cadence and what
        # it costs: baton.apps.StateSettings).
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": str(app.state.snapshot_every_batches),
        "spark.sql.streaming.stateStore.maintenanceInterval": f"{app.state.snapshot_upload_interval_s}s",
        "spark.sql.streaming.minBatchesToRetain": str(app.state.min_batches_to_retain),
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        # RocksDB counts the state's rows by looking every written key up first (StateSettings.count_rows).
        # Off, Spark reports no count (numRowsTotal 0: progress.status_from_progress reads none); a later
        # start with it on counts the keys once as it loads the state.
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": str(app.state.count_rows).lower(),
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "256",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # Checkpoints are local folders (or a POSIX mount): Hadoop's FileContext, without its native
        # library, runs `readlink` for every rename, a process each (~50 ms on each of the offset and
        # commit log writes). The FileSystem-based manager renames with File.renameTo (atomic on
        # POSIX). Not RawLocalFileSystem for `file:` (it would also spare the `chmod` per file): the
        # RocksDB state store's snapshot upload needs FileSystem.getLocal to be a LocalFileSystem,
        # and without snapshots a restart replays every changelog since the first batch.
        "spark.sql.streaming.checkpointFileManagerClass": "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        "spark.sql.streaming.ui.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A streaming aggregation runs four hash aggregations a batch (partial, merge, merge with the
        # state, final), each keyed by nearly every row's own key here (a batch holds few events per
        # key), where the first-level "fast" map only adds a probe and a copy before the real one.
        # A/B at the seed's rate (bench/throughput.py, active + standby): slots 1.32 -> 1.25 cores,
        # batch p50 790 -> 680 ms (bench/HISTORY.md).
        "spark.sql.codegen.aggregate.map.twolevel.enabled": "false",
        "spark.scheduler.mode": "FAIR",  # the pools: SCHEDULER_POOLS
    }
    jar_built = conf["spark.sql.streaming.stateStore.providerClass"] == CACHED_STORE
    if jar_built:
        conf["spark.sql.extensions"] = SINGLE_PARTITION_STATE_RULE
    # Baton's JVM classes on every executor: a TTL's operator (spark_apps.runtime.state.idle_counts), Baton's store.
    if app.state.ttl is not None or jar_built:
        from spark_apps.runtime.state.idle_counts import jar

        conf["spark.jars"] = str(jar())
    return conf


ROCKSDB_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# Spark's RocksDB store with the last committed batch's rows kept in the heap for its lookups
# (jvm/src/baton/state/CachedRocksDBStateStoreProvider.java; StateSettings.cache_keys says how many).
CACHED_STORE = "baton.state.CachedRocksDBStateStoreProvider"
CACHE_KEYS_CONF = "spark.sql.streaming.stateStore.baton.cacheMaxKeys"
# No shuffle into a one-partition state from a one-partition read: one stage a batch instead of two
# (jvm/src/baton/plan/SinglePartitionStateRule.java).
SINGLE_PARTITION_STATE_RULE = "baton.plan.SinglePartitionStateRule"


def state_store_provider() -> str:
    """Baton's store where its jar is built (`make install`), else RocksDB's own. A new checkpoint keeps
    the provider it started with (Spark restores it from the checkpoint): a checkpoint of Baton's store
    needs the jar wherever it runs or is read; one of RocksDB's keeps RocksDB's (no cache)."""
    from spark_apps.runtime.install.spark_home import baton_jar

    return CACHED_STORE if baton_jar() is not None else ROCKSDB_STORE


# `file:` for a local driver started from Baton's Spark home (its jar on the classpath; a local
# master's tasks run in that JVM): Hadoop's LocalFileSystem, checksums and all, whose permissions are
# set by a system call. Without Hadoop's native library every file it creates is chmod-ed by a process
# (a shell command and a thread to read it): ~15 a batch (the offset and commit log entries, a
# changelog per state partition, each with its checksum), 5-6 a second for an active at 1 s batches.
NO_FORK_LOCAL_FS = "baton.fs.NoForkLocalFileSystem"


def scheduler_pools_file() -> Path:
    """SCHEDULER_POOLS as a file for spark.scheduler.allocation.file (named by its content, so every
    slot on the machine shares one, written once and atomically)."""
    path = Path(tempfile.gettempdir()) / f"baton-pools-{hashlib.sha256(SCHEDULER_POOLS.encode()).hexdigest()[:12]}.xml"
    if not path.is_file():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(SCHEDULER_POOLS)
        os.replace(tmp, path)
    return path


@contextmanager
def background_jobs(spark):
    """Jobs started by this thread inside the block run in the background pool, behind the query."""
    sc = spark.sparkContext
    sc.setLocalProperty("spark.scheduler.pool", BACKGROUND_POOL)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)


def driver_java_options(given: str) -> str:
    """The driver JVM's options: the class-data-sharing archive (spark_apps.runtime.install.cds), the launch's own
    temporary directory (baton.launch_tmp: removed when the launch ends, however it ends) and where a crash
    of it logs (its slot's directory, not the checkout it runs in), then any given (a -Djava.io.tmpdir
    in the launch's conf comes after ours, and wins).
    The collector stays G1, the JVM's default: the throughput collector (-XX:+UseParallelGC) used ~5 %
    less CPU at the seed's rate, but its full collections of the 1 GB heap, every few minutes as the
    old generation filled (~10 % of it a minute), stopped a slot for up to 1.0 s (bench/HISTORY.md)."""
    from spark_apps.runtime.install import cds

    if "ArchiveClassesAtExit" in given:  # building the archive
        return given
    launch_tmp = os.environ.get(JVM_TMPDIR_ENV, "")
    # Spark splits these options at spaces: a state dir with one in its path keeps the host's temp dir
    # (and a crash log goes to the working directory, the JVM's default).
    own = (
        [f"-Djava.io.tmpdir={launch_tmp}", f"-XX:ErrorFile={crash_log_of(Path(launch_tmp))}"]
        if launch_tmp and " " not in launch_tmp
        else []
    )
    return " ".join(o for o in (cds.java_options(), *own, given) if o)


def session(name: str, app: AppDefinition, extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    from spark_apps.runtime.install import spark_home

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(name)
    own: dict[str, str] = {}
    # Under spark-submit (which sets PYSPARK_GATEWAY_PORT for the Python driver) the master comes
    # from the submit command and must not be overridden; under plain `python` Baton picks it.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = (extra or {}).get("spark.master") or os.environ.get("BATON_SPARK_MASTER", "local[2]")
        if "spark.master" not in (extra or {}):
            builder = builder.master(master)
        # The driver JVM this process launches starts from Baton's Spark home (no Spark ML), unless
        # the environment names one.
        if "SPARK_HOME" not in os.environ and (home := spark_home.local_home()) is not None:
            os.environ["SPARK_HOME"] = str(home)
        if (
            master.startswith("local")
            and os.environ.get("SPARK_HOME") == str(spark_home.HOME)
            and spark_home.has_baton_jar(spark_home.HOME)
        ):
            own["spark.hadoop.fs.file.impl"] = NO_FORK_LOCAL_FS
    conf = {**session_conf(app), **own, "spark.scheduler.allocation.file": str(scheduler_pools_file()), **(extra or {})}
    if own and conf.get("spark.jars") == str(spark_home.baton_jar()):
        # A local driver from Baton's Spark home has Baton's jar on its classpath already; shipped as well,
        # its copy for the tasks would be fetched and chmod-ed by a process at every start.
        del conf["spark.jars"]
    conf["spark.driver.extraJavaOptions"] = driver_java_options(conf.get("spark.driver.extraJavaOptions", ""))
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    skip_installed_data_source_lookup(spark)
    drop_hadoop_conf_sources(spark)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def drop_hadoop_conf_sources(spark) -> int:
    """Forget which file set each Hadoop property (core-default.xml, hdfs-default.xml, ...): returns
    how many properties had one. Spark broadcasts the session's Hadoop configuration for each of a
    batch's two state store RDDs, and Hadoop writes every property's sources as a gzip stream of its
    own: ~1,100 Deflaters and 116 KB a broadcast, ~7 ms of the driver's CPU (measured here; ~1 ms
    without the sources, 70 KB). The sources are only for people reading a configuration dump; the
    values stay. A configuration that loads its resources again (a new default resource: every class
    that adds one is loaded by the time the session exists) records them again, so this is a saving,
    not a guarantee. Best effort: on a Hadoop without the field nothing changes."""
    try:
        jvm = spark.sparkContext._jvm
        field = jvm.java.lang.Class.forName("org.apache.hadoop.conf.Configuration").getDeclaredField("updatingResource")
        field.setAccessible(True)
        sources = field.get(spark.sparkContext._jsc.hadoopConfiguration())
        if sources is None:
            return 0
        dropped = sources.size()
        sources.clear()
        return dropped
    except Exception:  # noqa: BLE001 - an optimisation only
        return 0


def skip_installed_data_source_lookup(spark) -> None:
    """Spark looks for Python data sources advertised by installed packages (entry points) before
    the first data source is resolved: a Python daemon and worker that scan every installed
    distribution, ~0.5 s of a slot's start measured here, then idle for the process's life. Baton
    registers its source by name and uses none of those; setting the (testing) hook Spark keeps
    for the lookup's result to "none found" skips it. Best effort: on a Spark without the hook the
    lookup simply runs."""
    try:
        jvm = spark.sparkContext._jvm
        manager = getattr(getattr(jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager$"), "MODULE$")
        if manager.dataSourceBuilders().isEmpty():
            empty = getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
    except Exception:  # noqa: BLE001 - an optimisation only
        pass
