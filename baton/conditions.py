"""What the control plane's sensors wait for, as pure functions of what a slot reported.

Each check returns a Check: met (stop waiting, succeed), failed (stop waiting, fail with the reason)
or neither (keep waiting). Status is observed, never assumed: "running" means a status record of the
launched process says so, not that a process exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from baton.records import CommitMarker, Positions, SlotState, StatusRecord, covers


@dataclass(frozen=True)
class Check:
    """met, failed, or neither (still waiting: the message, if any, says where it stands)."""

    met: bool = False
    failed: bool = False
    message: str = ""

    @property
    def waiting(self) -> bool:
        return not self.met and not self.failed


WAIT = Check()


def _since(history: Sequence[StatusRecord], since_ms: int, pid: int | None) -> list[StatusRecord]:
    return [r for r in history if r.ts_ms >= since_ms and (pid is None or r.pid == pid)]


def slot_running(history: Sequence[StatusRecord], since_ms: int, pid: int | None = None) -> Check:
    """The launched process reports RUNNING: it completed a batch (the first includes the state restore)
    or its query is up and polling with no input to read."""
    recent = _since(history, since_ms, pid)
    if not recent:
        return WAIT
    last = recent[-1]
    if last.state is SlotState.FAILED:
        return Check(failed=True, message=f"slot failed: {last.error or 'no error reported'}")
    if last.state is SlotState.STOPPED:
        return Check(failed=True, message="slot stopped before it was running")
    if last.state is SlotState.RUNNING:  # after its first batch, or polling with no input waiting
        batch = f"batch {last.batch_id}" if last.batch_id >= 0 else "idle, no batch yet"
        return Check(met=True, message=f"running ({batch}, restore {last.restore_ms} ms)")
    return WAIT


def position_reached(history: Sequence[StatusRecord], target: Positions, since_ms: int = 0) -> Check:
    """The slot's processed position covers `target` on every partition."""
    recent = [r for r in history if r.ts_ms >= since_ms and r.batch_id >= 0]
    if recent and recent[-1].state is SlotState.FAILED:
        return Check(failed=True, message=f"slot failed: {recent[-1].error}")
    if recent and covers(recent[-1].processed, target):
        return Check(met=True, message=f"processed {recent[-1].processed} covers {target}")
    return WAIT


def arrival_rate(active: Sequence[StatusRecord], last: int = 5) -> float:
    """Records per second the input arrives at, as the active last read it (its batches' input rate,
    taken over the time between batch starts): the rate a standby's lag is converted to seconds at."""
    return max((r.input_rate for r in [r for r in active if r.batch_id >= 0][-last:]), default=0.0)


def known_at(history: Sequence[StatusRecord], ts_ms: int) -> Positions | None:
    """What the slot knew the active had emitted at `ts_ms` (a status record carries the last commit
    marker its follower had read), from its last record by then; None when none says."""
    known = [r.emitted for r in history if r.ts_ms <= ts_ms and r.emitted is not None]
    return known[-1] if known else None


def following(
    standby: Sequence[StatusRecord],
    marker: CommitMarker | None,
    rate: float,
    max_records: int,
    max_seconds: float | None,
    pace_s: float,
    since_ms: int = 0,
) -> Check:
    """The warm-up gate (invariant 5: the standby within an acceptable lag of the active): the slot's last
    batch since `since_ms` read to at most `max_records` and `max_seconds` of input short of what the
    active had emitted when that batch started, plus what the standby's pace holds it back by (`pace_s`
    of input at `rate`: a standby follows the active's output at most every pace_s, by design).

    Measured against the active, not the input's end: a paced standby behind an active that itself
    trails the input by a batch sits 40-80k records short of the end at 20k events/s, and a gate on
    the end waited minutes for a standby that was as close as it is ever meant to be. And against the
    active's output when the batch started, not now: a batch reads what was there when it started, so
    while it runs the active emits on, and a follower with 10 s batches on a busy host stood ~200k
    records short of the active's output *now* at every check; the gate met only when a check fell just
    after a batch that happened to be quick (11 and 21 minutes in two product-path runs). A replay is
    still told apart: its batch ends short of what was there at its start. The reference is what the
    slot's own batch before (of this launch, published before this batch started) knew; a launch's
    first batch, which reads the backlog since its restart, is held to the active's output now. Waiting
    checks say where the slot stands (the task log shows the message)."""
    recent = [r for r in standby if r.ts_ms >= since_ms]
    if recent and recent[-1].state is SlotState.FAILED:
        return Check(failed=True, message=f"slot failed: {recent[-1].error}")
    batches = [r for r in recent if r.batch_id >= 0]
    if not batches:
        state = recent[-1].state.value if recent else "no status yet"
        return Check(message=f"no batch since its start ({state})")
    last = batches[-1]
    now = dict(marker.emitted) if marker is not None else {}
    at_start = known_at(batches[:-1], last.ts_ms - last.batch_ms)
    reference = now if at_start is None else {p: min(o, now.get(p, o)) for p, o in at_start.items()}
    behind = sum(max(0, o - last.processed.get(p, 0)) for p, o in reference.items())
    behind_now = sum(max(0, o - last.processed.get(p, 0)) for p, o in now.items())
    allowed_records = max_records + int(rate * pace_s)
    seconds = behind / rate if rate > 0 else 0.0  # no input arriving: the records bound alone
    allowed_s = None if max_seconds is None else max_seconds + pace_s
    where = (
        f"{behind} records ({seconds:.1f} s of input) short of the active's output when its last "
        f"batch started ({behind_now} of its output now; the batch took {last.batch_ms / 1000:.1f} s); "
        f"limit {allowed_records} records"
        + (f" and {allowed_s:g} s" if allowed_s is not None else "")
        + f" (a pace of {pace_s:g} s included)"
    )
    if behind <= allowed_records and (allowed_s is None or seconds <= allowed_s):
        return Check(met=True, message=where)
    return Check(message=where)
