"""A query's progress as the slot reports it: its events from the JVM (ProgressBridge), the status
fields and latencies a progress gives, and the reason a failed query reports."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

from baton.records import SlotState
from spark_apps.runtime.source.batch_times import BatchTimes, latencies_ms, read_batch_times

# An idle slot (no new input, or capped) publishes its status at least this often.
IDLE_HEARTBEAT_S = 5.0


def failure_reason(text: str, limit: int = 2000) -> str:
    """The error a failed query reports in its status. Spark buries a Python error under its error class,
    the traceback and the JVM's stack: the source's own message when it says why (input data loss: topic,
    partitions, positions and the way out); else a Python error's own line first, then Spark's words
    before its traceback; else Spark's text as it is."""
    m = re.search(r"InputDataLoss: ([^\n]+)", text)
    if m:
        return m.group(1).strip()[:limit]
    m = re.search(r"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n|\n)*(\S[^\n]*)", text)
    if m:
        head = " ".join(text[: m.start()].split())
        return (f"{m.group(1).strip()} ({head})" if head else m.group(1).strip())[:limit]
    return text[:limit]


def trigger_started_ms(p: dict) -> int | None:
    """When the progress's trigger started (epoch ms), from its ISO timestamp."""
    try:
        return int(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        return None


def with_input_rate(p: dict, previous_batch_ms: int | None) -> dict:
    """The progress with its input rate over the time since the previous batch's start. Spark divides
    by the time since the previous trigger, which need not have run a batch (a trigger that finds no
    new input, or one held by a cap): the rate would be overstated."""
    started = trigger_started_ms(p)
    rows = int(p.get("numInputRows", 0))
    if started is None or previous_batch_ms is None or rows <= 0 or started <= previous_batch_ms:
        return p
    return {**p, "inputRowsPerSecond": rows * 1000.0 / (started - previous_batch_ms)}


def _offsets(raw) -> dict[int, int] | None:
    # A source's offsets in a progress: JSON text (the Python data source) or already an object.
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {int(k): int(v) for k, v in raw.items()} if raw else None


def batch_times_of(p: dict, batch_times: Path) -> BatchTimes | None:
    """What the reader left for the progress's batch (spark_apps.runtime.source.batch_times), found by its end
    offsets; None when unknown (no input, a replayed batch, a reader on executors)."""
    end = _offsets((p.get("sources") or [{}])[0].get("endOffset"))
    if not end or not p.get("numInputRows"):
        return None
    return read_batch_times(batch_times, end)


def with_event_count(p: dict, times: BatchTimes | None, packed: bool) -> dict:
    """The progress counting events, not Spark's rows: numInputRows and its two rates. A source that
    packs events many to a row (packed_rows.py) hands Spark a few dozen rows a batch, while the status's
    input rows and rates feed the health checks' dead-letter share, the metrics and the upgrade's
    planning (ms a row). The reader's count when it left one; else, for packed rows, the records
    between the batch's start and end offsets (dead letters and transaction markers included); else
    Spark's rows, which are then events."""
    rows = int(p.get("numInputRows", 0))
    if rows <= 0:
        return p
    if times is not None and times.records is not None:
        events = times.records
    elif packed:
        source = (p.get("sources") or [{}])[0]
        start, end = _offsets(source.get("startOffset")) or {}, _offsets(source.get("endOffset")) or {}
        events = sum(max(0, o - start.get(part, o)) for part, o in end.items())
    else:
        return p
    if events == rows:
        return p
    scale = events / rows
    return {
        **p,
        "numInputRows": events,
        "inputRowsPerSecond": float(p.get("inputRowsPerSecond") or 0.0) * scale,
        "processedRowsPerSecond": float(p.get("processedRowsPerSecond") or 0.0) * scale,
    }


def batch_latencies(p: dict, times: BatchTimes | None) -> tuple[int | None, int | None]:
    """(oldest, newest) input record's latency at the end of the progress's batch, from the times the
    reader left for it (batch_times_of); None, None when unknown."""
    started = trigger_started_ms(p)
    took = (p.get("durationMs") or {}).get("triggerExecution")
    if not p.get("numInputRows") or started is None or took is None:
        return None, None
    return latencies_ms(times, started + int(took))


def status_from_progress(p: dict, rows_counted: bool = True) -> dict:
    """The status record's fields a batch's progress gives; `rows_counted`: the state store counts its
    rows (StateSettings.count_rows), else state_rows is None (Spark reports 0 for a count it does not keep)."""
    ops = p.get("stateOperators") or [{}]
    sources = p.get("sources") or [{}]
    end, latest = (_offsets(sources[0].get(k)) for k in ("endOffset", "latestOffset"))
    return dict(
        batch_id=int(p.get("batchId", -1)),
        processed=end or {},
        input_end=latest,
        input_rows=int(p.get("numInputRows", 0)),
        input_rate=float(p.get("inputRowsPerSecond") or 0.0),
        processing_rate=float(p.get("processedRowsPerSecond") or 0.0),
        batch_ms=int((p.get("durationMs") or {}).get("triggerExecution", 0)),
        state_rows=int(ops[0].get("numRowsTotal", 0)) if rows_counted else None,
        # RocksDB's files on disk when reported (the seed's disk budget), else the memory figure.
        state_bytes=int(
            (ops[0].get("customMetrics") or {}).get("rocksdbSstFileSize") or ops[0].get("memoryUsedBytes", 0)
        ),
        state_memory_bytes=int(ops[0].get("memoryUsedBytes", 0)),
    )


class ProgressBridge:
    """The query's events, from the JVM through py4j, as JSON for the harness: two py4j calls an event.

    PySpark's own StreamingQueryListener converts each progress field by field (about a hundred py4j
    calls, answered on Spark's listener thread): measured ~90 ms of the JVM's CPU a batch, the
    biggest fixed cost of a batch after the tasks. `harness` is the slot's Harness: its query's last
    event, progress and state are kept there, where its status is published from."""

    def __init__(self, harness):
        self.harness = harness

    def onQueryStarted(self, jevent):
        pass

    def onQueryProgress(self, jevent):
        h = self.harness
        c = h.startup
        h.last_event = time.monotonic()
        progress = json.loads(jevent.progress().json())
        times = batch_times_of(progress, h.paths.batch_times)
        progress = with_event_count(progress, times, h.packs_rows)
        h.latencies = batch_latencies(progress, times)
        h.last_progress = with_input_rate(progress, h.last_batch_ms)
        if int(progress.get("numInputRows", 0)) > 0:
            h.last_batch_ms = trigger_started_ms(progress)
        if c.first_batch_ms is None:
            h.mark("first batch done")
            c.first_batch_ms = int((time.monotonic() - c.started) * 1000)
            h.state = SlotState.RUNNING
            h.log_startup(h.last_progress)
        h.publish(h.last_progress)

    def onQueryIdle(self, jevent):
        # No new input (or the cap holds this slot back): the query is up and polling. Say so,
        # at most every IDLE_HEARTBEAT_S, so an idle slot is RUNNING and visibly alive.
        h = self.harness
        h.last_event = time.monotonic()
        if h.state is SlotState.RESTORING or time.monotonic() - h.last_publish >= IDLE_HEARTBEAT_S:
            h.state = SlotState.RUNNING
            h.publish(h.last_progress)

    def onQueryTerminated(self, jevent):
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def add_progress_listener(spark, harness) -> None:
    """Register the bridge as PySpark registers its listeners (a JVM wrapper around a py4j proxy)."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm = spark.sparkContext._jvm
    spark._jsparkSession.streams().addListener(
        jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(ProgressBridge(harness))
    )
