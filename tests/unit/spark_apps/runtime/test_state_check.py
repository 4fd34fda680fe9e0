"""Copying a live checkpoint for the preflight replay."""


def test_a_checkpoint_copy_skips_files_removed_while_it_runs(tmp_path, monkeypatch):
    import shutil

    from spark_apps.runtime import state_check

    src = tmp_path / "ck"
    (src / "commits").mkdir(parents=True)
    for name in ("1", "2", "3"):
        (src / "commits" / name).write_text("v1")
    real = shutil.copy2

    def racing(a, b):  # Spark's maintenance deletes batch 1 just before it is copied
        if a.endswith("commits/1"):
            (src / "commits" / "1").unlink()
        return real(a, b)

    monkeypatch.setattr(state_check.shutil, "copy2", racing)
    assert state_check.copy_checkpoint(src, tmp_path / "copy") == 3
    assert sorted(p.name for p in (tmp_path / "copy" / "commits").iterdir()) == ["2", "3"]
