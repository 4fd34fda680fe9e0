"""Independent verifier for the click-count output.

Reads the output topic with read_committed and compares every key with ground truth computed
from the input: per key, the counts emitted must be strictly increasing (a repeated count is a
duplicate emission), and the last one must equal the number of valid events for that key.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition


@dataclass
class Verdict:
    keys: int
    lost: list[str] = field(default_factory=list)        # final count below truth (or key missing)
    duplicated: list[str] = field(default_factory=list)  # a count emitted twice for a key
    wrong: list[str] = field(default_factory=list)       # final count above truth / unknown key / decreasing
    records: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong)

    def summary(self) -> dict:
        return {"keys": self.keys, "records": self.records, "lost": len(self.lost),
                "duplicated": len(self.duplicated), "wrong": len(self.wrong)}


def read_output(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> list[tuple[str, int]]:
    """(user_id, count) of every committed output record, in partition order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"baton-verify-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, done, deadline = [], set(), time.monotonic() + timeout_s
    try:
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"output topic {topic} not read to its end in {timeout_s}s")
            for m in c.consume(10_000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                    continue
                v = json.loads(m.value())
                out.append((v["user_id"], int(v["count"])))
    finally:
        c.close()
    return out


def verify(truth: Counter, output: list[tuple[str, int]]) -> Verdict:
    seen: dict[str, list[int]] = {}
    for user, count in output:
        seen.setdefault(user, []).append(count)
    v = Verdict(keys=len(truth), records=len(output))
    for user, counts in seen.items():
        if len(set(counts)) != len(counts):
            v.duplicated.append(user)
        if user not in truth or counts != sorted(counts) or counts[-1] > truth[user]:
            v.wrong.append(user)
    for user, n in truth.items():
        if user not in seen or seen[user][-1] < n:
            v.lost.append(user)
    return v
