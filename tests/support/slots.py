"""Helpers for tests that run app slots as real processes against the real broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from baton.apps import AppDefinition, load_definition
from baton.driver_wrapper import JVM_TMPDIR_ENV
from baton.kafka.admin import TopicSpec, ensure_topics
from baton.kafka.client_config import kafka_config
from baton.kafka.markers import read_last_marker
from baton.records import Role, SlotState, StatusRecord
from baton.settings import CONTROL_TOPIC, STATUS_TOPIC

REPO = Path(__file__).resolve().parents[2]


def make_app(
    bootstrap: str,
    directory: Path,
    module: str = "spark_apps.apps.click_counts",
    partitions: int = 2,
    trigger_ms: int = 300,
    max_records: int = 2000,
    prefix: str = "cc",
    spare_driver: bool = False,
) -> tuple[AppDefinition, Path]:
    """A uniquely named app definition file with its topics created (the caller deletes them). Without a
    spare driver unless asked: a test that does not restart a driver need not pay for one's start."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nmodule: {module}\nversion: v1\n"
        f"input: {{topic: in-{name}, partitions: {partitions}}}\noutput: {{topic: out-{name}, partitions: {partitions}}}\n"
        f"trigger_ms: {trigger_ms}\nmax_records_per_trigger: {max_records}\n"
        f"spare_driver: {str(spare_driver).lower()}\n"
    )
    app = load_definition(path)
    ensure_topics(
        bootstrap,
        [TopicSpec(CONTROL_TOPIC, 1, {"cleanup.policy": "compact"}), TopicSpec(STATUS_TOPIC, 1), *app.topics()],
    )
    return app, path


def start_slot(
    bootstrap: str,
    path: Path,
    state_dir: Path,
    slot: str = "blue",
    starting_offsets: str = "earliest",
    generation: int = 0,
) -> subprocess.Popen:
    # The JVM's scratch files beside the test's state, not in /tmp (as the launcher does: baton.launch_tmp)
    jvm_tmp = Path(tempfile.mkdtemp(prefix=f"jvm-{slot}-", dir=state_dir))
    env = {**os.environ, "PYTHONPATH": str(REPO), JVM_TMPDIR_ENV: str(jvm_tmp)}
    log_path = state_dir / f"{path.stem}-{slot}.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spark_apps.runtime.run",
            "--app",
            str(path),
            "--slot",
            slot,
            "--bootstrap",
            bootstrap,
            "--state-dir",
            str(state_dir),
            "--starting-offsets",
            starting_offsets,
            "--generation",
            str(generation),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log_path = log_path  # what wait_for shows of a slot that exited
    return proc


def stop_slot(proc: subprocess.Popen, timeout_s: float = 90) -> int:
    """SIGTERM (graceful stop at a batch boundary); kill the group if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            raise AssertionError(f"slot pid {proc.pid} did not stop within {timeout_s}s of SIGTERM") from None
    return proc.returncode


def kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def click(user: str, ts: int) -> bytes:
    return json.dumps({"user_id": user, "timestamp": ts}).encode()


def produce_clicks(bootstrap: str, topic: str, n: int, users: int, bad_every: int = 0, start: int = 0):
    """n click events round-robin over `users` users; every `bad_every`-th one malformed. -> (truth, bad)."""
    p = Producer(kafka_config(bootstrap, {"linger.ms": 5}))
    truth, bad = Counter(), 0
    for i in range(start, start + n):
        if bad_every and i % bad_every == 0:
            p.produce(topic, b"{broken" if i % 2 else b'{"timestamp": 1}', b"bad")
            bad += 1
            continue
        u = f"user{i % users}"
        truth[u] += 1
        p.produce(topic, click(u, 1678886400 + i), u.encode())
    p.flush()
    return truth, bad


def wait_until_emitted(bootstrap: str, app: AppDefinition, total: int, timeout_s: float = 180):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = read_last_marker(bootstrap, app.commits_topic, app.name)
        if m is not None and sum(m.emitted.values()) >= total:
            return m
        time.sleep(1)
    raise AssertionError(f"output did not reach {total} input records in {timeout_s}s")


def wait_until_following(
    bootstrap: str, app: AppDefinition, slot: str, procs=(), timeout_s: float = 240
) -> StatusRecord:
    """The slot ran a batch as the standby and runs: what a handoff gate that lets the standby trail F
    and a takeover (baton.leases.decide_takeover) judge it by, and what a standby stopped (SIGSTOP) or
    killed before its first batch never has. Seen in CI on a slow host: the active had emitted 4,000
    records while its standby, niced, was still starting; held there, the cutover waited 120 s for nothing."""

    def batch():
        rs = read_status(bootstrap, app.name, slot)
        last = next((r for r in reversed(rs) if r.batch_id >= 0), None)
        ok = last is not None and last.role is Role.STANDBY and rs[-1].state is SlotState.RUNNING
        return last if ok else None

    return wait_for(f"{slot}'s first batch", batch, timeout_s, procs)


def read_topic(bootstrap: str, topic: str, keep, timeout_s: float = 120.0) -> list:
    """keep(message) -> item or None for every record of a one-partition topic, read to its end as the
    read began (or an EOF, or 5 s without a record).

    Bounded by the end offset taken first: Tansu's end is the last batch's base + 1, so with slots
    publishing status all the time an EOF may never come and a read to the live end never ended (a
    600 s hang in CI)."""
    c = Consumer(
        kafka_config(
            bootstrap, {"group.id": uuid.uuid4().hex, "isolation.level": "read_committed", "enable.partition.eof": True}
        )
    )
    try:
        tp = TopicPartition(topic, 0, 0)
        end = c.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        c.assign([tp])
        out = []
        deadline = time.monotonic() + timeout_s
        while end > 0:
            m = c.poll(5)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                break
            if not m.error() and (item := keep(m)) is not None:
                out.append(item)
            if c.position([tp])[0].offset >= end:
                for m in c.consume(100_000, 0.2):  # the rest of the batch holding it (Tansu's end is its base)
                    if not m.error() and (item := keep(m)) is not None:
                        out.append(item)
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic} not read to offset {end} within {timeout_s:.0f} s (at {c.position([tp])[0].offset})"
                )
        return out
    finally:
        c.close()


def read_json_output(bootstrap: str, topic: str, partitions: int) -> list[tuple[str, dict]]:
    """(key, value as JSON) of every committed record of an app's output, partition by partition, read to
    its end (each partition's EOF)."""
    c = Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": uuid.uuid4().hex,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            },
        )
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, done = [], set()
    try:
        while len(done) < partitions:
            msgs = c.consume(10_000, 5)
            assert msgs, f"output topic {topic} not read to its end"
            for m in msgs:
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    done.add(m.partition())
                else:
                    out.append((m.key().decode(), json.loads(m.value())))
    finally:
        c.close()
    return out


def read_status(bootstrap: str, app_name: str, slot: str = "blue") -> list[StatusRecord]:
    key = f"{app_name}/{slot}".encode()
    return read_topic(bootstrap, STATUS_TOPIC, lambda m: StatusRecord.from_bytes(m.value()) if m.key() == key else None)


def wait_for(what: str, check, timeout_s: float = 180, procs=(), every_s: float = 0.3):
    """check()'s first truthy value, polled; fails if one of `procs` (slot processes) exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        for p in procs:
            assert p.poll() is None, f"a slot exited (code {p.returncode}) while waiting for {what}{log_tail(p)}"
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def log_tail(proc, lines: int = 40) -> str:
    """The end of a slot's log, without the JVM's and librdkafka's noise: why it exited, in the failure."""
    path = getattr(proc, "log_path", None)
    if path is None or not path.exists():
        return ""
    return f"; the end of {path.name}:\n" + "\n".join(driver_log_end(path, lines))


def driver_log_end(path: Path, lines: int = 40) -> list[str]:
    """The last `lines` lines of a slot driver's log that say something (no JVM stack frames, WARN lines
    or librdkafka chatter)."""
    keep = [
        ln
        for ln in Path(path).read_text(errors="replace").splitlines()
        if ln.strip() and "rdkafka" not in ln and " WARN " not in ln and not ln.lstrip().startswith("at ")
    ]
    return keep[-lines:]
