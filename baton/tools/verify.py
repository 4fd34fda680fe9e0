"""Independent verifier for the click-count output.

Reads the output topic with read_committed and compares every key with ground truth computed
from the input: per key, the counts emitted must be strictly increasing (a repeated count is a
duplicate emission), and the last one must equal the number of valid events for that key. Records
of a corrected-output publish (header baton.records.CORRECTION_HEADER) republish a key's value: they
are left out of the duplicate check, and may neither lower a key's count nor exceed its truth.

End-to-end latency: `OutputTailer` reads the output topic while the load runs and stamps every
record with the wall time it became readable (the time the consume call returned it; resolution
about FETCH_WAIT_MS plus CONSUME_WAIT_S). The n-th valid event of user u (sent at t_send) is
reflected once an output record for u with count >= n is readable (update mode emits only the
latest count per batch, hence >= n), so its latency is
    (first readable time of an output record for u with count >= n) - t_send.

    python -m baton.tools.verify tail --bootstrap H:P --topic T --partitions N --out seen.npz
tails until SIGTERM/SIGINT, then reads on to the end of every partition and writes what it saw.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from baton.kafka.client_config import kafka_config
from baton.kafka.messages import partition_of
from baton.records import CORRECTION_HEADER

FETCH_WAIT_MS = 50
CONSUME_WAIT_S = 0.02


@dataclass
class Verdict:
    keys: int
    lost: list[str] = field(default_factory=list)  # final count below truth (or key missing)
    duplicated: list[str] = field(default_factory=list)  # a count emitted twice for a key
    wrong: list[str] = field(default_factory=list)  # final count above truth / unknown key / decreasing
    records: int = 0
    corrections: int = 0  # records of a corrected-output publish

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong)

    def summary(self) -> dict:
        return {
            "keys": self.keys,
            "records": self.records,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "wrong": len(self.wrong),
            "corrections": self.corrections,
        }


def read_output(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> list[tuple[str, int]]:
    """(user_id, count) of every committed output record, in partition order."""
    c = Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": f"baton-verify-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            },
        )
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[str, int]] = []
    done: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"output topic {topic} not read to its end in {timeout_s}s")
            for m in c.consume(10_000, 0.05):
                if err := m.error():
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(partition_of(m))
                    continue
                if (value := m.value()) is None:
                    raise ValueError(f"output topic {topic}: a record without a value at offset {m.offset()}")
                v = json.loads(value)
                out.append((v["user_id"], int(v["count"])))
    finally:
        c.close()
    return out


def verify(truth: Counter, output: list[tuple[str, int]], corrections: Iterable[bool] | None = None) -> Verdict:
    """`corrections[i]`: output[i] is a corrected-output record (None: there are none)."""
    seen: dict[str, list[int]] = {}
    emitted: dict[str, list[int]] = {}  # the same without the corrections
    flags = corrections if corrections is not None else [False] * len(output)
    for (user, count), corrected in zip(output, flags, strict=True):
        seen.setdefault(user, []).append(count)
        if not corrected:
            emitted.setdefault(user, []).append(count)
    v = Verdict(keys=len(truth), records=len(output), corrections=sum(map(bool, flags)))
    for user, counts in seen.items():
        plain = emitted.get(user, [])
        if len(set(plain)) != len(plain):
            v.duplicated.append(user)
        if user not in truth or counts != sorted(counts) or counts[-1] > truth[user]:
            v.wrong.append(user)
    for user, n in truth.items():
        if user not in seen or seen[user][-1] < n:
            v.lost.append(user)
    return v


# --- what the tailer saw ----------------------------------------------------------------------


@dataclass
class Observations:
    """Output records in read order (per partition): users[i] indexes user_ids; times are epoch s.
    `unreadable` counts records whose value was not {"user_id": str, "count": int}."""

    user_ids: list[str]
    users: np.ndarray
    counts: np.ndarray
    times: np.ndarray
    unreadable: int = 0
    corrected: np.ndarray | None = None  # per record: a corrected-output record (None: none were)

    def pairs(self) -> list[tuple[str, int]]:
        """(user_id, count) per record, the input of `verify`."""
        names = self.user_ids
        return [(names[u], c) for u, c in zip(self.users.tolist(), self.counts.tolist())]

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:
            np.savez(
                f,
                user_ids=np.array(self.user_ids, dtype=str),
                users=self.users,
                counts=self.counts,
                times=self.times,
                unreadable=np.int64(self.unreadable),
                corrected=self.corrected if self.corrected is not None else np.zeros(0, dtype=bool),
            )

    @classmethod
    def load(cls, path: Path) -> Observations:
        with np.load(path) as z:
            corrected = z["corrected"] if "corrected" in z.files and z["corrected"].size else None
            return cls(
                user_ids=z["user_ids"].tolist(),
                users=z["users"],
                counts=z["counts"],
                times=z["times"],
                unreadable=int(z["unreadable"]),
                corrected=corrected,
            )


class OutputTailer:
    """Reads an output topic (read_committed) from the beginning, stamping each record's readable time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        self._users, self._counts, self._times = array("i"), array("q"), array("d")
        self._corrected: list[int] = []  # indexes of corrected-output records
        self._unreadable = 0
        self._next: dict[int, int] = {p: OFFSET_BEGINNING for p in range(partitions)}

    def _consumer(self) -> Consumer:
        c = Consumer(
            kafka_config(
                self.bootstrap,
                {
                    "group.id": f"baton-tail-{uuid.uuid4().hex}",
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": FETCH_WAIT_MS,
                },
            )
        )
        c.assign([TopicPartition(self.topic, p, off) for p, off in self._next.items()])
        return c

    def _take(self, msgs, now: float, at_end: set[int]) -> None:
        index, names, loads = self._index, self._names, json.loads
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            self._next[m.partition()] = m.offset() + 1
            try:
                v = loads(m.value())
                user, count = v["user_id"], v["count"]
                if not isinstance(user, str) or not isinstance(count, int):
                    raise TypeError
            except (ValueError, TypeError, KeyError):
                self._unreadable += 1
                continue
            u = index.get(user)
            if u is None:
                u = index[user] = len(names)
                names.append(user)
            if (headers := m.headers()) and any(k == CORRECTION_HEADER for k, _ in headers):
                self._corrected.append(len(self._users))
            self._users.append(u)
            self._counts.append(count)
            self._times.append(now)

    def run(self, stop: threading.Event, drain_timeout_s: float = 120.0) -> Observations:
        """Tail until `stop` is set, then read on to the end of every partition and return."""
        c = self._consumer()
        try:
            while not stop.is_set():
                msgs = c.consume(5000, CONSUME_WAIT_S)
                self._take(msgs, time.time(), set())
        finally:
            c.close()
        # A fresh consumer from the current positions: an end-of-partition it reports comes from
        # a fetch made after the stop, so nothing committed before the stop is missed.
        c, at_end = self._consumer(), set[int]()
        deadline = time.monotonic() + drain_timeout_s
        try:
            while len(at_end) < self.partitions:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.topic} not read to its end within {drain_timeout_s}s of the stop")
                msgs = c.consume(5000, CONSUME_WAIT_S)
                self._take(msgs, time.time(), at_end)
        finally:
            c.close()
        corrected = None
        if self._corrected:
            corrected = np.zeros(len(self._users), dtype=bool)
            corrected[self._corrected] = True
        return Observations(
            user_ids=list(self._names),
            users=np.frombuffer(self._users, dtype=np.int32).copy(),
            counts=np.frombuffer(self._counts, dtype=np.int64).copy(),
            times=np.frombuffer(self._times, dtype=np.float64).copy(),
            unreadable=self._unreadable,
            corrected=corrected,
        )


# --- latency ----------------------------------------------------------------------------------


def event_latencies(
    send_users: np.ndarray, send_times: np.ndarray, out_users: np.ndarray, out_counts: np.ndarray, out_times: np.ndarray
) -> np.ndarray:
    """Latency (s) of every valid event, in send order; NaN where no output reached it.

    Users are integer ids shared by both sides. Event i is the n-th event of send_users[i]
    (counting in send order); it is reflected by the earliest-readable output record of that user
    with count >= n.
    """
    send_users = np.asarray(send_users, dtype=np.int64)
    send_times = np.asarray(send_times, dtype=np.float64)
    lat = np.full(send_users.size, np.nan)
    if send_users.size == 0 or len(out_users) == 0:
        return lat
    # n of every event: its 1-based rank among its user's events in send order.
    order = np.argsort(send_users, kind="stable")
    su = send_users[order]
    first = np.r_[0, np.flatnonzero(np.diff(su)) + 1]
    group_start = np.repeat(first, np.diff(np.r_[first, su.size]))
    n = np.empty_like(send_users)
    n[order] = np.arange(su.size) - group_start + 1

    ou = np.asarray(out_users, dtype=np.int64)
    oc = np.asarray(out_counts, dtype=np.int64)
    t0 = min(float(np.min(out_times)), float(np.min(send_times)))
    # In integer microseconds the lifted running minimum below is exact.
    ot = np.round((np.asarray(out_times, dtype=np.float64) - t0) * 1e6).astype(np.int64)
    # (user, count) as one integer key, sorted ascending. Counts are clipped to [-1, max n + 1]:
    # beyond max n every count answers every event alike, and the key cannot overflow.
    top = int(n.max()) + 1
    width = top + 2
    okey = ou * width + np.clip(oc, -1, top) + 1
    by = np.argsort(okey, kind="stable")
    okey, ou, ot = okey[by], ou[by], ot[by]
    # Earliest readable time among a user's records at or after each position (count >= this
    # one): a running minimum from the end that must not leak from one user into the previous
    # one, so each user's times are lifted by an offset that grows with the user's rank.
    span = int(ot.max()) + 1
    lift = np.r_[0, np.cumsum(np.diff(ou) != 0)] * span
    earliest = np.minimum.accumulate((ot + lift)[::-1])[::-1] - lift
    # For each event, the first record of its user with count >= n.
    ekey = send_users * width + n + 1
    pos = np.searchsorted(okey, ekey, side="left")
    hit = pos < okey.size
    hit[hit] = ou[pos[hit]] == send_users[hit]
    lat[hit] = (earliest[pos[hit]] / 1e6 + t0) - send_times[hit]
    return lat


def percentile(values: np.ndarray, p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return math.nan
    k = max(1, math.ceil(p / 100.0 * v.size))
    return float(v[min(k, v.size) - 1])


def longest_gap(times: np.ndarray) -> float:
    """Longest time (s) between two consecutive distinct readable times of output records."""
    return longest_gap_at(times)[0]


def longest_gap_at(times: np.ndarray) -> tuple[float, float | None]:
    """(the longest gap, the readable time that ended it; None without a gap): where to look for its cause."""
    t = np.unique(np.asarray(times, dtype=np.float64))
    if t.size < 2:
        return 0.0, None
    i = int(np.argmax(np.diff(t)))
    return float(t[i + 1] - t[i]), float(t[i + 1])


@dataclass
class LatencyReport:
    events: int
    reflected: int  # events some output record reached
    unreflected: int  # events no output record reached (their keys are lost)
    p50_ms: float
    p99_ms: float
    p99_99_ms: float
    max_ms: float
    longest_output_gap_s: float
    longest_output_gap_end: float | None = None  # the readable time (epoch s) that ended it

    def summary(self) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def latency_report(lat: np.ndarray, out_times: np.ndarray) -> LatencyReport:
    ok = lat[~np.isnan(lat)]
    ms = ok * 1000.0
    gap, gap_end = longest_gap_at(out_times)
    return LatencyReport(
        events=int(lat.size),
        reflected=int(ok.size),
        unreflected=int(lat.size - ok.size),
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        p99_99_ms=percentile(ms, 99.99),
        max_ms=float(ms.max()) if ms.size else math.nan,
        longest_output_gap_s=gap,
        longest_output_gap_end=gap_end,
    )


def latency_timeline(
    send_times: np.ndarray, lat: np.ndarray, bucket_s: float = 1.0, start: float | None = None
) -> list[dict]:
    """Per bucket of send time: events, p50/p99/max latency (ms) of the reflected ones."""
    send_times = np.asarray(send_times, dtype=np.float64)
    if send_times.size == 0:
        return []
    t0 = float(send_times.min()) if start is None else start
    bucket = np.floor((send_times - t0) / bucket_s).astype(np.int64)
    rows = []
    order = np.argsort(bucket, kind="stable")
    b_sorted, l_sorted = bucket[order], lat[order] * 1000.0
    edges = np.r_[0, np.flatnonzero(np.diff(b_sorted)) + 1, b_sorted.size]
    for a, z in zip(edges[:-1], edges[1:]):
        vals = l_sorted[a:z]
        ok = vals[~np.isnan(vals)]
        rows.append(
            {
                "t_s": float(b_sorted[a] * bucket_s),
                "events": int(z - a),
                "p50_ms": percentile(ok, 50),
                "p99_ms": percentile(ok, 99),
                "max_ms": float(ok.max()) if ok.size else math.nan,
            }
        )
    return rows


def latencies_by_user(
    sends: Sequence[tuple[str, float]], outputs: Sequence[tuple[str, int, float]]
) -> list[float | None]:
    """event_latencies for user ids as strings: sends (user, t_send) in send order, outputs
    (user, count, t_readable). None where no output reached the event."""
    index: dict[str, int] = {}
    su = [index.setdefault(u, len(index)) for u, _ in sends]
    ou = [index.setdefault(u, len(index)) for u, _, _ in outputs]
    lat = event_latencies(
        np.array(su, dtype=np.int64),
        np.array([t for _, t in sends], dtype=np.float64),
        np.array(ou, dtype=np.int64),
        np.array([c for _, c, _ in outputs], dtype=np.int64),
        np.array([t for _, _, t in outputs], dtype=np.float64),
    )
    return [None if math.isnan(x) else float(x) for x in lat]


def align_users(obs: Observations, index: dict[str, int]) -> np.ndarray:
    """The observations' users as ids of `index` (-1 for a user it does not know)."""
    table = np.array([index.get(name, -1) for name in obs.user_ids], dtype=np.int64)
    return table[obs.users] if obs.users.size else np.empty(0, dtype=np.int64)


# --- CLI --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="baton.tools.verify", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tail", help="stamp output records as they become readable, until SIGTERM/SIGINT")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--partitions", type=int, required=True)
    t.add_argument("--out", type=Path, required=True, help="where to write what was seen (.npz)")
    args = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    obs = OutputTailer(args.bootstrap, args.topic, args.partitions).run(stop)
    obs.save(args.out)
    print(
        json.dumps({"records": int(obs.users.size), "users": len(obs.user_ids), "unreadable": obs.unreadable}),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
