"""Load generator for the click-count app: paced click events, ground truth and send times.

    python -m baton.tools.loadgen --bootstrap 127.0.0.1:9092 --topic clicks \
        --rate 20085 --keys 100000 --malformed 0.01 --seconds 180 --out sends.npz

Events are {"user_id": "user<N>", "timestamp": <epoch s>} keyed by the user id, so every event of
a user lands in one partition in send order (the producer is idempotent: retries cannot reorder).
A share of events is malformed, in equal parts: not JSON, missing user_id, missing timestamp; the
app must dead-letter them and count nothing for them.

Pacing is by ticks, not a sleep per message: every TICK_S the generator sends every event that is
due by then (rate x elapsed), stamps them all with that tick's wall time, and sleeps to the next
tick on an absolute schedule, so a late wake-up is caught up by the next tick instead of drifting.
The generator shares the machine with Spark: keys are pre-encoded, the user sequence is drawn up
front with numpy, and the producer batches (linger) and reports only failed deliveries.

The send log (`SendLog`, saved as .npz) is the ground truth for the verifier: the user of every
event in send order (-1 for a malformed one) and, per tick, the index of its first event and its
wall time. Since a user's events are processed in order, the n-th valid event of user u is the one
that makes u's count n; its latency is measured against the first output with count >= n.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from baton.kafka.client_config import kafka_config

TICK_S = 0.01
KEY_PREFIX = "user"

# Kinds of event in SendLog.kinds.
VALID, NOT_JSON, NO_USER, NO_TIMESTAMP = 0, 1, 2, 3
MALFORMED_KINDS = (NOT_JSON, NO_USER, NO_TIMESTAMP)


class LoadgenError(ValueError):
    """A bad load description: names the parameter."""


@dataclass(frozen=True)
class LoadSpec:
    rate: float  # events/s; math.inf = as fast as the producer takes them
    keys: int  # users user0 .. user<keys-1>
    events: int  # total events to send
    malformed: float = 0.0  # share of malformed events, 0 <= share < 1
    sequential: bool = False  # user of event i is i % keys (else uniform random)
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise LoadgenError(f"rate must be > 0 events/s, got {self.rate}")
        if self.keys <= 0:
            raise LoadgenError(f"keys must be > 0, got {self.keys}")
        if self.events < 0:
            raise LoadgenError(f"events must be >= 0, got {self.events}")
        if not 0 <= self.malformed < 1:
            raise LoadgenError(f"malformed must be a share in [0, 1), got {self.malformed}")

    @classmethod
    def for_duration(cls, rate: float, seconds: float, **kw) -> LoadSpec:
        if not math.isfinite(rate):
            raise LoadgenError("a duration needs a finite rate")
        return cls(rate=rate, events=int(round(rate * seconds)), **kw)


def plan(spec: LoadSpec) -> tuple[np.ndarray, np.ndarray]:
    """(users, kinds) of every event in send order, deterministic for a seed. Malformed events
    keep a user (their key), which the app must ignore."""
    rng = np.random.default_rng(spec.seed)
    if spec.sequential:
        users = (np.arange(spec.events, dtype=np.int64) % spec.keys).astype(np.int32)
    else:
        users = rng.integers(0, spec.keys, size=spec.events, dtype=np.int32)
    kinds = np.zeros(spec.events, dtype=np.int8)
    bad = np.flatnonzero(rng.random(spec.events) < spec.malformed)
    kinds[bad] = np.asarray(MALFORMED_KINDS, dtype=np.int8)[np.arange(bad.size) % len(MALFORMED_KINDS)]
    return users, kinds


def due(rate: float, elapsed_s: float, total: int) -> int:
    """How many events should have been sent `elapsed_s` after the start (never more than total)."""
    if elapsed_s <= 0:
        return 0
    if not math.isfinite(rate):
        return total
    return min(total, int(rate * elapsed_s))


def encode(key: bytes, kind: int, ts: int) -> bytes:
    if kind == VALID:
        return b'{"user_id":"%s","timestamp":%d}' % (key, ts)
    if kind == NOT_JSON:
        return b'{"user_id":"%s","timestamp":%d' % (key, ts)  # truncated: not JSON
    if kind == NO_USER:
        return b'{"timestamp":%d}' % ts
    return b'{"user_id":"%s"}' % key


@dataclass
class SendLog:
    """What was sent: users[i], kinds[i] of event i; tick j sent events [tick_first[j], tick_first[j+1])
    at wall time tick_time[j] (epoch s)."""

    users: np.ndarray
    kinds: np.ndarray
    tick_first: np.ndarray
    tick_time: np.ndarray
    keys: int
    meta: dict = field(default_factory=dict)

    def send_times(self) -> np.ndarray:
        """Wall time each event was handed to the producer."""
        counts = np.diff(np.append(self.tick_first, self.users.size))
        return np.repeat(self.tick_time, counts)

    def valid(self) -> tuple[np.ndarray, np.ndarray]:
        """(users, send times) of the valid events, in send order."""
        ok = self.kinds == VALID
        return self.users[ok], self.send_times()[ok]

    def truth(self) -> Counter:
        """Expected final count per user id (users that only got malformed events are absent)."""
        users, _ = self.valid()
        counts = np.bincount(users, minlength=self.keys)
        return Counter({user_id(int(u)): int(counts[u]) for u in np.flatnonzero(counts)})

    def malformed(self) -> int:
        return int(np.count_nonzero(self.kinds != VALID))

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to a bare path
            np.savez(
                f,
                users=self.users,
                kinds=self.kinds,
                tick_first=self.tick_first,
                tick_time=self.tick_time,
                keys=np.int64(self.keys),
                meta=np.array(json.dumps(self.meta)),
            )

    @classmethod
    def load(cls, path: Path) -> SendLog:
        with np.load(path) as z:
            return cls(
                users=z["users"],
                kinds=z["kinds"],
                tick_first=z["tick_first"],
                tick_time=z["tick_time"],
                keys=int(z["keys"]),
                meta=json.loads(str(z["meta"])),
            )


def user_id(n: int) -> str:
    return f"{KEY_PREFIX}{n}"


def producer_config(bootstrap: str) -> dict:
    return kafka_config(
        bootstrap,
        {
            # Idempotence keeps a partition's order through retries: the n-th event of a user stays n-th.
            "enable.idempotence": True,
            # 50 ms of batching: measured here, it cuts the broker's CPU for 20k events/s about 4x
            # against 5 ms, and it is part of the end-to-end latency the verifier reports.
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            "delivery.report.only.error": True,
        },
    )


class DeliveryFailed(RuntimeError):
    """Some events were not acknowledged by the broker: the recorded truth would be wrong."""


def run(
    spec: LoadSpec, bootstrap: str, topic: str, clock=time.time, sleep=time.sleep, progress=None, make_producer=None
) -> SendLog:
    """Send the planned events at spec.rate; returns the send log. Raises DeliveryFailed if the
    broker did not take every event. `progress(sent, elapsed_s)` is called about once a second;
    `make_producer(config)` builds the producer (default: confluent_kafka.Producer)."""
    if make_producer is None:
        from confluent_kafka import Producer as make_producer

    failures: list[str] = []

    def on_error(err, _msg) -> None:  # only called for failed deliveries (delivery.report.only.error)
        if err is not None:
            failures.append(str(err))

    producer = make_producer({**producer_config(bootstrap), "on_delivery": on_error})
    users, kinds = plan(spec)
    keys = [user_id(n).encode() for n in range(spec.keys)]
    users_l, kinds_l = users.tolist(), kinds.tolist()
    tick_first: list[int] = []
    tick_time: list[float] = []
    produce, poll = producer.produce, producer.poll
    total, sent, late_max = spec.events, 0, 0.0
    start = clock()
    next_tick, next_report = start, start + 1.0
    while sent < total:
        now = clock()
        late_max = max(late_max, now - next_tick)
        n = due(spec.rate, now - start, total)
        if n > sent:
            tick_first.append(sent)
            tick_time.append(now)
            ts = int(now)
            for i in range(sent, n):
                u, kind = users_l[i], kinds_l[i]
                value = encode(keys[u], kind, ts)
                while True:
                    try:
                        produce(topic, value, keys[u])
                        break
                    except BufferError:  # the local queue is full: let librdkafka send
                        poll(0.01)
            sent = n
        poll(0)
        if progress is not None and now >= next_report:
            progress(sent, now - start)
            next_report += 1.0
        next_tick += TICK_S
        pause = next_tick - clock()
        if pause > 0:
            sleep(pause)
        elif pause < -1.0:
            next_tick = clock()  # far behind: stop counting missed ticks, `due` still catches up
    finished = clock()
    left = producer.flush(120)
    if left or failures:
        raise DeliveryFailed(
            f"{left} events not delivered in 120s, {len(failures)} failed "
            f"({failures[:3]}): the send log does not describe the topic"
        )
    elapsed = max(finished - start, 1e-9)
    achieved = total / elapsed if total else 0.0
    meta = {
        "topic": topic,
        "rate_target": spec.rate if math.isfinite(spec.rate) else None,
        "keys": spec.keys,
        "events": total,
        "malformed_share": spec.malformed,
        "sequential": spec.sequential,
        "seed": spec.seed,
        "started": start,
        "elapsed_s": round(elapsed, 3),
        "rate_achieved": round(achieved, 1),
        "late_max_s": round(late_max, 4),
        # The generator fell behind if it needed noticeably longer than planned.
        "fell_behind": bool(math.isfinite(spec.rate) and total and elapsed > total / spec.rate * 1.02 + 0.05),
    }
    return SendLog(
        users=users,
        kinds=kinds,
        tick_first=np.asarray(tick_first, dtype=np.int64),
        tick_time=np.asarray(tick_time, dtype=np.float64),
        keys=spec.keys,
        meta=meta,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="baton.tools.loadgen", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, default=20085.0, help="events/s ('inf' = unpaced)")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01, help="share of malformed events")
    length = ap.add_mutually_exclusive_group(required=True)
    length.add_argument("--seconds", type=float, help="run time at --rate")
    length.add_argument("--events", type=int, help="number of events")
    ap.add_argument("--sequential", action="store_true", help="user of event i is i %% keys (else random)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write the send log here (.npz)")
    ap.add_argument("--quiet", action="store_true", help="no per-second progress on stderr")
    args = ap.parse_args(argv)
    try:
        kw = dict(keys=args.keys, malformed=args.malformed, sequential=args.sequential, seed=args.seed)
        spec = (
            LoadSpec.for_duration(args.rate, args.seconds, **kw)
            if args.seconds is not None
            else LoadSpec(rate=args.rate, events=args.events, **kw)
        )
    except LoadgenError as exc:
        ap.error(str(exc))

    def report(sent: int, elapsed: float) -> None:
        print(
            f"loadgen: {sent} sent in {elapsed:.0f}s ({sent / max(elapsed, 1e-9):.0f}/s)", file=sys.stderr, flush=True
        )

    log = run(spec, args.bootstrap, args.topic, progress=None if args.quiet else report)
    if args.out is not None:
        log.save(args.out)
    print(json.dumps({**log.meta, "malformed": log.malformed(), "users": len(log.truth())}), flush=True)
    if log.meta["fell_behind"]:
        print(f"loadgen: fell behind: {log.meta['rate_achieved']}/s achieved of {spec.rate}/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
