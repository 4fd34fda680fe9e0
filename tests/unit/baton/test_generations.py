"""Confirming a reprocess: which generation stays, what is refused, and what the archive keeps."""

import json
import re

import pytest

from baton.generations import (
    NOTE,
    archive_generation,
    archive_root,
    archive_unused,
    plan_confirmation,
    purge_expired,
    slot_root,
)
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.reprocess import RequestRefused

NOW = 1_700_000_000_000
DAY = 86_400_000


def record(active=Slot.GREEN, gens=(1, 2), versions=("v1", "v2"), **fields):
    slots = {
        Slot.BLUE: SlotSpec(SlotState.RUNNING, versions[0], gens[0]),
        Slot.GREEN: SlotSpec(SlotState.RUNNING, versions[1], gens[1]),
    }
    return ControlRecord(app="cc", revision=3, epoch=2, active=active, slots=fields.pop("slots", slots), **fields)


def test_the_active_generation_is_kept_and_the_other_slot_is_rebuilt_on_it():
    plan = plan_confirmation(record(), NOW)
    assert (plan.keep, plan.rebuild, plan.generation, plan.version) == (Slot.GREEN, Slot.BLUE, 2, "v2")
    assert (plan.drop_generation, plan.drop_version, plan.discards_reprocess) == (1, "v1", False)


def test_after_the_way_back_confirming_discards_the_reprocess():
    plan = plan_confirmation(record(active=Slot.BLUE), NOW)
    assert (plan.keep, plan.rebuild, plan.generation, plan.version) == (Slot.BLUE, Slot.GREEN, 1, "v1")
    assert plan.discards_reprocess


@pytest.mark.parametrize(
    "rec, words",
    [
        (None, "never been started"),
        (record(gens=(2, 2)), "nothing to confirm: both slots run generation 2"),
        (record(operation="reprocess by r1", operation_expires_ms=NOW + 1), "reprocess by r1 is under way"),
        (record(fence={0: 10}), "a fence {0: 10} is set"),
        (record(slots={Slot.GREEN: SlotSpec(SlotState.RUNNING, "v2", 2)}), "both slots must run"),
        (
            record(
                slots={
                    Slot.BLUE: SlotSpec(SlotState.STOPPED, "v1", 1),
                    Slot.GREEN: SlotSpec(SlotState.RUNNING, "v2", 2),
                }
            ),
            "blue stopped",
        ),
    ],
)
def test_a_confirmation_that_cannot_run_is_refused_with_the_reason(rec, words):
    with pytest.raises(RequestRefused, match=re.escape(words)):
        plan_confirmation(rec, NOW)


def test_an_expired_operation_or_the_runs_own_does_not_block_it():
    assert plan_confirmation(record(operation="reprocess by r1", operation_expires_ms=NOW - 1), NOW).generation == 2
    held = record(operation="confirm by r2", operation_expires_ms=NOW + DAY)
    assert plan_confirmation(held, NOW, held_by="confirm by r2").generation == 2


def make_generation(state_dir, slot, gen, note=None):
    root = slot_root(state_dir, "cc", slot, gen)
    (root / "checkpoint" / "commits").mkdir(parents=True)
    (root / "checkpoint" / "commits" / "7").write_text("v1\n{}")
    if note is not None:
        (root / NOTE).write_text(json.dumps(note))
    return root


def test_archiving_moves_the_generation_with_a_note_and_keeps_an_earlier_notes_reason(tmp_path):
    make_generation(tmp_path, Slot.GREEN, 1, note={"why": "reprocess generation 2 (r1)", "version": "v1"})
    moved = archive_generation(tmp_path, "cc", Slot.GREEN, 1, "confirm (r2)", NOW + DAY, NOW)
    assert not slot_root(tmp_path, "cc", Slot.GREEN, 1).exists()
    assert moved.parent == archive_root(tmp_path, "cc") and moved.name.startswith("green-gen-1-")
    assert (moved / "checkpoint" / "commits" / "7").read_text() == "v1\n{}"
    note = json.loads((moved / NOTE).read_text())
    assert (note["why"], note["version"], note["keep_until_ms"], note["generation"]) == (
        "reprocess generation 2 (r1)",
        "v1",
        NOW + DAY,
        1,
    )
    assert archive_generation(tmp_path, "cc", Slot.GREEN, 1, "again", NOW + DAY, NOW) is None  # nothing left
    # The same generation archived twice in one second (a slot rebuilt twice) does not collide.
    make_generation(tmp_path, Slot.GREEN, 1)
    again = archive_generation(tmp_path, "cc", Slot.GREEN, 1, "again", NOW + DAY, NOW)
    assert again != moved and again.is_dir() and moved.is_dir()


def test_only_generations_no_slot_runs_are_archived(tmp_path):
    for slot, gen in ((Slot.BLUE, 1), (Slot.BLUE, 2), (Slot.GREEN, 0), (Slot.GREEN, 1), (Slot.GREEN, 2)):
        make_generation(tmp_path, slot, gen)
    moved = archive_unused(tmp_path, record(gens=(2, 2)), "unused", NOW + DAY, NOW)
    assert sorted(p.name.rsplit("-", 1)[0] for p in moved) == ["blue-gen-1", "green-gen-0", "green-gen-1"]
    assert slot_root(tmp_path, "cc", Slot.BLUE, 2).is_dir() and slot_root(tmp_path, "cc", Slot.GREEN, 2).is_dir()


def test_archives_are_deleted_once_their_retention_passed_and_never_without_a_note(tmp_path):
    make_generation(tmp_path, Slot.BLUE, 1)
    make_generation(tmp_path, Slot.GREEN, 1)
    old = archive_generation(tmp_path, "cc", Slot.BLUE, 1, "x", NOW - 1, NOW)
    kept = archive_generation(tmp_path, "cc", Slot.GREEN, 1, "x", NOW + DAY, NOW)
    unknown = archive_root(tmp_path, "cc") / "someone-elses"
    unknown.mkdir()
    broken = archive_root(tmp_path, "cc") / "broken-note"
    broken.mkdir()
    (broken / NOTE).write_text("{not json")
    assert purge_expired(tmp_path, "cc", NOW) == [old]
    assert not old.exists() and kept.is_dir() and unknown.is_dir() and broken.is_dir()
    assert purge_expired(tmp_path, "cc", NOW + DAY) == [kept]
    assert purge_expired(tmp_path, "other-app", NOW) == []
