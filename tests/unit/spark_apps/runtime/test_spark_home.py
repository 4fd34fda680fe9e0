"""The local drivers' Spark home: the installed pyspark's bin and jars, without Spark ML's."""

from spark_apps.runtime.install import spark_home


def test_the_home_links_every_jar_but_spark_mls_and_the_installed_bin(tmp_path):
    home = spark_home.build(tmp_path / "home")
    source = spark_home.pyspark_dir()
    linked = {p.name for p in (home / "jars").iterdir()} - {"baton-jvm.jar"}  # Baton's own: the test below
    every = {j.name for j in (source / "jars").glob("*.jar")}
    assert any(n.startswith("spark-mllib_") for n in every)  # there is something to leave out
    assert not any(n.startswith(spark_home.LEFT_OUT) for n in linked)
    assert {n for n in every if not n.startswith(spark_home.LEFT_OUT)} == linked
    assert any(n.startswith("spark-sql_") for n in linked) and any(n.startswith("rocksdbjni") for n in linked)
    assert (home / "bin" / "spark-submit").resolve() == (source / "bin" / "spark-submit").resolve()
    assert not (home / "python").exists()  # no zips for Spark to put first on its workers' path
    assert spark_home.current(home)


def test_a_stale_or_missing_home_is_not_used_and_a_rebuild_replaces_it(tmp_path):
    home = tmp_path / "home"
    assert not spark_home.current(home)
    spark_home.build(home)
    stray = home / "jars" / "spark-mllib_2.13-0.0.0.jar"
    stray.symlink_to(spark_home.wanted_jars(spark_home.pyspark_dir())[0])
    assert not spark_home.current(home)
    spark_home.build(home)
    assert spark_home.current(home) and not stray.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no staging left behind


def test_the_home_links_batons_jar_once_built_and_is_stale_until_it_does(tmp_path, monkeypatch):
    jar = tmp_path / "baton-jvm.jar"
    monkeypatch.setattr(spark_home, "baton_jar", lambda: jar if jar.is_file() else None)
    home = spark_home.build(tmp_path / "home")
    assert spark_home.current(home) and not spark_home.has_baton_jar(home)
    jar.write_bytes(b"PK")  # `make install` built it: the home without it is stale
    assert not spark_home.current(home)
    spark_home.build(home)
    assert spark_home.current(home) and spark_home.has_baton_jar(home)
    assert (home / "jars" / jar.name).resolve() == jar
