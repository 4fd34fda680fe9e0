"""A Structured Streaming checkpoint on disk: its committed batches and stateful operators, a copy a
standby or a new generation starts from, a cut back to a batch. Files only (no Spark), so the
Airflow side uses it without the Spark runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from baton.records import Positions, covers


def committed_batches(checkpoint: Path) -> list[int]:
    """Batch ids with a commit file, ascending."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def last_committed_batch(checkpoint: Path) -> int | None:
    batches = committed_batches(checkpoint)
    return batches[-1] if batches else None


def read_offset_log(checkpoint: Path, batch_id: int) -> Positions | None:
    """End positions of `batch_id` from Spark's offset log (written before the batch runs)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except FileNotFoundError:
        return None
    # Line 0 is the log version, line 1 the batch metadata, then one line per source.
    return {int(k): int(v) for k, v in json.loads(lines[2]).items()}


def batch_ending_at(checkpoint: Path, position: Positions, look_back: int = 500) -> tuple[int | None, bool]:
    """(the committed batch that ended at exactly `position`, or None; whether the query is past it).
    Only the newest `look_back` batches are looked at: a check asks for a recent position."""
    want = dict(position)
    batches = committed_batches(checkpoint)
    for batch in reversed(batches[-look_back:]):
        end = read_offset_log(checkpoint, batch)
        if end is None:
            continue
        if end == want:
            return batch, True
        if not covers(end, want):  # older batches end before it
            break
    last = read_offset_log(checkpoint, batches[-1]) if batches else None
    return None, last is not None and covers(last, want)


def state_operators(checkpoint: Path) -> list[int]:
    """The stateful operators' ids (state/<id>/ folders)."""
    state = checkpoint / "state"
    if not state.is_dir():
        return []
    return sorted(int(p.name) for p in state.iterdir() if p.name.isdigit())


def copy_checkpoint(source: Path, target: Path) -> int | None:
    """Copy a checkpoint; the copy's last committed batch (None: none). The source is never written.
    Safe while the source's query runs: Spark writes each log and state file whole (rename), and
    whatever the copy caught beyond its last commit is dropped by `uncommit`."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.tmp"), copy_function=_copy_if_present)
    return last_committed_batch(target)


def _copy_if_present(src: str, dst: str) -> str:
    """A file the running query's maintenance removed between listing and copying (an old batch's log
    or state file, seen in CI) is skipped: the copy's last commit and what it needs are newer."""
    try:
        return shutil.copy2(src, dst)
    except FileNotFoundError:
        return dst


def truncate_after(checkpoint: Path, batch_id: int) -> None:
    """Make `batch_id` the checkpoint's last batch: drop every later commit and offset log entry (a
    batch the source had planned but not committed when it was copied; re-planned on start)."""
    _drop_log_entries(checkpoint, lambda log, batch: batch > batch_id)


def _drop_log_entries(checkpoint: Path, drop) -> None:
    for log in ("commits", "offsets"):
        for entry in (checkpoint / log).iterdir():
            name = entry.name.lstrip(".").removesuffix(".crc")
            if name.isdigit() and drop(log, int(name)):
                entry.unlink()
