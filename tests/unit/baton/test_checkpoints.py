"""A checkpoint on disk: copying a live one (for the preflight replay, a standby), cutting it back to a batch."""


def test_a_checkpoint_copy_skips_files_removed_while_it_runs(tmp_path, monkeypatch):
    import shutil

    from baton import checkpoints

    src = tmp_path / "ck"
    (src / "commits").mkdir(parents=True)
    for name in ("1", "2", "3"):
        (src / "commits" / name).write_text("v1")
    real = shutil.copy2

    def racing(a, b):  # Spark's maintenance deletes batch 1 just before it is copied
        if a.endswith("commits/1"):
            (src / "commits" / "1").unlink()
        return real(a, b)

    monkeypatch.setattr(checkpoints.shutil, "copy2", racing)
    assert checkpoints.copy_checkpoint(src, tmp_path / "copy") == 3
    assert sorted(p.name for p in (tmp_path / "copy" / "commits").iterdir()) == ["2", "3"]


def logs(checkpoint):
    return {log: sorted(p.name for p in (checkpoint / log).iterdir()) for log in ("commits", "offsets")}


def make_checkpoint(tmp_path):
    ck = tmp_path / "ck"
    for log, batches in (("commits", (3, 4)), ("offsets", (3, 4, 5))):  # batch 5 planned, not committed
        (ck / log).mkdir(parents=True)
        for b in batches:
            (ck / log / str(b)).write_text("v1")
            (ck / log / f".{b}.crc").write_text("")
    return ck


def test_a_copy_for_a_standby_ends_at_its_last_commit(tmp_path):
    from baton.checkpoints import truncate_after

    ck = make_checkpoint(tmp_path)
    truncate_after(ck, 4)
    assert logs(ck) == {"commits": [".3.crc", ".4.crc", "3", "4"], "offsets": [".3.crc", ".4.crc", "3", "4"]}
