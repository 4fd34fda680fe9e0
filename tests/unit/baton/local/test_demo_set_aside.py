"""A second `make demo` on the embedded broker: the demo app's checkpoints from the last demo stand on
input the restarted (empty) broker no longer has; the demo moves them to the archive, with a note, and
starts afresh. A broker that kept the app keeps them in place."""

import json

from baton.generations import NOTE, purge_expired
from baton.local.demo import SET_ASIDE_KEEP_MS, set_aside_orphans

NOW = 1_800_000_000_000


def checkpoints(state_dir):
    for slot in ("blue", "green"):
        gen = state_dir / "slots" / "click_counts" / slot / "gen-0" / "checkpoint"
        gen.mkdir(parents=True)
        (gen / "offsets").write_text("23413")
        (state_dir / "slots" / "click_counts" / slot / "driver.json").write_text("{}")


def test_checkpoints_the_broker_lost_are_archived_with_a_note_and_purged_after_a_week(tmp_path):
    checkpoints(tmp_path)
    moved = set_aside_orphans(tmp_path, "click_counts", broker_kept_it=False, now_ms=NOW)
    assert sorted(p.name.split("-gen-")[0] for p in moved) == ["blue", "green"]
    assert not list((tmp_path / "slots" / "click_counts").glob("*/gen-*"))  # a start begins afresh
    assert (tmp_path / "slots" / "click_counts" / "blue" / "driver.json").exists()  # launch records stay
    note = json.loads((moved[0] / NOTE).read_text())
    assert "restarted empty" in note["why"] and note["keep_until_ms"] == NOW + SET_ASIDE_KEEP_MS
    assert (moved[0] / "checkpoint" / "offsets").read_text() == "23413"
    assert purge_expired(tmp_path, "click_counts", NOW) == []
    assert len(purge_expired(tmp_path, "click_counts", NOW + SET_ASIDE_KEEP_MS)) == 2


def test_a_broker_that_kept_the_app_keeps_its_checkpoints_in_place(tmp_path):
    checkpoints(tmp_path)
    assert set_aside_orphans(tmp_path, "click_counts", broker_kept_it=True, now_ms=NOW) == []
    assert len(list((tmp_path / "slots" / "click_counts").glob("*/gen-0"))) == 2


def test_a_first_demo_has_nothing_to_set_aside(tmp_path):
    assert set_aside_orphans(tmp_path, "click_counts", broker_kept_it=False, now_ms=NOW) == []
