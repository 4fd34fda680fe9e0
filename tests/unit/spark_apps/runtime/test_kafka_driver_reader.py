"""The driver-side reader's choice of consumer: paced while a cap bounds the slot (it follows), at once
otherwise, and the user's kafka.* settings over either (prefetch.py, "Paced fetching")."""

import json

import confluent_kafka
import pytest

from spark_apps.runtime.source import kafka_driver_reader
from spark_apps.runtime.source.kafka_driver_reader import (
    FOLLOW_FETCH_PACE_MS,
    FOLLOW_WINDOW_LEAD_S,
    TAIL_FETCH_LEAD_S,
    DriverStreamReader,
)
from spark_apps.runtime.source.source_options import parse_options


class RecordedPrefetcher:
    def __init__(self, make_consumer, topic, begin, width, decode, max_buffered, **kw):
        self.make_consumer, self.kw = make_consumer, kw


def reader(tmp_path, monkeypatch, **options):
    monkeypatch.setattr(kafka_driver_reader, "Prefetcher", RecordedPrefetcher)
    monkeypatch.setattr(confluent_kafka, "Consumer", lambda conf: conf)  # a consumer is its conf here
    return DriverStreamReader(
        parse_options(
            {
                "kafka.bootstrap.servers": "127.0.0.1:9",
                "topic": "t",
                "readOn": "driver",
                "capFile": str(tmp_path / "cap.json"),
                **options,
            }
        )
    )


def test_a_capped_slot_follows_and_its_paced_consumer_waits_after_each_fetch(tmp_path, monkeypatch):
    r = reader(tmp_path, monkeypatch)
    assert r._limits([0, 1]) == ({0: float("inf"), 1: float("inf")}, False)  # no cap file: the active
    (tmp_path / "cap.json").write_text(json.dumps({"0": 5, "1": 7}))
    assert r._limits([0, 1]) == ({0: 5, 1: 7}, True)
    pf = r._prefetcher({0: 0, 1: 0}, True)
    assert pf.kw["paced"] is True
    at_once, paced = pf.make_consumer(), pf.kw["make_paced_consumer"]()
    assert (at_once["queued.min.messages"], at_once["fetch.queue.backoff.ms"]) == (1_000_000, 1)
    assert (paced["queued.min.messages"], paced["fetch.queue.backoff.ms"]) == (1, FOLLOW_FETCH_PACE_MS)
    assert {k: v for k, v in paced.items() if k not in at_once or at_once[k] != v} == {
        "queued.min.messages": 1,
        "fetch.queue.backoff.ms": FOLLOW_FETCH_PACE_MS,
        "max.partition.fetch.bytes": 4 * 1024 * 1024,
    }  # otherwise the same consumer


def test_the_user_s_kafka_settings_win_over_the_pace(tmp_path, monkeypatch):
    r = reader(tmp_path, monkeypatch, **{"kafka.fetch.queue.backoff.ms": "50"})
    pf = r._prefetcher({0: 0}, False)
    assert pf.kw["make_paced_consumer"]()["fetch.queue.backoff.ms"] == "50"
    assert pf.make_consumer()["fetch.queue.backoff.ms"] == "50"


def test_an_active_on_a_trigger_interval_fetches_nothing_at_its_ends_until_the_window_before_its_next_batch(
    tmp_path, monkeypatch
):
    r = reader(tmp_path, monkeypatch, minBatchIntervalMs="1000")
    assert r._quiet_until(False) == 0.0  # no look yet
    r._pacer.hold(now=100.0)  # a batch looked at the input
    assert r._quiet_until(False) == pytest.approx(100.95 - TAIL_FETCH_LEAD_S)
    assert r._quiet_until(True) == 0.0  # a slot that follows unpaced (a fence): its consumer is paced instead
    r._target = {0: 10}
    assert r._quiet_until(False) == 0.0  # AvailableNow reads to its target at once
    slow = reader(tmp_path, monkeypatch, minBatchIntervalMs="10000")
    slow._pacer.hold(now=100.0)
    assert slow._quiet_until(False) == pytest.approx(109.95 - 2.5)  # a quarter of a long interval
    untimed = reader(tmp_path, monkeypatch)
    untimed._pacer.hold(now=100.0)
    assert untimed._quiet_until(False) == 0.0  # no interval: every tick may start a batch


def test_a_standby_whose_cap_is_paced_fetches_in_a_window_before_the_cap_moves_next(tmp_path, monkeypatch):
    """pace_hint.py: the follower's hint, in wall-clock time, becomes the reader's quiet time (monotonic)."""
    from spark_apps.runtime.source.pace_hint import write_pace_hint

    r = reader(tmp_path, monkeypatch, minBatchIntervalMs="1000")
    r._pacer.hold(now=100.0)
    assert r._quiet_until(True) == 0.0  # no hint: fetch as records come
    monkeypatch.setattr(kafka_driver_reader.time, "time", lambda: 5000.0)
    monkeypatch.setattr(kafka_driver_reader.time, "monotonic", lambda: 200.0)
    write_pace_hint(tmp_path / "cap.json", 5002.0)
    assert r._quiet_until(True) == pytest.approx(202.0 - FOLLOW_WINDOW_LEAD_S)
    assert r._quiet_until(False) == pytest.approx(100.95 - TAIL_FETCH_LEAD_S)  # an active: its own window
    r._target = {0: 10}
    assert r._quiet_until(True) == 0.0  # AvailableNow reads to its target at once
    r._target = None
    (tmp_path / "cap.json.pace").write_text("garbage")
    assert r._quiet_until(True) == 0.0  # a hint that cannot be read is none
    write_pace_hint(tmp_path / "cap.json", None)
    assert r._quiet_until(True) == 0.0 and not (tmp_path / "cap.json.pace").exists()
