"""Helpers for e2e tests driving the platform through Airflow's REST API."""

import threading
import time
from collections import Counter
from contextlib import contextmanager

from baton.kafka.control_log import read_control
from tests.support.slots import produce_clicks

# What the e2e stack's alert notifier (tests.support.recording_notifier) was sent: this file beside the
# platform's state dir.
ALERTS = "alerts.jsonl"


def run_dag(client, dag_id, conf=None, timeout_s=420):
    run = client.trigger(dag_id, conf or {})
    return client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=timeout_s)


def desired(platform, app, slot):
    rec = read_control(platform.settings.kafka_bootstrap, app)
    return rec.slots.get(slot) if rec else None


class LiveLoad:
    """Live traffic for a test's duration: `per_tick` clicks every 0.25 s over `users` users, numbered on
    from `start`; with `on_s`, in bursts of on_s seconds `off_s` apart (input that pauses and resumes, as
    real input does). `truth` counts what was sent (a given Counter is updated in place); `sent` is the
    next click's number, i.e. how many were sent counting from 0."""

    def __init__(self, bootstrap, topic, per_tick=500, users=300, start=0, truth=None, on_s=None, off_s=0.0):
        self.bootstrap, self.topic, self.per_tick, self.users = bootstrap, topic, per_tick, users
        self.on_s, self.off_s = on_s, off_s
        self.sent, self.truth = start, truth if truth is not None else Counter()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        burst = time.monotonic()
        while not self.done.is_set():
            if self.on_s is not None and time.monotonic() - burst >= self.on_s:
                self.done.wait(self.off_s)
                burst = time.monotonic()
                continue
            part, _ = produce_clicks(self.bootstrap, self.topic, self.per_tick, users=self.users, start=self.sent)
            self.truth.update(part)
            self.sent += self.per_tick
            time.sleep(0.25)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


@contextmanager
def both_slots_running(client, app):
    """Both slots of `app` started through baton_lifecycle for the block, stopped after it."""
    started = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "start", "slot": "both"})
    assert started["state"] == "success", started
    yield
    stopped = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "stop", "slot": "both"})
    assert stopped["state"] == "success"
