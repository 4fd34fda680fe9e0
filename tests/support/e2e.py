"""Helpers for e2e tests driving the platform through Airflow's REST API."""

from baton.kafka.control_log import read_control


def run_dag(client, dag_id, conf=None, timeout_s=420):
    run = client.trigger(dag_id, conf or {})
    return client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=timeout_s)


def desired(platform, app, slot):
    rec = read_control(platform.broker.bootstrap, app)
    return rec.slots.get(slot) if rec else None
