"""A slot's Spark settings, in a JVM of their own (they are static: a shared test session cannot
take them): the RocksDB state store uploads its snapshots with FileSystem.copyFromLocalFile, which
needs `file:` to be Hadoop's LocalFileSystem. A raw file system there made every snapshot upload
fail, so a restart replayed every changelog since the first batch (seen in a benchmark's log)."""

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
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=180)
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
    out = subprocess.run([sys.executable, "-c", POOLS_SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pool after: None" in out.stdout, out.stdout
    order = out.stdout.split("order:", 1)[1].split()
    assert sorted(order) == sorted([f"background{i}" for i in range(6)] + ["query0", "query1"]), order
    # Two background tasks were running when the query's job came; the query's two ran next.
    assert [t.rstrip("0123456789") for t in order[:4]] == ["background", "background", "query", "query"], order
