"""The control-plane record formats: the one definition used by the Spark side and the Airflow side.

Three records travel on Kafka, all JSON with a format version `v`:

- ControlRecord, on the control topic, key = app. Desired state of an app: which slot is active,
  the role epoch, fences, each slot's desired state and version. Written only by the control plane.
  `revision` orders writes: a reader applies a record only if its revision is exactly one more than
  the last applied one, so a stale or duplicated write is ignored by every reader the same way
  (a compare-and-set on a log). `epoch` is the writer-role epoch: +1 at every cutover.
- StatusRecord, on the status topic, key = "app/slot". What a slot observed and did, every batch.
- CommitMarker, on the app's commits topic, key = app. "Emitted up to positions P, batch B, epoch E",
  produced in the same Kafka transaction as the output rows (invariant 3).

Positions are offset vectors {partition: next offset}, i.e. everything below has been consumed.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

FORMAT_VERSION = 1
# On the output records of a corrected-output publish (CommitMarker.corrected_epoch), value: the epoch.
# A republished value, not new input: downstream (and the verifier) can tell the two apart.
CORRECTION_HEADER = "baton-correction"


class RecordError(ValueError):
    """A record that cannot be decoded: names the record type and the field."""


class Slot(str, enum.Enum):
    BLUE = "blue"
    GREEN = "green"

    @property
    def other(self) -> Slot:
        return Slot.GREEN if self is Slot.BLUE else Slot.BLUE


class Role(str, enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"


class SlotState(str, enum.Enum):
    """Lifecycle of one slot; the legal moves are in baton.lifecycle.TRANSITIONS."""

    STOPPED = "stopped"
    STARTING = "starting"
    RESTORING = "restoring"
    RUNNING = "running"
    STOPPING = "stopping"
    FAILED = "failed"


Positions = dict[int, int]


def positions_to_json(p: Mapping[int, int] | None) -> dict[str, int] | None:
    return None if p is None else {str(k): int(v) for k, v in sorted(p.items())}


def positions_from_json(raw: Any, what: str) -> Positions | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecordError(f"{what}: expected an object of partition -> offset, got {type(raw).__name__}")
    try:
        out = {int(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise RecordError(f"{what}: partitions and offsets must be integers ({exc})") from None
    if any(v < 0 for v in out.values()) or any(k < 0 for k in out):
        raise RecordError(f"{what}: partitions and offsets must be >= 0")
    return out


def covers(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    """True if position vector a is at or beyond b on every partition of b."""
    return all(a.get(p, 0) >= off for p, off in b.items())


@dataclass(frozen=True)
class SlotSpec:
    """What the control plane wants of one slot."""

    desired: SlotState = SlotState.STOPPED
    version: str = ""
    generation: int = 0
    # Why the slot is in this state (e.g. the crash-loop guard's reason); shown in the UI.
    reason: str = ""
    # Restart times (ms) the crash-loop guard still counts (baton.health.prune_restarts), and when the
    # slot was last launched or restarted (start grace for baton.health.assess).
    restarts: tuple[int, ...] = ()
    started_ms: int = 0


@dataclass(frozen=True)
class Handoff:
    """Who set the current fence (or did the last cutover): an Airflow run id, or "failover" for the
    health DAG's; the epoch it was set at, the fence and the slot taking over. Kept after the cutover,
    so a re-run of the same run's fence step recognises its finished handoff instead of starting a new
    one, and an abort lifts only its own run's fence."""

    id: str
    epoch: int
    fence: Positions
    to: Slot
    # A failover's cause and when it was decided (ms): kept on the record until the next handoff, for
    # the health DAG's findings and the UI. Empty for a cutover.
    reason: str = ""
    ts_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "epoch": self.epoch,
            "fence": positions_to_json(self.fence),
            "to": self.to.value,
            "reason": self.reason,
            "ts_ms": self.ts_ms,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Handoff | None:
        if raw is None:
            return None
        what = "control record field 'handoff'"
        if not isinstance(raw, dict):
            raise RecordError(f"{what}: expected an object")
        return cls(
            id=_req(raw, "id", str, what),
            epoch=_req(raw, "epoch", int, what),
            fence=positions_from_json(_req(raw, "fence", dict, what), what) or {},
            to=Slot(_req(raw, "to", str, what)),
            reason=str(raw.get("reason", "")),
            ts_ms=int(raw.get("ts_ms", 0)),
        )


# How a rolling upgrade's hold on its app begins (ControlRecord.operation): "rolling upgrade by <run id>".
UPGRADE_HOLD = "rolling upgrade by "


@dataclass(frozen=True)
class ControlRecord:
    app: str
    revision: int
    epoch: int
    active: Slot
    slots: dict[Slot, SlotSpec] = field(default_factory=dict)
    # When set, every slot stops consuming at exactly these positions (cutover / failover fence).
    fence: Positions | None = None
    # When the fence's handoff must have finished (ms): past it, the health DAG lifts a fence left by a
    # handoff that died (its Airflow run killed or marked failed), so the output never stays held. 0: none.
    fence_expires_ms: int = 0
    handoff: Handoff | None = None
    # Every slot digests its state after its committed batch that ended at exactly these positions
    # (a state check at a position both slots have passed: the output keeps flowing meanwhile).
    check_at: Positions | None = None
    # The active at this epoch publishes its whole state as output when it takes over (a reprocess's
    # corrected-output cutover, or the way back from one): downstream's compacted view then holds
    # its values for every key. 0: no correction.
    correct_epoch: int = 0
    # The standby checks the app's invariants (its module's check_state) on its own state once for each
    # new value of this request id and answers in its status (StatusRecord.invariants): a reprocess's
    # gate on its new generation, without a Spark application of its own. Empty: none asked.
    invariants_asked: str = ""
    # A long operation under way (e.g. "reprocess by <run id>") and until when it may hold the app
    # (ms); another one is refused meanwhile. Empty: none.
    operation: str = ""
    operation_expires_ms: int = 0
    writer: str = ""
    ts_ms: int = 0

    @property
    def role_held(self) -> bool:
        """A long operation holds the app and moves the role by its own steps (a reprocess, its
        confirmation): no failover by lease meanwhile. A rolling upgrade's hold (UPGRADE_HOLD) keeps
        other handoffs of the app out but leaves a dead active's failover to the standby's lease, as
        without it: the upgrade's cutover is a gated step that a moved epoch fails."""
        return bool(self.operation) and not self.operation.startswith(UPGRADE_HOLD)

    def held_by_another(self, now_ms: int, mine: str = "") -> str:
        """The long operation that holds the app at now_ms, or "" if none does (none recorded, or expired)
        or it is `mine`: its very name, or a name ending " by <mine>" (an operation of run `mine`, retried)."""
        if not self.operation or self.operation_expires_ms <= now_ms:
            return ""
        if mine and (self.operation == mine or self.operation.endswith(f" by {mine}")):
            return ""
        return self.operation

    def role_of(self, slot: Slot) -> Role:
        return Role.ACTIVE if slot is self.active else Role.STANDBY

    def key(self) -> bytes:
        return self.app.encode()

    def to_bytes(self) -> bytes:
        body = {
            "v": FORMAT_VERSION,
            "app": self.app,
            "revision": self.revision,
            "epoch": self.epoch,
            "active": self.active.value,
            "slots": {
                s.value: {**asdict(spec), "desired": spec.desired.value, "restarts": list(spec.restarts)}
                for s, spec in self.slots.items()
            },
            "fence": positions_to_json(self.fence),
            "fence_expires_ms": self.fence_expires_ms,
            "handoff": self.handoff.to_json() if self.handoff else None,
            "check_at": positions_to_json(self.check_at),
            "correct_epoch": self.correct_epoch,
            "invariants_asked": self.invariants_asked,
            "operation": self.operation,
            "operation_expires_ms": self.operation_expires_ms,
            "writer": self.writer,
            "ts_ms": self.ts_ms,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> ControlRecord:
        d = _load(raw, "control record")
        try:
            slots = {
                Slot(name): SlotSpec(
                    desired=SlotState(spec.get("desired", "stopped")),
                    version=str(spec.get("version", "")),
                    generation=int(spec.get("generation", 0)),
                    reason=str(spec.get("reason", "")),
                    restarts=tuple(int(t) for t in spec.get("restarts", ())),
                    started_ms=int(spec.get("started_ms", 0)),
                )
                for name, spec in d.get("slots", {}).items()
            }
            return cls(
                app=_req(d, "app", str, "control record"),
                revision=_req(d, "revision", int, "control record"),
                epoch=_req(d, "epoch", int, "control record"),
                active=Slot(_req(d, "active", str, "control record")),
                slots=slots,
                fence=positions_from_json(d.get("fence"), "control record field 'fence'"),
                fence_expires_ms=int(d.get("fence_expires_ms", 0)),
                handoff=Handoff.from_json(d.get("handoff")),
                check_at=positions_from_json(d.get("check_at"), "control record field 'check_at'"),
                correct_epoch=int(d.get("correct_epoch", 0)),
                invariants_asked=str(d.get("invariants_asked", "")),
                operation=str(d.get("operation", "")),
                operation_expires_ms=int(d.get("operation_expires_ms", 0)),
                writer=str(d.get("writer", "")),
                ts_ms=int(d.get("ts_ms", 0)),
            )
        except (ValueError, AttributeError, TypeError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"control record: {exc}") from None


@dataclass(frozen=True)
class StateDigest:
    """What a slot's state held after batch `batch_id`: its row count, an order-independent hash of
    every (key, value) row, and the state's key/value schema. `at` says when it was taken:
    "restore" (what a started slot restored), "stop" (what a stopping slot leaves), "check" (asked
    for by ControlRecord.check_at: the batch ended at `position`), "missed" (asked for a check at
    `position`, the slot had read past it within a batch: no state there, batch_id -1); "replay" (the
    former preflight's replay) and "fence" are read for records of older versions. Compared by the rolling upgrade's restore and state checks."""

    at: str
    batch_id: int
    rows: int
    digest: str
    schema: str
    ts_ms: int = 0
    position: Positions | None = None

    AT = ("restore", "stop", "check", "missed", "replay", "fence")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "position": positions_to_json(self.position)}

    @classmethod
    def from_json(cls, raw: Any, what: str) -> StateDigest | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RecordError(f"{what}: expected an object, got {type(raw).__name__}")
        try:
            d = cls(
                at=_req(raw, "at", str, what),
                batch_id=_req(raw, "batch_id", int, what),
                rows=_req(raw, "rows", int, what),
                digest=_req(raw, "digest", str, what),
                schema=_req(raw, "schema", str, what),
                ts_ms=int(raw.get("ts_ms", 0)),
                position=positions_from_json(raw.get("position"), f"{what} field 'position'"),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{what}: {exc}") from None
        if d.at not in cls.AT:
            raise RecordError(f"{what}: field 'at' must be one of {cls.AT}, got {d.at!r}")
        return d


@dataclass(frozen=True)
class InvariantsCheck:
    """A slot's answer to ControlRecord.invariants_asked: the app's check_state on its state after its
    committed batch `batch_id` (`rows` rows) found `violations` (up to 10 `examples`). `unchecked`: the
    state could not be read (`error` says why): no verdict, a retry asks again. `note`: the app defines
    no check_state (nothing to check, ok)."""

    asked: str
    ok: bool
    batch_id: int = -1
    rows: int = 0
    violations: int = 0
    examples: tuple[str, ...] = ()
    unchecked: bool = False
    error: str = ""
    note: str = ""
    ts_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "examples": list(self.examples)}

    @classmethod
    def from_json(cls, raw: Any, what: str) -> InvariantsCheck | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RecordError(f"{what}: expected an object, got {type(raw).__name__}")
        try:
            return cls(
                asked=_req(raw, "asked", str, what),
                ok=bool(_req(raw, "ok", bool, what)),
                batch_id=int(raw.get("batch_id", -1)),
                rows=int(raw.get("rows", 0)),
                violations=int(raw.get("violations", 0)),
                examples=tuple(str(e) for e in raw.get("examples") or ()),
                unchecked=bool(raw.get("unchecked", False)),
                error=str(raw.get("error", "")),
                note=str(raw.get("note", "")),
                ts_ms=int(raw.get("ts_ms", 0)),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class StatusRecord:
    app: str
    slot: Slot
    state: SlotState
    role: Role
    epoch_seen: int
    version: str = ""
    generation: int = 0
    batch_id: int = -1
    processed: Positions = field(default_factory=dict)
    emitted: Positions | None = None
    # The input's end when the batch was planned (the source's latest offset): lag at that batch, for the
    # Baton page's plots and the metrics, without a broker read per record.
    input_end: Positions | None = None
    input_rows: int = 0
    input_rate: float = 0.0
    processing_rate: float = 0.0
    batch_ms: int = 0
    # None: the app's state store does not count its rows (AppDefinition.state.count_rows).
    state_rows: int | None = 0
    state_bytes: int = 0
    # The state store's memory (RocksDB: its block cache, memtables and pinned blocks, as Spark reports
    # memoryUsedBytes), beside state_bytes (its files on disk).
    state_memory_bytes: int = 0
    # End-to-end latency at this batch: from the timestamps of its oldest and newest input records (the
    # producer's send time) to the batch's end (its output committed). None: not known (a batch without
    # input, records without timestamps, or a source read on executors). spark_apps.runtime.source.batch_times.
    latency_ms: int | None = None
    latency_newest_ms: int | None = None
    dead_letters: int = 0
    restore_ms: int | None = None
    # The last state digest this process took (carried on every later record, so a reader of the tail
    # finds it): see StateDigest.
    state_digest: StateDigest | None = None
    # A standby asked for a state check digests the active's state too, from the active's checkpoint
    # (at="check" or "missed", with the position): the active's batches keep every task slot.
    active_digest: StateDigest | None = None
    # The newest epoch whose corrected output is in the output, as this slot's last commit marker says
    # (CommitMarker.corrected_epoch): the settle of a corrected-output cutover judges from there.
    corrected_epoch: int = 0
    # This slot's answer to the last invariant check asked of it (carried on every later record).
    invariants: InvariantsCheck | None = None
    # The active at a handoff's fence: its source plans under that fence's cap, so it emits nothing past
    # it at this epoch (spark_apps.runtime.coordination.applied_cap); `held_for` is the handoff's id (Handoff.id).
    held_fence: Positions | None = None
    held_for: str = ""
    error: str = ""
    pid: int = 0
    host: str = ""
    ts_ms: int = 0

    def key(self) -> bytes:
        return f"{self.app}/{self.slot.value}".encode()

    def to_bytes(self) -> bytes:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body.update(
            v=FORMAT_VERSION,
            slot=self.slot.value,
            state=self.state.value,
            role=self.role.value,
            processed=positions_to_json(self.processed),
            emitted=positions_to_json(self.emitted),
            input_end=positions_to_json(self.input_end),
            state_digest=self.state_digest.to_json() if self.state_digest else None,
            active_digest=self.active_digest.to_json() if self.active_digest else None,
            invariants=self.invariants.to_json() if self.invariants else None,
            held_fence=positions_to_json(self.held_fence),
        )
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> StatusRecord:
        d = _load(raw, "status record")
        what = "status record"
        try:
            kwargs = {f.name: d[f.name] for f in fields(cls) if f.name in d}
            kwargs.update(
                app=_req(d, "app", str, what),
                slot=Slot(_req(d, "slot", str, what)),
                state=SlotState(_req(d, "state", str, what)),
                role=Role(_req(d, "role", str, what)),
                epoch_seen=_req(d, "epoch_seen", int, what),
                processed=positions_from_json(d.get("processed", {}), f"{what} field 'processed'") or {},
                emitted=positions_from_json(d.get("emitted"), f"{what} field 'emitted'"),
                input_end=positions_from_json(d.get("input_end"), f"{what} field 'input_end'"),
                state_digest=StateDigest.from_json(d.get("state_digest"), f"{what} field 'state_digest'"),
                active_digest=StateDigest.from_json(d.get("active_digest"), f"{what} field 'active_digest'"),
                invariants=InvariantsCheck.from_json(d.get("invariants"), f"{what} field 'invariants'"),
                held_fence=positions_from_json(d.get("held_fence"), f"{what} field 'held_fence'"),
                held_for=str(d.get("held_for", "")),
            )
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class CommitMarker:
    """Produced inside the output transaction: the output up to `emitted` is committed.

    `corrected_epoch`: the newest epoch whose corrected output (its writer's whole state, asked for by
    ControlRecord.correct_epoch) is in the output before this marker; every later marker carries it on,
    so the last marker says whether a correction is still due."""

    app: str
    generation: int
    epoch: int
    slot: Slot
    batch_id: int
    emitted: Positions
    ts_ms: int = 0
    corrected_epoch: int = 0

    def key(self) -> bytes:
        return self.app.encode()

    def to_bytes(self) -> bytes:
        body = {
            **asdict(self),
            "v": FORMAT_VERSION,
            "slot": self.slot.value,
            "emitted": positions_to_json(self.emitted),
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> CommitMarker:
        d = _load(raw, "commit marker")
        what = "commit marker"
        try:
            return cls(
                app=_req(d, "app", str, what),
                generation=_req(d, "generation", int, what),
                epoch=_req(d, "epoch", int, what),
                slot=Slot(_req(d, "slot", str, what)),
                batch_id=_req(d, "batch_id", int, what),
                emitted=positions_from_json(_req(d, "emitted", dict, what), f"{what} field 'emitted'") or {},
                ts_ms=int(d.get("ts_ms", 0)),
                corrected_epoch=int(d.get("corrected_epoch", 0)),
            )
        except ValueError as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{what}: {exc}") from None


def _load(raw: bytes | None, what: str) -> dict[str, Any]:
    if raw is None:  # a record without a value, as a consumer hands it
        raise RecordError(f"{what}: no value")
    try:
        d = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise RecordError(f"{what}: not JSON ({exc})") from None
    if not isinstance(d, dict):
        raise RecordError(f"{what}: expected a JSON object")
    v = d.get("v")
    if v != FORMAT_VERSION:
        raise RecordError(f"{what}: format version {v!r} is not supported (this build reads {FORMAT_VERSION})")
    return d


def _req(d: Mapping[str, Any], name: str, typ: type, what: str) -> Any:
    if name not in d:
        raise RecordError(f"{what}: missing field {name!r}")
    value = d[name]
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise RecordError(f"{what}: field {name!r} must be {typ.__name__}, got {type(value).__name__}")
    return value
