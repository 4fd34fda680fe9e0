"""A slot's Spark settings, in a JVM of their own (they are static: a shared test session cannot
take them): the RocksDB state store uploads its snapshots with FileSystem.copyFromLocalFile, which
needs `file:` to be Hadoop's LocalFileSystem. A raw file system there made every snapshot upload
fail, so a restart replayed every changelog since the first batch (seen in a benchmark's log)."""

import os
import shutil
import subprocess
import sys

from baton.settings import REPO_ROOT

SCRIPT = """
import sys
from pathlib import Path
from baton.apps import load_app
from spark_apps.runtime.spark import session

spark = session("baton-conf-test", load_app("click_counts"), {"spark.master": "local[1]"})
jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf)
src, dst = Path(sys.argv[1]) / "snapshot.zip", Path(sys.argv[1]) / "checkpoint" / "state" / "1.zip"
src.write_bytes(b"state")
target = jvm.org.apache.hadoop.fs.Path(dst.as_uri())
target.getFileSystem(conf).copyFromLocalFile(jvm.org.apache.hadoop.fs.Path(src.as_uri()), target)
print(jvm.java.lang.Class.forName("org.apache.hadoop.fs.LocalFileSystem").isInstance(local), dst.read_bytes().decode())
spark.stop()
"""


def test_the_state_store_can_upload_a_snapshot_to_a_local_checkpoint(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["True", "state"], out.stdout


POOLS_SCRIPT = """
import os, sys, threading, time
from pathlib import Path
from baton.apps import load_app
from spark_apps.runtime.spark import BACKGROUND_POOL, background_jobs, session

marks = Path(sys.argv[1])
spark = session("baton-pools-test", load_app("click_counts"), {"spark.master": "local[2]"})
sc = spark.sparkContext

def task(tag, seconds):
    def run(index, rows):
        (marks / f"{time.monotonic():.6f}-{tag}{index}").touch()
        time.sleep(seconds)
        return [index]
    return run

def background():
    with background_jobs(spark):
        assert sc.getLocalProperty("spark.scheduler.pool") == BACKGROUND_POOL
        sc.parallelize(range(6), 6).mapPartitionsWithIndex(task("background", 1.0)).collect()

worker = threading.Thread(target=background)
worker.start()
while len(list(marks.iterdir())) < 2:  # both task slots busy with the background job
    time.sleep(0.05)
sc.parallelize(range(2), 2).mapPartitionsWithIndex(task("query", 0.1)).collect()
worker.join()
print("pool after:", sc.getLocalProperty("spark.scheduler.pool"))
print("order:", " ".join(p.name.split("-", 1)[1] for p in sorted(marks.iterdir())))
spark.stop()
"""


def test_a_background_job_leaves_the_next_free_task_slot_to_the_query(tmp_path):
    """A slot digests its state beside the running query (background_jobs): a job of the query that
    arrives while the digest's tasks fill both task slots runs on the first slot that frees up, not
    after every task of the digest (FIFO's order)."""
    out = subprocess.run(
        [sys.executable, "-c", POOLS_SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pool after: None" in out.stdout, out.stdout
    order = out.stdout.split("order:", 1)[1].split()
    assert sorted(order) == sorted([f"background{i}" for i in range(6)] + ["query0", "query1"]), order
    # Two background tasks were running when the query's job came; the query's two ran next.
    assert [t.rstrip("0123456789") for t in order[:4]] == ["background", "background", "query", "query"], order


HOME_SCRIPT = """
import os
import psutil
from pyspark.sql.datasource import DataSource, DataSourceReader
from baton.apps import load_app
from spark_apps.runtime.spark import session

class Numbers(DataSource):
    @classmethod
    def name(cls):
        return "numbers"
    def schema(self):
        return "n INT"
    def reader(self, schema):
        return NumbersReader()

class NumbersReader(DataSourceReader):
    def read(self, partition):
        yield from ((i,) for i in range(3))

spark = session("baton-home-test", load_app("click_counts"), {"spark.master": "local[1]"})
jvm = spark._jvm
print("home:", os.environ["SPARK_HOME"])
print("classpath:", jvm.java.lang.System.getProperty("java.class.path"))
try:  # Spark ML's session extension (ServiceLoader), applied to every session when on the classpath
    jvm.java.lang.Class.forName("org.apache.spark.sql.ml.InternalFunctionRegistration")
    print("ml extension: present")
except Exception:
    print("ml extension: absent")
spark.dataSource.register(Numbers)
print("read:", [r.n for r in spark.read.format("numbers").load().collect()])
# Spark's lookup of installed Python data sources runs in a daemon that lives as long as the JVM.
def cmdline(p):
    try:  # a worker that has just exited (a zombie until reaped) or gone has no command line
        return " ".join(p.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return ""
lookups = [p for p in psutil.Process().children(recursive=True) if "lookup_data_sources" in cmdline(p)]
print("lookup processes:", len(lookups))
spark.stop()
"""


def test_a_slot_driver_starts_from_batons_spark_home_without_spark_ml(tmp_path):
    """A slot's session starts from spark_home.HOME (no Spark ML on the classpath, so no ML session
    extension to apply), skips the lookup of installed Python data sources, and Python data sources
    registered by name still work."""
    from spark_apps.runtime.install import spark_home

    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    out = subprocess.run(
        [sys.executable, "-c", HOME_SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert lines["home"] == str(spark_home.HOME)
    classpath = lines["classpath"]
    assert str(spark_home.HOME / "jars") in classpath and "mllib" not in classpath, classpath
    assert lines["ml extension"] == "absent"
    assert lines["lookup processes"] == "0"
    assert lines["read"] == "[0, 1, 2]"


CHMOD_SCRIPT = """
import os, sys
from pathlib import Path
from baton.apps import load_app
from spark_apps.runtime.spark import session

tmp = Path(sys.argv[1])
spark = session("baton-fs-test", load_app("click_counts"), {"spark.master": "local[1]"})
jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
fs = jvm.org.apache.hadoop.fs

def create(filesystem, name):
    out = filesystem.create(fs.Path((tmp / name).as_uri()), True)
    out.write(b"x")
    out.close()
    return oct(os.stat(tmp / name).st_mode & 0o777), oct(os.stat(tmp / f".{name}.crc").st_mode & 0o777)

local = fs.FileSystem.getLocal(conf)
print("class", local.getClass().getName(), jvm.java.lang.Class.forName("org.apache.hadoop.fs.LocalFileSystem").isInstance(local))
print("ours", *create(local, "ours"), (tmp / "chmod-ran").exists())
hadoops = jvm.org.apache.hadoop.conf.Configuration(conf)
hadoops.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
print("hadoops", *create(fs.FileSystem.newInstance(fs.Path(tmp.as_uri()).toUri(), hadoops), "hadoops"),
      (tmp / "chmod-ran").exists())
spark.stop()
"""


def test_a_local_slot_writes_its_files_with_hadoops_permissions_and_no_chmod_process(tmp_path):
    """A slot's driver started from Baton's Spark home sets file permissions by a system call: the
    same modes as Hadoop's own LocalFileSystem, which runs `chmod` for every file (a `chmod` first on
    the PATH records that it ran: it did for Hadoop's, not for Baton's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("chmod")
    (bin_dir / "chmod").write_text(f'#!/bin/sh\ntouch {tmp_path / "chmod-ran"}\nexec {real} "$@"\n')
    (bin_dir / "chmod").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, "-c", CHMOD_SCRIPT, str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.split()}
    assert lines["class"] == ["baton.fs.NoForkLocalFileSystem", "True"], out.stdout
    assert lines["ours"] == ["0o644", "0o644", "False"], out.stdout
    assert lines["hadoops"] == ["0o644", "0o644", "True"], out.stdout


SOURCES_SCRIPT = """
import json, sys
from pathlib import Path
from baton.apps import load_app
from spark_apps.runtime.spark import session

tmp = Path(sys.argv[1])
spark = session("baton-sources-test", load_app("click_counts"), {"spark.master": "local[1]"})
jvm, state = spark._jvm, spark._jsparkSession.sessionState()
field = jvm.java.lang.Class.forName("org.apache.hadoop.conf.Configuration").getDeclaredField("updatingResource")
field.setAccessible(True)

def serialized_bytes(conf):
    out = jvm.java.io.ByteArrayOutputStream()
    objects = jvm.java.io.ObjectOutputStream(out)
    objects.writeObject(jvm.org.apache.spark.util.SerializableConfiguration(conf))
    objects.close()
    return out.size()

(tmp / "in").mkdir()
for i in range(3):
    (tmp / "in" / f"{i}.json").write_text(json.dumps({"user": f"u{i}"}))
# a stateful query's batches (the state store broadcasts the session's Hadoop configuration in each)
query = (spark.readStream.schema("user string").option("maxFilesPerTrigger", 1).json(str(tmp / "in"))
         .groupBy("user").count().writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(tmp / "checkpoint")).trigger(availableNow=True).start())
query.awaitTermination()
conf = state.newHadoopConf()
print("batches", query.lastProgress["batchId"] + 1)
print("properties", conf.size())
print("sources", field.get(conf).size())
print("defaultFS", conf.get("fs.defaultFS"))
print("bytes", serialized_bytes(conf))
hadoops = jvm.org.apache.hadoop.conf.Configuration()
hadoops.size()  # loads its resources, recording each property's sources
field.get(conf).putAll(field.get(hadoops))  # the sources as Hadoop keeps them
print("bytes_with_sources", serialized_bytes(conf))
spark.stop()
"""


def test_a_slot_broadcasts_its_hadoop_configuration_without_the_sources_of_its_properties(tmp_path):
    """Spark broadcasts the session's Hadoop configuration for each state store RDD of every batch, and
    Hadoop writes each property's sources (the file that set it) as a gzip stream of its own: a slot's
    session forgets them (spark.drop_hadoop_conf_sources). Through a stateful query's batches the
    session's configuration keeps its properties and gains no sources back, and is written in less."""
    out = subprocess.run(
        [sys.executable, "-c", SOURCES_SCRIPT, str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert int(lines["batches"]) == 3, out.stdout
    assert int(lines["properties"]) > 1000, out.stdout  # core-, hdfs-, mapred-default.xml and Spark's own
    # only what the session set itself since (Spark's SQL settings copied in, "programmatically")
    assert int(lines["sources"]) < 100, out.stdout
    assert lines["defaultFS"] == "file:///", out.stdout
    assert int(lines["bytes"]) < 0.75 * int(lines["bytes_with_sources"]), out.stdout
