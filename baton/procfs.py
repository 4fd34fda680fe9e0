"""Process and file helpers read from the host (Linux /proc, log files).

Production code (the launcher, the health check, a slot's priority) and the local platform
(baton.local) share these; they live here so that nothing shipped imports the local dev platform.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def process_stats(proc: Path = Path("/proc")) -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and the fields of /proc/<pid>/stat after its name (state, ppid, pgrp, ...:
    the name may hold spaces and parentheses, so they start after its last ")"); a process gone
    meanwhile is left out (Linux)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue


def tree_threads(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every thread id of `root`'s process and of its descendants (a process gone meanwhile is left out;
    Linux keeps a nice value per thread, so a priority is set thread by thread)."""
    children: dict[int, list[int]] = {}
    for pid, fields in process_stats(proc):
        children.setdefault(int(fields[1]), []).append(pid)
    tids: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tids.extend(int(t.name) for t in (proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        todo.extend(children.get(pid, ()))
    return tids


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a text file, or "(no log)" if it does not exist."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
