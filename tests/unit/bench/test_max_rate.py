"""bench/max_rate's judgement of its steps (issue 24's headline figures): which step counts as held, how
fast blue processed within a step, how far the standby trailed, and which processes count as the slots."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # max_rate imports its neighbours by name, as when run

import max_rate  # noqa: E402


def step(rate: float, p99_ms: float, behind: bool, standby_behind_s: float | None = 1.0) -> dict:
    return {
        "rate": rate,
        "p99_ms": p99_ms,
        "behind": behind,
        "held": not behind and p99_ms <= max_rate.P99_TARGET_MS,
        "standby_behind_records": None if standby_behind_s is None else int(standby_behind_s * rate),
    }


def test_max_rate_is_the_highest_step_held_and_keeps_pace_ignores_latency():
    steps = [
        step(20085, 1400, False),
        step(25085, 2100, False),
        step(30085, 1900, False),
        step(35085, 2500, False),
        step(40085, 1500, True),
    ]
    assert max_rate.headline(steps) == {
        "max_rate": 30085,
        "p99_ms_at_max": 1900,
        "max_rate_keeps_pace": 35085,
        "p99_ms_at_keeps_pace": 2500,
        "max_rate_standby_close": 30085,
    }


def test_no_step_held_reports_zero_and_no_latency():
    assert max_rate.headline([step(20085, 2300, False), step(25085, 2600, True)]) == {
        "max_rate": 0.0,
        "p99_ms_at_max": None,
        "max_rate_keeps_pace": 20085,
        "p99_ms_at_keeps_pace": 2300,
        "max_rate_standby_close": 0.0,
    }
    assert max_rate.headline([])["max_rate"] == 0.0


def test_standby_close_is_the_highest_held_step_whose_standby_trailed_by_at_most_three_seconds_of_input():
    """The embedded broker's run of 2026-12-07 in small: held to 35,085, the standby 6.4 s of input behind there."""
    steps = [
        step(20085, 1450, False, 1.0),
        step(25085, 1500, False, 1.1),
        step(30085, 1560, False, 3.0),
        step(35085, 1980, False, 6.4),
        step(40085, 2250, False, 7.3),
    ]
    assert max_rate.headline(steps)["max_rate"] == 35085
    assert max_rate.headline(steps)["max_rate_standby_close"] == 30085  # 3.0 s is still close
    assert not max_rate.standby_close(step(20085, 1400, False, None))  # no standby report in the step: unknown
    assert max_rate.headline([step(20085, 1400, False, 3.5)])["max_rate_standby_close"] == 0.0


def test_processed_rate_counts_only_reports_inside_the_step():
    points = [(0.0, 0), (10.0, 100_000), (20.0, 300_000), (30.0, 500_000), (40.0, 900_000)]
    assert max_rate.processed_rate(points, 10.0, 30.0) == 20_000.0
    assert max_rate.processed_rate(points, 12.0, 19.0) == 0.0  # fewer than two reports: unknown


def test_standby_behind_is_its_largest_distance_from_blues_last_report_before_each_of_its_own():
    blue = [(1.0, 1000), (2.0, 2000), (3.0, 3000), (4.0, 4000)]
    green = [(0.5, 0), (2.5, 1500), (3.5, 1000), (9.0, 0)]  # the first and last are outside the step
    assert max_rate.standby_behind(blue, green, 1.0, 5.0) == 2000  # at 3.5 s: blue 3000, green 1000
    assert max_rate.standby_behind(blue, [(0.5, 0)], 1.0, 5.0) is None


def test_slot_cores_adds_both_slots_jvms_jit_gc_and_python_and_nothing_else():
    report = {
        "by_role": {
            "blue.jvm": {"cores": 0.2},
            "blue.jvm_jit": {"cores": 0.05},
            "blue.python_workers": {"cores": 0.05},
            "green.jvm": {"cores": 0.15},
            "green.driver": {"cores": 0.01},
            "broker": {"cores": 0.4},
            "loadgen": {"cores": 0.06},
            "verifier": {"cores": 0.06},
        }
    }
    assert max_rate.slot_cores(report) == 0.46


def test_jit_cores_adds_both_slots_compiler_threads_only():
    report = {
        "by_role": {
            "blue.jvm": {"cores": 0.2},
            "blue.jvm_jit": {"cores": 0.05},
            "green.jvm_jit": {"cores": 0.03},
            "green.jvm_gc": {"cores": 0.01},
            "broker": {"cores": 0.4},
        }
    }
    assert max_rate.jit_cores(report) == 0.08


def test_the_warm_up_series_measures_each_minute_of_the_slots_own_processes(monkeypatch):
    """A window per SERIES_S until the step starts, each with the slots' CPU: a busy 'slot' (no JVM, so
    no JIT) counts, a busy process outside the slots does not."""
    import subprocess
    import time

    import psutil

    from baton.records import Slot

    monkeypatch.setattr(max_rate, "SERIES_S", 0.6)
    busy = [sys.executable, "-c", "import time\nt = time.time() + 30\nwhile time.time() < t: pass"]
    slot, other = subprocess.Popen(busy), subprocess.Popen(busy)
    try:
        started = time.time()
        series = max_rate.slot_cpu_series({Slot.BLUE: slot}, started, started + 2.5)
        own = psutil.Process(slot.pid).cpu_times()
    finally:
        for p in (slot, other):
            p.kill()
            p.wait()
    assert len(series) == 3  # 0.6 s windows while more than a second is left: 2.5 -> 1.9 -> 1.3 -> 0.7
    ends = [w["t_s"] for w in series]
    assert ends == sorted(ends) and ends[-1] < 2.5
    assert all(w["jit_cores"] == 0 and w["slot_cores"] > 0.1 for w in series), series
    assert all(set(w["by_role"]) == {"blue.driver"} for w in series)
    # what the windows counted is the slot's own CPU: no more than it used (the other busy process is
    # not in it), and most of it
    counted = sum(w["slot_cores"] * (end - begin) for w, begin, end in zip(series, [0.0] + ends, ends))
    assert 0.5 * (own.user + own.system) - 0.2 < counted <= own.user + own.system + 0.1, (counted, own, series)


def test_step_batch_ms_summarises_the_durations_of_the_batches_given_and_none_without_any():
    from types import SimpleNamespace

    batches = [SimpleNamespace(batch_ms=ms) for ms in (100, 200, 300, 400, 1000)]
    summary = max_rate.step_batch_ms(batches)
    assert summary["count"] == 5 and summary["p50"] == 300.0 and summary["max"] == 1000.0
    assert 400.0 < summary["p99"] < 1000.0
    assert max_rate.step_batch_ms([]) is None
