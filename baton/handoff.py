"""Handing the active role from one slot to the other at an exact offset fence (invariants 1-3).

The protocol, each step a compare-and-set on the control record (baton.control_plane), each
resumable (a retried step finds its own write and goes on):

1. fence: set F on the record at epoch E. F lies a little ahead of the input's end, so the active
   can still be running towards it when it sees the fence; from then on its source stops at exactly F.
2. wait: the active has emitted exactly F (its commit marker) and the standby, which never passes
   the active's emitted position, is on its way to F: live, not past F and within a lag bound
   (`trail_records`). If the active had read past F before it saw the fence (only possible if the
   fence took longer to reach it than the input took to arrive), nothing has changed hands: the
   handoff plans a fence further ahead (fence_passed, moved_fence) a few times, then gives up and lifts it.
3. cut over: one write makes the standby active at epoch E+1 and lifts the fence, by whoever watched
   the gate, the moment it is met (baton.fence_gate). Safe in one step
   because the old active verifiably stands at F (its marker) and stays there (its word that its source
   plans under F's cap, read before the marker): capped at F until it applies the new record and at
   the new writer's output after, it can never read past F as a writer; a late write of it would be
   fenced by Kafka anyway (shared transactional id, newer producer epoch). The new active first reads
   up to exactly F (its cap: the handoff's fence, spark_apps.runtime.coordination.follower), a stretch whose output
   the old active has emitted already (the sink skips a batch the last marker covers), then emits from F.

Why not wait until the standby stands at F as well: output stops when the active reaches F and
resumes with the new active's first batch past F. Waiting added the status round trip, the control
record's way to the standby and a trigger interval to that gap, while the standby's last batch up to F
is the same work either way.

A failover is the same with the dead active's last emitted position as F (it cannot pass it any more).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

from baton.conditions import WAIT, Check
from baton.records import CommitMarker, ControlRecord, Handoff, Positions, Slot, SlotState, StatusRecord

FAILOVER = "failover"  # the handoff id of failovers (the standby's own, or the health DAG's)

# A standby the cutover may go to before it stands at F: its last status is this recent and RUNNING
# (a slot that died or hangs is not handed the role; the handoff waits, and aborts at its timeout).
TRAILING_STANDBY_FRESH_MS = 60_000


class HandoffError(RuntimeError):
    """A handoff cannot go on; the message says why. The active role has not moved."""


def plan_fence(
    end: Mapping[int, int], active_processed: Mapping[int, int], rate_per_s: float, ahead_s: float, partitions: int
) -> Positions:
    """F per partition: the input's end now plus what arrives in `ahead_s` (at the measured rate),
    never behind what the active has already processed. With no input arriving, F is the end."""
    ahead = int(rate_per_s * ahead_s / max(partitions, 1) + 0.999) if rate_per_s > 0 else 0
    return {p: max(end.get(p, 0) + ahead, active_processed.get(p, 0)) for p in range(partitions)}


# A position planned ahead lies at least this many of the active's recent batch intervals ahead of the
# input: a batch planned between the end's measurement and the position reaching the active's source (a
# control-topic write, the follower's read, the cap file) must not span it. Seen through Airflow at the
# seed's rate on a busy host: the active's batches spanned ~2.5 s of input, a check position 2 s ahead
# was passed within a batch three times running.
AHEAD_BATCHES = 2.0
# How long plan_ahead watches the input's end grow to measure the arrival rate.
ARRIVAL_WINDOW_S = 1.0


def ahead_s_for(floor_s: float, active: Sequence[StatusRecord], last: int = 10, typical: bool = False) -> float:
    """How far ahead (in seconds of input) to plan: the form's value as a floor, else AHEAD_BATCHES of
    the active's slowest recent batch interval (the time between its last batches' ends); `typical`:
    of the median one (a standby just warmed up: its catch-up batches are not what it does now)."""
    ts = [r.ts_ms for r in active if r.batch_id >= 0][-(last + 1) :]
    intervals = sorted(b - a for a, b in zip(ts, ts[1:]))
    pick = intervals[len(intervals) // 2] if typical and intervals else max(intervals, default=0)
    return max(floor_s, AHEAD_BATCHES * pick / 1000)


def plan_ahead(
    read_active: Callable[[], Sequence[StatusRecord]],
    input_end: Callable[[], Mapping[int, int]],
    partitions: int,
    ahead_s: float,
    window_s: float = ARRIVAL_WINDOW_S,
    sleep=time.sleep,
    clock=time.monotonic,
    read_standby: Callable[[], Sequence[StatusRecord]] | None = None,
) -> Positions:
    """A position ahead of the input's end that the active has not read when it learns of it (a fence,
    or a state check position): ahead by what arrives in ahead_s_for(ahead_s, ...) at the input's
    arrival rate measured at its end over `window_s`, not at the active's reported rate: that is the rate
    it read at, and while it works through a backlog (after a restart, a slow batch) it reads many times
    faster than input arrives. Seen in CI: a fence planned with a catching-up active's rate lay ~100 s
    of input ahead, and the handoff waited for that input to arrive.

    `read_standby` (a fence): the slot taking over must reach the fence too before its output can
    resume, from further back (a paced standby's batches span a few seconds of input, and it follows
    the active's output): at least AHEAD_BATCHES of its median recent batch interval as well, so it
    stands at F about when the active does (the median: a standby just warmed up still has catch-up
    batches of 5-15 s among its last ones; planned by its slowest, a fence lay ~30 s ahead). Seen in
    the product-path bench: a fence 2.8 s ahead of the active and ~7 s of input ahead of the standby,
    whose catch-up after the active stood at F made the cutover's output gap 2.7 s."""
    history = [s for s in read_active() if s.batch_id >= 0]
    planned_s = ahead_s_for(ahead_s, history)
    if read_standby is not None:
        planned_s = max(planned_s, ahead_s_for(ahead_s, read_standby(), last=5, typical=True))
    processed = history[-1].processed if history else {}
    first, t0 = input_end(), clock()
    sleep(window_s)
    end = input_end()
    arrived = sum(max(0, o - first.get(p, 0)) for p, o in end.items())
    rate = arrived / max(clock() - t0, 1e-3)
    return plan_fence(end, processed, rate, planned_s, partitions)


def other(slot: Slot) -> Slot:
    return Slot.GREEN if slot is Slot.BLUE else Slot.BLUE


def with_fence(fence: Positions, epoch: int, expires_ms: int = 0, by: str = ""):
    """Change: set the fence at `epoch` for handoff `by` (a run id), to be lifted by the health DAG
    after `expires_ms` if its handoff has not finished by then (0: never). Re-running it is a no-op; a
    fence of another handoff in place is refused."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.epoch != epoch:
            raise HandoffError(f"{rec.app}: epoch is {rec.epoch}, the fence was planned at epoch {epoch}")
        if rec.fence is not None:
            if rec.handoff is not None and rec.handoff.id == by:
                return rec
            owner = rec.handoff.id if rec.handoff else "an unknown handoff"
            raise HandoffError(
                f"{rec.app}: a fence {rec.fence} is already set by {owner} (another handoff is under way)"
            )
        return dataclasses.replace(
            rec,
            fence=dict(fence),
            fence_expires_ms=expires_ms,
            handoff=Handoff(by, epoch, dict(fence), other(rec.active)),
        )

    return change


def failover_fence(fence: Positions, epoch: int, expires_ms: int = 0, reason: str = "", now_ms: int = 0):
    """Change: the fence of a failover, at what the dead active emitted, and why. It replaces a fence a
    handoff had set further ahead (the dead active will never reach that one)."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.epoch != epoch:
            raise HandoffError(f"{rec.app}: epoch is {rec.epoch}, the failover was planned at epoch {epoch}")
        return dataclasses.replace(
            rec,
            fence=dict(fence),
            fence_expires_ms=expires_ms,
            handoff=Handoff(FAILOVER, epoch, dict(fence), other(rec.active), reason, now_ms),
        )

    return change


def finished(rec: ControlRecord, by: str) -> Handoff | None:
    """Handoff `by` has cut over already (its record is kept after the cutover): a re-run of its steps
    must recognise it, not start another one."""
    h = rec.handoff
    if h is not None and h.id == by and rec.fence is None and rec.epoch == h.epoch + 1 and rec.active is h.to:
        return h
    return None


def cut_over(to: Slot, from_epoch: int, correct: bool = False, fence: Positions | None = None):
    """Change: `to` becomes active at from_epoch + 1 and the fence is lifted. Done already (a retry) = no-op.
    correct: the new active publishes its whole state as output on taking over (ControlRecord.correct_epoch).
    `fence`: the fence the gate was met at, which must still be the one set (not moved meanwhile)."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.active is to and rec.epoch == from_epoch + 1:
            return rec
        if rec.epoch != from_epoch:
            raise HandoffError(f"{rec.app}: epoch is {rec.epoch}, the cutover was planned at epoch {from_epoch}")
        if rec.fence is None:
            raise HandoffError(f"{rec.app}: no fence is set; a cutover needs one")
        if fence is not None and dict(rec.fence) != dict(fence):
            raise HandoffError(f"{rec.app}: the fence is {dict(rec.fence)}, the cutover was planned at {dict(fence)}")
        if rec.active is to:
            raise HandoffError(f"{rec.app}: {to.value} is already active at epoch {rec.epoch}")
        return dataclasses.replace(
            rec,
            active=to,
            epoch=from_epoch + 1,
            fence=None,
            fence_expires_ms=0,
            correct_epoch=from_epoch + 1 if correct else rec.correct_epoch,
            check_at=None,
            invariants_asked="",
        )

    return change


def short_of(marker: CommitMarker | None, fence: Positions, epoch: int) -> bool:
    """The active's marker, written at `epoch`, shows it short of `fence` and past it nowhere."""
    if marker is None or marker.epoch != epoch:
        return False
    emitted = dict(marker.emitted)
    return not _passed(emitted, fence) and any(emitted.get(p, 0) < f for p, f in fence.items())


def fence_passed(rec: ControlRecord | None, epoch: int, fence: Positions, by: str, marker: CommitMarker | None) -> bool:
    """Handoff `by`'s fence `fence` at `epoch` still stands, nothing has moved, and the active's output
    went past it: it emitted a batch it had planned before it saw the fence (input that resumed after
    a pause, a host too busy to deliver the fence in time). Planning a fence further ahead is safe then
    (moved_fence): the role is where it was and the new fence lies beyond everything either slot read."""
    if rec is None or marker is None or rec.epoch != epoch or marker.epoch != epoch:
        return False
    if rec.fence is None or dict(rec.fence) != dict(fence) or rec.handoff is None or rec.handoff.id != by:
        return False
    return bool(_passed(dict(marker.emitted), fence))


def moved_fence(old: Positions, new: Positions, epoch: int, by: str):
    """Change: handoff `by` replaces its fence `old` at `epoch` with `new` in one write (a fence the
    active passed: fence_passed), keeping its expiry. Refused if anything else changed meanwhile."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.fence is not None and dict(rec.fence) == dict(new) and rec.handoff is not None and rec.handoff.id == by:
            return rec  # done before (a retry)
        if (
            rec.epoch != epoch
            or rec.fence is None
            or dict(rec.fence) != dict(old)
            or rec.handoff is None
            or rec.handoff.id != by
        ):
            raise HandoffError(f"{rec.app}: the fence is no longer {dict(old)} of {by} at epoch {epoch}: not moving it")
        return dataclasses.replace(rec, fence=dict(new), handoff=dataclasses.replace(rec.handoff, fence=dict(new)))

    return change


def without_fence(epoch: int, by: str | None = None):
    """Change: lift the fence, only at `epoch` (a newer epoch's fence belongs to someone else) and, if
    `by` is given, only the fence handoff `by` set."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.epoch != epoch:
            raise HandoffError(f"{rec.app}: epoch is {rec.epoch}, not {epoch}: not lifting its fence")
        if by is not None and rec.fence is not None and (rec.handoff is None or rec.handoff.id != by):
            raise HandoffError(
                f"{rec.app}: the fence was set by {rec.handoff.id if rec.handoff else 'another'} "
                f"handoff, not {by}: not lifting it"
            )
        return dataclasses.replace(rec, fence=None, fence_expires_ms=0, handoff=None if rec.fence else rec.handoff)

    return change


def stale_fence(rec: ControlRecord, now_ms: int) -> bool:
    """A fence whose handoff should have finished by now: the run that set it died (or was marked
    failed) before its cutover or abort. Lifting it is safe: the role has not moved at its epoch, a
    live handoff that comes back finds no fence and fails its cutover (cut_over needs one)."""
    return rec.fence is not None and 0 < rec.fence_expires_ms < now_ms


def _passed(position: Mapping[int, int], fence: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    return {p: (position.get(p, 0), f) for p, f in fence.items() if position.get(p, 0) > f}


def _last_batch(history: Sequence[StatusRecord]) -> StatusRecord | None:
    """The slot's newest status record of a completed batch."""
    return next((r for r in reversed(history) if r.batch_id >= 0), None)


def fence_reached(
    marker: CommitMarker | None,
    standby: Sequence[StatusRecord],
    fence: Positions,
    epoch: int,
    *,
    active_holds: bool,
    active_alive: bool = True,
    trail_records: int = 0,
    now_ms: int | None = None,
) -> Check:
    """The cutover may be written: the active holds at F (its word, read before `marker`:
    baton.fence_gate), its commit marker says emitted == F (at `epoch`) and the standby's last status
    says processed == F, or that it is at most `trail_records` short of F (summed over partitions: the
    warm-up bound, e.g. the app's max_lag_records; 0 = it must stand at F) and live (RUNNING, a status
    within TRAILING_STANDBY_FRESH_MS): it reaches F as the new active before reading on. Failed if
    either went past F."""
    emitted = dict(marker.emitted) if marker is not None else {}
    if marker is not None and marker.epoch > epoch:
        return Check(failed=True, message=f"epoch {marker.epoch} wrote output: a newer handoff took over")
    if past := _passed(emitted, fence):
        return Check(
            failed=True,
            message=f"the active emitted past the fence before it saw it "
            f"(partition: (emitted, fence) {past}); handoff aborted, nothing moved",
        )
    last = _last_batch(standby)
    processed = dict(last.processed) if last is not None else {}
    if past := _passed(processed, fence):
        return Check(failed=True, message=f"the standby processed past the fence {past}: it did not follow")
    active_at = all(emitted.get(p, 0) == f for p, f in fence.items())
    if active_at and not active_holds:
        return Check(message=f"the active stands at the fence {dict(fence)}; waiting for its word that it holds there")
    standby_at = all(processed.get(p, 0) == f for p, f in fence.items())
    if active_at and standby_at:
        return Check(met=True, message=f"both slots at the fence {dict(fence)}")
    if active_at and trail_records > 0 and last is not None:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        latest = standby[-1]
        short = sum(f - processed.get(p, 0) for p, f in fence.items())
        if (
            short <= trail_records
            and latest.state is SlotState.RUNNING
            and now - latest.ts_ms <= TRAILING_STANDBY_FRESH_MS
        ):
            return Check(
                met=True,
                message=f"the active stands at the fence {dict(fence)}; the standby, {short} "
                f"records short of it, reaches it before it emits",
            )
    if not active_at and not active_alive:
        return Check(failed=True, message=f"the active died at {emitted} before reaching the fence {dict(fence)}")
    return WAIT


def taken_over_at(control: ControlRecord | None, slot: Slot) -> Positions | None:
    """The fence `slot` took the active role at, while that handoff's epoch holds (None otherwise): a
    new active that trailed F reads up to exactly F before anything else (spark_apps.runtime.coordination.follower)."""
    h = control.handoff if control is not None else None
    if control is None or h is None or h.to is not slot or control.active is not slot or control.epoch != h.epoch + 1:
        return None
    return dict(h.fence)


def saw_epoch(history: Sequence[StatusRecord], epoch: int, since_ms: int = 0) -> bool:
    """The slot published a status record having seen `epoch` (or a later one)."""
    return any(r.epoch_seen >= epoch and r.ts_ms >= since_ms for r in history)


def fail_over(
    plane,
    app: str,
    partitions: int,
    dead: Slot,
    epoch: int,
    emitted: Mapping[int, int],
    standby: Sequence[StatusRecord],
    reason: str = "",
) -> tuple[bool, str]:
    """The active `dead` is gone: fence at what it emitted (it cannot pass that any more) and cut over
    to the standby at once: capped at that fence already, it reaches it as the new active and emits
    from there (taken_over_at). (done, what happened). The caller makes sure the dead slot's process
    is gone first. Each step is a compare-and-set a rerun recognises. `plane` is a
    baton.control_plane.ControlPlane."""
    to = other(dead)
    fence = {p: emitted.get(p, 0) for p in range(partitions)}
    last = _last_batch(standby)
    processed = dict(last.processed) if last is not None else {}
    if past := _passed(processed, fence):  # never expected: a standby never passes the active's output
        return False, (
            f"no failover to {to.value}: it processed past what {dead.value} emitted {past}; "
            "its state holds input nobody emitted"
        )
    now = time.time()
    plane.update(app, failover_fence(fence, epoch, int((now + 180) * 1000), reason, int(now * 1000)))
    plane.update(app, cut_over(to, epoch))
    short = sum(f - processed.get(p, 0) for p, f in fence.items())
    return True, (
        f"active {dead.value} died: failed over to {to.value} at {fence} (epoch {epoch + 1}; "
        f"it was {short} records short of it)"
    )


def take_over(to: Slot, epoch: int, fence: Positions, reason: str, now_ms: int):
    """Change: the standby `to` takes the active role from the active that died at `epoch`, in one
    write (spark_apps.runtime.coordination.lease, once it has fenced the writer): epoch + 1, any fence lifted, the
    handoff names the failover fence F (what the dead active emitted: `to` reads up to exactly F first,
    taken_over_at), why and when. Done already (a retry) = no-op."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.active is to and rec.epoch == epoch + 1 and rec.handoff is not None and rec.handoff.id == FAILOVER:
            return rec
        if rec.epoch != epoch:
            raise HandoffError(f"{rec.app}: epoch is {rec.epoch}, the takeover was decided at epoch {epoch}")
        if rec.active is to:
            raise HandoffError(f"{rec.app}: {to.value} is already active at epoch {rec.epoch}")
        return dataclasses.replace(
            rec,
            active=to,
            epoch=epoch + 1,
            fence=None,
            fence_expires_ms=0,
            check_at=None,
            invariants_asked="",
            handoff=Handoff(FAILOVER, epoch, dict(fence), to, reason, now_ms),
        )

    return change
