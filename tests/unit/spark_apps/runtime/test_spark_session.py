"""The driver JVM's options: the class-data-sharing archive when there is one, never instead of the
options a caller gives, and not while the archive itself is being built."""

from spark_apps.runtime.install import cds
from spark_apps.runtime.spark import driver_java_options


def test_the_archive_is_used_when_present_and_given_options_are_kept(tmp_path, monkeypatch):
    archive = tmp_path / "a.jsa"
    monkeypatch.setattr(cds, "ARCHIVE", archive)
    assert driver_java_options("-Dx=1") == "-Dx=1"
    archive.write_bytes(b"")
    assert driver_java_options("-Dx=1") == f"-XX:SharedArchiveFile={archive} -Dx=1"
    assert driver_java_options("") == f"-XX:SharedArchiveFile={archive}"
    assert driver_java_options("-XX:ArchiveClassesAtExit=/t.jsa") == "-XX:ArchiveClassesAtExit=/t.jsa"
