"""Background processes with pid files: start detached, wait for health, stop by pid.

Every process the local platform starts is recorded as `<state>/<name>.pid` with its log at
`<state>/<name>.log`. Stopping signals the whole process group, waits, then kills what is left,
so nothing outlives `down` (Airflow standalone orphans its children on SIGTERM: it is stopped
with SIGINT, see baton.local.airflow).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from baton.procfs import process_stats, tail


class StartError(RuntimeError):
    """A managed process did not become healthy; the message points at its log."""


@dataclass(frozen=True)
class Managed:
    """One named background process under a state directory."""

    name: str
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded pid if that process is still alive, else None (a stale file is removed)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if pid_alive(pid):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start `argv` in its own session (so it survives us and its group can be signalled)."""
        existing = self.pid()
        if existing is not None:
            return existing
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def wait_healthy(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll `check` until it is true; fail early if the process died, naming its log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise StartError(f"{what} exited during start-up; see {self.log_file}:\n{tail(self.log_file)}")
            if check():
                return
            time.sleep(0.25)
        raise StartError(f"{what} not healthy after {timeout_s:.0f}s; see {self.log_file}:\n{tail(self.log_file)}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0, leader_only: bool = False) -> bool:
        """Signal the process group (or only its leader), wait up to timeout_s, then SIGKILL whatever
        of the group is left. True if it was running."""
        pid = self.pid()
        if pid is None:
            return False
        stop_group(pid, sig, timeout_s, leader_only)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True


def stop_group(pid: int, sig: int, timeout_s: float, leader_only: bool = False) -> None:
    """Signal a session leader (or its whole group); kill every group member alive after timeout_s."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    members = group_members(pgid)
    if leader_only:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    else:
        _signal_group(pgid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        members |= group_members(pgid)
        if not any(pid_alive(p) for p in members | {pid}):
            return
        time.sleep(0.2)
    _signal_group(pgid, signal.SIGKILL)
    for p in members | {pid}:
        _kill(p)
    # SIGKILL is not instant: a caller that checks right after must find them gone (seen in CI).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(p) for p in members | {pid}):
        time.sleep(0.05)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> None:
    """Collect the exit status if pid is our own child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def group_members(pgid: int) -> set[int]:
    """Pids whose process group is pgid (read from /proc, Linux)."""
    return {pid for pid, fields in process_stats() if int(fields[2]) == pgid}


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
