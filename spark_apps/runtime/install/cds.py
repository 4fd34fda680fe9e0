"""A class-data-sharing archive for the Spark driver's JVM: a slot (re)starts seconds sooner.

    python -m spark_apps.runtime.install.cds build    # `make install` runs it; nothing to do when current

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
    the Spark home a local driver starts from, spark_apps.runtime.install.spark_home)."""
    import pyspark

    from spark_apps.runtime.install import spark_home

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
        proc = subprocess.run(
            [sys.executable, "-m", "spark_apps.runtime.install.cds_workload", tmp],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if proc.returncode != 0 or not target.is_file():
            raise RuntimeError(f"the CDS workload failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        os.replace(target, ARCHIVE)
    STAMP.write_text(json.dumps(fingerprint()))
    return ARCHIVE


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"]:
        print("usage: python -m spark_apps.runtime.install.cds build", file=sys.stderr)
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
