"""When each batch's records were written, and how many it handed Spark: the driver-side reader leaves
it for the harness.

The reader (Spark's driver-side source process, kafka_driver_reader.py) knows, when it plans a batch,
the timestamps of the batch's oldest and newest records (prefetch.py's stamps). The harness (the
driver's Python process) knows when the batch ended. They are different processes, so the reader writes
the last few batches' times to a small file in the slot's directory (write + rename, once per batch with
input) and the harness looks up the batch it reports by its end offsets: the slot's end-to-end latency,
record timestamp (the producer's send time, or the broker's append time) to the batch's output
committed, for the oldest and the newest record of the batch. Across hosts it includes the clocks' skew.
The count is the batch's events: Spark's numInputRows counts rows, and a source that packs events many
to a row (packed_rows.py) hands it a few dozen rows for tens of thousands of events.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# Batches kept in the file: the harness reads a batch's entry right after it ends, a few are margin.
KEEP = 8


@dataclass(frozen=True)
class BatchTimes:
    end: dict[int, int]  # the batch's end offsets per partition
    oldest_ms: int | None  # timestamp of its oldest record (within a fetch's span; None: no timestamps)
    newest_ms: int | None  # timestamp of its newest record
    records: int | None = None  # the events it handed Spark (None: not known, an older reader's file)


class BatchTimesFile:
    """The reader's side: remembers the last KEEP batches and rewrites the file atomically."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._entries: list[dict] = []

    def add(self, times: BatchTimes) -> None:
        self._entries.append(
            {
                "end": {str(p): o for p, o in times.end.items()},
                "oldest_ms": times.oldest_ms,
                "newest_ms": times.newest_ms,
                "records": times.records,
            }
        )
        del self._entries[:-KEEP]
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self._entries, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            pass  # the slot's directory went away (a stop): latency is a figure, never worth a failed batch


def read_batch_times(path: str | Path, end: dict[int, int]) -> BatchTimes | None:
    """The times of the batch that ended at `end` (None: unknown, e.g. a batch with no records)."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    want = {str(p): o for p, o in end.items()}
    for e in reversed(entries if isinstance(entries, list) else []):
        if isinstance(e, dict) and e.get("end") == want:
            try:
                return BatchTimes(
                    end,
                    _int_or_none(e.get("oldest_ms")),
                    _int_or_none(e.get("newest_ms")),
                    _int_or_none(e.get("records")),
                )
            except (KeyError, TypeError, ValueError):
                return None
    return None


def _int_or_none(v) -> int | None:
    return None if v is None else int(v)


def latencies_ms(times: BatchTimes | None, batch_end_ms: int | None) -> tuple[int | None, int | None]:
    """(oldest record's latency, newest record's) at the batch's end; None when either is unknown."""
    if times is None or batch_end_ms is None or times.oldest_ms is None or times.newest_ms is None:
        return None, None
    return max(0, batch_end_ms - times.oldest_ms), max(0, batch_end_ms - times.newest_ms)
