"""What each app is doing, for people: the Baton page in Airflow, the metrics endpoint and `baton apps`.

Pure: built from what baton.status_feed read (the control records, the slots' status records and
leases, the input's end). Nothing here judges health (baton.health does); this says what is.
Lag in records is the input's end minus what the slot processed; lag in seconds is that backlog at
the slot's recent input rate (an estimate: the time to read it at the rate data arrives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from baton.leases import Lease
from baton.records import ControlRecord, Positions, Slot, SlotState, StatusRecord

# One plot point per slot and this many ms at most: an hour of per-batch records is thousands of points,
# a browser plot needs a few hundred.
POINT_SPACING_MS = 10_000


def backlog(end: Positions | None, processed: Positions) -> int | None:
    """Records of the input not yet processed (an end behind processed counts as caught up: Tansu's
    end is a lower bound, and an end read before the slot's last batch is older than it)."""
    if end is None:
        return None
    return sum(max(0, e - processed.get(p, 0)) for p, e in end.items())


@dataclass(frozen=True)
class SlotView:
    slot: str
    role: str  # active / standby, as the control record says
    desired: str  # what the control plane wants of it
    state: str  # what it last reported ("" never reported)
    version: str
    generation: int
    epoch_seen: int
    reason: str  # why it is in the desired state (e.g. the crash-loop guard's)
    restarts: int  # restarts the crash-loop guard still counts
    batch_id: int
    lag_records: int | None
    lag_s: float | None
    input_rate: float
    processing_rate: float
    batch_ms: int
    latency_ms: int | None  # the last batch's oldest input record: its timestamp to the batch's end
    latency_newest_ms: int | None  # its newest record's
    state_rows: int | None  # None: not counted (the app's state.count_rows)
    state_bytes: int
    state_memory_bytes: int  # RocksDB's memory
    dead_letters: int
    report_age_s: float | None  # since its last status record
    lease_age_s: float | None  # since its last lease renewal
    error: str
    host: str
    pid: int


@dataclass(frozen=True)
class Point:
    """A slot's figures at one batch, for the plots."""

    ts_ms: int
    slot: str
    lag_records: int | None
    batch_ms: int
    input_rate: float
    processing_rate: float
    latency_ms: int | None = None  # the worst (oldest record's) latency of the step's batches


@dataclass(frozen=True)
class Event:
    """A change of the app's control record: a handoff, a failover, a start or stop, a fence."""

    ts_ms: int
    revision: int
    kind: str  # cutover, failover, fence, fence lifted, check, slot, operation
    text: str
    writer: str  # who wrote it: "<dag_id>:<run_id>" for a DAG run, "<slot> (lease)" for a failover
    dag_id: str = ""
    run_id: str = ""
    # How long it took: a cutover or failover from its fence set to the epoch's change (the output's handoff), a fence
    # lifted without a cutover from its setting (an abandoned handoff), an operation from its start.
    duration_ms: int | None = None


@dataclass(frozen=True)
class HandoffStats:
    """The handoffs of one kind in the control history read: how many, and their durations."""

    kind: str  # cutover, failover, fence lifted (an abandoned handoff)
    count: int
    timed: int  # how many of them have a duration (their fence was read too)
    total_s: float
    last_s: float | None


HANDOFF_KINDS = ("cutover", "failover", "fence lifted")


def handoff_stats(evs: Sequence[Event]) -> list[HandoffStats]:
    out = []
    for kind in HANDOFF_KINDS:
        mine = [e for e in evs if e.kind == kind]
        took = [e.duration_ms / 1000 for e in mine if e.duration_ms is not None]
        out.append(HandoffStats(kind, len(mine), len(took), sum(took), took[-1] if took else None))
    return out


@dataclass(frozen=True)
class AppView:
    app: str
    registered: bool
    epoch: int = 0
    active: str = ""
    revision: int = 0
    fence: Positions | None = None
    operation: str = ""
    slots: list[SlotView] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # the last 50
    handoffs: list[HandoffStats] = field(default_factory=list)  # over the whole history read

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["fence"] = {str(p): o for p, o in self.fence.items()} if self.fence else None
        return d


def slot_view(
    slot: Slot,
    record: ControlRecord | None,
    history: Sequence[StatusRecord],
    lease: Lease | None,
    end: Positions | None,
    now_ms: int,
) -> SlotView:
    spec = record.slots.get(slot) if record else None
    last = history[-1] if history else None
    lag = backlog(end, last.processed) if last is not None and last.processed else None
    # The rate data arrives at over the last batches that read any: a lone idle record reports 0.
    rates = [s.input_rate for s in history[-10:] if s.input_rate > 0]
    rate = sum(rates) / len(rates) if rates else 0.0
    lag_s = None if lag is None else (0.0 if lag == 0 else (lag / rate if rate > 0 else None))
    return SlotView(
        slot=slot.value,
        role=record.role_of(slot).value if record else "",
        desired=spec.desired.value if spec else SlotState.STOPPED.value,
        state=last.state.value if last else "",
        version=(spec.version if spec else "") or (last.version if last else ""),
        generation=spec.generation if spec else 0,
        epoch_seen=last.epoch_seen if last else 0,
        reason=spec.reason if spec else "",
        restarts=len(spec.restarts) if spec else 0,
        batch_id=last.batch_id if last else -1,
        lag_records=lag,
        lag_s=lag_s,
        input_rate=last.input_rate if last else 0.0,
        processing_rate=last.processing_rate if last else 0.0,
        batch_ms=last.batch_ms if last else 0,
        latency_ms=last.latency_ms if last else None,
        latency_newest_ms=last.latency_newest_ms if last else None,
        state_rows=last.state_rows if last else 0,
        state_bytes=last.state_bytes if last else 0,
        state_memory_bytes=last.state_memory_bytes if last else 0,
        dead_letters=last.dead_letters if last else 0,
        report_age_s=(now_ms - last.ts_ms) / 1000 if last else None,
        lease_age_s=(now_ms - lease.ts_ms) / 1000 if lease else None,
        error=last.error if last else "",
        host=last.host if last else "",
        pid=last.pid if last else 0,
    )


class PlotPoints:
    """One point per slot per `spacing_ms` (the newest record of each step), fed record by record: a
    reader keeps one of these per app instead of every record of the hour."""

    def __init__(self, spacing_ms: int = POINT_SPACING_MS):
        self.spacing_ms = spacing_ms
        self._by_step: dict[tuple[str, int], Point] = {}

    def add(self, s: StatusRecord) -> None:
        if s.batch_id < 0:
            return  # before any batch: no figures
        key = (s.slot.value, s.ts_ms // self.spacing_ms)
        lag = backlog(s.input_end, s.processed)
        latency = s.latency_ms
        if (earlier := self._by_step.get(key)) is not None:
            if lag is None:
                lag = earlier.lag_records  # not every record carries the input's end (runtime.source.input_ends)
            if earlier.latency_ms is not None:
                latency = max(earlier.latency_ms, latency or 0)  # a plot of latency shows the step's worst
        self._by_step[key] = Point(
            ts_ms=s.ts_ms,
            slot=s.slot.value,
            lag_records=lag,
            batch_ms=s.batch_ms,
            input_rate=s.input_rate,
            processing_rate=s.processing_rate,
            latency_ms=latency,
        )

    def since(self, since_ms: int) -> list[Point]:
        return sorted((p for p in self._by_step.values() if p.ts_ms >= since_ms), key=lambda p: (p.ts_ms, p.slot))

    def forget_before(self, since_ms: int) -> None:
        for key in [k for k, p in self._by_step.items() if p.ts_ms < since_ms]:
            del self._by_step[key]


def points(history: Sequence[StatusRecord], since_ms: int, spacing_ms: int = POINT_SPACING_MS) -> list[Point]:
    """One point per slot per `spacing_ms` (the newest record of each step), from `since_ms` on."""
    plot = PlotPoints(spacing_ms)
    for s in history:
        plot.add(s)
    return plot.since(since_ms)


def _writer_run(writer: str) -> tuple[str, str]:
    dag_id, sep, run_id = writer.partition(":")
    return (dag_id, run_id) if sep and dag_id.startswith("baton_") and run_id else ("", "")


def describe_change(prev: ControlRecord | None, cur: ControlRecord) -> list[tuple[str, str]]:
    """(kind, text) of what one control record changed against the one before it."""
    out: list[tuple[str, str]] = []
    if prev is None:
        out.append(("slot", f"registered at epoch {cur.epoch}, {cur.active.value} active"))
    elif cur.epoch != prev.epoch:
        h = cur.handoff
        if h is not None and h.reason:
            out.append(("failover", f"epoch {prev.epoch} -> {cur.epoch}: {cur.active.value} took over ({h.reason})"))
        else:
            out.append(("cutover", f"epoch {prev.epoch} -> {cur.epoch}: {prev.active.value} -> {cur.active.value}"))
    if cur.fence and (prev is None or prev.fence != cur.fence):
        out.append(("fence", f"fence set at {sum(cur.fence.values()):,} records in"))
    elif prev is not None and prev.fence and not cur.fence and cur.epoch == prev.epoch:
        out.append(("fence lifted", "fence lifted (the handoff ended without a cutover)"))
    if cur.check_at and (prev is None or prev.check_at != cur.check_at):
        out.append(("check", f"state check asked at {sum(cur.check_at.values()):,} records in"))
    if cur.invariants_asked and (prev is None or prev.invariants_asked != cur.invariants_asked):
        out.append(("check", f"invariant check asked of the standby ({cur.invariants_asked})"))
    for slot in Slot:
        a = prev.slots.get(slot) if prev else None
        b = cur.slots.get(slot)
        if b is None or (
            a is not None and (a.desired, a.version, a.generation) == (b.desired, b.version, b.generation)
        ):
            continue
        why = f" ({b.reason})" if b.reason else ""
        out.append(("slot", f"{slot.value}: {b.desired.value.lower()} {b.version} generation {b.generation}{why}"))
    if cur.operation != (prev.operation if prev else ""):
        out.append(("operation", cur.operation or "operation ended"))
    return out


def events(records: Sequence[ControlRecord]) -> list[Event]:
    """The app's control changes in order (records: the applied ones, oldest first)."""
    out: list[Event] = []
    prev = None
    fence_since = operation_since = None  # when the fence, the operation in force were set
    for rec in records:
        dag_id, run_id = _writer_run(rec.writer)
        for kind, text in describe_change(prev, rec):
            duration = None
            if kind in ("cutover", "failover", "fence lifted") and fence_since is not None:
                duration = rec.ts_ms - fence_since
            elif kind == "operation" and operation_since is not None and prev is not None and prev.operation:
                duration = rec.ts_ms - operation_since
            out.append(
                Event(
                    ts_ms=rec.ts_ms,
                    revision=rec.revision,
                    kind=kind,
                    text=text,
                    writer=rec.writer,
                    dag_id=dag_id,
                    run_id=run_id,
                    duration_ms=duration,
                )
            )
        if rec.fence and (prev is None or prev.fence != rec.fence):
            fence_since = rec.ts_ms
        elif not rec.fence:
            fence_since = None
        if rec.operation != (prev.operation if prev else ""):
            operation_since = rec.ts_ms if rec.operation else None
        prev = rec
    return out


def app_view(
    app: str,
    registered: bool,
    records: Sequence[ControlRecord],
    history: Sequence[StatusRecord],
    leases: Mapping[Slot, Lease],
    end: Positions | None,
    now_ms: int,
    window_ms: int = 3_600_000,
    plot: Sequence[Point] | None = None,
) -> AppView:
    """The view of one app: `records` its applied control records (oldest first, the last is current),
    `history` its status records (oldest first; the last few per slot are enough), `leases` the newest
    per slot, `end` its input's end now; `plot` its points if kept apart (PlotPoints), else from history."""
    record = records[-1] if records else None
    history_events = events(records)
    slots = [
        slot_view(slot, record, [s for s in history if s.slot is slot], leases.get(slot), end, now_ms) for slot in Slot
    ]
    return AppView(
        app=app,
        registered=registered,
        epoch=record.epoch if record else 0,
        active=record.active.value if record else "",
        revision=record.revision if record else 0,
        fence=record.fence if record else None,
        operation=record.operation if record else "",
        slots=slots,
        points=list(plot) if plot is not None else points(history, now_ms - window_ms),
        events=history_events[-50:],
        handoffs=handoff_stats(history_events),
    )
