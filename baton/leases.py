"""Slot leases: how a slot says it is alive, and how the standby decides the active is not (invariant 7).

Every running slot renews a Lease on the leases topic (one partition for all apps, key "app/slot")
every `lease_interval_ms`, idle or not, and stops renewing when its query hangs. Pure functions and
records here; the renewing and watching process is spark_apps.runtime.coordination.lease, the health DAG reads the
newest lease per slot.

Expiry is judged against the log, not against another host's clock (LeaseJudge): the standby's own
renewals land in the same partition as the active's. The active's lease has expired when, after its
last renewal in the log, the standby's own renewals have kept landing for `ttl_ms - interval_ms` by the
standby's clock (the first of them stands for the active's last: they are at most an interval apart),
with no gap longer than `max_gap_ms` between two of them. So the active has been silent for between
ttl - interval and ttl while the broker took the standby's writes. Why relative: a broker that stalls
(paused, cut off from both) stops both slots' renewals alike; judged by the standby's clock alone every
lease would expire at once when it came back (a failover storm). A renewer keeps one renewal in flight,
so a stalled broker leaves a gap in the standby's own chain, and a chain begun after the gap must span
the ttl again, by which time the live active's renewals are usually back in the log. Not always: a
client whose connection the stall caught mid-setup waits out librdkafka's request timeouts (the
ApiVersion request's 10 s) before it reconnects, and on a CI host the active's renewals came back ~7 s
after the standby's. So a chain begun after a gap of its own counts the other's silence only after a
further RECOVERY_GRACE_MS: a death during a broker stall is failed over that much later, a live active
is never failed over for the broker's pause.

On the same host the standby also looks at the active's process: a pid that is gone (or now names
another process: its start time differs) is a death seen at once, without waiting for the ttl.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields

from baton.records import (
    FORMAT_VERSION,
    ControlRecord,
    Positions,
    RecordError,
    Role,
    Slot,
    SlotState,
    StatusRecord,
    _load,
    _req,
)

# How far back a reader of the leases topic starts: enough for every slot's last few renewals (one per slot
# and interval, every app's in one partition).
LOOK_BACK_RECORDS = 2000
# A lease in these states was given up by a slot that is stopping on request: it expires, nobody takes over.
RELEASED = (SlotState.STOPPING, SlotState.STOPPED)


@dataclass(frozen=True)
class Lease:
    app: str
    slot: Slot
    launch: str  # the launch renewing it (BATON_LAUNCH_ID): a restart is a new launch
    host: str
    pid: int
    pid_start: int  # the process's start time (clock ticks since boot, /proc/<pid>/stat): pids are reused
    state: SlotState
    role: Role
    epoch_seen: int
    seq: int  # renewals of this launch so far
    ts_ms: int  # when the renewal was made, by the renewer's clock
    ttl_ms: int
    interval_ms: int

    def key(self) -> bytes:
        return f"{self.app}/{self.slot.value}".encode()

    @property
    def released(self) -> bool:
        return self.state in RELEASED

    def to_bytes(self) -> bytes:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body.update(v=FORMAT_VERSION, slot=self.slot.value, state=self.state.value, role=self.role.value)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> Lease:
        d, what = _load(raw, "lease"), "lease"
        try:
            return cls(
                app=_req(d, "app", str, what),
                slot=Slot(_req(d, "slot", str, what)),
                launch=_req(d, "launch", str, what),
                host=_req(d, "host", str, what),
                pid=_req(d, "pid", int, what),
                pid_start=_req(d, "pid_start", int, what),
                state=SlotState(_req(d, "state", str, what)),
                role=Role(_req(d, "role", str, what)),
                epoch_seen=_req(d, "epoch_seen", int, what),
                seq=_req(d, "seq", int, what),
                ts_ms=_req(d, "ts_ms", int, what),
                ttl_ms=_req(d, "ttl_ms", int, what),
                interval_ms=_req(d, "interval_ms", int, what),
            )
        except ValueError as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"{what}: {exc}") from None


def decode_lease(app: str, key: bytes | None, value: bytes | None) -> Lease | None:
    """The lease in a message if it is `app`'s and well formed; a malformed one is skipped, never fatal."""
    if key is None or value is None or not key.startswith(f"{app}/".encode()):
        return None
    try:
        lease = Lease.from_bytes(value)
    except RecordError:
        return None
    return lease if lease.app == app else None


# After a gap in the standby's own renewals (a stalled broker), how long the active gets to reconnect before
# its silence counts: librdkafka's api.version.request.timeout.ms (10 s) plus a reconnect backoff and a
# renewal interval (module docstring).
RECOVERY_GRACE_MS = 12_000


def max_gap_ms(interval_ms: int) -> int:
    """The longest pause between two of a slot's own renewals that still counts as renewing steadily:
    two intervals (one late renewal is jitter, a busy host) but less than a stalled broker's gap."""
    return 2 * interval_ms + 500


class LeaseJudge:
    """Reads the leases topic in log order for one slot of one app (`me`, launch `launch`) and says
    how long the other slot has been silent, measured by this slot's own renewals (module docstring)."""

    def __init__(self, app: str, me: Slot, launch: str, interval_ms: int):
        self.app, self.me, self.launch, self.interval_ms = app, me, launch, interval_ms
        self.other: Lease | None = None  # the other slot's newest lease
        self.mine: Lease | None = None  # this launch's newest renewal seen in the log
        self._chain: tuple[int, int] | None = None  # (first, last) ts of my unbroken renewals since the other's
        self._after_gap = False  # the chain began after a gap in my own renewals (a stall) since the other's last

    def observe(self, lease: Lease) -> None:
        if lease.app != self.app:
            return
        if lease.slot is not self.me:
            self.other, self._chain, self._after_gap = lease, None, False
            return
        if lease.launch != self.launch:
            return  # an earlier launch of this slot
        self.mine = lease
        if self._chain is not None and lease.ts_ms - self._chain[1] > max_gap_ms(self.interval_ms):
            self._chain, self._after_gap = None, True  # a gap: count afresh, and give the other time to reconnect
        if self._chain is None:
            self._chain = (lease.ts_ms, lease.ts_ms)
        else:
            self._chain = (self._chain[0], lease.ts_ms)

    def restart_count(self) -> None:
        """The role moved (a new epoch): the new active's silence counts from now. A slot handed the role
        while it was stalled (a cutover to a trailing standby) is not failed over for its silence before."""
        self._chain = None

    def silent_ms(self) -> int:
        """How long the other slot has been silent while this one renewed steadily (0: not known to be)."""
        if self._chain is None:
            return 0
        counted = self._chain[1] - self._chain[0] + self.interval_ms
        return max(0, counted - RECOVERY_GRACE_MS) if self._after_gap else counted


@dataclass(frozen=True)
class Takeover:
    """The standby's decision: take the active role now (`go`), and why, or why not."""

    go: bool
    reason: str


def process_gone(lease: Lease, host: str, start_of) -> bool:
    """The lease's process is known to be gone: it ran on this host and its pid is free or now names a
    process that started at another time. `start_of(pid)` -> start time or None (no such process)."""
    if lease.host != host:
        return False
    started = start_of(lease.pid)
    return started is None or started != lease.pid_start


def decide_takeover(
    control: ControlRecord | None,
    me: Slot,
    my_state: SlotState,
    judge: LeaseJudge,
    active_gone: bool,
    processed: Positions | None,
    emitted: Positions,
    max_lag_records: int,
) -> Takeover:
    """Whether the standby `me` takes the active role now (the caller fences the writer, reads the
    final emitted position and writes the control record: spark_apps.runtime.coordination.lease).

    Never while the control plane wants the active stopped or holds the app for a long operation that
    moves the role by its own steps (a reprocess: ControlRecord.role_held; a rolling upgrade's hold does
    not stop a failover), never between generations (different state), never from
    a standby that is not running, is past what the active emitted or is further behind than the
    app's warm-up bound (a restart of the active from its checkpoint is the faster way back then: the
    health DAG's). Otherwise: when the active's process is gone (same host) or its lease expired."""
    if control is None or control.role_of(me) is not Role.STANDBY:
        return Takeover(False, "not the standby")
    active, mine = control.slots.get(control.active), control.slots.get(me)
    if active is None or active.desired not in (SlotState.STARTING, SlotState.RUNNING):
        return Takeover(False, "the active is not desired running")
    if mine is None or mine.desired is not SlotState.RUNNING or my_state is not SlotState.RUNNING:
        return Takeover(False, "this standby is not running")
    if control.role_held:
        return Takeover(False, f"the app is held by {control.operation}")
    if active.generation != mine.generation:
        return Takeover(False, f"generations differ ({active.generation} active, {mine.generation} here)")
    lease = judge.other
    if lease is None:
        return Takeover(False, "no lease of the active seen yet")
    if lease.released:
        return Takeover(False, f"the active released its lease ({lease.state.value})")
    silent = judge.silent_ms()
    expired = silent >= lease.ttl_ms
    if not (active_gone or expired):
        return Takeover(False, "the active's lease holds")
    if processed is None:
        return Takeover(False, "this standby has not processed a batch yet")
    past = {p: (o, emitted.get(p, 0)) for p, o in processed.items() if o > emitted.get(p, 0)}
    if past:
        return Takeover(False, f"this standby processed past what the active emitted {past}")
    short = sum(max(0, o - processed.get(p, 0)) for p, o in emitted.items())
    if short > max_lag_records:
        return Takeover(
            False,
            f"this standby is {short} records behind the active's output (more than max_lag_records {max_lag_records})",
        )
    why = (
        f"the active's process (pid {lease.pid} on {lease.host}) is gone"
        if active_gone
        else f"the active's lease expired: no renewal for {silent / 1000:.1f} s (ttl {lease.ttl_ms / 1000:g} s) "
        f"while {me.value} renewed"
    )
    return Takeover(True, why)


# A standby's newest status at most this old counts as a running standby for a step-down.
STANDBY_FRESH_MS = 10_000


def decide_step_down(
    control: ControlRecord | None,
    me: Slot,
    standby: StatusRecord | None,
    emitted: Positions,
    max_lag_records: int,
    now_ms: int,
) -> Takeover:
    """Whether the active `me`, its driver just restarted in place (baton.driver_wrapper), hands the role
    to its running standby before it starts, instead of restoring from its checkpoint while the output
    waits (tens of seconds). `standby`: the other slot's newest status record; `emitted`: what the app
    emitted (the last commit marker, read after fencing the writer: final, since the restarted driver
    has not acquired it). The caller writes baton.handoff.take_over for the other slot.

    The step-down is the restarted active's, not the standby's: the standby could take over from a live
    restarted active only by racing the writer it acquires for its first batch, and a writer
    initialised after the standby fenced it could commit past the fence the standby read. The
    restarted active hands over before it acquires anything, so nobody can write in between.
    The standby's own conditions apply (decide_takeover): running, of the same generation, not past
    the output and within max_lag_records of it; no fence or reprocess in flight."""
    if control is None or control.active is not me:
        return Takeover(False, "not the active")
    mine, other = control.slots.get(me), control.slots.get(me.other)
    if control.fence is not None or control.role_held:
        return Takeover(False, f"a handoff is in flight ({control.operation or 'a fence is set'})")
    if other is None or other.desired is not SlotState.RUNNING:
        return Takeover(False, "the standby is not desired running")
    if mine is not None and other.generation != mine.generation:
        return Takeover(False, f"generations differ ({mine.generation} here, {other.generation} standby)")
    if (
        standby is None
        or standby.state is not SlotState.RUNNING
        or standby.role is not Role.STANDBY
        or standby.generation != other.generation
        or now_ms - standby.ts_ms > STANDBY_FRESH_MS
        or not standby.processed
    ):
        return Takeover(False, "the standby is not running now")
    processed = standby.processed
    past = {p: (o, emitted.get(p, 0)) for p, o in processed.items() if o > emitted.get(p, 0)}
    if past:
        return Takeover(False, f"the standby processed past what was emitted {past}")
    short = sum(max(0, o - processed.get(p, 0)) for p, o in emitted.items())
    if short > max_lag_records:
        return Takeover(False, f"the standby is {short} records behind the output (max_lag_records {max_lag_records})")
    return Takeover(
        True,
        f"the active {me.value} was restarted by its supervisor and handed over to its running standby, "
        f"{short} records behind, instead of restoring while the output waits",
    )


def proc_start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (Linux /proc), None if there is no such process
    or it has ended: a killed process stays a zombie until its parent (or init, once the parent is
    gone too) reaps it, which took ~2 s on this host after a kill of a slot's whole process group."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'. Then the
    # state (field 3) and, 19 fields on, the start time (field 22).
    rest = stat[stat.rindex(b")") + 2 :].split()
    if rest[0] in (b"Z", b"X"):
        return None
    return int(rest[19])


def this_host() -> str:
    import socket

    return socket.gethostname()


def my_pid_start() -> int:
    return proc_start_ticks(os.getpid()) or 0
