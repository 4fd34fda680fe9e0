"""Detaches a slot's driver from whoever launched it, restarts it when it dies, and records how it ended.

    python -m baton.driver_wrapper --log F --pid-file F --exit-file F --restarts-file F --lock-fd N
        [--restart-limit N --restart-window-s S --restart-backoff-s S --restart-backoff-max-s S]
        -- <driver argv...>

The launcher (an Airflow task process) starts this; it forks once and exits, so the forked copy is
re-parented to init: no walk of the task's process tree and no signal to the task's process group
reaches it. The copy leads a session of its own (every process of the slot, the Python driver, its
JVM and Python workers, has its pid as session id), writes its pid to the pid file, runs the driver
as its child with output to the log, forwards SIGTERM/SIGINT to the driver only (the harness then
stops at a batch boundary; signalling the JVM as well would tear the SparkContext down under the
running batch) and writes the driver's exit code to the exit file.

It is the slot's restart policy, as a container runtime's is (issue 77): a driver that dies (killed by
a signal, or exit code 1: its query failed) is started again at once, then after a backoff that
doubles, up to `--restart-limit` restarts in `--restart-window-s` (the app's HealthPolicy: one guard,
counted in the control record too). A driver that ran `--restart-stable-s` before it died had started
well: its death begins a new count (restarted at once), as a container runtime resets its backoff
after a container ran for a while; a crash loop is a driver that dies again soon after each start. Airflow's baton_health was the only restarter, 3-35 s after a
death and a minute at worst; this is about 0.1 s. Not restarted: a requested stop (a signal
forwarded, or exit 0: the harness stops by itself when the control record says so), bad arguments or
app definition (2), a staged launch never promoted (3), a checkpoint its input cannot resume (4), a
driver that cannot be executed (127): each would end the same way again. The relaunched driver finds
RELAUNCH_ENV set: it records the restart in the control record and, if the control record wants the
slot stopped meanwhile, exits 0 at once. The restarts file says what the wrapper is doing (waiting,
relaunched, gave up; `running` from the start when it restarts at all) for baton_health, which must not
restart a launch its supervisor is restarting.
The driver runs in a process group of its own: a kill of its group (the driver, its JVM and Python
workers, what a crash takes down) leaves the wrapper to restart it; a kill of the session ends both,
and baton_health, the supervisor of last resort, starts a new launch.

The launcher gives each launch a temporary directory of its own for the driver's JVM (JVM_TMPDIR_ENV,
baton.launch_tmp): the wrapper empties it before each restart and removes it once the driver has
ended for good, however it ended.

`--lock-fd` is an open file description on which the launcher took an flock. The wrapper and the
driver keep it open, so the lock stays held exactly as long as either of them lives: that is how a
launcher tells a live launch from a dead one without trusting a pid.

Standard library only: it stays small for the whole life of the slot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

LAUNCH_ID_ENV = "BATON_LAUNCH_ID"
# The launch's own directory for the driver JVM's java.io.tmpdir (baton.launch_tmp).
JVM_TMPDIR_ENV = "BATON_JVM_TMPDIR"
# What a staged driver is told (baton.launcher.stage, spark_apps.runtime.run): hold until this record
# names its launch, at most this long.
HOLD_ARG, HOLD_TIMEOUT_ARG = "--hold-until-recorded", "--hold-timeout-s"


def write_json(path: Path, body: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def _redirect(log: Path) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)


# The relaunched driver's environment: {"restart": k, "code": its predecessor's exit code, "at": epoch s,
# "fresh": its predecessor ran restart_stable_s, so the crash-loop count begins again}.
RELAUNCH_ENV = "BATON_RELAUNCH"
# Exit codes after which a restart would end the same way (spark_apps.runtime.run documents them).
NOT_RESTARTED = {
    0: "a clean stop",
    2: "bad arguments or app definition",
    3: "a staged launch never promoted",
    4: "its checkpoint cannot resume on its input",
    127: "the driver could not be executed",
}
EXIT_CANNOT_RESUME = 4


@dataclass(frozen=True)
class RestartPolicy:
    """At most `limit` restarts in `window_s`; the first at once, the next after backoff_s, doubling up to
    backoff_max_s (as baton.health_policy.HealthPolicy.backoff_s). limit 0: never restart."""

    limit: int = 0
    window_s: float = 600.0
    backoff_s: float = 30.0
    backoff_max_s: float = 300.0
    stable_s: float = 60.0  # a driver that ran this long before it died is not part of a crash loop

    def decide(self, restarts: list[float], now: float) -> tuple[float | None, str]:
        """(seconds to wait before the next restart, or None to give up; why)."""
        recent = [t for t in restarts if t > now - self.window_s]
        if len(recent) >= self.limit:
            return None, f"crash loop: {len(recent)} restarts in {self.window_s:g} s (limit {self.limit})"
        delay = 0.0 if not recent else min(self.backoff_s * 2 ** (len(recent) - 1), self.backoff_max_s)
        return max(0.0, recent[-1] + delay - now) if recent else 0.0, f"restart {len(recent) + 1} of {self.limit}"


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def supervise(
    argv: list[str],
    log: Path,
    pid_file: Path,
    exit_file: Path,
    lock_fd: int,
    restarts_file: Path | None = None,
    policy: RestartPolicy = RestartPolicy(),
) -> int:
    os.setsid()
    _redirect(log)
    launch_id = os.environ.get(LAUNCH_ID_ENV)
    stop_signals: list[int] = []
    current: list[subprocess.Popen] = []  # the running driver, if any

    def forward(signum, _frame):
        stop_signals.append(signum)
        if current and current[0].poll() is None:
            current[0].send_signal(signal.SIGTERM)

    def say(state: str, **more) -> None:
        if restarts_file is not None:
            write_json(restarts_file, {"launch_id": launch_id, "state": state, "restarts": restarted, **more})

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    write_json(pid_file, {"launch_id": launch_id, "pid": os.getpid()})
    started = time.time()
    restarted: list[float] = []
    print(f"[baton] wrapper {os.getpid()} starting: {' '.join(argv)}")
    if policy.limit > 0:  # baton_health leaves a driver's end to this wrapper (baton.health.restarting_in_place)
        say("running", at=started, limit=policy.limit)
    env = dict(os.environ)
    while True:
        try:
            # A group of its own: a kill of the driver's group (a crash) leaves this wrapper to restart it.
            driver = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(lock_fd,), env=env, process_group=0)
        except OSError as exc:
            print(f"[baton] driver did not start: {exc}")
            _remove_jvm_tmp()
            write_json(exit_file, {"launch_id": launch_id, "code": 127, "error": str(exc), "ended_at": time.time()})
            return 127
        current[:] = [driver]
        if stop_signals:  # a stop arrived before the driver existed
            driver.send_signal(signal.SIGTERM)
        driver_started = time.monotonic()
        code = driver.wait()
        current.clear()
        ran_s = time.monotonic() - driver_started
        print(f"[baton] driver {driver.pid} {describe_exit(code)} after {ran_s:.0f} s")
        gave_up = ""
        if stop_signals or code in NOT_RESTARTED or policy.limit <= 0:
            break
        fresh = ran_s >= policy.stable_s
        if fresh:
            restarted.clear()  # it had started well: not a crash loop
        delay, why = policy.decide(restarted, time.time())
        if delay is None:
            gave_up = why
            print(f"[baton] not restarted: {why}")
            say("gave_up", reason=why, code=code)
            break
        say("waiting", next_at=time.time() + delay, code=code)
        if delay:
            print(f"[baton] restarting the driver in {delay:.0f} s ({why})")
        deadline = time.monotonic() + delay
        while not stop_signals and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if stop_signals:
            break
        _remove_jvm_tmp(recreate=True)  # the dead JVM's scratch files: its successor starts clean
        now = time.time()
        restarted.append(now)
        relaunch = {"restart": len(restarted), "code": code, "at": now, "fresh": fresh}
        env = {**os.environ, RELAUNCH_ENV: json.dumps(relaunch)}
        print(f"[baton] restarting the driver ({why}): it {describe_exit(code)}")
        say("relaunched", at=now, code=code)
    _remove_jvm_tmp()  # what its JVM's shutdown hooks did not delete (a kill -9 of the JVM)
    write_json(
        exit_file,
        {
            "launch_id": launch_id,
            "code": code,
            "driver_pid": driver.pid,
            "stop_signal": stop_signals[0] if stop_signals else None,
            "restarts": len(restarted),
            "gave_up": gave_up,
            "started_at": started,
            "ended_at": time.time(),
        },
    )
    return 0 if code == 0 else 1


def _remove_jvm_tmp(recreate: bool = False) -> None:
    path = os.environ.get(JVM_TMPDIR_ENV)
    if not path:
        return
    shutil.rmtree(path, ignore_errors=True)
    if recreate:
        os.makedirs(path, exist_ok=True)


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="baton.driver_wrapper")
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--pid-file", type=Path, required=True)
    ap.add_argument("--exit-file", type=Path, required=True)
    ap.add_argument("--lock-fd", type=int, required=True)
    ap.add_argument("--restarts-file", type=Path, default=None)
    ap.add_argument("--restart-limit", type=int, default=0, help="restarts allowed in the window (0: none)")
    ap.add_argument("--restart-window-s", type=float, default=600.0)
    ap.add_argument("--restart-backoff-s", type=float, default=30.0)
    ap.add_argument("--restart-backoff-max-s", type=float, default=300.0)
    ap.add_argument("--restart-stable-s", type=float, default=60.0)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    ns = ap.parse_args(args)
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    if not argv:
        ap.error("no driver command given after --")
    if os.fork():
        return 0  # the launcher reaps this; the forked copy is now an orphan of init
    try:
        policy = RestartPolicy(
            ns.restart_limit, ns.restart_window_s, ns.restart_backoff_s, ns.restart_backoff_max_s, ns.restart_stable_s
        )
        code = supervise(argv, ns.log, ns.pid_file, ns.exit_file, ns.lock_fd, ns.restarts_file, policy)
    except BaseException:  # never return into the parent's code path from the fork
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
