"""bench/soak's pure parts (issue 75, item 4): when the handoffs fall due and with which version, the
windows, which windows the drifts compare, the windows' resource means, the drifts and the targets."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # soak imports its neighbours by name, as when run

import soak  # noqa: E402


def test_the_hours_schedule_runs_a_cutover_every_10_min_and_an_upgrade_every_20_alternating_v2_and_v1():
    plan = soak.handoff_schedule(60, 10, 20)
    assert [(h["at_s"], h["kind"], h["conf"].get("version")) for h in plan] == [
        (600, "cutover", None),
        (1200, "cutover", None),
        (1200, "rolling_upgrade", "v2"),
        (1800, "cutover", None),
        (2400, "cutover", None),
        (2400, "rolling_upgrade", "v1"),
        (3000, "cutover", None),
    ]  # none at the end itself
    assert plan[0]["dag_id"] == "baton_cutover" and plan[0]["conf"] == {"app": "click_counts"}
    assert plan[2]["dag_id"] == "baton_rolling_upgrade" and plan[2]["conf"] == {"app": "click_counts", "version": "v2"}


def test_the_smoke_schedule_and_switched_off_kinds():
    assert [(h["at_s"], h["kind"]) for h in soak.handoff_schedule(8, 3, 6)] == [
        (180, "cutover"),
        (360, "cutover"),
        (360, "rolling_upgrade"),
    ]
    assert [h["kind"] for h in soak.handoff_schedule(60, 0, 20)] == ["rolling_upgrade", "rolling_upgrade"]
    assert soak.handoff_schedule(60, 0, 0) == []
    versions = [h["conf"]["version"] for h in soak.handoff_schedule(100, 0, 20)]
    assert versions == ["v2", "v1", "v2", "v1"]  # never the version already running


def test_windows_are_full_ones_then_a_shorter_last_one_if_it_lasts_a_second():
    assert soak.window_bounds(600.4, 300) == [(0, 300, True), (300, 600, True)]
    assert soak.window_bounds(650, 300) == [(0, 300, True), (300, 600, True), (600, 650, False)]
    assert soak.window_bounds(100, 300) == [(0, 100, False)]


@pytest.mark.parametrize(
    ("full", "window_s", "n"),
    [
        (12, 300, 2),  # the hour at 5 min: the first / last 10 minutes
        (4, 120, 2),  # the smoke run at 2 min: two windows (4 min) are shorter than 10 min
        (6, 600, 1),  # 10-minute windows: one
        (12, 420, 1),  # two 7-minute windows would be 14 min: as many as fit in 10 min, at least one
        (3, 300, 1),  # never more than half of them: the spans do not overlap
        (1, 300, 0),  # one window: nothing to compare
    ],
)
def test_drift_spans_are_two_windows_or_ten_minutes_whichever_is_shorter(full, window_s, n):
    assert soak.drift_windows(full, window_s) == n


def test_window_means_average_each_groups_samples_inside_each_window_and_skip_missing_values():
    bounds = [(0, 10, True), (10, 20, True), (20, 30, True)]
    samples = [
        (1, {"broker": 100.0, "blue": None}),
        (5, {"broker": 200.0, "blue": 10.0}),
        (12, {"broker": 400.0}),
        (29.9, {"broker": 50.0}),
        (30, {"broker": 9e9}),
    ]  # 30: outside
    assert soak.window_means(samples, bounds) == [{"broker": 150.0, "blue": 10.0}, {"broker": 400.0}, {"broker": 50.0}]
    assert soak.window_means([], bounds) == [{}, {}, {}]


def test_cpu_by_window_takes_the_meter_report_covering_most_of_each_window():
    def report(broker, airflow, helpers=0.0):
        return {
            "by_role": {
                "broker": {"cores": broker},
                "airflow": {"cores": airflow},
                "helpers": {"cores": helpers},
                "blue.jvm": {"cores": 0.5},
                "blue.python_workers": {"cores": 0.1},
                "loadgen": {"cores": 0.2},
            },
            "machine_busy_cores": 1.5,
            "steal_cores": 0.0,
        }

    cpu = [(0, 10.3, report(0.2, 0.1)), (10.3, 20.1, report(0.3, 0.2, 0.4)), (20.1, 31, report(0.4, 0.1))]
    out = soak.cpu_by_window(cpu, [(0, 10, True), (10, 20, True), (20, 30, True), (40, 50, False)])
    assert [w["broker"] for w in out[:3]] == [0.2, 0.3, 0.4]
    assert out[1]["airflow"] == 0.6  # Airflow's own processes and the Spark helpers its tasks start
    assert out[0]["blue"] == 0.6 and out[0]["green"] == 0.0  # a slot: its driver, JVM and Python workers
    assert out[3] == {}


def windows(cpu: list[float], rss: list[float | None], full: list[bool] | None = None) -> list[dict]:
    full = full or [True] * len(cpu)
    return [{"full": f, "broker_cpu_cores": c, "broker_rss_bytes": r} for c, r, f in zip(cpu, rss, full)]


def test_drifts_compare_the_last_spans_mean_with_the_firsts_and_leave_out_a_short_last_window():
    ws = windows([0.4, 0.6, 0.5, 0.5, 0.55, 0.65, 9.0], [100, 100, 110, 110, 120, 130, 999], [True] * 6 + [False])
    assert soak.drifts(ws, 2, 1000.0, 1300.0) == {"p99_drift": 1.3, "broker_cpu_drift": 1.2, "broker_rss_drift": 1.25}
    assert soak.drifts(ws, 1, None, 1300.0)["p99_drift"] is None
    assert soak.drifts(ws, 0, None, None) == {"p99_drift": None, "broker_cpu_drift": None, "broker_rss_drift": None}
    # an external broker without a pid: no figures, no drift
    assert soak.drifts(windows([None] * 4, [None] * 4), 2, 10.0, 10.0)["broker_cpu_drift"] is None


def result(**over) -> dict:
    r = {
        "handoffs": [{"state": "success"}, {"state": "success"}],
        "lost": 0,
        "duplicated": 0,
        "wrong": 0,
        "p99_99_ms": 4000.0,
        "p99_drift": 1.1,
        "broker_cpu_drift": 1.0,
        "broker_rss_drift": 1.25,
    }
    return {**r, **over}


def test_targets_every_handoff_exact_output_p99_99_and_each_drift():
    t = soak.soak_targets(result())
    assert t["all_met"] and all(t["met"].values()) and t["not_judged"] == []
    assert t["p99_99_ms"] == 5000 and t["drift"] == 1.25
    failed = soak.soak_targets(result(handoffs=[{"state": "success"}, {"state": "failed"}]))
    assert failed["met"]["handoffs_succeeded"] is False and not failed["all_met"]
    assert soak.soak_targets(result(handoffs=[]))["met"]["handoffs_succeeded"] is False  # nothing was handed over
    assert soak.soak_targets(result(duplicated=1))["met"]["exact"] is False
    assert soak.soak_targets(result(p99_99_ms=5000.1))["met"]["p99_99"] is False
    assert soak.soak_targets(result(broker_rss_drift=1.26))["met"]["broker_rss_drift"] is False


def test_a_drift_not_measured_is_not_judged():
    t = soak.soak_targets(result(broker_cpu_drift=None, broker_rss_drift=None))
    assert t["met"]["broker_cpu_drift"] is None and t["all_met"]
    assert t["not_judged"] == ["broker_cpu_drift", "broker_rss_drift"]
