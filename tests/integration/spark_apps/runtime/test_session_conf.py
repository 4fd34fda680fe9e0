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
