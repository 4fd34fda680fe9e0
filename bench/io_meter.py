"""Bytes each process tree moved over a window (issue 24's "bytes per event"), two ways:

- `kafka_sent` / `kafka_received`: bytes over its TCP connections to the broker's port, from the kernel's
  per-connection counters (`ss -tin`: tcp_info's bytes_sent / bytes_received), so the broker's fetches
  to two readers, the produces and the transactions' round trips are counted where they happen;
- `read_bytes` / `write_bytes`: Linux's per-process `rchar` / `wchar` (psutil's `read_chars` /
  `write_chars`): bytes through read/write calls on files and pipes (checkpoints, state deltas, logs,
  the JVM's pipes to its Python workers). Socket send/recv calls do not count there: measured, the
  load generator's rchar/wchar moved 5 bytes per event it sent of 55.

A process (or a connection) alive at both ends counts the difference; one born inside the window counts
from zero; one that ended inside it is not counted. A slot's processes and Kafka connections live through
a benchmark's step, so its figures are whole; a tree that forks short-lived workers reads low.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import psutil
from common import log

_PID = re.compile(r"pid=(\d+)")
_BYTES = re.compile(r"\bbytes_(sent|received):(\d+)")


def _tree(root: int) -> dict[int, tuple[int, int]]:
    """pid -> (read_chars, write_chars) for `root` and its descendants still readable."""
    try:
        top = psutil.Process(root)
        procs = [top] + top.children(recursive=True)
    except psutil.Error:
        return {}
    out = {}
    for p in procs:
        try:
            io = p.io_counters()
        except (psutil.Error, AttributeError):
            continue
        out[p.pid] = (io.read_chars, io.write_chars)
    return out


def connections(port: int, ss: str = "ss") -> dict[tuple[str, str], tuple[int, int, int]]:
    """(local, peer) -> (pid, bytes sent, bytes received) of every established TCP connection from or to
    `port` on this host (both ends of a local connection appear, each with its own process)."""
    out = subprocess.run(
        [ss, "-tinpH", "state", "established", f"( sport = :{port} or dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[tuple[str, str], tuple[int, int, int]] = {}
    key: tuple[str, str] | None = None
    pid: int | None = None
    for line in out.splitlines():
        if not line[:1].isspace():  # a connection: [Recv-Q Send-Q] local peer users:(("name",pid=N,fd=M))
            fields = line.split()
            addrs = [f for f in fields if ":" in f and not f.startswith("users:")]
            m = _PID.search(line)
            key, pid = ((addrs[0], addrs[1]) if len(addrs) >= 2 else None), (int(m.group(1)) if m else None)
            continue
        if key is None or pid is None:
            continue
        counts = dict((k, int(v)) for k, v in _BYTES.findall(line))
        found[key] = (pid, counts.get("sent", 0), counts.get("received", 0))
        key = None
    return found


class IoMeter:
    """`track(role, pid)` before `start()`; `stop()` returns {role: {"read_bytes", "write_bytes",
    "kafka_sent", "kafka_received"}} (the Kafka figures when a broker port is given)."""

    def __init__(self, broker_port: int | None = None):
        self.ss = shutil.which("ss")
        if broker_port is not None and self.ss is None:
            log(
                "bytes over Kafka connections not measured: no `ss` on this host (Debian: apt-get install -y "
                "iproute2); files and pipes only"
            )
            broker_port = None
        self.broker_port = broker_port
        self.roots: dict[str, int] = {}
        self._start: dict[str, dict[int, tuple[int, int]]] = {}
        self._conns: dict[tuple[str, str], tuple[int, int, int]] = {}

    def track(self, role: str, pid: int) -> None:
        self.roots[role] = pid

    def start(self) -> None:
        self._start = {role: _tree(pid) for role, pid in self.roots.items()}
        self._conns = connections(self.broker_port, self.ss) if self.broker_port and self.ss else {}

    def stop(self) -> dict[str, dict[str, int]]:
        conns = connections(self.broker_port, self.ss) if self.broker_port and self.ss else {}
        out = {}
        for role, pid in self.roots.items():
            before, now = self._start.get(role, {}), _tree(pid)
            read = sum(r - before.get(p, (0, 0))[0] for p, (r, _) in now.items())
            write = sum(w - before.get(p, (0, 0))[1] for p, (_, w) in now.items())
            out[role] = {"read_bytes": max(0, read), "write_bytes": max(0, write)}
            if self.broker_port:
                mine = {k: v for k, v in conns.items() if v[0] in now}
                sent = sum(s - self._conns.get(k, (0, 0, 0))[1] for k, (_, s, _) in mine.items())
                received = sum(r - self._conns.get(k, (0, 0, 0))[2] for k, (_, _, r) in mine.items())
                out[role].update(kafka_sent=max(0, sent), kafka_received=max(0, received))
        return out


def per_event(io: dict[str, dict[str, int]], events: int) -> dict[str, dict[str, float]]:
    """Each role's bytes per event of the window, for each figure it has."""
    if events <= 0:
        return {}
    return {role: {f"{k}_per_event": round(n / events, 1) for k, n in v.items()} for role, v in io.items()}


def mean_record_bytes(users, kinds, ts: int = 1_764_000_000) -> float:
    """Key and value bytes of the load generator's input records, averaged over what it sent (its
    users and kinds arrays; the timestamp's digits as of today's seconds)."""
    import numpy as np

    from baton.tools.loadgen import encode, user_id

    if len(users) == 0:
        return 0.0
    total = 0
    pairs, counts = np.unique(np.stack([users, kinds]), axis=1, return_counts=True)
    for (u, kind), n in zip(pairs.T.tolist(), counts.tolist()):
        key = user_id(u).encode()
        total += n * (len(key) + len(encode(key, kind, ts)))
    return total / len(users)
