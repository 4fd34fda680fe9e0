"""Reads what baton.app_view shows: Baton's control, status and leases topics, and each app's input end.

Bounded and incremental: the first refresh reads the control topic (compacted: one record per app once
compacted) and only the last `status_tail` status records and `lease_tail` renewals; every later
refresh reads just what arrived since, so a page refreshed every few seconds costs one short fetch
however long the apps have run. History older than `window_ms` is dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from baton.app_view import AppView, PlotPoints, app_view
from baton.apps import AppDefinition, load_registry
from baton.kafka.control_log import apply_records
from baton.kafka.fetch_wait import StallWatch, fetch_wait_ms, reopen_longer, short_wait
from baton.kafka.messages import offset_of, topic_of
from baton.kafka.tail import FETCH_WAIT_MS
from baton.kafka.tail import _consumer as tail_consumer
from baton.leases import Lease
from baton.records import ControlRecord, RecordError, Slot, StatusRecord
from baton.settings import CONTROL_TOPIC, LEASES_TOPIC, STATUS_TOPIC

log = logging.getLogger(__name__)
# librdkafka's own lines (a broker down is one per retry): the caller says it once, with the reason.
KAFKA_LOG = logging.getLogger("baton.status_feed.kafka")
RECENT = 10  # status records kept per slot (app_view.slot_view reads the last ten's input rate)


@dataclass
class _AppState:
    records: list[ControlRecord] = field(default_factory=list)  # applied, oldest first
    # Each slot's last status records (its figures now, its recent input rate), and the plot's points.
    recent: dict[Slot, deque] = field(default_factory=lambda: {s: deque(maxlen=RECENT) for s in Slot})
    plot: PlotPoints = field(default_factory=PlotPoints)
    leases: dict[Slot, Lease] = field(default_factory=dict)

    def history(self) -> list[StatusRecord]:
        return sorted((r for d in self.recent.values() for r in d), key=lambda r: r.ts_ms)


class StatusFeed:
    """One reader of Baton's topics for many views; thread-safe (the API server answers concurrently)."""

    def __init__(
        self,
        bootstrap: str,
        status_tail: int = 20_000,
        lease_tail: int = 2_000,
        window_ms: int = 3_600_000,
        timeout_s: float = 10.0,
    ):
        self.bootstrap, self.window_ms, self.timeout_s = bootstrap, window_ms, timeout_s
        self.tails = {CONTROL_TOPIC: None, STATUS_TOPIC: status_tail, LEASES_TOPIC: lease_tail}
        self.next: dict[str, int] = {}  # the next offset to read per topic, once read
        self.apps: dict[str, _AppState] = defaultdict(_AppState)
        self.read: dict[str, int] = defaultdict(int)  # records read per topic, in all (the reads are bounded)
        self.lock = threading.Lock()

    def refresh(self) -> None:
        """Read every record that arrived since the last refresh (to each topic's end)."""
        with self.lock:
            self._read()

    def _read(self) -> None:
        wait = max(fetch_wait_ms(self.bootstrap, t, FETCH_WAIT_MS) for t in self.tails)
        c = tail_consumer(self.bootstrap, wait, logger=KAFKA_LOG)
        try:
            starts = self._starts(c)
            if not starts:
                return
            c.assign([TopicPartition(t, 0, o) for t, o in starts.items()])
            pending, deadline = set(starts), time.monotonic() + self.timeout_s
            position = dict(starts)
            watch = StallWatch()
            while pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{', '.join(sorted(pending))} not read to the end within {self.timeout_s}s "
                        f"(broker {self.bootstrap}, fetch.wait.max.ms={wait})"
                    )
                for m in c.consume(10_000, 0.05):
                    if err := m.error():
                        if err.code() == KafkaError._PARTITION_EOF:
                            pending.discard(topic_of(m))
                            continue
                        raise KafkaException(err)
                    position[topic_of(m)] = offset_of(m) + 1
                    self._take(topic_of(m), m.key(), m.value())
                if (
                    pending
                    and watch.stalled()
                    and (
                        reopened := reopen_longer(
                            c,
                            lambda w: tail_consumer(self.bootstrap, w, logger=KAFKA_LOG),
                            self.bootstrap,
                            [t for t in pending if short_wait(c, t, 0, position[t])],
                            wait,
                            [TopicPartition(t, 0, position[t]) for t in pending],
                        )
                    )
                ):
                    c, wait = reopened
            self.next.update(position)
            self._forget_before(int(time.time() * 1000) - self.window_ms)
        finally:
            c.close()

    def _starts(self, c: Consumer) -> dict[str, int]:
        """Where each topic's read starts: where the last one ended, else its tail (all of the control topic)."""
        starts = {}
        for topic, tail in self.tails.items():
            if topic in self.next:
                starts[topic] = self.next[topic]
                continue
            try:
                low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=self.timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # not created yet (no app ever started): nothing to show
                raise
            starts[topic] = low if tail is None else max(low, high - tail)
        return starts

    def _take(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.read[topic] += 1
        if value is None or key is None:
            return
        try:
            if topic == STATUS_TOPIC:
                rec = StatusRecord.from_bytes(value)
                state = self.apps[rec.app]
                state.recent[rec.slot].append(rec)
                state.plot.add(rec)
            elif topic == CONTROL_TOPIC:
                ctl = ControlRecord.from_bytes(value)
                if ctl.app.encode() != key:
                    return
                state = self.apps[ctl.app]
                current = state.records[-1] if state.records else None
                if apply_records(current, [ctl]) is ctl:
                    state.records.append(ctl)
                    del state.records[:-200]
            elif topic == LEASES_TOPIC:
                lease = Lease.from_bytes(value)
                self.apps[lease.app].leases[lease.slot] = lease
        except RecordError as exc:  # a malformed record is skipped, never fatal
            log.debug("skipped a record of %s: %s", topic, exc)

    def _forget_before(self, since_ms: int) -> None:
        for state in self.apps.values():
            state.plot.forget_before(since_ms)

    def views(self, registry: dict[str, AppDefinition] | None = None, now_ms: int | None = None) -> list[AppView]:
        """Every registered app's view, and any app with records but no definition (a removed one)."""
        registry = load_registry() if registry is None else registry
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        ends = input_ends(self.bootstrap, registry.values())
        with self.lock:
            names = sorted(set(registry) | {a for a, s in self.apps.items() if s.records})
            return [
                app_view(
                    name,
                    name in registry,
                    list(st.records),
                    st.history(),
                    dict(st.leases),
                    ends.get(name),
                    now_ms,
                    self.window_ms,
                    plot=st.plot.since(now_ms - self.window_ms),
                )
                for name, st in ((n, self.apps[n]) for n in names)
            ]


def input_ends(bootstrap: str, apps, timeout_s: float = 3.0) -> dict[str, dict[int, int]]:
    """Each app's input end now (read to the true end: baton.kafka.tail.probe_ends). One consumer for
    all; if it cannot be read (the broker away, an input topic missing) the views show no lag."""
    from baton.kafka.tail import ends_of

    apps = list(apps)
    try:
        ends = ends_of(bootstrap, {app.input.topic: range(app.input.partitions) for app in apps}, timeout_s)
    except KafkaException as exc:
        log.warning("input ends not read: %s", exc)
        return {}
    return {app.name: ends[app.input.topic] for app in apps}
