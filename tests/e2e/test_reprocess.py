"""baton_reprocess end to end, through Airflow's REST API (seed 003's "Recovering from Bugs"):

v1 of the click-count app counts some users twice (an injected bug). Live traffic runs; a reprocess
with v2 from earliest replays history in a new generation beside the live output, takes over at a
fence and publishes its state: afterwards a read-committed, compacted view of the output equals the
ground truth for every key, and the output never stopped. A second reprocess while one runs, and
requests with bad start positions, are refused with their reasons and change nothing. The way back
(baton_cutover with correct=true) hands over to the previous generation, still hot, whose values
downstream then holds again.
"""

import re
import time
from collections import Counter

import pytest

from baton.kafka.control_log import read_control
from baton.launcher import Launcher
from baton.records import CommitMarker
from baton.tools.verify import read_output
from tests.support.e2e import LiveLoad, both_slots_running, run_dag
from tests.support.slots import produce_clicks, read_topic, wait_until_emitted

pytestmark = pytest.mark.e2e
APP = "cc_fix"
# Live input of ~600 clicks/s (per 0.25 s tick): every reprocess from earliest in this module replays all
# of it (at 1,600/s the staged one at the end replayed 556k records, 2.5 min of its run, testing nothing more).
LIVE_PER_TICK = 150


def buggy(truth):
    """What v1 counts: users whose id ends in 7 twice."""
    return Counter({u: n * (2 if u.endswith("7") else 1) for u, n in truth.items()})


def compacted(bootstrap, app):
    """The last committed count per user: what a compacted topic (or a table fed by it) holds."""
    return Counter(dict(read_output(bootstrap, app.output.topic, app.output.partitions)))


def reason(client, run, task):
    return client.xcom("baton_reprocess", run["dag_run_id"], task, key="reason")


@pytest.fixture(scope="module")
def running(stack):
    platform, client, apps = stack
    app = apps[APP]
    with both_slots_running(client, app):
        truth, _ = produce_clicks(platform.settings.kafka_bootstrap, app.input.topic, 4_000, users=300)
        wait_until_emitted(platform.settings.kafka_bootstrap, app, 4_000, timeout_s=300)
        yield platform, client, app, truth


@pytest.mark.parametrize(
    "conf, words",
    [
        ({"start": "offsets", "start_offsets": {"0": 10**9, "1": 0}}, "is beyond the log end"),
        ({"start": "offsets", "start_offsets": {"0": 0, "1": 0, "5": 0}}, "partition(s) [5] do not exist"),
        ({"start": "timestamp", "start_timestamp_ms": int(time.time() * 1000) + 3_600_000}, "is in the future"),
        ({"version": "v9"}, "has no version 'v9'"),
    ],
)
def test_a_bad_request_is_refused_with_its_reason_and_changes_nothing(running, conf, words):
    platform, client, app, _ = running
    before = read_control(platform.settings.kafka_bootstrap, app.name)
    run = run_dag(client, "baton_reprocess", {"app": app.name, "version": "v2", **conf}, timeout_s=300)
    assert run["state"] == "failed"
    why = reason(client, run, "validate")
    assert words in why and "nothing was changed" in why, why
    assert read_control(platform.settings.kafka_bootstrap, app.name) == before


def test_a_reprocess_corrects_every_key_without_stopping_the_output_and_has_a_way_back(running):
    platform, client, app, truth = running
    bootstrap = platform.settings.kafka_bootstrap
    assert compacted(bootstrap, app) == buggy(truth)  # the bug, as downstream sees it
    before = read_control(bootstrap, app.name)
    with LiveLoad(bootstrap, app.input.topic, per_tick=LIVE_PER_TICK, start=4_000, truth=truth) as load:
        started_at = time.time()
        first = client.trigger(
            "baton_reprocess", {"app": app.name, "version": "v2", "start": "earliest", "settle_s": 10}
        )
        # A second reprocess while the first holds the app: refused, nothing changed by it.
        time.sleep(20)
        second = run_dag(client, "baton_reprocess", {"app": app.name, "version": "v2"}, timeout_s=300)
        assert second["state"] == "failed" and "is under way: one at a time" in reason(client, second, "validate")
        result = client.wait_for_run("baton_reprocess", first["dag_run_id"], timeout_s=1200)
        assert result["state"] == "success", client.task_instances("baton_reprocess", first["dag_run_id"])
        record = read_control(bootstrap, app.name)
        standby = before.active.other
        assert (record.active, record.epoch, record.fence, record.operation) == (standby, before.epoch + 1, None, "")
        assert record.slots[standby].generation == before.slots[standby].generation + 1
        assert record.slots[standby].version == "v2" and record.slots[before.active].version == "v1"
        summary = client.xcom("baton_reprocess", first["dag_run_id"], "finish")
        assert summary["way_back"]["conf"] == {"app": app.name, "correct": True}
        # Its correction came from the state image its invariant check's read began (the app's output is
        # its state: spark_apps.runtime.state.state_image), with no state read at the cutover.
        driver_log = (Launcher(platform.settings.state_dir).slot_dir(app.name, standby) / "driver.log").read_text()
        assert re.search(
            rf"published the state image through batch \d+ as corrected output at epoch {record.epoch}:", driver_log
        ), "the new generation's correction did not come from its state image"
        time.sleep(5)
        corrected = load.sent
    wait_until_emitted(bootstrap, app, corrected, timeout_s=300)
    assert compacted(bootstrap, app) == truth  # every key corrected, the live input included
    # The live output never stopped: committed output markers kept coming through the whole run.
    markers = [
        m.ts_ms / 1000
        for m in read_topic(bootstrap, app.commits_topic, lambda m: CommitMarker.from_bytes(m.value()))
        if m.ts_ms / 1000 >= started_at
    ]
    gaps = [b - a for a, b in zip(markers, markers[1:])]
    at = client.xcom("baton_reprocess", first["dag_run_id"], "cutover")["at_ms"] / 1000
    print(
        f"longest gap between committed outputs {max(gaps):.2f} s, ending {markers[gaps.index(max(gaps)) + 1] - started_at:.1f} s "
        f"into the run; cutover written {at - started_at:.1f} s into it"
    )
    # The handoff's gap target is 2 s (measured here: 1.4 s, at the cutover; bench/handoff.py --kind
    # corrected_cutover at the seed's rate): the bound leaves room for a slow phase of a shared CI host
    # and still fails a cutover that waits for a task start or for the correction (it did: 21.4 s).
    assert markers and max(gaps) < 5, f"longest gap between committed outputs {max(gaps):.1f} s"

    # The way back, under live load: the previous generation (v1, still following) takes over and
    # publishes its state.
    with LiveLoad(bootstrap, app.input.topic, per_tick=LIVE_PER_TICK, start=corrected, truth=truth) as load:
        time.sleep(3)
        back = run_dag(client, "baton_cutover", {"app": app.name, "correct": True}, timeout_s=600)
        assert back["state"] == "success", back.get("why", back)
        time.sleep(3)
    record = read_control(bootstrap, app.name)
    assert (record.active, record.epoch) == (before.active, before.epoch + 2)
    wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    assert compacted(bootstrap, app) == buggy(truth)  # v1's output path again, bug and all

    # Confirming after the way back discards the reprocess: green is rebuilt on v1's generation from a
    # copy of blue's checkpoint and follows it; the v2 generation no slot runs is archived, and with a
    # retention of 0 days deleted at once. The output goes on meanwhile.
    state_dir = platform.settings.state_dir
    with LiveLoad(bootstrap, app.input.topic, per_tick=LIVE_PER_TICK, start=load.sent, truth=truth) as load:
        confirm = run_dag(
            client,
            "baton_reprocess_confirm",
            {"app": app.name, "retention_days": 0, "max_lag_records": 10_000},
            timeout_s=900,
        )
        assert confirm["state"] == "success", client.task_instances("baton_reprocess_confirm", confirm["dag_run_id"])
        time.sleep(3)
    record = read_control(bootstrap, app.name)
    assert (record.active, record.epoch, record.operation) == (before.active, before.epoch + 2, "")
    standby = before.active.other
    assert (record.slots[standby].generation, record.slots[standby].version) == (
        before.slots[before.active].generation,
        "v1",
    )
    summary = client.xcom("baton_reprocess_confirm", confirm["dag_run_id"], "finish")
    assert summary["discarded_reprocess"] is True and summary["purged"], summary
    gens = sorted(p.name for p in (state_dir / "slots" / app.name / standby.value).glob("gen-*"))
    assert gens == [f"gen-{before.slots[before.active].generation}"]
    assert not (state_dir / "archive" / app.name).exists() or not any((state_dir / "archive" / app.name).iterdir())
    wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    assert compacted(bootstrap, app) == buggy(truth)

    # A second confirmation has nothing to do: refused with the reason, nothing changed.
    again = run_dag(client, "baton_reprocess_confirm", {"app": app.name}, timeout_s=300)
    assert again["state"] == "failed"
    why = client.xcom("baton_reprocess_confirm", again["dag_run_id"], "validate", key="reason")
    assert "nothing to confirm: both slots run generation" in why and "nothing was changed" in why, why
    assert read_control(bootstrap, app.name) == record


def test_a_staged_reprocess_ends_with_the_new_generation_hot_in_the_standby_slot(running):
    """end=standby: the new generation replays, catches up and passes its checks in the standby slot,
    and the run ends there: no fence, no cutover, downstream untouched, the app free again."""
    platform, client, app, truth = running
    bootstrap = platform.settings.kafka_bootstrap
    before = read_control(bootstrap, app.name)
    standby = before.active.other
    with LiveLoad(bootstrap, app.input.topic, per_tick=LIVE_PER_TICK, start=sum(truth.values()), truth=truth) as load:
        staged = run_dag(
            client,
            "baton_reprocess",
            {"app": app.name, "version": "v2", "start": "earliest", "end": "standby"},
            timeout_s=900,
        )
        assert staged["state"] == "success", client.task_instances("baton_reprocess", staged["dag_run_id"])
        time.sleep(3)
    states = {t["task_id"]: t["state"] for t in client.task_instances("baton_reprocess", staged["dag_run_id"])}
    assert states["finish_staged"] == "success" and states["invariants"] == "success", states
    assert {states[t] for t in ("handover", "fence", "cutover", "finish", "abort", "rollback")} == {"skipped"}, states
    record = read_control(bootstrap, app.name)
    assert (record.active, record.epoch, record.fence, record.operation) == (before.active, before.epoch, None, "")
    assert (record.slots[standby].version, record.slots[standby].generation) == (
        "v2",
        max(s.generation for s in before.slots.values()) + 1,
    )
    live, was = record.slots[before.active], before.slots[before.active]
    assert (live.version, live.generation, live.desired) == (was.version, was.generation, was.desired)
    summary = client.xcom("baton_reprocess", staged["dag_run_id"], "finish_staged")
    assert summary["hand_over"]["conf"] == {"app": app.name, "correct": True}, summary
    wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    assert compacted(bootstrap, app) == buggy(truth)  # downstream still holds the live generation's output
