"""Spark's Python processes import the installed pyspark, not the zip Spark puts first on their path."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from spark_apps.runtime.install import worker_path


def imported_pyspark(pythonpath: str) -> str:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run(
        [sys.executable, "-c", "import pyspark, sys; print(pyspark.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_make_install_wrote_the_path_file_beside_the_installed_pyspark():
    pth = Path(sysconfig.get_paths()["purelib"]) / worker_path.PTH_NAME  # the virtualenv's site-packages
    assert worker_path.installed_zips_dir().parents[2] == pth.parent
    assert pth.read_text() == worker_path.pth_line(worker_path.installed_zips_dir())


def test_a_process_started_with_sparks_worker_path_imports_the_installed_pyspark():
    zips = worker_path.installed_zips_dir()
    assert (zips / "pyspark.zip").is_file()  # what Spark prepends (SPARK_HOME = the installed package)
    spark_path = os.pathsep.join([str(zips / "pyspark.zip"), *map(str, zips.glob("py4j-*-src.zip"))])
    got = imported_pyspark(spark_path)
    assert ".zip" not in got and Path(got).parent == zips.parents[1], got


def test_another_spark_distributions_zip_stays_on_the_path(tmp_path):
    other = tmp_path / "spark" / "python" / "lib"
    (other / "pyspark").mkdir(parents=True)
    (other / "pyspark" / "__init__.py").write_text("")
    assert imported_pyspark(str(other)) == str(other / "pyspark" / "__init__.py")


def test_install_writes_one_line_that_only_drops_the_installed_zips(tmp_path):
    path = worker_path.install(tmp_path)
    line = path.read_text()
    assert line.startswith("import sys;") and line.count("\n") == 1
    zips = worker_path.installed_zips_dir()
    path_before = [str(zips / "pyspark.zip"), "/elsewhere/pyspark.zip", str(zips.parent)]
    scope = {}
    exec(
        line.replace("import sys;", "sys = __import__('types').SimpleNamespace(path=list(P));"),
        {"P": path_before},
        scope,
    )
    assert scope["sys"].path == ["/elsewhere/pyspark.zip", str(zips.parent)]


def test_the_command_refuses_unknown_arguments(capsys):
    assert worker_path.main(["uninstall"]) == 2
    assert "usage" in capsys.readouterr().err
