"""Exactly-once output for micro-batches: the output rows, the dead letters and the commit marker
("emitted up to positions P, batch B, epoch E") go to Kafka in ONE transaction (invariant 3).

The active writer's transactional.id is shared by every slot of an app (`baton.<app>.writer`): when
a slot takes the active role it initialises the producer, which makes Kafka fence the previous
holder; a fenced producer cannot commit anything again (invariant 1).

A micro-batch replayed after a crash is recognised by its end positions: if the last committed
marker already covers them, the batch was emitted before the crash and is skipped. (A batch that moves
positions back, the source's resume at the earliest offsets after a data loss, is emitted once the
marker has moved back with it.)

Order of `emit`, and why:
1. begin the transaction;
2. produce output rows and dead letters (held in the client: see linger below);
3. produce the marker to the commits topic;
4. commit: librdkafka flushes 2-3 and ends the transaction. Only now is anything visible.

linger.ms is set far above any batch's duration so that nothing is sent before commit: on Tansu
0.6.0, records of an aborted transaction that reached the broker are visible to read_committed
consumers (see baton/local/broker.py); records never sent cannot leak. A partition's records are
still sent early once they fill batch.size (1 MB, kept: Apache Kafka rejects larger batches), so
on Tansu an aborted transaction with more than 1 MB for one partition can leak; on Kafka nothing does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Producer

from baton.kafka.client_config import kafka_config
from baton.kafka.markers import read_last_marker
from baton.records import CORRECTION_HEADER, CommitMarker, Positions, Slot, covers


class WriterFenced(RuntimeError):
    """Another slot took the active writer role; this slot must stop writing."""


class ReplayConflict(RuntimeError):
    """A batch straddles the last committed position: batch boundaries diverged (never expected)."""


def writer_transactional_id(app: str) -> str:
    return f"baton.{app}.writer"


@dataclass
class Emitted:
    marker: CommitMarker | None
    skipped: bool


class TransactionalEmitter:
    def __init__(
        self,
        bootstrap: str,
        app: str,
        slot: Slot,
        generation: int,
        output_topic: str,
        dead_letter_topic: str,
        commits_topic: str,
        extra: dict | None = None,
    ):
        self.app, self.slot, self.generation = app, slot, generation
        self.output_topic, self.dead_letter_topic, self.commits_topic = output_topic, dead_letter_topic, commits_topic
        self._config = kafka_config(
            bootstrap,
            {
                "transactional.id": writer_transactional_id(app),
                "enable.idempotence": True,
                # Below message.timeout.ms (librdkafka refuses more), far above a batch's duration.
                "linger.ms": 50_000,
                "batch.num.messages": 100_000,
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 2_097_152,
                "transaction.timeout.ms": 60_000,
                "compression.type": "lz4",
                **(extra or {}),
            },
        )
        self._producer: Producer | None = None
        self.epoch: int | None = None
        self.last: CommitMarker | None = None

    def acquire(self, epoch: int, timeout_s: float = 30.0) -> None:
        """Take the writer role for `epoch`: fences any previous holder, then reads the last marker."""
        if self._producer is not None and self.epoch == epoch:
            return
        self.release()
        producer = Producer(self._config)
        producer.init_transactions(timeout_s)
        self._producer, self.epoch = producer, epoch
        # After init_transactions no older writer can commit: the marker read now is final.
        self.last = read_last_marker(self._config["bootstrap.servers"], self.commits_topic, self.app)

    def release(self) -> None:
        if self._producer is not None:
            try:
                self._producer.flush(5)
            except Exception:
                pass
        self._producer, self.epoch = None, None

    @property
    def holding(self) -> bool:
        return self._producer is not None

    def already_emitted(self, end: Positions, start: Positions | None = None) -> bool:
        """The last marker covers the batch's end. A batch that moved a partition back (the source resumed
        at the earliest offsets after a data loss, on_data_loss=earliest) is covered by the marker from
        before it: it was emitted when the marker has moved back too (no longer covers its start)."""
        if self.last is None or not covers(self.last.emitted, end):
            return False
        return not (start is not None and rewound(start, end) and covers(self.last.emitted, start))

    def emit(
        self,
        batch_id: int,
        start: Positions,
        end: Positions,
        output: Iterable[tuple[bytes | None, bytes | None]],
        dead_letters: Sequence[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = (),
        timeout_s: float = 60.0,
    ) -> Emitted:
        """Emit one micro-batch exactly once. `output` is (key, value) pairs; dead letters are
        (key, value, headers)."""
        if self._producer is None or self.epoch is None:
            raise WriterFenced(f"{self.app}/{self.slot.value} does not hold the writer role")
        if self.already_emitted(end, start):
            return Emitted(self.last, skipped=True)
        if self.last is not None and not rewound(start, end) and not covers(start, self.last.emitted):
            raise ReplayConflict(
                f"batch {batch_id} starts at {start} but output was already committed up to {self.last.emitted}"
            )
        return self._commit(batch_id, end, output, dead_letters, timeout_s)

    @property
    def corrected(self) -> bool:
        """The output holds this epoch's corrected output (the last marker says so)."""
        return self.last is not None and self.epoch is not None and self.last.corrected_epoch >= self.epoch

    def emit_correction(self, output: Iterable[tuple[bytes | None, bytes | None]], timeout_s: float = 60.0) -> Emitted:
        """Publish corrected output for this epoch (spark_apps.runtime.sink.correction): one transaction of
        `output` and a marker that moves no position (the last marker's) and says the correction is
        in. Done already if the last marker says so."""
        if self._producer is None or self.epoch is None:
            raise WriterFenced(f"{self.app}/{self.slot.value} does not hold the writer role")
        if self.corrected:
            return Emitted(self.last, skipped=True)
        last = self.last
        return self._commit(
            last.batch_id if last else -1,
            last.emitted if last else {},
            output,
            (),
            timeout_s,
            corrected_epoch=self.epoch,
            headers=[(CORRECTION_HEADER, str(self.epoch).encode())],
        )

    def _commit(
        self,
        batch_id: int,
        end: Positions,
        output,
        dead_letters,
        timeout_s: float,
        corrected_epoch: int = 0,
        headers: list | None = None,
    ) -> Emitted:
        """One transaction: output rows (with `headers`, if any), dead letters, the marker "emitted up
        to `end`" (carrying on the last marker's corrected_epoch)."""
        corrected_epoch = max(corrected_epoch, self.last.corrected_epoch if self.last is not None else 0)
        p, epoch = self._producer, self.epoch
        assert p is not None and epoch is not None  # the callers checked that this writer holds the role
        marker = CommitMarker(
            app=self.app,
            generation=self.generation,
            epoch=epoch,
            slot=self.slot,
            batch_id=batch_id,
            emitted=dict(end),
            ts_ms=int(time.time() * 1000),
            corrected_epoch=corrected_epoch,
        )
        try:
            p.begin_transaction()
            produce, topic = p.produce, self.output_topic
            if headers:
                produce = partial(produce, headers=headers)
            for key, value in output:
                try:
                    produce(topic, value, key)
                except BufferError:
                    p.poll(0.1)
                    produce(topic, value, key)
            for key, value, why in dead_letters:
                p.produce(self.dead_letter_topic, value, key, headers=why)
            p.produce(self.commits_topic, marker.to_bytes(), marker.key())
            p.commit_transaction(timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if (
                err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
                or err.fatal()
            ):
                self._producer, self.epoch = None, None
                raise WriterFenced(f"{self.app}/{self.slot.value}: writer fenced ({err.name()})") from exc
            if err.txn_requires_abort():
                p.abort_transaction(timeout_s)
            raise
        self.last = marker
        return Emitted(marker, skipped=False)


def rewound(start: Positions, end: Positions) -> bool:
    """A batch that moves some partition back: the source's resume batch after a data loss."""
    return any(o < start[p] for p, o in end.items() if p in start)
