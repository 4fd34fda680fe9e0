"""The Airflow control plane end to end: real broker, real Spark slots, real Airflow standalone, DAGs
triggered through the REST API.

- baton_lifecycle refuses a bad conf (400 naming the field) and starts nothing;
- it starts both slots of the click-count app; baton_health sees them RUNNING;
- a re-run (cleared) start task reattaches to the running launches instead of starting second copies;
- kill -9 of the active's driver, with every Airflow process stopped (SIGSTOP): the standby takes over by
  itself at what the dead active emitted (its lease watch), and the dead driver's wrapper starts it again
  in place, recording the restart (baton.driver_wrapper); once Airflow runs again, baton_health reports
  the failover and restarts nothing: the slot is back as the standby; output stays exactly once;
- an app with bad code is restarted up to its limit, then marked FAILED with the reason;
- stop ends both slots gracefully;
- baton_cutover for an app that was never started ends failed (not success), with the reason;
- baton_cutover, triggered from the Baton page in the Airflow UI (a real browser), hands the active role to
  the standby under live load, exactly once; the page shows it, its API and metrics need an Airflow user;
  the app's output Asset gets the cutover's event, and a DAG scheduled on that Asset runs on it.
"""

import json
import os
import signal
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import psutil
import pytest

from baton.airflow_api import AirflowAPIError
from baton.handoff import FAILOVER
from baton.kafka.control_log import read_control
from baton.launcher import Launcher
from baton.local.procs import pid_alive
from baton.records import Role, Slot, SlotState
from baton.tools.verify import read_output, verify
from spark_apps.runtime.coordination.relaunch import RESTARTED_BY_SUPERVISOR
from tests.support.browser import logged_in
from tests.support.e2e import ALERTS, LiveLoad, desired, run_dag
from tests.support.recording_notifier import read as read_alerts
from tests.support.slots import produce_clicks, read_status, wait_for, wait_until_emitted

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "no_such_app", "action": "start"}, "app"),
        ({"app": "cc_e2e", "action": "start", "slot": "purple"}, "slot"),
        ({"app": "cc_e2e", "action": 7}, "action"),
    ],
)
def test_a_bad_conf_is_refused_with_the_field_and_starts_nothing(stack, conf, field):
    platform, client, apps = stack
    if conf["app"] in apps:  # its name on this run (unique per run on a shared broker)
        conf = {**conf, "app": apps[conf["app"]].name}
    with pytest.raises(AirflowAPIError) as err:
        client.trigger("baton_lifecycle", conf)
    assert 400 <= err.value.status < 500
    assert field in err.value.body
    # Nothing was written or launched for the app the conf named (other tests share the platform).
    assert read_control(platform.settings.kafka_bootstrap, conf["app"]) is None
    assert not list((platform.settings.state_dir / "slots" / conf["app"]).glob("*/driver.json"))


def test_start_health_restart_after_kill_9_and_stop(stack):
    platform, client, apps = stack
    app, bootstrap = apps["cc_e2e"], platform.settings.kafka_bootstrap
    launcher = Launcher(platform.settings.state_dir)
    truth, _ = produce_clicks(bootstrap, app.input.topic, 20_000, users=400)

    started = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "start", "slot": "both"})
    assert started["state"] == "success", started.get("why", started)
    for slot in Slot:
        assert desired(platform, app.name, slot).desired is SlotState.RUNNING
    launches = {slot: launcher.find(app.name, slot) for slot in Slot}
    assert all(launches.values())

    health = run_dag(client, "baton_health")
    assert health["state"] == "success", health.get("why", health)
    verdicts = client.xcom("baton_health", health["dag_run_id"], "check")["slots"]
    assert verdicts[f"{app.name}/blue"]["verdict"] == "healthy", verdicts
    assert verdicts[f"{app.name}/green"]["verdict"] == "healthy", verdicts

    # A retried start task (cleared, as after a worker crash) reattaches: no second launch.
    client.clear_tasks("baton_lifecycle", started["dag_run_id"], ["start"])
    rerun = client.wait_for_run("baton_lifecycle", started["dag_run_id"], timeout_s=300)
    assert rerun["state"] == "success", rerun.get("why", rerun)
    for slot in Slot:
        again = launcher.find(app.name, slot)
        assert again is not None and again.launch_id == launches[slot].launch_id

    # kill -9 of the active's Python driver (the pid its status records carry) while no Airflow process
    # runs: the failover is the data plane's own (invariant 7).
    wait_until_emitted(bootstrap, app, 20_000)
    driver_pid = read_status(bootstrap, app.name, "blue")[-1].pid
    airflow = psutil.Process(platform.airflow.proc.pid())
    paused = [p for p in (airflow, *airflow.children(recursive=True)) if "airflow" in cmdline(p)]
    for proc in paused:
        proc.send_signal(signal.SIGSTOP)
    try:
        os.kill(driver_pid, signal.SIGKILL)
        more, _ = produce_clicks(bootstrap, app.input.topic, 10_000, users=400, start=20_000)
        took = wait_for("green to take over", lambda: (r := read_control(bootstrap, app.name)).epoch == 2 and r, 60)
        # Green's takeover; the record read may already be the one after it, blue's restart's record.
        assert took.active is Slot.GREEN and took.writer in ("green (lease)", "blue (supervisor)"), took
        assert took.handoff.id == FAILOVER and "is gone" in took.handoff.reason, took.handoff
        wait_until_emitted(bootstrap, app, 30_000, timeout_s=120)  # green emits on, Airflow still stopped
        # Blue's wrapper started its driver again at once (baton.driver_wrapper), Airflow still stopped: the
        # new driver records the restart, the crash-loop guard's count, as its supervisor's.
        restarted = wait_for(
            "blue restarted in place by its supervisor",
            lambda: (d := desired(platform, app.name, Slot.BLUE)).restarts and d,
            120,
            every_s=1,
        )
        assert restarted.reason.startswith(RESTARTED_BY_SUPERVISOR) and restarted.desired is SlotState.RUNNING
    finally:
        for proc in paused:
            proc.send_signal(signal.SIGCONT)
    relaunch = launcher.find(app.name, Slot.BLUE)
    assert relaunch is not None and relaunch.launch_id == launches[Slot.BLUE].launch_id  # in place, not Airflow's
    wait_for(
        "blue back as the standby",
        lambda: any(
            s.pid != driver_pid and s.batch_id >= 0 and s.role is Role.STANDBY and s.epoch_seen == 2
            for s in read_status(bootstrap, app.name, "blue")
        ),
        300,
        every_s=1,
    )
    # Blue was the active: green took over at what blue had emitted, blue came back as the standby.
    record = read_control(bootstrap, app.name)
    assert (record.active, record.epoch, record.fence) == (Slot.GREEN, 2, None)
    findings = client.xcom("baton_health", run_dag(client, "baton_health")["dag_run_id"], "check")["slots"]
    assert any(
        f.startswith("failover: took over from blue at epoch 2") for f in findings[f"{app.name}/green"]["findings"]
    )
    wait_until_emitted(bootstrap, app, 30_000, timeout_s=300)
    verdict = verify(truth + more, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()
    # baton_health left the restart to the data plane: the same launch, one restart, desired RUNNING.
    assert launcher.find(app.name, Slot.BLUE).launch_id == launches[Slot.BLUE].launch_id
    assert len(desired(platform, app.name, Slot.BLUE).restarts) == 1
    assert desired(platform, app.name, Slot.BLUE).desired is SlotState.RUNNING

    stopped = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "stop", "slot": "both"})
    assert stopped["state"] == "success", stopped.get("why", stopped)
    for slot in Slot:
        assert desired(platform, app.name, slot).desired is SlotState.STOPPED
        assert launcher.find(app.name, slot) is None
        assert read_status(bootstrap, app.name, slot.value)[-1].state is SlotState.STOPPED
    assert not pid_alive(relaunch.pid)


def test_a_crash_looping_app_is_marked_failed_with_the_reason(stack):
    platform, client, apps = stack
    app = apps["crashy"]
    start = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "start", "slot": "blue"})
    assert start["state"] == "failed"  # the start gate reports the slot's own error
    failed = wait_for(
        "the crash-loop guard to mark the slot FAILED",
        lambda: (
            run_dag(client, "baton_health")["state"] == "success"
            and (d := desired(platform, app.name, Slot.BLUE)).desired is SlotState.FAILED
            and d
        ),
        600,
        every_s=1,
    )
    assert "crash loop: 2 restarts" in failed.reason and "injected bug" in failed.reason
    # The deployment's notifier was told (its setting: tests/e2e/conftest.py).
    sent = wait_for(
        "the alert",
        lambda: [
            a
            for a in read_alerts(platform.settings.state_dir.parent / ALERTS)
            if (a["app"], a["slot"], a["rule"]) == (app.name, "blue", "failed")
        ],
        120,
        every_s=2,
    )
    assert "crash loop: 2 restarts" in sent[0]["text"]
    # FAILED is final until an operator starts it again: further health runs restart nothing.
    launches = Launcher(platform.settings.state_dir).read_record(app.name, Slot.BLUE).launch_id
    assert run_dag(client, "baton_health")["state"] == "success"
    assert Launcher(platform.settings.state_dir).read_record(app.name, Slot.BLUE).launch_id == launches
    assert desired(platform, app.name, Slot.BLUE).desired is SlotState.FAILED


def test_cutover_from_the_baton_page_under_load_is_exactly_once_and_the_page_shows_it(stack, tmp_path):
    platform, client, apps = stack
    app, bootstrap, airflow = apps["cc_cut"], platform.settings.kafka_bootstrap, platform.airflow
    started = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "start", "slot": "both"})
    assert started["state"] == "success", started.get("why", started)
    # Plugin routes are not protected by Airflow unless the plugin does it: the page's are.
    for path in ("/baton/api/apps", "/baton/metrics", "/baton/"):
        assert http_status(f"{airflow.url}{path}") == 401, path
    with LiveLoad(bootstrap, app.input.topic) as load, logged_in(airflow.url, "admin", airflow.password()) as page:
        wait_until_emitted(bootstrap, app, 5_000, timeout_s=300)
        page.goto(f"{airflow.url}/plugin/baton")  # the page, in the Airflow UI's navigation
        card = page.frame_locator("iframe").locator(f"[data-app={app.name}]")
        card.locator("table.slots tr.active").wait_for(timeout=60_000)
        rows = card.locator("table.slots tr").all_inner_texts()
        assert any("blue\tactive\trunning / running" in r for r in rows), rows
        assert any("green\tstandby\trunning / running" in r for r in rows), rows
        # The operator acts from the page: the DAG's own form, pre-filled for this app.
        card.locator("button[data-dag=baton_cutover]").click()
        dialog = page.frame_locator("iframe").locator("#trigger")
        assert dialog.locator("select[name=app]").input_value(timeout=30_000) == app.name
        assert dialog.locator("input[name=ahead_s]").input_value() == "2"  # the form's default
        dialog.locator("#trigger-submit").click()
        # The run's link, or the page's error saying why not (a slow API server on a busy host: 90 s).
        outcome = dialog.locator("#trigger-result").locator("#trigger-run, .error")
        outcome.wait_for(timeout=90_000)
        assert outcome.get_attribute("id") == "trigger-run", outcome.inner_text()
        run_id = outcome.inner_text()
        cut = client.wait_for_run("baton_cutover", run_id, timeout_s=600)
        assert cut["state"] == "success", cut.get("why", cut)
        record = read_control(bootstrap, app.name)
        assert (record.active, record.epoch, record.fence) == (Slot.GREEN, 2, None)
        # The app's output Asset got the cutover's event: what a downstream DAG scheduled on it sees.
        params = {"source_dag_id": "baton_cutover", "source_run_id": run_id}
        [event] = client.request("GET", "/assets/events", "asset events", params=params)["asset_events"]
        assert event["uri"] == f"kafka://{bootstrap.split(',')[0]}/{app.output.topic}", event
        assert {k: event["extra"][k] for k in ("app", "kind", "epoch", "active", "corrected")} == {
            "app": app.name,
            "kind": "cutover",
            "epoch": 2,
            "active": "green",
            "corrected": False,
        }, event
        # A user's DAG scheduled on that Asset (tests/e2e/dags) ran on the event and saw what it said.
        downstream = wait_for(
            "a run of baton_test_downstream after the cutover",
            lambda: next(
                (
                    r
                    for r in client.request("GET", "/dags/baton_test_downstream/dagRuns", "runs")["dag_runs"]
                    if r["state"] == "success"
                ),
                None,
            ),
            timeout_s=180,
            every_s=2,
        )
        seen = client.xcom("baton_test_downstream", downstream["dag_run_id"], "seen")
        seen = json.loads(seen) if isinstance(seen, str) else seen  # the API may decode the task's JSON
        assert [(e["app"], e["epoch"], e["active"], e["run_id"]) for e in seen] == [(app.name, 2, "green", run_id)], (
            seen
        )
        time.sleep(5)
        # The page shows what happened: green active at epoch 2, the cutover on the plots' time axis and
        # in the history, linked to the run that did it.
        page.reload()
        card = page.frame_locator("iframe").locator(f"[data-app={app.name}]")
        card.locator(".head", has_text="epoch 2, green active").wait_for(timeout=30_000)
        assert card.locator("svg .series").count() >= 2 and card.locator("svg .handoff-mark").count() >= 2
        assert card.locator("svg[data-field=latency_ms] .series").count() >= 1  # the end-to-end latency plot
        assert card.locator(".events td", has_text="s from the fence").count() >= 1  # the cutover's duration
        assert card.locator(f".events a[href$='{quote(run_id, safe='')}']").count() >= 2  # its fence and cutover
        page.screenshot(path=str(tmp_path / "baton-page.png"), full_page=True)
    metrics = scrape(f"{airflow.url}/baton/metrics", client.token())
    assert metrics[("baton_app_epoch", app.name, None)] == 2
    assert metrics[("baton_slot_active", app.name, "green")] == 1
    assert ("baton_slot_lag_records", app.name, "blue") in metrics
    assert 0 <= metrics[("baton_slot_latency_seconds", app.name, "green")] < 60
    assert metrics[("baton_handoff_duration_seconds_count", app.name, None)] == 1  # the cutover, timed
    wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    verdict = verify(load.truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()
    assert read_status(bootstrap, app.name, "blue")[-1].epoch_seen == 2  # the old active is the standby now
    stopped = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "stop", "slot": "both"})
    assert stopped["state"] == "success", stopped.get("why", stopped)


def test_a_cutover_that_cannot_happen_fails_its_run_with_the_reason(stack):
    """A script polling the run must not read "success" for a handoff that did not happen: the abort
    step (the DAG's leaf, whose state Airflow gives the run) fails with the fence's reason."""
    platform, client, apps = stack
    app = apps["cc_idle"].name
    run = client.trigger("baton_cutover", {"app": app})
    done = client.wait_for_run("baton_cutover", run["dag_run_id"], timeout_s=300)
    tasks = {ti["task_id"]: ti["state"] for ti in client.task_instances("baton_cutover", run["dag_run_id"])}
    assert done["state"] == "failed", tasks
    assert tasks == {"fence": "failed", "cutover": "upstream_failed", "abort": "failed"}
    never = f"{app} has never been started: nothing to hand over"
    assert sorted(client.failure_reasons("baton_cutover", run["dag_run_id"])) == [
        f"abort: {app}: handoff did not happen: {never}; nothing changed",
        f"fence: {never}",
    ]
    assert read_control(platform.settings.kafka_bootstrap, app) is None


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def scrape(url: str, token: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return {
        (s.name, s.labels.get("app"), s.labels.get("slot")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def cmdline(p) -> str:
    """A process's command line; "" for one that exited meanwhile (a task process just ended)."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""
