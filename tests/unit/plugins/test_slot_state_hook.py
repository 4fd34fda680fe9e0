"""The slot-state hook: the slots' files the operators read and write (checkpoints, notes, disk use, logs)."""

import json

from baton.generations import slot_paths
from baton.records import Slot
from baton_airflow.hooks.slot_state import ARCHIVE_NOTE, BatonSlotStateHook


def test_a_slots_disk_use_counts_every_generation_and_nothing_is_none(tmp_path):
    state = BatonSlotStateHook(tmp_path)
    assert state.disk_bytes("a", Slot.BLUE) is None
    for generation, size in ((0, 3), (1, 5)):
        checkpoint = slot_paths(tmp_path, "a", Slot.BLUE, generation).checkpoint
        checkpoint.mkdir(parents=True)
        (checkpoint / "f").write_bytes(b"x" * size)
    assert state.disk_bytes("a", Slot.BLUE) == 8
    assert state.disk_bytes("a", Slot.GREEN) is None


def test_an_archive_note_goes_beside_an_existing_generations_checkpoint_only(tmp_path):
    state = BatonSlotStateHook(tmp_path)
    state.archive_note("a", Slot.GREEN, 1, "v1", "reprocess")  # nothing there: no note
    assert not state.checkpoint("a", Slot.GREEN, 1).parent.exists()
    state.checkpoint("a", Slot.GREEN, 1).mkdir(parents=True)
    state.archive_note("a", Slot.GREEN, 1, "v1", "reprocess")
    note = json.loads((state.checkpoint("a", Slot.GREEN, 1).parent / ARCHIVE_NOTE).read_text())
    assert {k: note[k] for k in ("app", "slot", "generation", "version", "why")} == {
        "app": "a",
        "slot": "green",
        "generation": 1,
        "version": "v1",
        "why": "reprocess",
    }


def test_a_logs_tail(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert BatonSlotStateHook.log_tail(str(log), 2) == "line 48\nline 49"
    assert BatonSlotStateHook.log_tail(tmp_path / "missing.log") == "(no log)"


def test_the_hook_of_a_spark_hook_uses_its_state_dir(tmp_path):
    class Spark:
        state_dir = tmp_path

    assert BatonSlotStateHook.of(Spark()).state_dir == tmp_path
