"""A class-data-sharing archive for the Spark driver's JVM: a slot (re)starts seconds sooner.

    python -m spark_apps.runtime.cds build    # `make install` runs it; nothing to do when current

Measured on the project's 2-core machine: a SparkSession took ~10 s to start and its first job ~3.5 s,
much of it loading and verifying Spark's ~22k classes; with the archive, ~6 s and ~2.3 s. The archive
is a JDK dynamic CDS archive (-XX:ArchiveClassesAtExit) of the classes a slot loads: a session with
the slots' settings, a streaming aggregation on RocksDB state with foreachBatch, the state reader, a
Python data source. It is valid for one JVM and one classpath (the installed pyspark's jars), which
`build` records beside it and checks; at run time the JVM itself checks again and, should it not
match, starts without it (-Xshare:auto). A missing archive is never an error, only slower.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHIVE = Path(sys.prefix) / "baton-spark-cds.jsa"
STAMP = ARCHIVE.with_suffix(".json")


def java_options() -> str:
    """The driver JVM option that uses the archive, or "" when there is none."""
    return f"-XX:SharedArchiveFile={ARCHIVE}" if ARCHIVE.is_file() else ""


def fingerprint() -> dict:
    """What the archive depends on: the java that runs Spark and the jars on its classpath (those of
    the Spark home a local driver starts from, spark_apps.runtime.spark_home)."""
    import pyspark

    from spark_apps.runtime import spark_home

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.strip()
    home = spark_home.local_home() or spark_home.pyspark_dir()
    jars = sorted((home / "jars").glob("*.jar"))
    digest = hashlib.sha256("\n".join(f"{j.name}:{j.stat().st_size}" for j in jars).encode()).hexdigest()
    return {"java": version, "pyspark": pyspark.__version__, "home": str(home), "jars": digest}


def current() -> bool:
    try:
        return ARCHIVE.is_file() and json.loads(STAMP.read_text()) == fingerprint()
    except (FileNotFoundError, ValueError):
        return False


def build(timeout_s: float = 600.0) -> Path:
    """(Re)build the archive by running the workload in a child whose JVM dumps its classes at exit."""
    with tempfile.TemporaryDirectory(prefix="baton-cds-") as tmp:
        target = Path(tmp) / "archive.jsa"
        env = {**os.environ, "BATON_CDS_DUMP": str(target)}
        proc = subprocess.run([sys.executable, "-m", "spark_apps.runtime.cds", "workload", tmp], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not target.is_file():
            raise RuntimeError(f"the CDS workload failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        os.replace(target, ARCHIVE)
    STAMP.write_text(json.dumps(fingerprint()))
    return ARCHIVE


def workload(tmp: Path) -> None:
    """What a slot's driver does, in small: the classes it loads go into the archive."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType

    from baton.apps import AppDefinition, TopicRef
    from spark_apps.runtime.kafka_source import KafkaSource
    from spark_apps.runtime.spark import session

    app = AppDefinition(name="cds", module="spark_apps.apps.click_counts", version="v1",
                        input=TopicRef("in", 2), output=TopicRef("out", 2))
    spark = session("baton-cds", app, {"spark.driver.extraJavaOptions":
                                       f"-XX:ArchiveClassesAtExit={os.environ['BATON_CDS_DUMP']}"})
    spark.dataSource.register(KafkaSource)
    DataType.fromDDL("user_id STRING, timestamp LONG")
    checkpoint = str(tmp / "checkpoint")
    events = (spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
              .select((F.col("value") % 100).cast("string").alias("user_id"), F.col("value").alias("timestamp")))
    counts = events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count"))
    out = counts.select(F.col("user_id").cast("binary").alias("key"),
                        F.to_json(F.struct("user_id", "count")).cast("binary").alias("value"))
    query = (out.writeStream.outputMode("update").foreachBatch(lambda df, _id: df.toArrow())
             .option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start())
    try:
        while len(query.recentProgress) < 3:
            if query.awaitTermination(0.5):
                raise RuntimeError(f"the workload's query ended: {query.exception()}")
    finally:
        query.stop()
    state = spark.read.format("statestore").load(checkpoint)
    state.select(F.count(F.lit(1)), F.bit_xor(F.xxhash64("key", "value"))).first()
    spark.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["workload"]:
        workload(Path(argv[1]))
        return 0
    if argv[:1] != ["build"]:
        print("usage: python -m spark_apps.runtime.cds build", file=sys.stderr)
        return 2
    if current():
        print(f"CDS archive current: {ARCHIVE}")
        return 0
    try:
        print(f"built the Spark driver's CDS archive: {build()}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # An optimisation only: slots start without it, a few seconds slower.
        print(f"warning: no CDS archive for the Spark driver (slots start without it): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
