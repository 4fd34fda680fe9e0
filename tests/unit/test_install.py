"""The installed environment is the one the lock promises (regression: pyspark-client 4.2.0, pulled
by the Spark provider, overwrites pyspark 4.3.0's Python files and leaves them driving 4.3.0 jars)."""

import importlib.metadata as md
import importlib.util
import re
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parents[2]


def locked(name: str) -> str:
    m = re.search(rf"^{re.escape(name)}==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert m, f"{name} is not pinned in requirements.txt"
    return m.group(1)


def test_importable_pyspark_matches_its_jars_and_the_lock():
    jars = Path(pyspark.__file__).parent / "jars"
    core = [p.name for p in jars.glob("spark-core_*.jar")]
    assert len(core) == 1, core
    jar_version = re.match(r"spark-core_[\d.]+-(.+)\.jar", core[0]).group(1)
    assert pyspark.__version__ == jar_version == locked("pyspark")


def test_pyspark_client_is_not_installed():
    try:
        md.version("pyspark-client")
    except md.PackageNotFoundError:
        return
    raise AssertionError("pyspark-client is installed: it overwrites pyspark's Python files")


def test_every_locked_package_is_installed_at_its_version():
    wrong = []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            try:
                have = md.version(m.group(1))
            except md.PackageNotFoundError:
                have = None
            if have != m.group(2):
                wrong.append((m.group(1), m.group(2), have))
    assert wrong == []


def test_installed_packages_carry_compiled_bytecode():
    """`make install` compiles: with PYTHONDONTWRITEBYTECODE set, nothing else ever would, and every
    Spark worker and Airflow task would compile its imports again."""
    import pyspark.sql.session as mod

    cached = Path(importlib.util.cache_from_source(mod.__file__))
    assert cached.is_file(), f"no bytecode for {mod.__file__}"


def test_the_local_drivers_spark_home_is_built_for_the_installed_pyspark():
    from spark_apps.runtime.install import spark_home

    assert spark_home.current(), f"{spark_home.HOME} is missing or stale: `make install` builds it"


def test_the_spark_drivers_class_data_sharing_archive_is_built_for_this_java_and_pyspark():
    from spark_apps.runtime.install import cds

    assert cds.current(), f"{cds.ARCHIVE} is missing or stale: `make install` builds it"
