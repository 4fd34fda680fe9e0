"""Helpers for e2e tests driving the platform through Airflow's REST API."""

import re
import threading
import time
from collections import Counter
from contextlib import contextmanager

from baton.kafka.control_log import read_control
from tests.support.slots import driver_log_end, produce_clicks

# What the e2e stack's alert notifier (tests.support.recording_notifier) was sent: this file beside the
# platform's state dir.
ALERTS = "alerts.jsonl"


def run_dag(client, dag_id, conf=None, timeout_s=420):
    """Trigger and wait; a run that did not succeed carries "why" (its failed tasks' logs and the slot
    drivers' logs they name), which the tests' assertion messages print."""
    run = client.trigger(dag_id, conf or {})
    done = client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=timeout_s)
    if done["state"] != "success":
        done["why"] = why_not_success(client, dag_id, run["dag_run_id"])
    return done


def why_not_success(client, dag_id, run_id, lines=30):
    """The end of every failed (or retrying) task try's log, then of each driver log those name."""
    try:
        out, drivers = [], []
        for ti in client.task_instances(dag_id, run_id):
            if ti["state"] not in ("failed", "up_for_retry", "upstream_failed", "running", "deferred", "queued"):
                continue
            out.append(f"--- {ti['task_id']}[{ti.get('map_index', -1)}] {ti['state']}, try {ti.get('try_number')}")
            for attempt in range(1, (ti.get("try_number") or 0) + 1):
                log = client.task_log(dag_id, run_id, ti["task_id"], attempt, ti.get("map_index", -1))
                out.append(f"try {attempt}:")
                out.extend(log[-lines:])
                drivers.extend(m for line in log for m in re.findall(r"(/\S+/driver\.log)", line))
        for path in dict.fromkeys(drivers):
            out.append(f"--- the end of {path}:")
            out.extend(driver_log_end(path, lines))
        return "\n".join(out)
    except Exception as exc:  # the explanation must never hide the failure it explains
        return f"(could not collect the failed tasks' logs: {type(exc).__name__}: {exc})"


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
    assert started["state"] == "success", started.get("why", started)
    yield
    stopped = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "stop", "slot": "both"})
    assert stopped["state"] == "success"
