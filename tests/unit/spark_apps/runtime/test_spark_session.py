"""The driver JVM's options: the class-data-sharing archive when there is one, the collector unless the
caller names one, never instead of the options a caller gives, and not while the archive itself is
being built."""

from spark_apps.runtime import cds
from spark_apps.runtime.spark import GC_OPTION, driver_java_options


def test_the_archive_is_used_when_present_and_given_options_are_kept(tmp_path, monkeypatch):
    archive = tmp_path / "a.jsa"
    monkeypatch.setattr(cds, "ARCHIVE", archive)
    assert driver_java_options("-Dx=1") == f"{GC_OPTION} -Dx=1"
    archive.write_bytes(b"")
    assert driver_java_options("-Dx=1") == f"-XX:SharedArchiveFile={archive} {GC_OPTION} -Dx=1"
    assert driver_java_options("") == f"-XX:SharedArchiveFile={archive} {GC_OPTION}"
    assert driver_java_options("-XX:ArchiveClassesAtExit=/t.jsa") == "-XX:ArchiveClassesAtExit=/t.jsa"


def test_a_collector_the_caller_names_is_kept_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(cds, "ARCHIVE", tmp_path / "none.jsa")
    assert driver_java_options("-XX:+UseG1GC -Dx=1") == "-XX:+UseG1GC -Dx=1"
    assert driver_java_options("-XX:+UseZGC") == "-XX:+UseZGC"
