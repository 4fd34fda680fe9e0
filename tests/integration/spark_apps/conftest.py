"""One local Spark session for every Spark test of the session (starting one costs seconds)."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Python workers must run this interpreter (the venv), not whatever `python3` is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_apps.runtime.spark import driver_java_options
    from spark_apps.runtime.state.idle_counts import jar

    root = tmp_path_factory.mktemp("spark")
    # Baton's jar, as on a slot's classpath: the slots' checkpoints the tests read are of Baton's state store.
    own = str(jar())
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.extraClassPath", own)
        .appName("baton-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(root / "warehouse"))
        .config("spark.sql.streaming.checkpointLocation", str(root / "checkpoints"))
        .config("spark.local.dir", str(root / "local"))
        .config("spark.driver.extraJavaOptions", driver_java_options(f"-Dderby.system.home={root / 'derby'}"))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()
