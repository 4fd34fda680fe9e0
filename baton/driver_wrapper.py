"""Detaches a slot's driver from whoever launched it and records how the driver ended.

    python -m baton.driver_wrapper --log F --pid-file F --exit-file F --lock-fd N -- <driver argv...>

The launcher (an Airflow task process) starts this; it forks once and exits, so the forked copy is
re-parented to init: no walk of the task's process tree and no signal to the task's process group
reaches it. The copy leads a session of its own (every process of the slot, the Python driver, its
JVM and Python workers, has its pid as session id), writes its pid to the pid file, runs the driver
as its child with output to the log, forwards SIGTERM/SIGINT to the driver only (the harness then
stops at a batch boundary; signalling the JVM as well would tear the SparkContext down under the
running batch) and writes the driver's exit code to the exit file.

The launcher gives each launch a temporary directory of its own for the driver's JVM (JVM_TMPDIR_ENV,
baton.launch_tmp): the wrapper removes it once the driver has ended, however it ended.

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


def supervise(argv: list[str], log: Path, pid_file: Path, exit_file: Path, lock_fd: int) -> int:
    os.setsid()
    _redirect(log)
    launch_id = os.environ.get(LAUNCH_ID_ENV)
    stop_signals: list[int] = []
    driver: subprocess.Popen | None = None

    def forward(signum, _frame):
        stop_signals.append(signum)
        if driver is not None and driver.poll() is None:
            driver.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    write_json(pid_file, {"launch_id": launch_id, "pid": os.getpid()})
    started = time.time()
    print(f"[baton] wrapper {os.getpid()} starting: {' '.join(argv)}")
    try:
        driver = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(lock_fd,))
    except OSError as exc:
        print(f"[baton] driver did not start: {exc}")
        write_json(exit_file, {"launch_id": launch_id, "code": 127, "error": str(exc), "ended_at": time.time()})
        return 127
    if stop_signals:  # a stop arrived before the driver existed
        driver.send_signal(signal.SIGTERM)
    code = driver.wait()
    print(f"[baton] driver {driver.pid} exited with code {code}")
    if os.environ.get(JVM_TMPDIR_ENV):  # what its JVM's shutdown hooks did not delete (a kill -9 of the JVM)
        shutil.rmtree(os.environ[JVM_TMPDIR_ENV], ignore_errors=True)
    write_json(
        exit_file,
        {
            "launch_id": launch_id,
            "code": code,
            "driver_pid": driver.pid,
            "stop_signal": stop_signals[0] if stop_signals else None,
            "started_at": started,
            "ended_at": time.time(),
        },
    )
    return 0 if code == 0 else 1


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="baton.driver_wrapper")
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--pid-file", type=Path, required=True)
    ap.add_argument("--exit-file", type=Path, required=True)
    ap.add_argument("--lock-fd", type=int, required=True)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    ns = ap.parse_args(args)
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    if not argv:
        ap.error("no driver command given after --")
    if os.fork():
        return 0  # the launcher reaps this; the forked copy is now an orphan of init
    try:
        code = supervise(argv, ns.log, ns.pid_file, ns.exit_file, ns.lock_fd)
    except BaseException:  # never return into the parent's code path from the fork
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
