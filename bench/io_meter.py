"""Bytes a process tree moved through read/write system calls over a window (issue 24's "bytes per
event"): sockets (the broker's fetches and produces) and files (checkpoints, state deltas, logs) alike,
from Linux's per-process `rchar` / `wchar` (psutil's `read_chars` / `write_chars`).

A process alive at both ends counts the difference; one born inside the window counts from zero; one
that died inside it is not counted (its parent's counters do not take it over, unlike CPU times).
A slot's processes (driver, JVM, the few Python workers of a driver-side reader) live through a
benchmark's step, so its figure is whole; a tree that forks short-lived workers reads low.
"""

from __future__ import annotations

import psutil


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


class IoMeter:
    """`track(role, pid)` before `start()`; `stop()` returns {role: {"read_bytes", "write_bytes"}}."""

    def __init__(self):
        self.roots: dict[str, int] = {}
        self._start: dict[str, dict[int, tuple[int, int]]] = {}

    def track(self, role: str, pid: int) -> None:
        self.roots[role] = pid

    def start(self) -> None:
        self._start = {role: _tree(pid) for role, pid in self.roots.items()}

    def stop(self) -> dict[str, dict[str, int]]:
        out = {}
        for role, pid in self.roots.items():
            before, now = self._start.get(role, {}), _tree(pid)
            read = sum(r - before.get(p, (0, 0))[0] for p, (r, _) in now.items())
            write = sum(w - before.get(p, (0, 0))[1] for p, (_, w) in now.items())
            out[role] = {"read_bytes": max(0, read), "write_bytes": max(0, write)}
        return out


def per_event(io: dict[str, dict[str, int]], events: int) -> dict[str, dict[str, float]]:
    """Each role's bytes read and written per event of the window."""
    if events <= 0:
        return {}
    return {role: {"read_per_event": round(v["read_bytes"] / events, 1),
                   "write_per_event": round(v["write_bytes"] / events, 1)} for role, v in io.items()}


def mean_record_bytes(users, kinds, ts: int = 1_764_000_000) -> float:
    """Key and value bytes of the load generator's input records, averaged over what it sent (its
    users and kinds arrays; the timestamp's digits as of today's seconds)."""
    from baton.tools.loadgen import encode, user_id

    if len(users) == 0:
        return 0.0
    import numpy as np

    keys = {}
    total = 0
    pairs, counts = np.unique(np.stack([users, kinds]), axis=1, return_counts=True)
    for (u, kind), n in zip(pairs.T.tolist(), counts.tolist()):
        key = keys.setdefault(u, user_id(u).encode())
        total += n * (len(key) + len(encode(key, kind, ts)))
    return total / len(users)
