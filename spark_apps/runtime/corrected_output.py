"""Publishing the corrected output (spark_apps.runtime.correction explains what it is and why it is
safe) beside the query's batches, under the sink's batch lock."""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from baton.checkpoints import last_committed_batch, read_offset_log
from baton.handoff import taken_over_at
from baton.records import covers
from spark_apps.runtime.batch_sink import RoleGatedSink
from spark_apps.runtime.correction import correction_due, leave_out
from spark_apps.runtime.kafka_sink import WriterFenced
from spark_apps.runtime.spark import background_jobs
from spark_apps.runtime.state_check import state_output

log = logging.getLogger(__name__)


class CorrectedOutput:
    """Publishes the corrected output of the slot whose sink is `sink`, once it is due and possible."""

    def __init__(self, sink: RoleGatedSink):
        self.sink = sink

    def maybe_publish(self, spark: Any) -> None:
        """Publish the corrected output once this slot's last committed batch K stands at or past the
        fence it took over at: K's state read behind the query's batches, then, under the batch lock,
        published less the keys emitted after K."""
        sink = self.sink
        emitter, emitted_keys, checkpoint = sink.emitter, sink.emitted_keys, sink.paths.checkpoint
        control, _ = sink.follower.snapshot()
        if spark is None or not correction_due(control, sink.slot, emitter):
            return
        started = time.monotonic()
        try:
            with sink.lock:  # no sink runs: K and the last marker stand still
                emitter.acquire(control.epoch)
                if emitter.corrected:  # published before a restart
                    emitted_keys.clear()
                    return
                batch = last_committed_batch(checkpoint)
                at = (read_offset_log(checkpoint, batch) if batch is not None else None) or {}
                if not covers(at, taken_over_at(control, sink.slot) or {}):
                    return  # still on its way to F
                last = emitter.last
                if last is not None and not covers(at, last.emitted) and not emitted_keys.noted(last.batch_id):
                    # Output a previous start of this slot emitted and Spark did not commit (it runs that
                    # batch again, skipping its output): neither in K's state nor noted. After its commit.
                    return
            module = importlib.import_module(sink.app.module)
            with background_jobs(spark):
                rows = state_output(spark, checkpoint, batch, module) if batch is not None else []
            read_s = time.monotonic() - started
            with sink.lock:
                now, _ = sink.follower.snapshot()
                still_due = now is not None and now.epoch == control.epoch and correction_due(now, sink.slot, emitter)
                if sink.stopping or not still_due:
                    return
                published = leave_out(rows, emitted_keys.after(batch))
                locked = time.monotonic()
                emitter.emit_correction(published)
                emitted_keys.clear()
                publish_s = time.monotonic() - locked
        except WriterFenced as exc:  # the role moved on meanwhile: the new writer's to do
            log.error("corrected output not published: %s", exc)
            return
        log.info("published the state at batch %s as corrected output at epoch %s: %d of %d keys (the rest emitted "
                 "since) in %.1fs (state read %.1fs, published under the batch lock in %.1fs)", batch, control.epoch,
                 len(published), len(rows), time.monotonic() - started, read_s, publish_s)
