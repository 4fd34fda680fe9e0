"""A start after the broker lost the input's data (invariant 6), through Airflow's REST API: the slot ran
and stopped, then its input topic lost its data (deleted and recreated, shorter: what `make down` /
`make up` does to the in-memory broker's topics). baton_lifecycle's start used to launch a slot that hung
without a word and wait for its timeout (600 s); now the slot stops as FAILED with the reason and the
start task fails with it, in about a slot's start-up."""

import time

import pytest

from baton.airflow_api import AirflowAPIError
from baton.kafka.admin import TopicSpec
from baton.kafka.markers import read_last_marker
from baton.records import Slot, SlotState
from tests.support.e2e import desired, run_dag
from tests.support.slots import produce_clicks, read_status, wait_until_emitted
from tests.support.topics import recreate_topic

pytestmark = pytest.mark.e2e

DAG = "baton_lifecycle"


def test_a_start_after_the_input_lost_its_data_fails_with_the_reason(stack):
    platform, client, apps = stack
    app, bootstrap = apps["cc_lost"], platform.settings.kafka_bootstrap
    produce_clicks(bootstrap, app.input.topic, 2_000, users=100)
    started = run_dag(client, DAG, {"app": app.name, "action": "start", "slot": "blue"})
    assert started["state"] == "success", started.get("why", started)
    wait_until_emitted(bootstrap, app, 2_000)
    assert run_dag(client, DAG, {"app": app.name, "action": "stop", "slot": "blue"})["state"] == "success"
    stood = read_last_marker(bootstrap, app.commits_topic, app.name).emitted

    recreate_topic(bootstrap, TopicSpec(app.input.topic, app.input.partitions))
    produce_clicks(bootstrap, app.input.topic, 50, users=10, start=2_000)
    began = time.monotonic()
    run = run_dag(client, DAG, {"app": app.name, "action": "start", "slot": "blue"}, timeout_s=300)
    took = time.monotonic() - began
    assert run["state"] == "failed", run
    start = next(t for t in client.task_instances(DAG, run["dag_run_id"]) if t["task_id"] == "start")
    # Failed for good, with retries left: no retry can help. (A second try is Airflow's, when it lost the
    # first's deferral: apache/airflow#71580.)
    assert start["state"] == "failed" and start["try_number"] <= start["max_tries"], start
    try:
        reason = client.xcom(DAG, run["dag_run_id"], "start", key="reason", map_index=start["map_index"])
    except AirflowAPIError as exc:  # the start failed some other way: its log says which
        pytest.fail(f"{exc}\n{run.get('why')}")
    assert f"slot failed: input data loss on topic {app.input.topic!r}, partitions 0, 1: " in reason, reason
    for p, o in stood.items():
        assert f"partition {p}: checkpoint at offset {o} " in reason, reason
    assert "reprocess into a new generation (baton_reprocess" in reason and "on_data_loss: earliest" in reason
    log = client.request(
        "GET",
        f"/dags/{DAG}/dagRuns/{run['dag_run_id']}/taskInstances/start/logs/1",
        "start's log",
        params={"map_index": start["map_index"]},
    )
    assert f"input data loss on topic {app.input.topic!r}" in str(log)
    assert read_status(bootstrap, app.name)[-1].state is SlotState.FAILED
    assert took < 240, f"the start took {took:.0f}s to fail"
    print(f"the start failed {took:.0f}s after it was triggered: {reason}")

    # Stopped, so the health DAG does not restart a slot that cannot run on this input.
    assert run_dag(client, DAG, {"app": app.name, "action": "stop", "slot": "blue"})["state"] == "success"
    assert desired(platform, app.name, Slot.BLUE).desired is SlotState.STOPPED
