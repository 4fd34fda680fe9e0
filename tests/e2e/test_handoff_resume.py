"""A cutover whose tasks are killed with SIGKILL mid-step, under live load, converges when Airflow
retries them (issue 5): no second fence, no double epoch bump, no second cutover, no lost fence, and
the output stays exactly once.

How a running task is found: Airflow 3's LocalExecutor runs each task in one of its worker processes,
which retitles itself `airflow worker -- LocalExecutor: <task instance id>` (the supervisor) and forks
the task runner, which runs the operator (it retitles itself `airflow worker -- <task instance id>`).
The task instance id comes from the REST API; killing the runner (not the supervisor) is what a crash
of the operator's code looks like: the supervisor reports the try failed and Airflow retries it.

The fence task is killed after its control write and before it could report. Once the runner has a
connection to the broker (its execute() began, and its hook has read the Kafka connection from Airflow),
its supervisor is held stopped (SIGSTOP). Every request of the runner to its supervisor waits for the
answer, and its first one after the write is the push of its plan as XCom: it cannot report success
while the supervisor is held. The first time the control record shows the write, the runner is killed
and the supervisor let go, which finds the try's runner dead. The try numbers then prove where the kill
landed. (Slicing the runner's run time with SIGSTOP/SIGCONT instead let it report between two reads
when the host was busy: a CI run saw the fence succeed on its first try.)

The cutover task waits at the fence deferred, and the triggerer writes the cutover: it is killed
twice, before it could defer, and after the triggerer's write, resumed to report it, before it could.

Then the finished cutover task is cleared and re-run: it recognises the write and changes nothing.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from baton.kafka.control_log import decode_for_app, read_control
from baton.kafka.tail import read_tail
from baton.records import ControlRecord, Slot
from baton.settings import CONTROL_TOPIC
from baton.tools.verify import read_output, verify
from tests.support.e2e import LiveLoad, run_dag
from tests.support.slots import read_status, wait_for, wait_until_emitted

pytestmark = pytest.mark.e2e

DAG = "baton_cutover"


def task_instance(client, run_id: str, task_id: str) -> dict:
    return next(t for t in client.task_instances(DAG, run_id) if t["task_id"] == task_id)


def started_at(proc: psutil.Process) -> float:
    """When `proc` started, on the wall clock (time.time()) to within the kernel's tick: psutil's
    create_time() counts from /proc/stat's boot time, whole seconds, up to 1 s off that clock."""
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return proc.create_time() - psutil.boot_time() + booted


def task_runner(
    client, run_id: str, task_id: str, timeout_s: float = 300, born_after: float = 0.0
) -> tuple[psutil.Process, dict]:
    """The process running the current try of `task_id` in `run_id` (see the module docstring); with
    `born_after` (wall clock, s), only a runner started after it: a deferred try and its resumption share
    one task instance id, so the runner that deferred can still be exiting under its supervisor (a busy
    host's exit takes seconds) when the resumed one starts under another."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ti = task_instance(client, run_id, task_id)
        assert ti["state"] not in ("success", "failed", "upstream_failed", "skipped"), (
            f"{task_id} ended ({ti['state']}) before its process was found"
        )
        title = f"airflow worker -- LocalExecutor: {ti['id']}"
        for proc in psutil.process_iter(["cmdline"]):
            if " ".join(proc.info["cmdline"] or []).strip() == title:
                try:  # a previous try's runner, exited but not reaped yet (a zombie), is not this try's
                    children = [
                        c for c in proc.children() if c.status() != psutil.STATUS_ZOMBIE and started_at(c) > born_after
                    ]
                except psutil.NoSuchProcess:
                    continue
                if children:
                    assert len(children) == 1, f"{task_id}'s supervisor has children {children}"
                    return children[0], ti
        time.sleep(0.05)
    raise AssertionError(f"no process ran {task_id} of {run_id} within {timeout_s}s")


def talks_to(proc: psutil.Process, port: int) -> bool:
    return any(c.raddr and c.raddr.port == port for c in proc.net_connections(kind="tcp"))


def kill_after_write(runner: psutil.Process, written, broker_port: int, timeout_s: float = 180) -> ControlRecord:
    """Hold the runner's supervisor from the runner's first connection to the broker on, until written()
    (the control record showing its step's write) holds; then SIGKILL the runner and let the supervisor
    go (see the module docstring). Returns the record seen. Fails if the runner ends first."""
    supervisor = runner.parent()
    deadline = time.monotonic() + timeout_s
    try:
        while not talks_to(runner, broker_port):  # free run through start-up (DAG parse) to execute()
            assert time.monotonic() < deadline, "the task never connected to the broker"
            time.sleep(0.005)
        supervisor.send_signal(signal.SIGSTOP)
        seen = None
        try:
            while seen is None and time.monotonic() < deadline:
                if (seen := written()) is not None:
                    runner.send_signal(signal.SIGKILL)
                    break
                assert runner.status() != psutil.STATUS_ZOMBIE, "the task ended before its write"
                time.sleep(0.05)
        finally:
            supervisor.send_signal(signal.SIGCONT)
        if seen is None:
            raise AssertionError(
                f"the task did not write within {timeout_s}s while its supervisor was held: "
                "does the step ask Airflow for something after it connects to the broker?"
            )
        runner.wait(30)  # reaped by the supervisor, now that it runs again
        return seen
    except psutil.NoSuchProcess:
        raise AssertionError("the task ended before it could be killed after its write") from None


def kill_running(client, run_id: str, task_id: str, born_after: float = 0.0) -> None:
    """Stop the current try's runner (started after `born_after`, see task_runner) as soon as it is found,
    and SIGKILL it once Airflow shows the try running under that pid: the try dies mid-step, and Airflow
    retries it."""
    proc, _ = task_runner(client, run_id, task_id, born_after=born_after)
    proc.send_signal(signal.SIGSTOP)
    ti = wait_for(
        f"{task_id} to be running",
        lambda: (t := task_instance(client, run_id, task_id))["state"] == "running" and t,
        60,
        every_s=0.1,
    )
    assert ti["pid"] == proc.pid  # the pid Airflow recorded for the try is the process found
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def transitions(bootstrap: str, app: str, since_revision: int) -> list[tuple]:
    """(epoch, active, fence) of every control record of `app` that readers applied from `since_revision` on
    (read_control's revision rule), repeats dropped: what the handoff changed, whoever else wrote meanwhile
    (the health DAG writes too)."""
    applied: list[ControlRecord] = []
    for rec in read_tail(bootstrap, CONTROL_TOPIC, lambda m: decode_for_app(app, m.key(), m.value()), last_n=None):
        if not applied or rec.revision == applied[-1].revision + 1:
            applied.append(rec)
    states = [(r.epoch, r.active, r.fence) for r in applied if r.revision >= since_revision]
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


@pytest.mark.timeout(900)
def test_a_cutover_whose_tasks_are_killed_mid_step_converges_exactly_once(stack):
    platform, client, apps = stack
    app, bootstrap = apps["cc_resume"], platform.settings.kafka_bootstrap
    broker_port = int(bootstrap.rsplit(":", 1)[1])
    started = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "start", "slot": "both"})
    assert started["state"] == "success", started.get("why", started)
    with LiveLoad(bootstrap, app.input.topic) as load:
        wait_until_emitted(bootstrap, app, 5_000, timeout_s=300)
        before = read_control(bootstrap, app.name)
        assert (before.active, before.epoch, before.fence) == (Slot.BLUE, 1, None)
        t0 = time.monotonic()
        # fence_timeout_s also sets how long the fence is held before the health DAG may lift it (+120 s):
        # room for three tasks' retries on a busy machine.
        run_id = client.trigger(DAG, {"app": app.name, "ahead_s": 2, "fence_timeout_s": 300})["dag_run_id"]

        # 1. The fence task, killed after it set the fence, before it returned the plan.
        proc, _ = task_runner(client, run_id, "fence")
        fenced = kill_after_write(
            proc, lambda: r if (r := read_control(bootstrap, app.name)).fence else None, broker_port
        )
        assert (fenced.active, fenced.epoch) == (Slot.BLUE, 1)
        print(f"fence killed {time.monotonic() - t0:.1f}s after the trigger, fence {fenced.fence}")

        # 2. The cutover task, stopped as soon as its runner is found and killed once Airflow has the try
        #    running (before it could defer): its retry must find both slots still held at the fence.
        kill_running(client, run_id, "cutover")
        print(f"cutover killed before it deferred {time.monotonic() - t0:.1f}s after the trigger")

        # 3. The retry defers; the triggerer writes the cutover the moment the gate is met; the task resumed
        #    to report it is killed before it could: the next try must find the cutover done, not make another.
        #    The resumed try's runner starts after the triggerer's write (CI once found the deferred try's
        #    runner, still exiting, and held it while the resumed one ran).
        cutover = wait_for(
            "the cutover written by the triggerer",
            lambda: r if (r := read_control(bootstrap, app.name)).epoch > 1 else None,
            300,
            every_s=0.2,
        )
        assert (cutover.active, cutover.epoch, cutover.fence) == (Slot.GREEN, 2, None)
        wait_for(
            "the cutover task to resume",
            lambda: task_instance(client, run_id, "cutover")["state"] in ("scheduled", "queued", "running"),
            120,
            every_s=0.1,
        )
        kill_running(client, run_id, "cutover", born_after=cutover.ts_ms / 1000)
        print(f"resumed cutover killed {time.monotonic() - t0:.1f}s after the trigger")

        run = client.wait_for_run(DAG, run_id, timeout_s=420)
        print(f"run {run['state']} {time.monotonic() - t0:.1f}s after the trigger")
        assert run["state"] == "success", run.get("why", run)
        time.sleep(5)

    tis = {t["task_id"]: t for t in client.task_instances(DAG, run_id)}
    # Each killed task was retried once (a try number of 1 would mean the kill came after it reported).
    assert {t: (tis[t]["state"], tis[t]["try_number"]) for t in ("fence", "cutover")} == {
        "fence": ("success", 2),
        "cutover": ("success", 3),
    }, tis
    assert tis["abort"]["state"] == "skipped"
    # The retried fence reused the fence it had set: the plan the cutover used is that fence.
    plan = client.xcom(DAG, run_id, "fence")
    assert plan == {
        "fence": {str(p): o for p, o in fenced.fence.items()},
        "epoch": 1,
        "from_slot": "blue",
        "to": "green",
    }

    # The control record's history since the trigger: the fence set once and held until the one cutover
    # write, which lifted it and bumped the epoch once.
    assert transitions(bootstrap, app.name, before.revision) == [
        (1, Slot.BLUE, None),
        (1, Slot.BLUE, fenced.fence),
        (2, Slot.GREEN, None),
    ]
    record = read_control(bootstrap, app.name)
    assert (record.active, record.epoch, record.fence) == (Slot.GREEN, 2, None)

    wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    verdict = verify(load.truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()
    assert read_status(bootstrap, app.name, "blue")[-1].epoch_seen == 2  # the old active is the standby now

    # A re-run of the finished fence and cutover (cleared, as after a lost success report) recognises this
    # run's handoff (kept in the control record): the same plan, no second fence, no second cutover.
    client.clear_tasks(DAG, run_id, ["fence", "cutover"])
    wait_for(
        "the cleared cutover to run again",
        lambda: (
            (ti := task_instance(client, run_id, "cutover"))["try_number"] == 4
            and ti["state"] in ("success", "failed", "up_for_retry")
        ),
        300,
        every_s=1,
    )
    assert task_instance(client, run_id, "fence")["state"] == "success"
    assert client.xcom(DAG, run_id, "fence")["fence"] == {str(p): o for p, o in fenced.fence.items()}
    assert client.wait_for_run(DAG, run_id, timeout_s=120)["state"] == "success"
    assert task_instance(client, run_id, "cutover")["state"] == "success"
    assert transitions(bootstrap, app.name, before.revision) == [
        (1, Slot.BLUE, None),
        (1, Slot.BLUE, fenced.fence),
        (2, Slot.GREEN, None),
    ]
    stopped = run_dag(client, "baton_lifecycle", {"app": app.name, "action": "stop", "slot": "both"})
    assert stopped["state"] == "success", stopped.get("why", stopped)
