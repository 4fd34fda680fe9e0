"""Dead letters from the source's read tasks to the driver's sink, beside the checkpoint.

When the source decodes events itself (spark_apps.runtime.source.decode), the events that do not decode are
not rows of the streaming query: each read task writes those of its range, with their reasons, to one
spool file per Kafka partition and offset range, `<partition>-<start>-<end>.arrow`, even when there are
none. The driver's foreachBatch reads the files of the batch's ranges once the batch's job is done
(every read task has finished by then) and emits them in the batch's transaction, like the output.

Why this holds under faults:
- a file is a function of its offset range (the input is immutable and read read_committed), so a
  retried or replayed task writes the same file again; files are replaced atomically (write + rename);
- the driver requires a file for every partition the batch read: a missing one fails the batch
  loudly (a spool the executors cannot share with the driver) instead of dropping dead letters;
- files are removed once a later batch has begun past them, never before their batch was emitted.
The spool lives under the slot's folder, beside the checkpoint, which executors write too: a
deployment where they can reach the checkpoint can reach the spool.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_FILE = re.compile(r"^(\d+)-(\d+)-(\d+)\.arrow$")
INITIAL = "initial-offsets.json"


class SpoolIncomplete(RuntimeError):
    """A partition the batch read has no spool file: its dead letters cannot be emitted."""


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    reason: str
    partition: int
    offset: int


def _schema():
    import pyarrow as pa

    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("reason", pa.string()), ("offset", pa.int64())])


def write_spool(
    directory: str,
    partition: int,
    start: int,
    end: int,
    keys: Sequence,
    values: Sequence,
    reasons: Sequence[str],
    offsets: Sequence[int],
) -> Path:
    """Executor side: the dead letters of `partition` in [start, end), atomically (also when none)."""
    import pyarrow as pa

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{partition}-{start}-{end}.arrow"
    tmp = d / f".{path.name}.{os.getpid()}.tmp"
    table = pa.table(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(reasons, pa.string()),
            pa.array(offsets, pa.int64()),
        ],
        schema=_schema(),
    )
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)
    return path


def write_initial(directory: str, offsets: Mapping[int, int]) -> None:
    """Where a new query starts (batch 0 has no earlier offset log entry to say so)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{INITIAL}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({str(p): o for p, o in offsets.items()}))
    os.replace(tmp, d / INITIAL)


def read_initial(directory: Path) -> dict[int, int] | None:
    try:
        return {int(p): int(o) for p, o in json.loads((directory / INITIAL).read_text()).items()}
    except FileNotFoundError:
        return None


def _files(directory: Path) -> list[tuple[int, int, int, Path]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _FILE.match(name)
        if m:
            out.append((int(m[1]), int(m[2]), int(m[3]), directory / name))
    return out


def collect(directory: Path, start: Mapping[int, int], end: Mapping[int, int]) -> list[DeadLetter]:
    """Driver side: the dead letters of a batch that read [start[p], end[p]) of each partition, in
    partition and offset order. Raises SpoolIncomplete when a range that was read has no file. A
    partition missing from `start` (new since the last batch) is matched by its end alone."""
    import pyarrow as pa

    files = _files(directory)
    out: list[DeadLetter] = []
    for p in sorted(end):
        e = end[p]
        if p in start:
            if e <= start[p]:
                continue
            paths = [path for fp, fs, fe, path in files if (fp, fs, fe) == (p, start[p], e)]
            if not paths:
                raise SpoolIncomplete(
                    f"no dead-letter spool file for partition {p} offsets [{start[p]}, {e}) in {directory}: the "
                    f"read task did not write one where the driver can see it (the slot folder must be shared "
                    f"with the executors)"
                )
        else:
            paths = [path for fp, _fs, fe, path in files if (fp, fe) == (p, e)][:1]
        for path in paths:
            with pa.memory_map(str(path)) as src:
                t = pa.ipc.open_file(src).read_all()
            for k, v, r, o in zip(*(t.column(c).to_pylist() for c in ("key", "value", "reason", "offset"))):
                out.append(DeadLetter(k, v, r, p, o))
    return out


def purge(directory: Path, below: Mapping[int, int]) -> int:
    """Remove the files of ranges that end at or before `below[p]` (batches already handled)."""
    n = 0
    for p, _s, e, path in _files(directory):
        if p in below and e <= below[p]:
            path.unlink(missing_ok=True)
            n += 1
    return n
