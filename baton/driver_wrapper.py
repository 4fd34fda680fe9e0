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
relaunched, gave up; `running` from the start when it restarts at all; the driver's pid) for
baton_health, which must not restart a launch its supervisor is restarting.
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
# A spare driver (Drivers): the argument that makes a driver one, and the nice increment it starts and
# holds at (its start must not slow the slot's driver or the other slot; promoted, it takes its wrapper's
# priority back: spark_apps.runtime.coordination.priority.SlotPriority.rebase, which needs root to raise).
SPARE_ARG = "--spare-of"
SPARE_NICE = 10


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


class Drivers:
    """Starts the launch's driver processes, each in a process group and a JVM temp dir of its own
    (`<launch tmp>/<n>`, removed when it ends), and keeps one spare beside the driver when asked: a
    driver started with SPARE_ARG that starts its interpreter, JVM and Spark session, then holds
    (spark_apps.runtime.coordination.hold.SpareHold) until the restarts file names it the replacement of
    a driver that died. Its start waits `spare_delay_s` after a driver's: that start and its catch-up
    come first (the spare's JVM and Spark session take ~10 s of a core)."""

    def __init__(
        self, argv: list[str], lock_fd: int, restarts_file: Path | None, spare: bool, spare_delay_s: float = 30.0
    ):
        self.argv, self.lock_fd, self.spare_delay_s = argv, lock_fd, spare_delay_s
        self.restarts_file = restarts_file
        self.want_spare = spare and restarts_file is not None
        self.base_tmp = os.environ.get(JVM_TMPDIR_ENV)
        self.count = 0
        self.tmp_of: dict[int, str] = {}
        self.spare: subprocess.Popen | None = None
        self.spare_due = time.monotonic() + self.spare_delay_s

    def start(self, extra_env: dict[str, str] | None = None, extra_argv: tuple[str, ...] = ()) -> subprocess.Popen:
        env = {**os.environ, **(extra_env or {})}
        tmp = ""
        if self.base_tmp:
            tmp = os.path.join(self.base_tmp, str(self.count))
            os.makedirs(tmp, exist_ok=True)
            env[JVM_TMPDIR_ENV] = tmp
        self.count += 1
        spare = SPARE_ARG in extra_argv
        if not spare:  # a driver's start: the next spare waits until it is behind
            self.spare_due = time.monotonic() + self.spare_delay_s
        # A group of its own: a kill of the driver's group (a crash) leaves this wrapper to restart it.
        proc = subprocess.Popen(
            [*self.argv, *extra_argv],
            stdin=subprocess.DEVNULL,
            pass_fds=(self.lock_fd,),
            env=env,
            process_group=0,
            preexec_fn=_lower_priority if spare and os.geteuid() == 0 else None,
        )
        self.tmp_of[proc.pid] = tmp
        return proc

    def ended(self, proc: subprocess.Popen) -> None:
        """What its JVM's shutdown hooks did not delete (a kill -9 of the JVM)."""
        tmp = self.tmp_of.pop(proc.pid, "")
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    def tend_spare(self, stopping: bool) -> None:
        """A spare that ended is replaced later; none yet: start one once it is due."""
        if self.spare is not None and self.spare.poll() is not None:
            print(f"[baton] spare driver {self.spare.pid} {describe_exit(self.spare.returncode)}: another later")
            self.ended(self.spare)
            self.spare, self.spare_due = None, time.monotonic() + self.spare_delay_s
        if self.want_spare and self.spare is None and not stopping and time.monotonic() >= self.spare_due:
            self.spare = self.start(extra_argv=(SPARE_ARG, str(self.restarts_file)))
            print(f"[baton] spare driver {self.spare.pid} started: it starts Spark, then waits to replace the driver")

    def take_spare(self) -> subprocess.Popen | None:
        """The live spare, now the driver (the caller names it in the restarts file); the next is due later."""
        spare, self.spare = self.spare, None
        self.spare_due = time.monotonic() + self.spare_delay_s
        if spare is not None and spare.poll() is None:
            return spare
        if spare is not None:
            self.ended(spare)
        return None

    def wait(self, driver: subprocess.Popen, stopping) -> int:
        while True:
            try:
                return driver.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                self.tend_spare(stopping())

    def stop_spare(self) -> None:
        if self.spare is None:
            return
        if self.spare.poll() is None:
            self.spare.send_signal(signal.SIGTERM)  # held: it exits at once
            try:
                self.spare.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.spare.pid, signal.SIGKILL)
                self.spare.wait()
        self.ended(self.spare)
        self.spare = None


def supervise(
    argv: list[str],
    log: Path,
    pid_file: Path,
    exit_file: Path,
    lock_fd: int,
    restarts_file: Path | None = None,
    policy: RestartPolicy = RestartPolicy(),
    spare: bool = False,
    spare_delay_s: float = 30.0,
) -> int:
    os.setsid()
    _redirect(log)
    launch_id = os.environ.get(LAUNCH_ID_ENV)
    stop_signals: list[int] = []
    current: list[subprocess.Popen] = []  # the running driver, if any
    drivers = Drivers(argv, lock_fd, restarts_file, spare and policy.limit > 0, spare_delay_s)

    def forward(signum, _frame):
        stop_signals.append(signum)
        if current and current[0].poll() is None:
            current[0].send_signal(signal.SIGTERM)
        if drivers.spare is not None and drivers.spare.poll() is None:
            drivers.spare.send_signal(signal.SIGTERM)

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
    try:
        driver = drivers.start()
    except OSError as exc:
        print(f"[baton] driver did not start: {exc}")
        _remove_jvm_tmp()
        write_json(exit_file, {"launch_id": launch_id, "code": 127, "error": str(exc), "ended_at": time.time()})
        return 127
    if policy.limit > 0:  # baton_health leaves a driver's end to this wrapper (baton.health.restarting_in_place)
        say("running", at=started, limit=policy.limit, driver_pid=driver.pid)
    while True:
        current[:] = [driver]
        if stop_signals:  # a stop arrived before the driver existed
            driver.send_signal(signal.SIGTERM)
        driver_started = time.monotonic()
        code = drivers.wait(driver, lambda: bool(stop_signals))
        current.clear()
        drivers.ended(driver)
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
        now = time.time()
        restarted.append(now)
        relaunch = {"restart": len(restarted), "code": code, "at": now, "fresh": fresh}
        spare_driver = drivers.take_spare()
        if spare_driver is not None:  # Spark is up in it already: it reads this record and goes on
            say("relaunched", at=now, code=code, fresh=fresh, spare_pid=spare_driver.pid, driver_pid=spare_driver.pid)
            print(f"[baton] spare driver {spare_driver.pid} replaces it ({why}): it {describe_exit(code)}")
            driver = spare_driver
            continue
        print(f"[baton] restarting the driver ({why}): it {describe_exit(code)}")
        try:
            driver = drivers.start({RELAUNCH_ENV: json.dumps(relaunch)})
        except OSError as exc:
            print(f"[baton] driver did not start: {exc}")
            code = 127
            break
        say("relaunched", at=now, code=code, fresh=fresh, driver_pid=driver.pid)
    drivers.stop_spare()
    _remove_jvm_tmp()
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


def _lower_priority() -> None:
    os.nice(SPARE_NICE)


def _remove_jvm_tmp() -> None:
    """The launch's JVM temp dir, with whatever its drivers left (removed only once the launch ends)."""
    path = os.environ.get(JVM_TMPDIR_ENV)
    if path:
        shutil.rmtree(path, ignore_errors=True)


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
    ap.add_argument("--spare", action="store_true", help="keep a spare driver with Spark up beside the driver")
    ap.add_argument("--spare-delay-s", type=float, default=30.0, help="a spare starts this long after a driver")
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
        code = supervise(
            argv, ns.log, ns.pid_file, ns.exit_file, ns.lock_fd, ns.restarts_file, policy, ns.spare, ns.spare_delay_s
        )
    except BaseException:  # never return into the parent's code path from the fork
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
