"""When a paced standby's cap moves next: the follower's word to the source's reader, beside the cap file.

A standby's cap moves at most every standby_pace_ms (follower.py, "Pace"; 2 s by default), so records
fetched between two moves wait in its buffer until the next one anyway. The reader runs in another process
(Spark's Python worker) and knows only the cap file; this file tells it, in wall-clock seconds, the earliest
time the cap moves again, and the reader fetches in a window before that instead of all the time
(kafka_driver_reader, FOLLOW_WINDOW_LEAD_S): on the embedded broker every fetch that finds records costs a
pass over the partition (docs/operations.md, "The embedded broker").

The follower writes it while it paces the cap (a standby, no fence) and removes it before it writes a cap
it does not pace (a fence: the cutover waits for the standby to stand at F; a role change), so a reader
that finds no file fetches as before. A file that cannot be read counts as none.
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIX = ".pace"


def hint_path(cap_file: str | Path) -> Path:
    return Path(f"{cap_file}{SUFFIX}")


def write_pace_hint(cap_file: Path, not_before: float | None) -> None:
    """Atomically write when the cap moves next (time.time() seconds), or remove the hint (None)."""
    path = hint_path(cap_file)
    if not_before is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(f"{not_before:.3f}")
    os.replace(tmp, path)


def read_pace_hint(cap_file: str | None) -> float | None:
    """The time (time.time() seconds) before which the cap does not move; None: no hint, fetch as records come."""
    if not cap_file:
        return None
    try:
        return float(hint_path(cap_file).read_text())
    except (FileNotFoundError, ValueError):
        return None
