"""Publishing the corrected output (spark_apps.runtime.sink.correction explains what it is and why it is
safe) beside the query's batches, under the sink's batch lock: from the slot's state image when it has
one (runtime.state.state_image: no state read at the cutover), else from a read of its state."""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from baton.checkpoints import last_committed_batch, read_offset_log
from baton.handoff import taken_over_at
from baton.records import covers
from spark_apps.runtime.sink.batch_sink import RoleGatedSink, is_active
from spark_apps.runtime.sink.correction import correction_due, leave_out
from spark_apps.runtime.sink.kafka_sink import WriterFenced
from spark_apps.runtime.spark import background_jobs
from spark_apps.runtime.state.state_check import state_output

log = logging.getLogger(__name__)

# A state image is published once at most this many of its keys are left (the new active's batches emit
# the others meanwhile, their records downstream already), or IMAGE_WAIT_S after it first could be: every
# record goes out under the batch lock, while the output waits (24k records took 0.5 s on a busy host;
# all 100k keys of the seed's app at the cutover would stop the output for ~2 s).
IMAGE_PUBLISH_KEYS = 20_000
IMAGE_WAIT_S = 15.0


class CorrectedOutput:
    """Publishes the corrected output of the slot whose sink is `sink`, once it is due and possible."""

    def __init__(self, sink: RoleGatedSink, clock=time.monotonic):
        self.sink, self.clock = sink, clock
        self.image_due_since: float | None = None  # when the state image first stood at or past the fence

    def maybe_publish(self, spark: Any) -> None:
        """Publish the corrected output once this slot's last committed batch K stands at or past the
        fence it took over at: K's state read behind the query's batches, then, under the batch lock,
        published less the keys emitted after K."""
        sink = self.sink
        emitter, emitted_keys, checkpoint = sink.emitter, sink.emitted_keys, sink.paths.checkpoint
        control, _ = sink.follower.snapshot()
        self.tend_image(control)
        if spark is None or not correction_due(control, sink.slot, emitter):
            return
        assert control is not None  # correction_due
        started = time.monotonic()
        try:
            with sink.lock:  # no sink runs: K and the last marker stand still
                emitter.acquire(control.epoch)
                if emitter.corrected:  # published before a restart
                    emitted_keys.clear()
                    sink.image.drop()
                    return
                if sink.image.ready:
                    self.publish_image(control)
                    return
                batch = last_committed_batch(checkpoint)
                if not self.state_may_go_out(control, batch):
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
        log.info(
            "published the state at batch %s as corrected output at epoch %s: %d of %d keys (the rest emitted "
            "since) in %.1fs (state read %.1fs, published under the batch lock in %.1fs)",
            batch,
            control.epoch,
            len(published),
            len(rows),
            time.monotonic() - started,
            read_s,
            publish_s,
        )

    def state_may_go_out(self, control, batch: int | None) -> bool:
        """Under the batch lock: whether the state after `batch` may be published as the correction."""
        sink = self.sink
        at = (read_offset_log(sink.paths.checkpoint, batch) if batch is not None else None) or {}
        if not covers(at, taken_over_at(control, sink.slot) or {}):
            return False  # still on its way to F
        last = sink.emitter.last
        # Output a previous start of this slot emitted and Spark did not commit (it runs that batch
        # again, skipping its output): neither in that state nor noted. After its commit.
        return last is None or covers(at, last.emitted) or sink.emitted_keys.noted(last.batch_id)

    def publish_image(self, control) -> None:
        """Under the batch lock: publish the state image (the state at the image's last batch, which
        stands at or past the fence) less the keys emitted since the cutover, whose records it holds too;
        once few enough are left (IMAGE_PUBLISH_KEYS) or it has waited IMAGE_WAIT_S."""
        sink = self.sink
        image, emitter, emitted_keys = sink.image, sink.emitter, sink.emitted_keys
        if not self.state_may_go_out(control, image.through):
            return
        newer = emitted_keys.after(None)
        if self.image_due_since is None:
            self.image_due_since = self.clock()
        waited = self.clock() - self.image_due_since
        if image.left_after(newer) > IMAGE_PUBLISH_KEYS and waited < IMAGE_WAIT_S:
            return  # the new active's batches emit more of its keys meanwhile: fewer to publish
        published = image.records_less(newer)
        through, keys = image.through, image.keys
        locked = time.monotonic()
        emitter.emit_correction(published)
        emitted_keys.clear()
        image.drop()
        self.image_due_since = None
        log.info(
            "published the state image through batch %s as corrected output at epoch %s: %d of %d keys (the rest "
            "emitted since) %.1fs after it stood at the fence, in %.1fs under the batch lock, no state read",
            through,
            control.epoch,
            len(published),
            keys,
            waited,
            time.monotonic() - locked,
        )

    def tend_image(self, control) -> None:
        """Drop a state image no correction will use: one kept past its time (a staged reprocess not
        handed over), or this slot active with no correction to publish (a plain cutover or failover)."""
        sink = self.sink
        if not sink.image.collecting:
            return
        if sink.image.expired():
            why = f"no correction within {sink.image.keep_s:.0f} s"
        elif is_active(control, sink.slot) and not correction_due(control, sink.slot, sink.emitter):
            why = "the slot is the active and owes no correction"
        else:
            return
        with sink.lock:
            sink.image.drop(why)
        self.image_due_since = None
