"""A fault for tests of the real stack: a slot that passes a handoff's position before it sees it.

In the wild a slot passes a fence or a state check position when the record that sets it reaches the
slot after the slot planned a batch beyond it: input that resumed after a pause, a host too busy to
deliver the record in time. The handoffs recover from that (baton_rolling_upgrade's state check asks
again further ahead, a cutover or rollback plans its fence again); the end-to-end tests show it through
the REST API by making it happen on purpose, not by waiting for a busy host.

The fault is a file `fault-late-position` in a slot's directory (`fault_file`), written by a test: it
names `fence` or `check_at`, or both (a line each). The next control
record that sets a new one of those is taken by this slot as if that position had not reached it yet:
the slot reads on past it, as the slot it stands for would. Each name is used once, and the file is
removed once all are (or when it names anything else), and the position stays unseen
only until a record sets another one (the handoff's next try). Without the file this costs one stat
of it per control record that sets a new position.

It reaches a slot through the follower's seam, Follower.seen_control (as written, in Baton): `install`
replaces it in the process it runs in. A slot is a process of its own, so a test runs one whose app
module installs it: tests.support.late_position_app (click_counts with the fault).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from baton.generations import SlotPaths
from baton.records import ControlRecord
from spark_apps.runtime.coordination.follower import Follower

log = logging.getLogger(__name__)

KINDS = ("fence", "check_at")
FAULT_FILE = "fault-late-position"


def fault_file(paths: SlotPaths) -> Path:
    """Where a test writes the fault for the slot whose directory is `paths`."""
    return paths.root / FAULT_FILE


def seen_control(follower: Follower, rec: ControlRecord) -> ControlRecord:
    """Follower.seen_control with the fault: one LatePositionFault per follower, its file beside the
    follower's cap file (both in the slot's directory)."""
    fault = follower.__dict__.get("_late_position")
    if fault is None:
        fault = follower.__dict__["_late_position"] = LatePositionFault(follower.cap_file.with_name(FAULT_FILE))
    return fault.seen(follower.control, rec)


def install() -> None:
    """Every follower of this process takes control records through the fault from now on."""
    Follower.seen_control = seen_control


class LatePositionFault:
    def __init__(self, path: Path):
        self.path = path
        self._unseen: tuple[str, dict | None] | None = None  # (kind, the position this slot acts as if it never saw)

    def seen(self, current: ControlRecord | None, rec: ControlRecord) -> ControlRecord:
        """`rec` as this slot takes it, `current` being what it holds now."""
        if self._unseen is not None:
            unseen, position = self._unseen
            if _position(rec, unseen) == position:
                return _with_position(rec, unseen, _position(current, unseen))
            self._unseen = None  # the handoff moved on: its next position is seen
        new = [k for k in KINDS if _position(rec, k) is not None and _position(rec, k) != _position(current, k)]
        if not new or not self.path.exists():
            return rec
        try:
            kinds = self.path.read_text().split()
            if not set(kinds) <= set(KINDS):
                self.path.unlink()
                log.warning("baton: fault %s names %s, not only %s: removed, not used", self.path, kinds, KINDS)
                return rec
            kind = next((k for k in kinds if k in new), None)
            if kind is None:  # kept for the record that sets one
                return rec
            kinds.remove(kind)
            if kinds:
                self.path.write_text("\n".join(kinds) + "\n")
            else:
                self.path.unlink()
        except OSError:
            return rec
        self._unseen = (kind, _position(rec, kind))
        log.warning(
            "baton: fault %s: the %s %s is not seen by this slot until another is set", self.path, kind, self._unseen[1]
        )
        return _with_position(rec, kind, _position(current, kind))


def _with_position(rec: ControlRecord, kind: str, position: dict | None) -> ControlRecord:
    if kind == "fence":
        return dataclasses.replace(rec, fence=position)
    return dataclasses.replace(rec, check_at=position)


def _position(rec: ControlRecord | None, kind: str) -> dict | None:
    value = getattr(rec, kind) if rec is not None else None
    return dict(value) if value is not None else None
