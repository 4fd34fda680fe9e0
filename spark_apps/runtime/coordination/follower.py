"""Follows the control topic (desired state of this app) and the app's commits topic (what the
active writer has emitted), without restarting the query, and keeps the source's cap file true.

The cap decides how far this slot's source may read in its next batch:
- the active role: the fence F if one is set (it stops emitting at exactly F), else no cap;
- the standby role: the active's last committed position (follow mode: never ahead, invariant 2),
  and never beyond F; once the active has emitted up to F the standby reaches F too.
The cap file is replaced atomically, so the source never reads half a file.

Reaching F first: a slot handed the active role before it stood at the handoff's fence F (the
cutover does not wait for it, baton.handoff) reads up to exactly F before anything else: a batch ends
there, its output (emitted by the previous active already) is skipped by the sink, and the first
batch it emits starts at F.

First batch as the active: a slot that takes the active role (a cutover, a failover, a restart of
the active) reads at most what the previous active's last batch held, per partition, in its first
batch as the active. Everything that arrived since the fence waits for it, and one batch of that
size is done in about a trigger interval (measured: a first batch of 63k rows took 1.6 s, one
batch's 20k about 0.7 s), so output resumes sooner; the rest follows in the next batch.

Pace: a standby's cap moves up at most every `standby_pace_s` (the app's standby_pace_ms), so it runs
fewer, larger batches than the active: a batch has a fixed cost (planning, one task per state
partition, checkpoint files) and the standby shares the machine with the active. A control record
that changes anything (a fence, a role) is written through at once, and while a fence is set the
standby follows unpaced, so a handoff never waits on the pace. A cap written starts the slot's next
batch on the query's next tick (100 ms), not at the next multiple of the trigger interval
(source_plan.BatchPacer; new input alone still waits for the interval). While it paces the cap, the
follower tells the reader when it moves next (pace_hint.py), so the reader fetches shortly before that
instead of all the time.

Fetch wait: an idle fetch costs the embedded broker CPU (Tansu holds it, then answers a record that
arrived meanwhile a quarter of the wait later at the median; Apache Kafka answers at once), and a
slot reads these two topics for its whole life. The follower fetches with IDLE_FETCH_WAIT_MS while
nothing waits on what it reads (a marker is taken at the standby's pace anyway), and with
HANDOFF_FETCH_WAIT_MS while a handoff is under way (a fence or a check position set): the cutover's
record is on the output gap's path. Both slots of an app running with no input: the broker 0.066 ->
0.045 cores with the idle wait at 250 ms instead of 50.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from baton.caps import compute_cap
from baton.handoff import taken_over_at
from baton.kafka.client_config import kafka_config
from baton.kafka.control_log import apply_records, decode_for_app
from baton.kafka.messages import offset_of, topic_of
from baton.records import CommitMarker, ControlRecord, Positions, RecordError, Role, Slot, covers
from baton.settings import CONTROL_TOPIC
from spark_apps.runtime.coordination.applied_cap import CAP_WRITE_KEY
from spark_apps.runtime.source.pace_hint import write_pace_hint

# fetch.wait.max.ms of the follower's consumer (module docstring).
IDLE_FETCH_WAIT_MS = 250
HANDOFF_FETCH_WAIT_MS = 50


def fetch_wait_for(control: ControlRecord | None) -> int:
    """The follower's fetch wait while `control` is the app's desired state: short while a handoff waits
    on what the follower reads next."""
    handoff = control is not None and (control.fence is not None or control.check_at is not None)
    return HANDOFF_FETCH_WAIT_MS if handoff else IDLE_FETCH_WAIT_MS


def write_cap_file(path: Path, cap: Positions | None, write: str = "") -> str | None:
    """Atomically write the cap (or remove the file: no cap); returns the text written. `write` numbers
    the write, so the source's word that it planned under it names this very write (applied_cap.py)."""
    if cap is None:
        path.unlink(missing_ok=True)
        return None
    body: dict[str, int | str] = {str(p): o for p, o in sorted(cap.items())}
    if write:
        body[CAP_WRITE_KEY] = write
    text = json.dumps(body)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return text


class Follower:
    def __init__(
        self,
        bootstrap: str,
        app: str,
        slot: Slot,
        commits_topic: str,
        partitions: int,
        cap_file: Path,
        control_topic: str = CONTROL_TOPIC,
        standby_pace_s: float = 0.0,
        clock=time.monotonic,
    ):
        self.app, self.slot, self.partitions, self.cap_file = app, slot, partitions, cap_file
        self.standby_pace_s, self._clock = standby_pace_s, clock
        self._written_at: float | None = None  # when the cap file was last written (None: never)
        # The cap file's text as last written and the desired state it was computed from (held_fence);
        # _write_lock keeps the two with the file's content when two threads write at once. A write is
        # numbered anew only when what it says changes (the cap, or what held_fence reads of the state):
        # the active rewrites its cap at each of its markers, and a new number each time would make the
        # source's pacer (BatchPacer: a changed cap file starts a batch) plan a batch at every tick.
        self._written: tuple[str | None, ControlRecord | None] = (None, None)
        self._writes = 0
        self._written_says: tuple[Positions | None, tuple[str, Positions] | None] | None = None
        self._write_lock = threading.Lock()
        self._pending = False  # a newer cap is held back by the pace
        self.control: ControlRecord | None = None
        self.marker: CommitMarker | None = None
        self.processed: Positions | None = None  # where this slot's last batch ended (note_processed)
        self.last_batch: Positions | None = None  # per partition, what the active's last batch held
        self._emitted_epoch: int | None = None  # the epoch this slot last emitted a batch at
        self._topics = (control_topic, commits_topic)
        self._bootstrap = bootstrap
        self._next = {t: 0 for t in self._topics}  # the next offset to read of each (one partition each)
        self.fetch_wait_ms = IDLE_FETCH_WAIT_MS
        self._consumer = self._new_consumer(self.fetch_wait_ms)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def seen_control(self, rec: ControlRecord) -> ControlRecord:
        """A control record of this app as this slot takes it, `self.control` being what it holds now:
        as written. A seam for tests, which replace it to make a slot take a record late (a host too busy
        to deliver it in time: tests/support/late_position.py)."""
        return rec

    def _new_consumer(self, fetch_wait_ms: int) -> Consumer:
        return Consumer(
            kafka_config(
                self._bootstrap,
                {
                    "group.id": f"baton-follower-{self.app}-{self.slot.value}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": fetch_wait_ms,
                },
            )
        )

    def _fit_fetch_wait(self) -> None:
        """Reopen the consumer where it stands if the desired state asks for another fetch wait."""
        with self._lock:
            wait = fetch_wait_for(self.control)
        if wait == self.fetch_wait_ms:
            return
        old, self._consumer = self._consumer, self._new_consumer(wait)
        old.close()
        self._consumer.assign([TopicPartition(t, 0, self._next[t]) for t in self._topics])
        self.fetch_wait_ms = wait

    def catch_up(self, timeout_s: float = 30.0) -> None:
        """Read both topics to their current end and write the cap, before the query starts."""
        self._consumer.assign([TopicPartition(t, 0, 0) for t in self._topics])
        at_end: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while at_end != set(self._topics):
            if time.monotonic() > deadline:
                raise TimeoutError(f"control/commits topics not read to their end within {timeout_s}s")
            for m in self._consumer.consume(10_000, 0.05):
                if err := m.error():
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(topic_of(m))
                    continue
                self._next[topic_of(m)] = offset_of(m) + 1
                self._apply(m)
        self._publish_cap()
        self._fit_fetch_wait()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"baton-follower-{self.slot.value}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            controlled = marked = False
            for m in self._consumer.consume(1000, 0.2):
                if m.error():
                    continue
                self._next[topic_of(m)] = offset_of(m) + 1
                if self._apply(m):
                    if m.topic() == self._topics[0]:
                        controlled = True
                    else:
                        marked = True
            if controlled or marked or self._pending:
                self._publish_cap(paced=not controlled)
            self._fit_fetch_wait()  # a record read, or one this slot wrote (apply_control)

    def _apply(self, m) -> bool:
        topic = m.topic()
        with self._lock:
            if topic == self._topics[0]:
                rec = decode_for_app(self.app, m.key(), m.value())
                if rec is None:
                    return False
                rec = self.seen_control(rec)
                before = self.control
                self.control = apply_records(self.control, [rec])
                changed = self.control is not before
            else:
                if m.key() != self.app.encode():
                    return False
                try:
                    marker = CommitMarker.from_bytes(m.value())
                except RecordError:
                    return False
                if self.marker is not None:
                    grown = {p: o - self.marker.emitted.get(p, 0) for p, o in marker.emitted.items()}
                    if any(n > 0 for n in grown.values()):
                        self.last_batch = {p: max(0, n) for p, n in grown.items()}
                self.marker = marker
                changed = True
            return changed

    def _publish_cap(self, paced: bool = False) -> None:
        """Write the cap; `paced`: only a new marker moved it, which a standby takes at its pace."""
        now = self._clock()
        with self._lock:
            control = self.control
            cap = compute_cap(
                control, self.slot, self.marker, self.partitions, self.processed, self._first_batch_as_active()
            )
            standby = self.control is None or self.control.role_of(self.slot) is Role.STANDBY
            # Under a fence the standby is on the handoff's critical path (the cutover waits for it to
            # stand at F): every move of the active's position is taken at once.
            fenced = self.control is not None and self.control.fence is not None
            pacing = standby and not fenced and self.standby_pace_s > 0
            hold = paced and pacing and self._written_at is not None and now - self._written_at < self.standby_pace_s
            self._pending = hold
        if hold:
            return
        # The reader learns when the cap moves next (pace_hint.py). A cap that is not paced (a fence, the
        # active role) goes out after its hint is gone: the reader never waits for a move that comes early.
        if not pacing:
            write_pace_hint(self.cap_file, None)
        with self._write_lock:
            says = (cap, self._hold_of(control))
            if says != self._written_says:
                self._writes, self._written_says = self._writes + 1, says
            text = write_cap_file(self.cap_file, cap, write=f"{os.getpid()}.{self._writes}")
            self._written = (text, control)
        self._written_at = now
        if pacing:
            write_pace_hint(self.cap_file, time.time() + self.standby_pace_s)

    def _first_batch_as_active(self) -> Positions | None:
        """The previous active's last batch, when this slot holds the active role and has not emitted
        at its epoch yet (caller holds the lock)."""
        if self.control is None or self.control.role_of(self.slot) is not Role.ACTIVE:
            return None
        return self.last_batch if self._emitted_epoch != self.control.epoch else None

    def note_processed(self, position: Positions, emitted_epoch: int | None = None) -> None:
        """This slot's batch ended at `position` (and was emitted at `emitted_epoch`, if it holds the
        active role and wrote output). The batch that passes a check position, the one that reaches
        the fence this slot took over at, and the first batch as the active lift their caps: the cap
        is rewritten then only, not after every batch."""
        with self._lock:
            before, self.processed = self.processed or {}, dict(position)
            was_first = self._first_batch_as_active() is not None
            if emitted_epoch is not None:
                self._emitted_epoch = emitted_epoch
            check = self.control.check_at if self.control is not None else None
            lift = check is not None and covers(position, check) and not covers(before, check)
            lift = lift or (was_first and self._first_batch_as_active() is None)
            reach = taken_over_at(self.control, self.slot)
            lift = lift or (reach is not None and covers(position, reach) and not covers(before, reach))
        if lift:
            self._publish_cap()

    def apply_control(self, record: ControlRecord) -> None:
        """A control record this slot wrote itself (a takeover, runtime.coordination.lease): applied and its cap
        written now, not once the consumer reads it back (the read-back repeats its revision: ignored)."""
        with self._lock:
            self.control = apply_records(self.control, [record])
        self._publish_cap()

    def held_fence(self, applied: str | None) -> tuple[str, Positions] | None:
        """(the handoff's id, its fence) when this slot holds the active role at a fence and its source
        planned last under the cap written for it, `applied` being the source's word
        (applied_cap.read_applied): from then on it emits nothing past the fence at this epoch (every
        cap computed while that fence stands is within it, baton.caps). None otherwise."""
        with self._write_lock:
            text, control = self._written
        if applied is None or applied != text:
            return None
        return self._hold_of(control)

    def _hold_of(self, control: ControlRecord | None) -> tuple[str, Positions] | None:
        """(handoff id, fence) of the fence `control` has this slot, the active, stop at (None: none)."""
        if control is None or control.fence is None or control.handoff is None:
            return None
        if control.role_of(self.slot) is not Role.ACTIVE:
            return None
        return control.handoff.id, dict(control.fence)

    def role(self) -> Role:
        with self._lock:
            return self.control.role_of(self.slot) if self.control is not None else Role.STANDBY

    def snapshot(self) -> tuple[ControlRecord | None, CommitMarker | None]:
        with self._lock:
            return self.control, self.marker
