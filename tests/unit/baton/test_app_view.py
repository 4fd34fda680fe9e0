"""What the Baton page, the metrics and `baton apps` show: built from records, nothing judged."""

import dataclasses
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from baton.app_table import app_detail, apps_table
from baton.app_view import app_view, backlog, describe_change, events, points
from baton.leases import Lease
from baton.metrics import render
from baton.records import ControlRecord, Handoff, Role, Slot, SlotSpec, SlotState, StatusRecord

NOW = 1_800_000_000_000


def control(
    revision=1,
    epoch=1,
    active=Slot.BLUE,
    fence=None,
    handoff=None,
    writer="baton_lifecycle:manual__1",
    blue=SlotState.RUNNING,
    green=SlotState.RUNNING,
    version="v1",
    operation="",
    ts=NOW - 60_000,
):
    return ControlRecord(
        app="app",
        revision=revision,
        epoch=epoch,
        active=active,
        fence=fence,
        handoff=handoff,
        operation=operation,
        writer=writer,
        ts_ms=ts,
        slots={
            Slot.BLUE: SlotSpec(desired=blue, version=version),
            Slot.GREEN: SlotSpec(desired=green, version=version, restarts=(1, 2)),
        },
    )


def status(
    slot=Slot.BLUE, ts=NOW - 1000, processed=None, end=None, rate=2000.0, batch=5, batch_ms=400, latency=(1300, 500)
):
    return StatusRecord(
        app="app",
        slot=slot,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        version="v1",
        batch_id=batch,
        processed=processed or {0: 100, 1: 100},
        input_end=end,
        input_rate=rate,
        processing_rate=3000.0,
        batch_ms=batch_ms,
        state_rows=42,
        state_bytes=2048,
        dead_letters=3,
        latency_ms=latency[0],
        latency_newest_ms=latency[1],
        pid=7,
        host="h",
        ts_ms=ts,
    )


def lease(slot, ts):
    return Lease(
        app="app",
        slot=slot,
        launch="l",
        host="h",
        pid=7,
        pid_start=1,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        seq=3,
        ts_ms=ts,
        ttl_ms=4000,
        interval_ms=1000,
    )


def test_the_backlog_counts_unprocessed_records_and_an_end_behind_processed_as_caught_up():
    assert backlog({0: 150, 1: 90}, {0: 100, 1: 100}) == 50
    assert backlog({0: 10}, {}) == 10
    assert backlog(None, {0: 1}) is None


def test_a_slot_s_view_has_its_lag_in_records_and_seconds_at_its_input_rate_and_the_ages():
    view = app_view(
        "app",
        True,
        [control()],
        [status(), status(ts=NOW - 500, processed={0: 100, 1: 200})],
        {Slot.BLUE: lease(Slot.BLUE, NOW - 300)},
        {0: 1100, 1: 1200},
        NOW,
    )
    blue, green = view.slots
    assert (blue.role, blue.desired, blue.state, blue.version) == ("active", "running", "running", "v1")
    assert blue.lag_records == 2000 and blue.lag_s == 1.0  # 2,000 records at 2,000 records/s
    assert blue.report_age_s == 0.5 and blue.lease_age_s == 0.3
    assert (blue.state_rows, blue.state_bytes, blue.dead_letters, blue.batch_ms) == (42, 2048, 3, 400)
    assert (blue.latency_ms, blue.latency_newest_ms) == (1300, 500)
    # Never reported: its control record's wish, no figures.
    assert (green.role, green.state, green.lag_records, green.report_age_s, green.restarts) == (
        "standby",
        "",
        None,
        None,
        2,
    )


def test_an_idle_slot_caught_up_has_no_lag_and_an_unknown_rate_leaves_seconds_unknown():
    caught_up = app_view("app", True, [control()], [status(rate=0.0)], {}, {0: 100, 1: 100}, NOW).slots[0]
    assert (caught_up.lag_records, caught_up.lag_s) == (0, 0.0)
    behind = app_view("app", True, [control()], [status(rate=0.0)], {}, {0: 500, 1: 100}, NOW).slots[0]
    assert (behind.lag_records, behind.lag_s) == (400, None)


def test_points_keep_one_per_slot_and_spacing_within_the_window():
    history = [status(ts=NOW - 20_000 + i * 1000, end={0: 100 + i, 1: 100}) for i in range(20)]
    history.append(status(Slot.GREEN, ts=NOW - 1000, end={0: 300, 1: 300}))
    history.append(status(ts=NOW - 90_000))  # outside the window
    history.append(status(ts=NOW - 500, batch=-1))  # before any batch: no figures
    got = points(history, since_ms=NOW - 60_000, spacing_ms=10_000)
    blue = [p for p in got if p.slot == "blue"]
    assert len(blue) <= 3 and all(NOW - 60_000 <= p.ts_ms for p in got)
    assert blue[-1].lag_records == 19  # the newest record of its step: end 119 - processed 100
    assert [p.lag_records for p in got if p.slot == "green"] == [400]
    # A step's newest record without the input's end keeps the lag an earlier record of the step had.
    steps = points([status(ts=NOW - 9000, end={0: 150, 1: 100}), status(ts=NOW - 8000)], NOW - 60_000, 10_000)
    assert [(p.ts_ms, p.lag_records) for p in steps] == [(NOW - 8000, 50)]
    # Latency plots the step's worst batch; a batch with no latency known does not hide it.
    steps = points(
        [
            status(ts=NOW - 9000, latency=(4000, 10)),
            status(ts=NOW - 8500, latency=(900, 10)),
            status(ts=NOW - 8000, latency=(None, None)),
        ],
        NOW - 60_000,
        10_000,
    )
    assert [p.latency_ms for p in steps] == [4000]
    assert [p.latency_ms for p in points([status(latency=(None, None))], NOW - 60_000)] == [None]


def test_control_changes_read_as_a_history_with_who_did_them():
    fence = {0: 500, 1: 500}
    records = [
        control(revision=1),
        control(revision=2, fence=fence, writer="baton_cutover:manual__2"),
        control(
            revision=3,
            epoch=2,
            active=Slot.GREEN,
            writer="baton_cutover:manual__2",
            handoff=Handoff(id="manual__2", epoch=1, fence=fence, to=Slot.GREEN),
        ),
        control(
            revision=4,
            epoch=3,
            active=Slot.BLUE,
            writer="blue (lease)",
            handoff=Handoff(id="failover", epoch=2, fence=fence, to=Slot.BLUE, reason="green's process is gone"),
        ),
        control(revision=5, epoch=3, active=Slot.BLUE, fence=fence, writer="baton_rolling_upgrade:r"),
        control(
            revision=6,
            epoch=3,
            active=Slot.BLUE,
            green=SlotState.STOPPED,
            version="v2",
            writer="baton_rolling_upgrade:r",
            operation="reprocess by r",
        ),
    ]
    got = events(records)
    kinds = [(e.revision, e.kind) for e in got]
    assert (2, "fence") in kinds and (3, "cutover") in kinds and (4, "failover") in kinds
    assert (6, "fence lifted") in kinds and (6, "slot") in kinds and (6, "operation") in kinds
    failover = next(e for e in got if e.kind == "failover")
    assert "green's process is gone" in failover.text and failover.dag_id == "" and failover.writer == "blue (lease)"
    cutover = next(e for e in got if e.kind == "cutover")
    assert (cutover.dag_id, cutover.run_id) == ("baton_cutover", "manual__2") and "blue -> green" in cutover.text
    assert describe_change(records[0], records[0]) == []  # a record that changed nothing shown
    asked = dataclasses.replace(records[0], revision=7, invariants_asked="manual__3:1")
    assert describe_change(records[0], asked) == [("check", "invariant check asked of the standby (manual__3:1)")]
    assert describe_change(asked, dataclasses.replace(asked, revision=8)) == []


def test_handoffs_take_from_their_fence_to_their_end_and_are_counted_over_the_whole_history():
    fence = {0: 500, 1: 500}
    t = NOW - 600_000
    records = [control(revision=1, ts=t)]
    epoch, active = 1, Slot.BLUE
    for i in range(30):  # 30 cutovers, each 4 s from fence to cutover: more than the 50 events a view keeps
        base = t + (i + 1) * 10_000
        records.append(control(revision=len(records) + 1, epoch=epoch, active=active, fence=fence, ts=base))
        epoch, active = epoch + 1, Slot.GREEN if active is Slot.BLUE else Slot.BLUE
        records.append(control(revision=len(records) + 1, epoch=epoch, active=active, ts=base + 4000 + i))
    records.append(control(revision=len(records) + 1, epoch=epoch, active=active, fence=fence, ts=t + 400_000))
    records.append(control(revision=len(records) + 1, epoch=epoch, active=active, ts=t + 430_000))  # abandoned
    view = app_view("app", True, records, [status()], {}, None, NOW)
    assert len(view.events) == 50
    cutovers = [e for e in events(records) if e.kind == "cutover"]
    assert [e.duration_ms for e in cutovers[:3]] == [4000, 4001, 4002]
    assert next(e for e in events(records) if e.kind == "fence lifted").duration_ms == 30_000
    stats = {h.kind: h for h in view.handoffs}
    assert (stats["cutover"].count, stats["cutover"].timed, stats["cutover"].last_s) == (30, 30, 4.029)
    assert stats["failover"].count == 0 and stats["fence lifted"].last_s == 30.0
    families = {f.name: f for f in text_string_to_metric_families(render([view]).decode())}
    sample = {(s.name, s.labels.get("kind")): s.value for f in families.values() for s in f.samples}
    assert sample[("baton_handoffs_total", "cutover")] == 30  # not only the events the view lists
    assert sample[("baton_handoff_duration_seconds_count", "cutover")] == 30
    assert abs(sample[("baton_handoff_duration_seconds_sum", "cutover")] - (30 * 4 + sum(range(30)) / 1000)) < 1e-9
    assert sample[("baton_last_handoff_duration_seconds", "fence lifted")] == 30.0


def test_an_app_never_started_has_an_empty_view_and_the_tables_say_so():
    never = app_view("other", True, [], [], {}, None, NOW)
    assert never.revision == 0 and never.points == [] and never.events == []
    running = app_view("app", True, [control()], [status()], {}, {0: 100, 1: 100}, NOW)
    table = apps_table([running, never])
    assert "never started: other" in table and "app" in table.splitlines()[2]
    assert "never started" in app_detail(never)
    detail = app_detail(running)
    assert "epoch 1, blue active" in detail and "registered at epoch 1" in detail and "pid 7 on h" in detail


def test_the_detail_shows_a_slot_s_error_s_first_line_whole():
    """A data-loss error is long and ends with the way out (it was cut at 200 characters)."""
    from spark_apps.runtime.source.input_check import decide

    error = decide("clicks", {0: 25_818, 1: 26_006}, {0: 0, 1: 0}, {0: 0, 1: 0}, "fail").reason
    failed = dataclasses.replace(
        status(), state=SlotState.FAILED, error=f"{error}\nTraceback (most recent call last): ..."
    )
    detail = app_detail(app_view("app", True, [control(blue=SlotState.FAILED)], [failed], {}, {0: 100, 1: 100}, NOW))
    blue = next(line for line in detail.splitlines() if line.startswith("  blue: "))
    assert blue.endswith(f"error: {error}") and "Traceback" not in detail


def test_metrics_carry_each_slot_s_figures_with_labels_and_skip_what_is_unknown():
    view = app_view(
        "app", True, [control()], [status()], {Slot.BLUE: lease(Slot.BLUE, NOW - 250)}, {0: 1100, 1: 100}, NOW
    )
    never = app_view("other", True, [], [], {}, None, NOW)
    families = {f.name: f for f in text_string_to_metric_families(render([view, never]).decode())}
    sample = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    blue, green = (("app", "app"), ("slot", "blue")), (("app", "app"), ("slot", "green"))
    assert sample[("baton_slot_lag_records", blue)] == 1000
    assert sample[("baton_slot_batch_duration_seconds", blue)] == 0.4
    assert (
        sample[("baton_slot_latency_seconds", blue)] == 1.3
        and sample[("baton_slot_latency_newest_seconds", blue)] == 0.5
    )
    assert sample[("baton_slot_lease_age_seconds", blue)] == 0.25
    assert sample[("baton_slot_active", blue)] == 1 and sample[("baton_slot_active", green)] == 0
    assert ("baton_slot_lag_records", green) not in sample  # never reported: no figure, not a zero
    assert sample[("baton_app_epoch", (("app", "app"),))] == 1
    assert not any(dict(labels).get("app") == "other" for _, labels in sample)  # never started


RULES = Path(__file__).resolve().parents[3] / "docs" / "prometheus-rules.yaml"


def test_the_alert_rules_name_only_metrics_baton_exports_and_each_says_what_fired():
    """docs/prometheus-rules.yaml: each rule is complete, and every baton_* series it reads is one the
    exporter writes (a renamed metric would leave its alert silently never firing)."""
    view = app_view(
        "app",
        True,
        [control(fence={0: 5, 1: 5})],
        [status(), status(Slot.GREEN)],
        {s: lease(s, NOW - 250) for s in Slot},
        {0: 1100, 1: 100},
        NOW,
    )
    exported = {
        line.split("{")[0].split(" ")[0] for line in render([view]).decode().splitlines() if not line.startswith("#")
    }
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert len(rules) >= 8
    for rule in rules:
        assert rule["alert"].startswith("Baton") and rule["labels"]["severity"] in ("warning", "critical"), rule
        assert "{{ $labels.app }}" in rule["annotations"]["summary"], rule
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), rule
        used = set(re.findall(r"\bbaton_[a-z_]+", expr))
        assert used and used <= exported, (rule["alert"], used - exported)
    assert "baton_slot_dead_letters_total" in exported and "baton_slot_desired_state" in exported
