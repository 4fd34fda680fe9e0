"""Ending a reprocess: one generation stays, the other is archived for a while, then deleted.

After a reprocess the slots run different generations: the new one (active, corrected) and the
previous one (hot in the other slot: the way back, baton_cutover with correct=true). Confirming
keeps whichever generation is active now (the new one; or the previous one if the way back was
taken, which discards the reprocess) and rebuilds the other slot on it from a copy of the active's
checkpoint, so the app has a hot standby of its live state again.

Nothing is deleted at once: a generation's checkpoint that no slot uses any more is moved to the
app's archive with a note (what it held, why, until when it is kept); archives past their
retention are deleted. An archive without a readable note is never deleted: Baton cannot tell
what it is.

    <state_dir>/slots/<app>/<slot>/gen-<n>/         what the slots run (spark_apps.runtime.harness)
    <state_dir>/archive/<app>/<slot>-gen-<n>-<ts>/  ARCHIVED.json + the slot's files
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from baton.records import ControlRecord, Slot, SlotState
from baton.reprocess import RequestRefused

NOTE = "ARCHIVED.json"
GEN_DIR = re.compile(r"^gen-(\d+)$")


def slot_root(state_dir: Path, app: str, slot: Slot, generation: int) -> Path:
    return state_dir / "slots" / app / slot.value / f"gen-{generation}"


def archive_root(state_dir: Path, app: str) -> Path:
    return state_dir / "archive" / app


@dataclass(frozen=True)
class Confirmation:
    """What a confirmation does: `keep` is the active slot, whose generation stays; `rebuild` the other
    slot, moved from `drop_generation` onto `generation` (copied from `keep`)."""

    keep: Slot
    rebuild: Slot
    generation: int
    version: str
    drop_generation: int
    drop_version: str
    discards_reprocess: bool  # the active runs the older generation: the way back was taken


def plan_confirmation(rec: ControlRecord | None, now_ms: int, held_by: str = "") -> Confirmation:
    """Refused (RequestRefused, with the reason) unless both slots run, on different generations, and
    no handoff or other operation (than `held_by`: a retry of the same run) is under way."""
    if rec is None:
        raise RequestRefused("the app has never been started: there is no reprocess to confirm")
    if holder := rec.held_by_another(now_ms, held_by):
        raise RequestRefused(f"{holder} is under way: one at a time")
    if rec.fence is not None:
        raise RequestRefused(f"a fence {rec.fence} is set: a handoff is under way")
    if len(rec.slots) < 2 or any(s.desired is not SlotState.RUNNING for s in rec.slots.values()):
        states = ", ".join(f"{slot.value} {spec.desired.value}" for slot, spec in sorted(rec.slots.items()))
        raise RequestRefused(f"both slots must run to confirm ({states or 'none started'})")
    keep, rebuild = rec.active, rec.active.other
    active, other = rec.slots[keep], rec.slots[rebuild]
    if active.generation == other.generation:
        raise RequestRefused(f"nothing to confirm: both slots run generation {active.generation}")
    return Confirmation(
        keep=keep,
        rebuild=rebuild,
        generation=active.generation,
        version=active.version,
        drop_generation=other.generation,
        drop_version=other.version,
        discards_reprocess=active.generation < other.generation,
    )


def archive_generation(
    state_dir: Path, app: str, slot: Slot, generation: int, why: str, keep_until_ms: int, now_ms: int, version: str = ""
) -> Path | None:
    """Move a slot's generation out of the slots' tree into the archive, with its note; None if the
    slot never had that generation. An earlier note (an archive in place) keeps its fields."""
    source = slot_root(state_dir, app, slot, generation)
    if not source.is_dir():
        return None
    note = _read_note(source) or {}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ms / 1000))
    target = archive_root(state_dir, app) / f"{slot.value}-gen-{generation}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = target.with_name(f"{slot.value}-gen-{generation}-{stamp}-{n}")
    target.parent.mkdir(parents=True, exist_ok=True)
    source.rename(target)  # same filesystem: atomic, no copy of a large state
    note = {
        "app": app,
        "slot": slot.value,
        "generation": generation,
        "version": version or note.get("version", ""),
        "why": note.get("why") or why,
        "archived_ms": note.get("archived_ms", now_ms),
        **({"archived_at": note["archived_at"]} if "archived_at" in note else {}),
        "moved_ms": now_ms,
        "keep_until_ms": keep_until_ms,
    }
    (target / NOTE).write_text(json.dumps(note, indent=1))
    return target


def archive_unused(state_dir: Path, rec: ControlRecord, why: str, keep_until_ms: int, now_ms: int) -> list[Path]:
    """Archive every generation of the app's slots that no slot runs (left by reprocesses)."""
    in_use = {(slot.value, spec.generation) for slot, spec in rec.slots.items()}
    moved = []
    for slot in Slot:
        base = state_dir / "slots" / rec.app / slot.value
        for entry in sorted(base.iterdir()) if base.is_dir() else ():
            m = GEN_DIR.match(entry.name)
            if m and entry.is_dir() and (slot.value, int(m.group(1))) not in in_use:
                if path := archive_generation(state_dir, rec.app, slot, int(m.group(1)), why, keep_until_ms, now_ms):
                    moved.append(path)
    return moved


def purge_expired(state_dir: Path, app: str, now_ms: int) -> list[Path]:
    """Delete the app's archives whose retention has passed; the ones kept and unreadable stay."""
    root = archive_root(state_dir, app)
    removed = []
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        note = _read_note(entry)
        until = note.get("keep_until_ms") if note else None
        if isinstance(until, int) and not isinstance(until, bool) and until <= now_ms:
            shutil.rmtree(entry)
            removed.append(entry)
    return removed


def _read_note(path: Path) -> dict | None:
    try:
        note = json.loads((path / NOTE).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


@dataclass
class SlotPaths:
    root: Path

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def cap_file(self) -> Path:
        return self.root / "cap.json"

    @property
    def batch_times(self) -> Path:
        """Each batch's oldest and newest record times, from the reader (spark_apps.runtime.source.batch_times)."""
        return self.root / "batch-times.json"

    @property
    def spool(self) -> Path:
        """Dead letters from the read tasks to the sink (spark_apps.runtime.sink.dead_letters)."""
        return self.root / "dead-letters"


def slot_paths(state_dir: Path, app: str, slot: Slot, generation: int) -> SlotPaths:
    return SlotPaths(slot_root(state_dir, app, slot, generation))
