"""A fault for tests of the real stack: a slot that passes a handoff's position before it sees it.

In the wild a slot passes a fence or a state check position when the record that sets it reaches the
slot after the slot planned a batch beyond it: input that resumed after a pause, a host too busy to
deliver the record in time. The handoffs recover from that (baton_rolling_upgrade's state check asks
again further ahead, a cutover or rollback plans its fence again); the end-to-end tests show it through
the REST API by making it happen on purpose, not by waiting for a busy host.

The fault is a file `fault-late-position` in a slot's directory (baton.generations.SlotPaths), written
by a test, never by Baton: it names `fence` or `check_at`, or both (a line each). The next control
record that sets a new one of those is taken by this slot as if that position had not reached it yet:
the slot reads on past it, as the slot it stands for would. Each name is used once, and the file is
removed once all are (or when it names anything else), and the position stays unseen
only until a record sets another one (the handoff's next try). Without the file this costs one stat
of it per control record that sets a new position.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from baton.records import ControlRecord

log = logging.getLogger(__name__)

KINDS = ("fence", "check_at")


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
        log.warning("baton: fault %s: the %s %s is not seen by this slot until another is set", self.path, kind,
                    self._unseen[1])
        return _with_position(rec, kind, _position(current, kind))


def _with_position(rec: ControlRecord, kind: str, position: dict | None) -> ControlRecord:
    if kind == "fence":
        return dataclasses.replace(rec, fence=position)
    return dataclasses.replace(rec, check_at=position)


def _position(rec: ControlRecord | None, kind: str) -> dict | None:
    value = getattr(rec, kind) if rec is not None else None
    return dict(value) if value is not None else None
