"""Health rules and crash-loop guard of the baton_health DAG: pure functions, no I/O.

Per app and slot the DAG gathers the desired SlotSpec (control topic), the slot's recent status records
(oldest first, always including the latest one however old), the input end offsets, the size of the slot's
checkpoint directory, its cap (follower.compute_cap) and its own earlier lag samples; `assess` turns them
into findings and a verdict, and `decide_restart` says whether to restart a DEAD slot now, later or never.

Liveness. The harness publishes when a batch completes (and at start, restore, stop, failure), never while
idle: Spark runs no batch without new data. So silence means death only when input has been waiting
longer than a batch could take:
    silence = now - max(last record, waiting since) > heartbeat_max_age_s (restore_max_s while RESTORING)
"Waiting": the reachable end (input end, capped for a standby at the active's emitted position and for an
active at the fence) is beyond `processed`; without the cap a standby correctly holding back looks dead.
"Waiting since": `waiting_since_ms` if the caller knows it (timestamp of the oldest unprocessed input
record), else the oldest of an unbroken run of earlier lag samples that saw input waiting after the last
record, else now. So one look never declares a slot dead and an app just woken from a long idle is not
restarted; the price is detection one DAG run later. A STARTING record must move on within start_grace_s.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from baton.apps import AppDefinition
from baton.handoff import FAILOVER
from baton.health_policy import HealthPolicy
from baton.leases import Lease
from baton.records import ControlRecord, Positions, Role, Slot, SlotSpec, SlotState, StatusRecord

RUNNABLE = (SlotState.STARTING, SlotState.RESTORING, SlotState.RUNNING)


class Severity(str, enum.Enum):
    INFO = "info"
    WARN = "warn"
    CRITICAL = "critical"


class Verdict(str, enum.Enum):
    HEALTHY = "healthy"
    STARTING = "starting"  # within its start/restore grace: neither healthy nor dead yet
    DEGRADED = "degraded"  # alive, with WARN/CRITICAL findings: an operator should look
    DEAD = "dead"  # should run and does not: the DAG restarts it (see decide_restart)
    STOPPED = "stopped"  # not desired running: not checked
    FAILED = "failed"  # the crash-loop guard gave up: left alone until an operator starts it


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str


@dataclass(frozen=True)
class SlotHealth:
    app: str
    slot: Slot
    verdict: Verdict
    findings: list[Finding] = field(default_factory=list)
    last: StatusRecord | None = None
    lag: int | None = None  # records waiting now; store (ts_ms, lag) and pass it back next run as lag_history
    ts_ms: int = 0

    @property
    def reason(self) -> str:
        """The most severe finding: the one line that explains the verdict."""
        order = [Severity.CRITICAL, Severity.WARN, Severity.INFO]
        worst = sorted(self.findings, key=lambda f: order.index(f.severity))
        return worst[0].message if worst else ""


def lease_finding(
    spec: SlotSpec | None, lease: Lease | None, now_ms: int, policy: HealthPolicy, relaunched_ms: int = 0
) -> Finding | None:
    """A slot desired running whose lease (renewed by a launch since its start) has not been renewed for
    its ttl, plus the clock skew tolerance (the renewer's clock is not ours): it is dead, whatever its
    last status says (a hung query stops renewing; a slot on another host has no process to look at).
    relaunched_ms: when the launch's wrapper restarted its driver (or will): an older lease is the dead
    driver's."""
    if spec is None or spec.desired not in RUNNABLE or lease is None or lease.released:
        return None
    tolerance_ms = policy.clock_skew_tolerance_s * 1000
    if lease.ts_ms < max(spec.started_ms or 0, relaunched_ms) - tolerance_ms:
        return None  # the lease of the launch (or driver) before the slot's restart
    age = now_ms - lease.ts_ms
    if age <= lease.ttl_ms + tolerance_ms:
        return None
    return Finding(
        "lease",
        Severity.CRITICAL,
        f"lease not renewed for {_s(age)} (ttl {lease.ttl_ms / 1000:g} s; "
        f"launch {lease.launch[:8]}, pid {lease.pid} on {lease.host}, "
        f"last {lease.state.value})",
    )


def restarting_in_place(
    health: SlotHealth, state: str, at_ms: int, code: int | None, now_ms: int, policy: HealthPolicy
) -> SlotHealth:
    """The slot's launch is alive and its wrapper restarts a driver that dies (baton.driver_wrapper):
    `running` its driver since at_ms, `waiting` to restart it at at_ms, or `relaunched` it then. A restart
    by baton_health would kill the one under way, so:
    - a driver that reported its end (FAILED, STOPPED) since at_ms while its launch lives is ending: its
      wrapper restarts it or gives up once it has exited; STARTING for heartbeat_max_age_s (a JVM's
      shutdown), then judged as usual;
    - waiting: STARTING;
    - relaunched, and the new driver has not reported yet: STARTING for start_grace_s, then DEAD;
    otherwise the new driver's records are judged as any start's."""
    if health.verdict in (Verdict.STOPPED, Verdict.FAILED):
        return health
    last = health.last

    def judged(verdict: Verdict, finding: Finding) -> SlotHealth:
        return SlotHealth(health.app, health.slot, verdict, [finding], last, health.lag, now_ms)

    def starting(message: str) -> SlotHealth:
        return judged(Verdict.STARTING, Finding("restart", Severity.INFO, message))

    if last is not None and last.ts_ms >= at_ms and state in ("running", "relaunched"):
        ended = last.state in (SlotState.FAILED, SlotState.STOPPED) and health.verdict is Verdict.DEAD
        if ended and now_ms - last.ts_ms <= policy.heartbeat_max_age_s * 1000:
            return starting(f"its driver is ending ({last.state.value}): its supervisor restarts it or gives up")
        return health
    if state == "running":
        return health
    how = "died" if code is None else ("was killed by a signal" if code < 0 else f"exited with code {code}")
    if state == "waiting":
        return starting(f"its driver {how}: its supervisor restarts it in {_s(max(0, at_ms - now_ms))}")
    since = now_ms - at_ms
    if since > policy.start_grace_s * 1000:
        message = f"no status record {_s(since)} after its supervisor restarted it (grace {policy.start_grace_s:g} s)"
        return judged(Verdict.DEAD, Finding("liveness", Severity.CRITICAL, message))
    return starting(f"its driver {how}; its supervisor restarted it {_s(since)} ago, no status yet")


def failover_finding(record: ControlRecord, slot: Slot, now_ms: int) -> Finding | None:
    """The slot holds the active role through a failover (the standby's own, or the health DAG's): who
    took over from whom, when and why, until the next handoff."""
    h = record.handoff
    if h is None or h.id != FAILOVER or record.active is not slot or record.epoch != h.epoch + 1:
        return None
    when = f", {_s(now_ms - h.ts_ms)} ago" if h.ts_ms else ""
    return Finding(
        "failover",
        Severity.INFO,
        f"took over from {slot.other.value} at epoch {record.epoch}{when}, "
        f"at {dict(h.fence)}: {h.reason or 'no reason recorded'}",
    )


def _s(ms: float) -> str:
    return f"{ms / 1000:.0f} s"


def _mib(n: int) -> str:
    return f"{n / 1024**2:,.0f} MiB"


def _lag(end: Positions, cap: Positions | None, processed: Positions) -> int:
    # A cap names every partition (follower.compute_cap): one it omits may not be read. A partition missing
    # from `processed` has consumed nothing. An end behind processed counts as caught up: the end was read
    # before the slot's last batch, or it is Tansu's high watermark (last batch's base + 1).
    reachable = {p: e if cap is None else min(e, cap.get(p, 0)) for p, e in end.items()}
    return sum(max(0, e - processed.get(p, 0)) for p, e in reachable.items())


def assess(
    app_def: AppDefinition,
    slot: Slot,
    desired: SlotSpec | None,
    history: Sequence[StatusRecord],
    input_end: Positions | None,
    disk_bytes: int | None,
    now_ms: int,
    policy: HealthPolicy,
    *,
    cap: Positions | None = None,
    started_ms: int | None = None,
    waiting_since_ms: int | None = None,
    lag_history: Sequence[tuple[int, int]] = (),
) -> SlotHealth:
    """The health of one slot at now_ms (see the module docstring for liveness).

    cap: follower.compute_cap(control, slot, latest marker, partitions); None = no cap for an active slot,
      and for a slot whose last record says STANDBY, that record's `emitted`.
    started_ms: when the slot was last launched or restarted. Records older than that are from the old
      process, and a slot with no newer record is STARTING for start_grace_s, then DEAD.
    lag_history: (ts_ms, lag) of earlier runs (SlotHealth.ts_ms, .lag), oldest first.
    """
    for r in history:
        if r.app != app_def.name or r.slot is not slot:
            raise ValueError(f"history for {app_def.name}/{slot.value} holds a record of {r.app}/{r.slot.value}")
    if desired is None or desired.desired not in RUNNABLE:
        verdict = Verdict.FAILED if desired is not None and desired.desired is SlotState.FAILED else Verdict.STOPPED
        note = [Finding("desired", Severity.INFO, desired.reason)] if desired is not None and desired.reason else []
        return SlotHealth(app_def.name, slot, verdict, note, history[-1] if history else None, None, now_ms)
    # Records of another generation belong to a state that was thrown away (reprocess).
    recs = [r for r in history if r.generation == desired.generation]
    last = recs[-1] if recs else None
    progress = [r for r in recs if r.batch_id >= 0]
    findings: list[Finding] = []
    tolerance_ms = policy.clock_skew_tolerance_s * 1000
    if last is not None and last.ts_ms - now_ms > tolerance_ms:
        findings.append(
            Finding(
                "clock_skew",
                Severity.WARN,
                f"last record is {_s(last.ts_ms - now_ms)} in the future "
                f"(tolerance {policy.clock_skew_tolerance_s:g} s): heartbeat ages are unreliable",
            )
        )

    def done(
        verdict: Verdict, lag: int | None = None, rule: str = "", severity: Severity = Severity.INFO, message: str = ""
    ) -> SlotHealth:
        if message:
            findings.append(Finding(rule, severity, message))
        if verdict in (Verdict.HEALTHY, Verdict.STARTING) and any(f.severity is not Severity.INFO for f in findings):
            verdict = Verdict.DEGRADED
        return SlotHealth(app_def.name, slot, verdict, findings, last, lag, now_ms)

    dead = Severity.CRITICAL
    # 1. Not started yet, or (re)started after its last record.
    if last is None or (started_ms is not None and last.ts_ms < started_ms - tolerance_ms):
        if started_ms is None:
            return done(
                Verdict.DEAD,
                None,
                "liveness",
                dead,
                f"no status record of generation {desired.generation} and no start time known",
            )
        since, grace = now_ms - started_ms, f"grace {policy.start_grace_s:g} s"
        if since > policy.start_grace_s * 1000:
            return done(Verdict.DEAD, None, "liveness", dead, f"no status record {_s(since)} after start ({grace})")
        return done(Verdict.STARTING, None, "starting", message=f"started {_s(since)} ago, no status yet ({grace})")
    # 2. A process that ended, is still starting, or is stopping.
    age, wanted = max(0, now_ms - last.ts_ms), desired.desired.value
    if last.state in (SlotState.FAILED, SlotState.STOPPED):
        error = f": {last.error[:500]}" if last.error else ""  # the harness keeps up to 2000 chars
        return done(
            Verdict.DEAD,
            None,
            "liveness",
            dead,
            f"slot is {last.state.value} since {_s(age)} while desired {wanted}{error}",
        )
    if last.state is SlotState.STARTING:
        if age > policy.start_grace_s * 1000:
            return done(
                Verdict.DEAD, None, "liveness", dead, f"starting for {_s(age)} (grace {policy.start_grace_s:g} s)"
            )
        return done(Verdict.STARTING, None, "starting", message=f"starting for {_s(age)}")
    if last.state is SlotState.STOPPING:
        limit = f"limit {policy.heartbeat_max_age_s:g} s"
        if age > policy.heartbeat_max_age_s * 1000:
            return done(
                Verdict.DEAD, None, "liveness", dead, f"stopping for {_s(age)} while desired {wanted} ({limit})"
            )
        return done(Verdict.HEALTHY, None, "liveness", Severity.WARN, f"stopping for {_s(age)} while desired {wanted}")

    # 3. RESTORING or RUNNING: silence counts only while input is waiting.
    processed = progress[-1].processed if progress else {}
    if cap is None and last.role is Role.STANDBY:
        cap = last.emitted or {}
    lag = None if input_end is None else _lag(input_end, cap, processed)
    limit_s = policy.restore_max_s if last.state is SlotState.RESTORING else policy.heartbeat_max_age_s
    if lag is None and age > limit_s * 1000:
        findings.append(
            Finding(
                "liveness",
                Severity.WARN,
                f"no status for {_s(age)} and input end unknown: cannot tell idle from dead (limit {limit_s:g} s)",
            )
        )
    elif lag:
        since = now_ms if waiting_since_ms is None else min(waiting_since_ms, now_ms)
        for t, n in lag_history if waiting_since_ms is None else ():
            if t >= last.ts_ms + tolerance_ms:  # an unbroken run of waiting samples since the last record
                since = min(since, t) if n > 0 else now_ms
        silence = now_ms - max(last.ts_ms, since)
        if silence > limit_s * 1000:
            return done(
                Verdict.DEAD,
                lag,
                "liveness",
                dead,
                f"no status for {_s(silence)} while {lag:,} records "
                f"wait (limit {limit_s:g} s, last record {_s(age)} ago, {last.state.value})",
            )
    if last.state is SlotState.RESTORING:
        if lag != 0:
            waiting = "input end unknown" if lag is None else f"{lag:,} records waiting"
            return done(Verdict.STARTING, lag, "restore", message=f"restoring for {_s(age)}, {waiting}")
        findings.append(Finding("restore", Severity.INFO, "idle since the start (state loads with the first batch)"))

    # 4. Progress and budgets.
    k = policy.stuck_after_triggers
    if lag and len(progress) >= k and all(r.processed == processed for r in progress[-k:]):
        findings.append(
            Finding(
                "stuck",
                Severity.CRITICAL,
                f"processed unchanged over the last {k} batches "
                f"({progress[-k].batch_id}..{progress[-1].batch_id}) while {lag:,} records wait",
            )
        )
    if lag is not None and lag > policy.max_lag_records:
        findings.append(_lag_finding(lag, lag_history, now_ms, policy))
    findings.extend(_budget_findings(progress, disk_bytes, now_ms, policy))
    return done(Verdict.HEALTHY, lag)


def _lag_finding(lag: int, lag_history: Sequence[tuple[int, int]], now_ms: int, policy: HealthPolicy) -> Finding:
    # Over the limit is a WARN (a burst being worked off); over the limit and never shrinking across the
    # window is CRITICAL: the slot consumes slower than input arrives and will not catch up by itself.
    earlier = [(t, n) for t, n in lag_history if now_ms - policy.lag_window_s * 1000 <= t <= now_ms]
    series = [n for _, n in earlier] + [lag]
    growing = bool(earlier) and lag > series[0] and all(a <= b for a, b in zip(series, series[1:]))
    trend = f", up from {series[0]:,} {_s(now_ms - earlier[0][0])} ago" if growing else ""
    return Finding(
        "lag",
        Severity.CRITICAL if growing else Severity.WARN,
        f"lag {lag:,} records (limit {policy.max_lag_records:,}){trend}",
    )


def _same_process(a: StatusRecord, b: StatusRecord) -> bool:
    # A pid alone is reused across restarts in a container, and a lower running total also means a new process.
    return (a.host, a.pid) == (b.host, b.pid)


def _budget_findings(
    progress: list[StatusRecord], disk_bytes: int | None, now_ms: int, policy: HealthPolicy
) -> list[Finding]:
    out = []
    window_start = now_ms - policy.recent_window_s * 1000
    in_window = [(prev, r) for prev, r in zip(progress, progress[1:]) if r.ts_ms >= window_start]
    # The first batch of a process is left out: it includes the state restore and warm-up (see restore_ms).
    times = [r.batch_ms for prev, r in in_window if _same_process(prev, r)]
    if len(times) >= policy.min_batch_samples and statistics.median(times) > policy.batch_ms_budget:
        out.append(
            Finding(
                "batch_time",
                Severity.WARN,
                f"median batch {statistics.median(times):,.0f} ms over the "
                f"last {len(times)} batches (budget {policy.batch_ms_budget:,} ms)",
            )
        )
    rows = progress[-1].state_rows if progress else None
    if rows is not None and rows > policy.state_max_rows:
        out.append(
            Finding("state_rows", Severity.WARN, f"state holds {rows:,} rows (budget {policy.state_max_rows:,})")
        )
    if progress and progress[-1].state_bytes > policy.state_max_bytes:
        out.append(
            Finding(
                "state_bytes",
                Severity.WARN,
                f"state uses {_mib(progress[-1].state_bytes)} (budget {_mib(policy.state_max_bytes)})",
            )
        )
    if disk_bytes is not None and disk_bytes > policy.disk_max_bytes:
        out.append(
            Finding(
                "disk",
                Severity.WARN,
                f"checkpoint uses {_mib(disk_bytes)} on disk (budget {_mib(policy.disk_max_bytes)})",
            )
        )
    # dead_letters is a running total per process (back to 0 when it restarts): a batch's count is the
    # difference from the batch before in the same process.
    bad = sum(
        r.dead_letters - prev.dead_letters
        if _same_process(prev, r) and r.dead_letters >= prev.dead_letters
        else r.dead_letters
        for prev, r in in_window
    )
    rows = sum(r.input_rows for _, r in in_window)
    if rows >= policy.dead_letter_min_rows and bad > policy.dead_letter_max_share * rows:
        out.append(
            Finding(
                "dead_letters",
                Severity.WARN,
                f"{bad:,} of {rows:,} input rows ({bad / rows:.1%}) went to "
                f"the dead-letter topic in the last {len(in_window)} batches "
                f"(limit {policy.dead_letter_max_share:.0%})",
            )
        )
    return out


class RestartAction(str, enum.Enum):
    RESTART = "restart"
    WAIT = "wait"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class RestartDecision:
    action: RestartAction
    at_ms: int  # when a restart is allowed (now for RESTART)
    reason: str


def _recent(restarts: Sequence[int], now_ms: int, policy: HealthPolicy) -> list[int]:
    # A restart stamped after now is a clock difference between DAG workers, so it still counts.
    return sorted(t for t in restarts if t > now_ms - policy.restart_window_s * 1000)


# How the reason of a slot whose checkpoint cannot resume on its input begins (lost input data:
# spark_apps.runtime.source.input_check.WAY_OUT): a restart fails the same way, so the guard gives up at once.
CANNOT_RESUME = "The slot cannot resume from its checkpoint."


def decide_restart(
    restarts_ms: Sequence[int], now_ms: int, policy: HealthPolicy, last_error: str = ""
) -> RestartDecision:
    """What to do with a DEAD slot, given the times of its earlier restarts (persisted by the caller).

    On RESTART the caller restarts the slot and appends now_ms to the list. On GIVE_UP it marks the
    slot FAILED with the reason. On WAIT it does nothing, and the next run asks again.
    """
    if CANNOT_RESUME in last_error:  # its input lost what its checkpoint stands on: no restart helps
        return RestartDecision(RestartAction.GIVE_UP, now_ms, f"not restarted: {last_error}")
    recent = _recent(restarts_ms, now_ms, policy)
    window = f"{policy.restart_window_s:g} s"
    if len(recent) >= policy.max_restarts:
        error = f"; last error: {last_error}" if last_error else ""
        return RestartDecision(
            RestartAction.GIVE_UP,
            now_ms,
            f"crash loop: {len(recent)} restarts in {window} (limit {policy.max_restarts}){error}",
        )
    backoff_s = policy.backoff_s(len(recent))
    at_ms = int(recent[-1] + backoff_s * 1000) if recent else now_ms
    if at_ms > now_ms:
        return RestartDecision(
            RestartAction.WAIT,
            at_ms,
            f"backoff {backoff_s:g} s after restart {len(recent)} "
            f"in {window}: next restart in {(at_ms - now_ms) / 1000:.0f} s",
        )
    return RestartDecision(
        RestartAction.RESTART, now_ms, f"restart {len(recent) + 1} of {policy.max_restarts} in {window}"
    )


def prune_restarts(restarts_ms: Sequence[int], now_ms: int, policy: HealthPolicy) -> list[int]:
    """The restarts the guard still counts (inside the window), oldest first; at most max_restarts kept."""
    return _recent(restarts_ms, now_ms, policy)[-policy.max_restarts :]


def summarize(healths: Sequence[SlotHealth]) -> str:
    """A table for the task log: one line per slot, then its findings indented below it."""
    counts = {v: sum(h.verdict is v for h in healths) for v in Verdict}
    head = ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
    lines = [
        f"baton_health: {len(healths)} slot(s): {head or 'none'}",
        f"{'APP':<24} {'SLOT':<6} {'VERDICT':<9} {'BATCH':>8} {'LAG':>12} {'LAST':>8}",
    ]
    for h in sorted(healths, key=lambda h: (h.app, h.slot.value)):
        batch = str(h.last.batch_id) if h.last is not None and h.last.batch_id >= 0 else "-"
        lag = f"{h.lag:,}" if h.lag is not None else "-"
        ago = f"{max(0, h.ts_ms - h.last.ts_ms) / 1000:.0f} s" if h.last is not None else "never"
        lines.append(f"{h.app:<24} {h.slot.value:<6} {h.verdict.value.upper():<9} {batch:>8} {lag:>12} {ago:>8}")
        lines += [f"    {f.severity.value.upper():<8} {f.rule}: {f.message}" for f in h.findings]
    return "\n".join(lines)


def healthy_check(health: SlotHealth, now_ms: int, policy: HealthPolicy):
    """A gate on one assessment (baton.conditions.Check): met when HEALTHY with a status record younger
    than heartbeat_max_age_s (a live slot publishes at least every few seconds, idle or not); failed
    when the slot is dead, failed or not desired running (waiting cannot help); else keep waiting."""
    from baton.conditions import WAIT, Check

    if health.verdict in (Verdict.DEAD, Verdict.FAILED, Verdict.STOPPED):
        return Check(failed=True, message=f"{health.verdict.value}: {health.reason}")
    fresh = health.last is not None and now_ms - health.last.ts_ms <= policy.heartbeat_max_age_s * 1000
    if health.verdict is Verdict.HEALTHY and fresh:
        return Check(met=True, message=f"healthy: {health.reason or 'no findings'}")
    return WAIT
