"""A slot's lease and, in the standby, the failover that needs no Airflow (invariant 7).

One thread per slot (LeaseKeeper):
- renews the slot's lease (baton.leases.Lease) every lease_interval_ms while the slot is alive: up, or
  its query has reported progress or idleness within `stall_s` (a query thread stuck in a batch stops
  renewing, and is then failed over like a dead one). One renewal is in flight at a time and one that
  cannot be delivered within the ttl is dropped: a stalled broker leaves a gap in the slot's own
  renewals, which is what keeps a broker pause from looking like every slot's death (baton.leases);
- reads the leases topic into a LeaseJudge;
- as the standby, takes the active role when baton.leases.decide_takeover says so.

The takeover, in this order, and why:
1. init_transactions with the app's shared writer transactional.id: Kafka fences whoever held it, so
   an active that is only stalled (SIGSTOP, GC, a network stall) can never commit again: its open
   transaction is aborted and its next commit fails (kafka_sink.WriterFenced);
2. read the last commit marker: after step 1 nobody can add to it, so it is the final position F the
   old active emitted (read before step 1, a zombie could still commit past it: duplicates);
3. decide again with F (the standby must not be past it, nor too far behind);
4. one compare-and-set on the control record at the epoch the decision saw (baton.handoff.take_over):
   epoch + 1, this slot active, F as the failover's fence. Exactly one writer can win it; a cutover or
   the health DAG that moved the epoch first makes it fail (StaleEpoch / HandoffError): nothing to do;
5. hand the record to the follower at once (it would read it back from the control topic too), so
   the cap moves now: the slot reads up to exactly F, then emits from F (follower.compute_cap).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from baton.apps import AppDefinition
from baton.driver_wrapper import LAUNCH_ID_ENV
from baton.handoff import HandoffError, take_over
from baton.kafka.admin import TopicSpec, ensure_topics
from baton.kafka.client_config import kafka_config
from baton.kafka.fetch_wait import StallWatch, fetch_wait_ms, reopen_longer
from baton.kafka.markers import read_last_marker
from baton.kafka.messages import offset_of
from baton.leases import (
    LOOK_BACK_RECORDS,
    Lease,
    LeaseJudge,
    decide_takeover,
    decode_lease,
    my_pid_start,
    proc_start_ticks,
    process_gone,
    this_host,
)
from baton.records import Role, Slot, SlotState
from baton.settings import LEASES_TOPIC, LEASES_TOPIC_CONFIG
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.coordination.relaunch import Relaunch
from spark_apps.runtime.sink.kafka_sink import writer_transactional_id

log = logging.getLogger(__name__)

# Renewals are seen within this of their write (longer where Tansu needs it: baton.kafka.fetch_wait).
# Nothing waits on a renewal's arrival: a silence is counted in this slot's own renewals as the log
# holds them (baton.leases.LeaseJudge), so a longer wait only moves a stall's takeover by up to that
# (Apache Kafka answers a long poll when a record arrives; Tansu, a quarter of the wait later at the
# median). An idle fetch costs Tansu its CPU: with both slots of an app running and no input, the
# broker used 0.085 cores at 50 ms and 0.066 at 250 ms (two slots' lease readers).
FETCH_WAIT_MS = 250
# After a takeover that did not happen (a check failed, the epoch moved), the next try waits this long.
RETRY_AFTER_S = 2.0


class LeaseKeeper:
    def __init__(
        self,
        app: AppDefinition,
        slot: Slot,
        bootstrap: str,
        follower: Follower,
        state: Callable[[], SlotState],
        alive: Callable[[], bool],
        launch: str | None = None,
    ):
        self.app, self.slot, self.bootstrap, self.follower = app, slot, bootstrap, follower
        self.state, self.alive = state, alive
        self.launch = launch or lease_launch()
        self.interval_s = app.lease_interval_ms / 1000
        self.judge = LeaseJudge(app.name, slot, self.launch, app.lease_interval_ms)
        self.host, self.pid, self.pid_start = this_host(), os.getpid(), my_pid_start()
        self.seq = 0
        self.taken_over: str = ""  # the reason, once this slot took the active role
        self._inflight = False
        self._next_renewal = 0.0
        self._next_try = 0.0
        self._epoch: int | None = None  # the control epoch the judge counts silence at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        ensure_topics(bootstrap, [TopicSpec(LEASES_TOPIC, 1, LEASES_TOPIC_CONFIG)])
        self._producer = Producer(
            kafka_config(
                bootstrap,
                {
                    "linger.ms": 0,
                    "acks": "all",
                    # A renewal older than the ttl says nothing any more: dropped rather than delivered late.
                    "message.timeout.ms": app.lease_ttl_ms,
                    "reconnect.backoff.max.ms": 1000,
                },
            )
        )
        self._fetch_wait = fetch_wait_ms(bootstrap, LEASES_TOPIC, FETCH_WAIT_MS)
        self._consumer = self._new_consumer(self._fetch_wait)
        self._watch = StallWatch()
        # The next offset to read; the end of the topic as this slot's own delivered renewals show it, now
        # and at the last stall check (no broker query: a renewal is delivered every interval).
        self._position = self._known_end = self._end_before = 0

    def _new_consumer(self, fetch_wait: int) -> Consumer:
        return Consumer(
            kafka_config(
                self.bootstrap,
                {
                    "group.id": f"baton-lease-{self.app.name}-{self.slot.value}",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": fetch_wait,
                    "reconnect.backoff.max.ms": 1000,
                },
            )
        )

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        tp = TopicPartition(LEASES_TOPIC, 0)
        high = self._consumer.get_watermark_offsets(tp, timeout=10)[1]
        self._position = max(0, high - LOOK_BACK_RECORDS)  # the next offset to read
        self._consumer.assign([TopicPartition(LEASES_TOPIC, 0, self._position)])
        self._thread = threading.Thread(target=self._run, name=f"baton-lease-{self.slot.value}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing; the last renewal carries the slot's final state (a stop releases the lease)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._renew(force=True)
        self._producer.flush(2)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew()
                if self._watch.stalled():  # once per STALL_S
                    self._unless_stuck()
                for m in self._consumer.consume(500, 0.1):
                    if (err := m.error()) is None:
                        self._position = offset_of(m) + 1
                        if (lease := decode_lease(self.app.name, m.key(), m.value())) is not None:
                            self.judge.observe(lease)
                    elif err.code() != KafkaError._PARTITION_EOF:
                        log.debug("leases topic: %s", err)
                self._maybe_take_over()
            except Exception:  # never let the lease thread die silently: the slot would look dead
                log.exception("%s/%s: lease keeper", self.app.name, self.slot.value)
                time.sleep(self.interval_s)

    def _unless_stuck(self) -> None:
        """Not yet past a renewal of this slot's own that was delivered a STALL_S ago (renewals are read within
        milliseconds of their write): the fetch wait is too short for the topic (Tansu, after hours of
        renewals: baton.kafka.fetch_wait). Renewals unseen would make the other slot's lease look expired.
        Judged from the delivery reports, not a ListOffsets a second per slot; a broker that does not answer
        (paused, unreachable) delivers nothing, so it never lengthens the wait, which would not help."""
        end_before, self._end_before = self._end_before, self._known_end
        if self._position >= end_before:
            return
        reopened = reopen_longer(
            self._consumer,
            self._new_consumer,
            self.bootstrap,
            [LEASES_TOPIC],
            self._fetch_wait,
            [TopicPartition(LEASES_TOPIC, 0, self._position)],
        )
        if reopened is not None:
            self._consumer, self._fetch_wait = reopened

    # --- renewing ---------------------------------------------------------------------------------
    def _renew(self, force: bool = False) -> None:
        self._producer.poll(0)
        now = time.monotonic()
        if not force and (self._inflight or now < self._next_renewal or not self.alive()):
            return
        control, _ = self.follower.snapshot()
        self.seq += 1
        lease = Lease(
            app=self.app.name,
            slot=self.slot,
            launch=self.launch,
            host=self.host,
            pid=self.pid,
            pid_start=self.pid_start,
            state=self.state(),
            role=control.role_of(self.slot) if control is not None else Role.STANDBY,
            epoch_seen=control.epoch if control is not None else 0,
            seq=self.seq,
            ts_ms=int(time.time() * 1000),
            ttl_ms=self.app.lease_ttl_ms,
            interval_ms=self.app.lease_interval_ms,
        )
        self._inflight = True
        self._producer.produce(LEASES_TOPIC, lease.to_bytes(), lease.key(), on_delivery=self._delivered)
        self._next_renewal = now + self.interval_s

    def _delivered(self, err, msg) -> None:
        self._inflight = False
        if err is None:
            self._known_end = max(self._known_end, msg.offset() + 1)
        else:
            log.warning("%s/%s: lease renewal not delivered: %s", self.app.name, self.slot.value, err)

    # --- taking over ------------------------------------------------------------------------------
    def _decide(self, emitted):
        control, _ = self.follower.snapshot()
        other = self.judge.other
        gone = other is not None and process_gone(other, self.host, proc_start_ticks)
        return control, decide_takeover(
            control,
            self.slot,
            self.state(),
            self.judge,
            gone,
            self.follower.processed,
            emitted,
            self.app.max_lag_records,
        )

    def _maybe_take_over(self) -> None:
        current, marker = self.follower.snapshot()
        if current is not None and current.epoch != self._epoch:
            self._epoch = current.epoch
            self.judge.restart_count()
        if time.monotonic() < self._next_try:
            return
        control, decision = self._decide(dict(marker.emitted) if marker is not None else {})
        if not decision.go:
            return
        self._next_try = time.monotonic() + RETRY_AFTER_S
        t0 = time.monotonic()
        fence_writer(self.bootstrap, self.app.name)  # 1
        final = read_last_marker(self.bootstrap, self.app.commits_topic, self.app.name)  # 2
        fence = {p: (final.emitted.get(p, 0) if final else 0) for p in range(self.app.input.partitions)}
        again, decision = self._decide(fence)  # 3
        if not decision.go or again is None or again.epoch != control.epoch:
            log.warning(
                "%s/%s: no takeover after fencing the writer: %s",
                self.app.name,
                self.slot.value,
                decision.reason if again is not None and again.epoch == control.epoch else "the epoch moved",
            )
            return
        from baton.control_plane import ControlPlane, KafkaControlStore, StaleEpoch

        plane = ControlPlane(KafkaControlStore(self.bootstrap), writer=f"{self.slot.value} (lease)")
        try:  # 4
            record = plane.update(
                self.app.name,
                take_over(self.slot, control.epoch, fence, decision.reason, int(time.time() * 1000)),
                expected_epoch=control.epoch,
            )
        except (HandoffError, StaleEpoch) as exc:
            log.warning("%s/%s: takeover not written: %s", self.app.name, self.slot.value, exc)
            return
        self.follower.apply_control(record)  # 5
        self.taken_over = decision.reason
        log.warning(
            "%s/%s: took over at epoch %d from %s at %s in %.2f s: %s",
            self.app.name,
            self.slot.value,
            record.epoch,
            self.slot.other.value,
            fence,
            time.monotonic() - t0,
            decision.reason,
        )


def lease_launch(environ=os.environ) -> str:
    """The launch a lease names: the launcher's launch id, and for a driver its wrapper restarted, which
    restart (`<id>.<n>`). So each driver process renews as a launch of its own: the watcher reports each
    death and each return once per launch (baton.slot_changes), and a judge of this slot's own renewals
    never counts its dead predecessor's (baton.leases.LeaseJudge)."""
    base = environ.get(LAUNCH_ID_ENV) or uuid.uuid4().hex
    relaunch = Relaunch.from_env(environ)
    return f"{base}.{relaunch.restart}" if relaunch is not None else base


def fence_writer(bootstrap: str, app: str, timeout_s: float = 10.0) -> None:
    """Fence the app's active writer: initialise a producer with the shared transactional.id (its
    commits fail from now on, its open transaction is aborted), then let it go; the slot's own
    emitter initialises again when it emits (kafka_sink.TransactionalEmitter.acquire)."""
    p = Producer(
        kafka_config(bootstrap, {"transactional.id": writer_transactional_id(app), "enable.idempotence": True})
    )
    p.init_transactions(timeout_s)
    p.flush(1)
