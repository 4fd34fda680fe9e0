"""Health rules and crash-loop guard, driven by an injected clock and status records built by hand."""

import pytest

from baton.apps import APPS_DIR, AppDefinition, StateSettings, TopicRef, load_definition
from baton.health import (
    CANNOT_RESUME,
    Finding,
    HealthPolicy,
    RestartAction,
    Severity,
    SlotHealth,
    Verdict,
    assess,
    decide_restart,
    prune_restarts,
    summarize,
)
from baton.records import Role, Slot, SlotSpec, SlotState, StatusRecord

S = SlotState
MIB = 1024**2
NOW = 1_700_000_000_000  # the injected clock (ms)
APP = AppDefinition(
    name="clicks",
    module="spark_apps.apps.click_counts",
    version="v1",
    input=TopicRef("in", 2),
    output=TopicRef("out", 2),
    trigger_ms=1000,
    batch_ms_budget=2000,
    max_lag_records=1000,
    state=StateSettings(max_rows=10_000, max_bytes=100 * MIB),
)
POLICY = HealthPolicy.from_app(APP)
RUN = SlotSpec(S.RUNNING, "v1", 0)


def rec(ago_s: float, processed=None, **kw) -> StatusRecord:
    """A RUNNING active record published ago_s before NOW."""
    base = dict(
        app="clicks",
        slot=Slot.BLUE,
        state=S.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        batch_id=0,
        processed={0: 100, 1: 100} if processed is None else processed,
        pid=10,
        batch_ms=500,
        input_rows=100,
        ts_ms=int(NOW - ago_s * 1000),
    )
    return StatusRecord(**{**base, **kw})


def batches(n: int, start_ago_s: float = 100, step_s: float = 1, first_offset: int = 0, **kw) -> list[StatusRecord]:
    """n consecutive batches of one process, 10 records per partition each, the last at start_ago_s - (n-1)*step_s."""
    return [
        rec(
            start_ago_s - i * step_s,
            processed={0: first_offset + 10 * (i + 1), 1: first_offset + 10 * (i + 1)},
            batch_id=i,
            **kw,
        )
        for i in range(n)
    ]


def check(history, input_end=None, disk_bytes=None, desired=RUN, now=NOW, policy=POLICY, **kw) -> SlotHealth:
    return assess(APP, Slot.BLUE, desired, history, input_end, disk_bytes, now, policy, **kw)


def rules(h: SlotHealth) -> dict[str, Severity]:
    return {f.rule: f.severity for f in h.findings}


# --- policy ---------------------------------------------------------------------------------------------


def test_policy_from_app_uses_the_app_budgets():
    assert (POLICY.batch_ms_budget, POLICY.max_lag_records) == (2000, 1000)
    assert (POLICY.state_max_rows, POLICY.state_max_bytes, POLICY.disk_max_bytes) == (10_000, 100 * MIB, 300 * MIB)
    assert POLICY.heartbeat_max_age_s == 30  # 5 x (1 s + 2 s) = 15 s is under the 30 s floor
    slow = AppDefinition(**{**APP.__dict__, "trigger_ms": 10_000, "batch_ms_budget": 5_000})
    assert HealthPolicy.from_app(slow).heartbeat_max_age_s == 75
    assert HealthPolicy.from_app(APP, stuck_after_triggers=4).stuck_after_triggers == 4
    real = load_definition(APPS_DIR / "click_counts.yaml")
    assert HealthPolicy.from_app(real).max_lag_records == real.max_lag_records


def test_bad_policies_name_the_field():
    with pytest.raises(ValueError, match="max_restarts must be > 0"):
        HealthPolicy(max_restarts=0)
    # 30 + 60 + 120 + 240 s of backoff between 5 restarts cannot fit in a 300 s window.
    with pytest.raises(ValueError, match="restart_window_s=300 must exceed the 450 s"):
        HealthPolicy(max_restarts=5, restart_window_s=300)


def test_record_of_another_slot_is_rejected():
    with pytest.raises(ValueError, match="clicks/blue holds a record of clicks/green"):
        check([rec(1, slot=Slot.GREEN)])


# --- desired state --------------------------------------------------------------------------------------


def test_slot_not_desired_running_is_not_checked():
    ancient = [rec(86_400, state=S.FAILED, error="boom")]
    assert check(ancient, desired=None).verdict is Verdict.STOPPED
    h = check(ancient, {0: 999, 1: 999}, desired=SlotSpec(S.STOPPED))
    assert h.verdict is Verdict.STOPPED and h.findings == []


def test_failed_slot_shows_the_guard_reason():
    h = check([rec(5)], desired=SlotSpec(S.FAILED, reason="crash loop: 3 restarts in 600 s"))
    assert h.verdict is Verdict.FAILED and h.reason == "crash loop: 3 restarts in 600 s"


# --- start and liveness ---------------------------------------------------------------------------------


def test_no_record_is_starting_within_the_grace_then_dead():
    assert check([], started_ms=NOW - 60_000).verdict is Verdict.STARTING
    h = check([], started_ms=NOW - 200_000)
    assert h.verdict is Verdict.DEAD and "no status record 200 s after start (grace 120 s)" in h.reason
    assert check([]).verdict is Verdict.DEAD  # nothing to measure a grace from


def test_records_of_an_older_generation_do_not_count():
    old = batches(3, start_ago_s=10)  # generation 0, fresh
    h = check(old, desired=SlotSpec(S.RUNNING, "v1", 1), started_ms=NOW - 30_000)
    assert h.verdict is Verdict.STARTING and h.last is None


def test_a_restart_after_a_failure_gets_a_start_grace():
    failed = [rec(100, state=S.FAILED, batch_id=-1, processed={}, error="OOM")]
    assert check(failed).verdict is Verdict.DEAD
    assert check(failed, started_ms=NOW - 40_000).verdict is Verdict.STARTING
    assert check(failed, started_ms=NOW - 130_000).verdict is Verdict.DEAD


@pytest.mark.parametrize("state", [S.FAILED, S.STOPPED])
def test_ended_process_while_desired_running_is_dead(state):
    h = check([*batches(3), rec(3, state=state, batch_id=-1, processed={}, error="ValueError: bad state")])
    assert h.verdict is Verdict.DEAD
    assert h.reason == f"slot is {state.value} since 3 s while desired running: ValueError: bad state"


def test_starting_record_must_move_on_within_the_grace():
    starting = lambda ago: [rec(ago, state=S.STARTING, batch_id=-1, processed={})]  # noqa: E731
    assert check(starting(60), {0: 0, 1: 0}).verdict is Verdict.STARTING
    h = check(starting(121), {0: 0, 1: 0})
    assert h.verdict is Verdict.DEAD and h.reason == "starting for 121 s (grace 120 s)"


def test_stopping_while_desired_running():
    stopping = lambda ago: [*batches(2), rec(ago, state=S.STOPPING, batch_id=-1, processed={})]  # noqa: E731
    assert check(stopping(5)).verdict is Verdict.DEGRADED
    assert check(stopping(31)).verdict is Verdict.DEAD


def test_idle_app_is_not_dead_however_old_its_last_record():
    h = check(batches(3, start_ago_s=3600), {0: 30, 1: 30})
    assert h.verdict is Verdict.HEALTHY and h.findings == [] and h.lag == 0
    # The end read below processed (Tansu's high watermark, or read before the last batch) is caught up.
    assert check(batches(3, start_ago_s=3600), {0: 25, 1: 30}).lag == 0


def test_silent_slot_with_input_waiting_is_dead_only_on_evidence_that_it_waited():
    hist = batches(3, start_ago_s=3600)
    waiting = {0: 35, 1: 30}
    # First look: the input may have arrived a moment ago (an app waking from idle) - not dead yet.
    first = check(hist, waiting)
    assert first.verdict is Verdict.HEALTHY and first.lag == 5
    # A minute later the earlier sample proves it has been waiting for 60 s.
    h = check(hist, waiting, now=NOW + 60_000, lag_history=[(first.ts_ms, first.lag)])
    assert h.verdict is Verdict.DEAD
    assert h.reason.startswith("no status for 60 s while 5 records wait (limit 30 s, last record 3658 s ago")
    # The caller may know when the oldest waiting record arrived: one look suffices.
    assert check(hist, waiting, waiting_since_ms=NOW - 31_000).verdict is Verdict.DEAD
    assert check(hist, waiting, waiting_since_ms=NOW - 10_000).verdict is Verdict.HEALTHY


def test_only_an_unbroken_run_of_waiting_samples_after_the_last_record_counts():
    hist = batches(3, start_ago_s=3600)
    before_last = [(NOW - 3_700_000, 5)]
    assert check(hist, {0: 35, 1: 30}, lag_history=before_last).verdict is Verdict.HEALTHY
    broken = [(NOW - 120_000, 5), (NOW - 60_000, 0)]
    assert check(hist, {0: 35, 1: 30}, lag_history=broken).verdict is Verdict.HEALTHY
    unbroken = [(NOW - 120_000, 5), (NOW - 60_000, 5)]
    assert "no status for 120 s" in check(hist, {0: 35, 1: 30}, lag_history=unbroken).reason


def test_busy_slot_with_fresh_heartbeat_is_healthy():
    h = check(batches(5, start_ago_s=5), {0: 500, 1: 500}, waiting_since_ms=NOW - 600_000)
    assert h.verdict is Verdict.HEALTHY and h.lag == 900


def test_standby_holding_at_its_cap_is_idle_not_dead():
    hist = batches(3, start_ago_s=3600, role=Role.STANDBY, emitted={0: 30, 1: 30})
    end = {0: 5000, 1: 5000}  # input waits beyond the active's emitted position
    old_wait = NOW - 600_000
    h = check(hist, end, cap={0: 30, 1: 30}, waiting_since_ms=old_wait)
    assert h.verdict is Verdict.HEALTHY and h.lag == 0
    # Without a cap from the caller, the record's own `emitted` is the standby's cap.
    assert check(hist, end, waiting_since_ms=old_wait).lag == 0
    assert check(batches(3, start_ago_s=3600, role=Role.STANDBY), end, waiting_since_ms=old_wait).lag == 0
    # A standby that may read further and is silent is dead.
    h = check(hist, end, cap={0: 80, 1: 30}, waiting_since_ms=old_wait)
    assert h.verdict is Verdict.DEAD and h.lag == 50


def test_active_at_its_fence_is_idle():
    hist = batches(3, start_ago_s=3600)
    assert check(hist, {0: 900, 1: 900}, cap={0: 30, 1: 30}, waiting_since_ms=NOW - 600_000).verdict is Verdict.HEALTHY


def test_unknown_input_end_cannot_tell_idle_from_dead():
    h = check(batches(3, start_ago_s=3600), None)
    assert h.verdict is Verdict.DEGRADED and h.lag is None
    assert "no status for 3598 s and input end unknown: cannot tell idle from dead (limit 30 s)" in h.reason
    assert check(batches(3, start_ago_s=10), None).verdict is Verdict.HEALTHY


def test_record_from_the_future_is_flagged_and_not_dead():
    hist = [*batches(3, start_ago_s=100), rec(-60, processed={0: 30, 1: 30}, batch_id=3)]
    h = check(hist, {0: 500, 1: 500}, waiting_since_ms=NOW - 600_000)
    assert h.verdict is Verdict.DEGRADED and rules(h) == {"clock_skew": Severity.WARN}
    assert "last record is 60 s in the future (tolerance 5 s)" in h.reason
    within = [*batches(3, start_ago_s=100), rec(-2, processed={0: 30, 1: 30}, batch_id=3)]
    assert check(within, {0: 30, 1: 30}).findings == []
    stopping = [*batches(3, start_ago_s=100), rec(-60, state=S.STOPPING, batch_id=-1, processed={})]
    assert "stopping for 0 s while desired running" in [f.message for f in check(stopping).findings]


def test_partitions_missing_from_processed_count_from_zero():
    h = check([rec(1, processed={0: 10, 7: 3})], {0: 10, 1: 5})
    assert h.lag == 5  # partition 1 never consumed; partition 7 has no known end and is ignored


def test_restoring_slot():
    def restoring(ago: float) -> list[StatusRecord]:
        return [*batches(3, start_ago_s=4000), rec(ago, state=S.RESTORING, batch_id=-1, processed={})]

    # Restored, and no input since: healthy idle, however long ago.
    h = check(restoring(3600), {0: 30, 1: 30})
    assert h.verdict is Verdict.HEALTHY and rules(h) == {"restore": Severity.INFO} and h.lag == 0
    # Input waiting: the first batch restores the state, which may take up to restore_max_s.
    assert check(restoring(600), {0: 40, 1: 30}, waiting_since_ms=NOW - 600_000).verdict is Verdict.STARTING
    h = check(restoring(1801), {0: 40, 1: 30}, waiting_since_ms=NOW - 1_900_000)
    assert h.verdict is Verdict.DEAD and "limit 1800 s" in h.reason
    # Input end unknown: still restoring as far as anyone can tell; past restore_max_s an operator should look.
    h = check(restoring(60), None)
    assert h.verdict is Verdict.STARTING and h.reason == "restoring for 60 s, input end unknown"
    assert check(restoring(1900), None).verdict is Verdict.DEGRADED


# --- progress rules -------------------------------------------------------------------------------------


def stalled(n: int) -> list[StatusRecord]:
    return [rec(20 - i, processed={0: 50, 1: 50}, batch_id=i) for i in range(n)]


def test_stuck_fires_when_processed_stands_still_while_input_waits():
    h = check(stalled(10), {0: 80, 1: 50})
    assert rules(h)["stuck"] is Severity.CRITICAL and h.verdict is Verdict.DEGRADED
    assert "processed unchanged over the last 10 batches (0..9) while 30 records wait" in h.reason


def test_stuck_does_not_fire_without_waiting_input_progress_or_enough_batches():
    assert "stuck" not in rules(check(stalled(10), {0: 50, 1: 50}))
    assert "stuck" not in rules(check(stalled(9), {0: 80, 1: 50}))
    assert "stuck" not in rules(check(batches(10, start_ago_s=20), {0: 500, 1: 100}))


def test_lag_over_the_limit_warns_and_growing_lag_is_critical():
    hist = batches(3, start_ago_s=3)  # processed 30 / 30
    end = {0: 1030, 1: 30}  # lag 1000 = the limit
    assert "lag" not in rules(check(hist, end))
    end = {0: 1530, 1: 30}
    h = check(hist, end)
    assert rules(h)["lag"] is Severity.WARN and h.reason == "lag 1,500 records (limit 1,000)"
    growing = [(NOW - 120_000, 400), (NOW - 60_000, 900)]
    h = check(hist, end, lag_history=growing)
    assert rules(h)["lag"] is Severity.CRITICAL and h.reason == "lag 1,500 records (limit 1,000), up from 400 120 s ago"
    shrinking = [(NOW - 120_000, 3000), (NOW - 60_000, 2000)]
    assert rules(check(hist, end, lag_history=shrinking))["lag"] is Severity.WARN
    outside_window = [(NOW - 900_000, 400)]
    assert rules(check(hist, end, lag_history=outside_window))["lag"] is Severity.WARN


def test_batch_time_median_over_budget_warns():
    slow = batches(6, start_ago_s=10, batch_ms=2500)
    h = check(slow, {0: 60, 1: 60})
    assert rules(h) == {"batch_time": Severity.WARN}
    assert h.reason == "median batch 2,500 ms over the last 5 batches (budget 2,000 ms)"


def test_batch_time_ignores_a_spike_a_first_batch_and_old_batches():
    spike = batches(6, start_ago_s=10)
    spike[3] = StatusRecord(**{**spike[3].__dict__, "batch_ms": 60_000})
    assert check(spike, {0: 60, 1: 60}).findings == []
    # After a restart, the first batch includes the state restore: not a batch-time problem.
    restarted = [rec(30, batch_id=0), rec(5, batch_id=1, host="h2", batch_ms=90_000), rec(4, batch_id=2, host="h2")]
    one_sample = HealthPolicy.from_app(APP, min_batch_samples=1)
    assert check(restarted, {0: 100, 1: 100}, policy=one_sample).findings == []
    slow_second = [*restarted, rec(3, batch_id=3, host="h2", batch_ms=90_000)]
    assert "batch_time" in rules(check(slow_second, {0: 100, 1: 100}, policy=one_sample))
    # Too few recent batches to judge: the slow ones are outside the window.
    old = [*batches(5, start_ago_s=900, batch_ms=9000), *batches(2, start_ago_s=2, first_offset=50)]
    assert "batch_time" not in rules(check(old, {0: 70, 1: 70}))


def test_state_and_disk_budgets():
    hist = batches(2, start_ago_s=2, state_rows=10_001, state_bytes=101 * MIB)
    h = check(hist, {0: 20, 1: 20}, disk_bytes=301 * MIB)
    assert rules(h) == {"state_rows": Severity.WARN, "state_bytes": Severity.WARN, "disk": Severity.WARN}
    messages = {f.rule: f.message for f in h.findings}
    assert messages["state_rows"] == "state holds 10,001 rows (budget 10,000)"
    assert messages["state_bytes"] == "state uses 101 MiB (budget 100 MiB)"
    assert messages["disk"] == "checkpoint uses 301 MiB on disk (budget 300 MiB)"
    uncounted = batches(2, start_ago_s=2, state_rows=None, state_bytes=101 * MIB)  # the app's state.count_rows off
    assert rules(check(uncounted, {0: 20, 1: 20}, disk_bytes=None)) == {"state_bytes": Severity.WARN}
    within = batches(2, start_ago_s=2, state_rows=10_000, state_bytes=100 * MIB)
    assert check(within, {0: 20, 1: 20}, disk_bytes=300 * MIB).findings == []
    assert check(within, {0: 20, 1: 20}, disk_bytes=None).findings == []


def dead_lettering(
    counts: list[int], pids: list[int] | None = None, start_ago_s: float = 10, rows: int = 100
) -> list[StatusRecord]:
    pids = pids or [10] * len(counts)
    return [
        rec(start_ago_s - i, processed={0: 10 * (i + 1), 1: 0}, batch_id=i, dead_letters=c, pid=p, input_rows=rows)
        for i, (c, p) in enumerate(zip(counts, pids))
    ]


def test_dead_letter_share_over_the_limit_warns():
    h = check(dead_lettering([0, 10, 20, 30]), {0: 40, 1: 0})  # 30 of 300 rows after the first batch
    assert rules(h) == {"dead_letters": Severity.WARN}
    assert h.reason == "30 of 300 input rows (10.0%) went to the dead-letter topic in the last 3 batches (limit 5%)"


def test_dead_letter_share_under_the_limit_few_rows_or_old_does_not_warn():
    assert check(dead_lettering([0, 1, 2, 3]), {0: 40, 1: 0}).findings == []
    # 40 of 99 rows is too few rows to judge a share; 40 of 100 is enough.
    assert check(dead_lettering([0, 40], rows=99), {0: 20, 1: 0}).findings == []
    assert "dead_letters" in rules(check(dead_lettering([0, 40], rows=100), {0: 20, 1: 0}))
    assert check(dead_lettering([0, 10, 20, 30], start_ago_s=1000), {0: 40, 1: 0}).findings == []


def test_dead_letter_counter_restarts_with_the_process():
    # The new process (pid 11) counts from 0 again: 40 + 1 + 1 of 300 rows, not 40 + (1 - 40) + 1.
    h = check(dead_lettering([0, 40, 1, 2], pids=[10, 10, 11, 11]), {0: 40, 1: 0})
    assert "dead_letters" in rules(h) and "42 of 300" in h.reason
    h = check(dead_lettering([0, 0, 1, 2], pids=[10, 10, 11, 11]), {0: 40, 1: 0})
    assert h.findings == []
    # In a container the new process may get the same pid: a running total that went down restarted too.
    h = check(dead_lettering([0, 40, 1, 2], pids=[10, 10, 10, 10]), {0: 40, 1: 0})
    assert "42 of 300" in h.reason


def test_reason_is_the_most_severe_finding():
    found = [Finding("x", Severity.INFO, "i"), Finding("y", Severity.CRITICAL, "c"), Finding("z", Severity.WARN, "w")]
    h = SlotHealth("a", Slot.BLUE, Verdict.DEGRADED, found)
    assert h.reason == "c"


# --- crash-loop guard -----------------------------------------------------------------------------------


def test_first_restart_is_immediate_then_backoff_doubles():
    assert decide_restart([], NOW, POLICY).action is RestartAction.RESTART
    d = decide_restart([NOW - 10_000], NOW, POLICY)
    assert d.action is RestartAction.WAIT and d.at_ms == NOW + 20_000 and "backoff 30 s" in d.reason
    assert decide_restart([NOW - 30_000], NOW, POLICY).action is RestartAction.RESTART
    d = decide_restart([NOW - 100_000, NOW - 50_000], NOW, POLICY)
    assert d.action is RestartAction.WAIT and d.at_ms == NOW + 10_000  # 60 s after the second


def test_backoff_is_capped():
    p = HealthPolicy(max_restarts=8, restart_window_s=3600, restart_backoff_s=30, restart_backoff_max_s=100)
    assert [p.backoff_s(k) for k in range(6)] == [0, 30, 60, 100, 100, 100]
    restarts = [NOW - 50_000 - (4 - i) * 1000 for i in range(5)]
    assert decide_restart(restarts, NOW, p).at_ms == restarts[-1] + 100_000


def test_gives_up_after_n_restarts_in_the_window():
    restarts = [NOW - 500_000, NOW - 400_000, NOW - 200_000]
    d = decide_restart(restarts, NOW, POLICY, last_error="ValueError: schema changed")
    assert d.action is RestartAction.GIVE_UP
    assert d.reason == "crash loop: 3 restarts in 600 s (limit 3); last error: ValueError: schema changed"


def test_restarts_outside_the_window_are_forgotten():
    restarts = [NOW - 900_000, NOW - 800_000, NOW - 200_000]
    d = decide_restart(restarts, NOW, POLICY)
    assert d.action is RestartAction.RESTART and d.reason == "restart 2 of 3 in 600 s"
    assert prune_restarts(restarts, NOW, POLICY) == [NOW - 200_000]


def test_restart_stamped_in_the_future_still_counts_and_prune_is_bounded():
    assert decide_restart([NOW + 5_000], NOW, POLICY).action is RestartAction.WAIT
    many = [NOW - 5000 * i for i in range(10, 0, -1)]
    assert prune_restarts(list(reversed(many)), NOW, POLICY) == many[-3:]


def test_crash_loop_lifecycle_with_an_injected_clock():
    """The DAG's loop, every minute: a slot that dies at once after each start ends FAILED after 3 restarts."""
    now, restarts, history, actions = NOW, [], [], []
    while len(actions) < 20:
        started = restarts[-1] if restarts else now - 600_000
        h = check(history, {0: 10, 1: 10}, now=now, started_ms=started)
        if h.verdict is Verdict.DEAD:
            d = decide_restart(restarts, now, POLICY, last_error=h.last.error if h.last else "")
            actions.append(d.action)
            if d.action is RestartAction.GIVE_UP:
                break
            if d.action is RestartAction.RESTART:
                restarts = prune_restarts([*restarts, now], now, POLICY)
                # the new process starts and fails 5 s later
                history = [rec(0, state=S.FAILED, batch_id=-1, processed={}, error="boom", ts_ms=now + 5000)]
        now += 60_000
    assert actions[-1] is RestartAction.GIVE_UP and actions.count(RestartAction.RESTART) == 3
    assert d.reason == "crash loop: 3 restarts in 600 s (limit 3); last error: boom"
    check_failed = check(history, now=now, desired=SlotSpec(S.FAILED, reason=d.reason))
    assert check_failed.verdict is Verdict.FAILED


# --- summary --------------------------------------------------------------------------------------------


def test_summary_is_one_table_with_findings_under_their_slot():
    healthy = check(batches(3, start_ago_s=3), {0: 30, 1: 30})
    dead = assess(APP, Slot.GREEN, RUN, [], None, None, NOW, POLICY, started_ms=NOW - 200_000)
    text = summarize([dead, healthy])
    lines = text.splitlines()
    assert lines[0] == "baton_health: 2 slot(s): 1 healthy, 1 dead"
    assert lines[1].split() == ["APP", "SLOT", "VERDICT", "BATCH", "LAG", "LAST"]
    assert lines[2].split() == ["clicks", "blue", "HEALTHY", "2", "0", "1", "s"]
    assert lines[3].split()[:5] == ["clicks", "green", "DEAD", "-", "-"] and lines[3].endswith("never")
    assert lines[4].strip() == "CRITICAL liveness: no status record 200 s after start (grace 120 s)"
    assert summarize([]) == "baton_health: 0 slot(s): none\n" + lines[1]


@pytest.mark.parametrize(
    "verdict, age_ms, met, failed",
    [
        (Verdict.HEALTHY, 1_000, True, False),
        (Verdict.HEALTHY, 31_000, False, False),
        (Verdict.STARTING, 1_000, False, False),
        (Verdict.DEGRADED, 1_000, False, False),
        (Verdict.DEAD, 1_000, False, True),
        (Verdict.FAILED, 1_000, False, True),
        (Verdict.STOPPED, 1_000, False, True),
    ],
)
def test_the_healthy_gate_needs_a_fresh_record_and_fails_on_death(verdict, age_ms, met, failed):
    from baton.health import healthy_check
    from baton.records import Role, StatusRecord

    last = StatusRecord(
        app="app", slot=Slot.BLUE, state=SlotState.RUNNING, role=Role.ACTIVE, epoch_seen=1, ts_ms=100_000 - age_ms
    )
    check = healthy_check(SlotHealth("app", Slot.BLUE, verdict, last=last), 100_000, HealthPolicy())
    assert (check.met, check.failed) == (met, failed)


def test_a_slot_whose_input_lost_its_data_is_not_restarted():
    """Its restart fails the same way (in ~20-35 s): the guard gives up at once, with the slot's reason and
    its way out, instead of restarting it up to its limit."""
    from spark_apps.runtime.source.input_check import WAY_OUT

    assert WAY_OUT.startswith(CANNOT_RESUME)
    reason = f"clicks partitions [0, 1]: the checkpoint stands at {{0: 900}} but the topic ends at {{0: 0}}. {WAY_OUT}."
    d = decide_restart([], NOW, POLICY, last_error=reason)
    assert d.action is RestartAction.GIVE_UP and d.reason == f"not restarted: {reason}"
    assert decide_restart([], NOW, POLICY, last_error="ValueError: boom").action is RestartAction.RESTART


def test_a_failover_is_a_finding_of_the_new_active_until_the_next_handoff():
    from baton.handoff import take_over
    from baton.health import failover_finding
    from baton.records import ControlRecord

    before = ControlRecord(app="clicks", revision=1, epoch=1, active=Slot.BLUE)
    after = take_over(Slot.GREEN, 1, {0: 5}, "the active's lease expired", NOW - 30_000)(before)
    found = failover_finding(after, Slot.GREEN, NOW)
    assert found.severity is Severity.INFO  # a failover that worked is not a fault of the slot
    assert found.message == ("took over from blue at epoch 2, 30 s ago, at {0: 5}: the active's lease expired")
    assert failover_finding(after, Slot.BLUE, NOW) is None and failover_finding(before, Slot.BLUE, NOW) is None
