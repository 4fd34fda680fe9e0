"""The Spark home a local slot's driver starts from: the installed pyspark's, without Spark ML.

    python -m spark_apps.runtime.install.spark_home build    # `make install` runs it (before the CDS archive)

Every SparkSession applies the session extensions its classpath advertises (a ServiceLoader over
every jar), and the only one in pyspark's jars is Spark ML's: it registers ML functions through
Scala reflection, ~1 s of a session's start on this project's 2-core machine, for functions no Baton
app uses. This home holds the same `bin` (a link) and links to every jar but Spark ML's and the
libraries only ML and GraphX use; measured with a CDS archive built for each: a session started in
2.7-3.0 s instead of 3.8-4.1 s; the restart benchmark's first batch came 2-2.8 s sooner. Baton's
own jar (`make install` builds it, spark_apps.runtime.state.idle_counts.JAR) is linked among the jars, so
its classes are on the driver's classpath from the JVM's start (and in its CDS archive): the local
file system that sets permissions without a process (spark_apps.runtime.spark). It has
no `python/lib` either: Spark would put those zips first on every Python process's path, where
they only slow imports down (spark_apps.runtime.install.worker_path); its Python processes import the
installed pyspark.

`spark_apps.runtime.spark.session` starts local drivers from it when it is current; a missing or
stale home only makes a start slower. Executors of a cluster use their own Spark home.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HOME = Path(sys.prefix) / "baton-spark-home"
# Jars no Baton slot loads a class from: Spark ML and GraphX, and the numeric libraries only they use.
LEFT_OUT = (
    "spark-mllib_",
    "spark-mllib-local_",
    "spark-graphx_",
    "breeze_",
    "breeze-macros_",
    "spire_",
    "spire-macros_",
    "spire-platform_",
    "spire-util_",
    "algebra_",
    "arpack-",
    "arpack_combined_all-",
    "blas-",
    "lapack-",
)


def pyspark_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def wanted_jars(source: Path) -> list[Path]:
    return sorted(j for j in (source / "jars").glob("*.jar") if not j.name.startswith(LEFT_OUT))


def baton_jar() -> Path | None:
    """Baton's own jar, when `make install` has built it."""
    from spark_apps.runtime.state.idle_counts import JAR

    return JAR if JAR.is_file() else None


def links(source: Path) -> dict[str, Path]:
    """The home's jars: name -> what it links to."""
    want = {j.name: j for j in wanted_jars(source)}
    if (own := baton_jar()) is not None:
        want[own.name] = own
    return want


def current(home: Path = HOME) -> bool:
    """The home links exactly the installed pyspark's bin and wanted jars, and Baton's jar if built
    (checked at every slot start: one readlink a link, not a resolve)."""
    source = pyspark_dir()
    try:
        if os.readlink(home / "bin") != str(source / "bin"):
            return False
        want = links(source)
        return sorted(os.listdir(home / "jars")) == sorted(want) and all(
            os.readlink(home / "jars" / name) == str(j) for name, j in want.items()
        )
    except OSError:
        return False


def has_baton_jar(home: Path) -> bool:
    """Whether a driver started from `home` has Baton's jar on its classpath."""
    own = baton_jar()
    return own is not None and (home / "jars" / own.name).is_symlink()


def build(home: Path = HOME) -> Path:
    """(Re)build the home next to it, then swap it in (a slot starting meanwhile sees the old one)."""
    source = pyspark_dir()
    staging = home.with_name(home.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "jars").mkdir(parents=True)
    (staging / "bin").symlink_to(source / "bin")
    for name, jar in links(source).items():
        (staging / "jars" / name).symlink_to(jar)
    old = home.with_name(home.name + f".old{os.getpid()}")
    if home.exists():
        home.rename(old)
    staging.rename(home)
    shutil.rmtree(old, ignore_errors=True)
    return home


def local_home() -> Path | None:
    """The home to start a local driver from, or None (then the installed pyspark's own)."""
    return HOME if current() else None


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: python -m spark_apps.runtime.install.spark_home build", file=sys.stderr)
        return 2
    if current():
        print(f"Spark home current: {HOME}")
        return 0
    print(f"built the slots' Spark home: {build()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
