"""The load generator's pure logic: pacing math, the event plan, encodings, the send log."""

import json
import math

import numpy as np
import pytest

from baton.tools import loadgen
from baton.tools.loadgen import (
    NO_TIMESTAMP,
    NO_USER,
    NOT_JSON,
    VALID,
    DeliveryFailed,
    LoadgenError,
    LoadSpec,
    SendLog,
    due,
    encode,
    plan,
)


def test_due_is_rate_times_elapsed_capped_at_total():
    assert due(1000, 0.0, 10_000) == 0
    assert due(1000, -1.0, 10_000) == 0
    assert due(1000, 0.0055, 10_000) == 5
    assert due(20085, 1.0, 10**9) == 20085
    assert due(1000, 60.0, 10_000) == 10_000
    assert due(math.inf, 0.001, 123) == 123


def test_spec_rejects_bad_parameters_by_name():
    for kw, word in [
        (dict(rate=0), "rate"),
        (dict(keys=0), "keys"),
        (dict(events=-1), "events"),
        (dict(malformed=1.0), "malformed"),
        (dict(malformed=-0.1), "malformed"),
    ]:
        with pytest.raises(LoadgenError, match=word):
            LoadSpec(**{"rate": 10, "keys": 5, "events": 10, **kw})
    with pytest.raises(LoadgenError, match="finite rate"):
        LoadSpec.for_duration(math.inf, 3, keys=1)
    assert LoadSpec.for_duration(20085, 180, keys=100_000).events == 3_615_300


def test_plan_is_deterministic_and_malformed_share_is_close():
    spec = LoadSpec(rate=1, keys=1000, events=200_000, malformed=0.01, seed=3)
    u1, k1 = plan(spec)
    u2, k2 = plan(spec)
    assert np.array_equal(u1, u2) and np.array_equal(k1, k2)
    assert u1.min() >= 0 and u1.max() < 1000
    bad = np.count_nonzero(k1 != VALID)
    # Binomial(200000, 0.01): mean 2000, sd ~44.5; 5 sd either side.
    assert 1777 < bad < 2223
    kinds = np.bincount(k1[k1 != VALID], minlength=4)
    assert kinds[VALID] == 0 and max(kinds[1:]) - min(kinds[1:]) <= 1  # equal parts of the three kinds
    assert not np.array_equal(plan(LoadSpec(rate=1, keys=1000, events=1000, seed=4))[0], u1[:1000])


def test_sequential_plan_visits_every_key_in_order():
    users, kinds = plan(LoadSpec(rate=1, keys=4, events=10, sequential=True))
    assert users.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert not kinds.any()


def test_encodings_valid_and_malformed():
    assert json.loads(encode(b"user7", VALID, 1700000000)) == {"user_id": "user7", "timestamp": 1700000000}
    with pytest.raises(ValueError):
        json.loads(encode(b"user7", NOT_JSON, 1))
    assert json.loads(encode(b"user7", NO_USER, 5)) == {"timestamp": 5}
    assert json.loads(encode(b"user7", NO_TIMESTAMP, 5)) == {"user_id": "user7"}


def _log() -> SendLog:
    # 6 events over 3 ticks: user 1, 2(bad), 1 | 0 | 1, 2
    return SendLog(
        users=np.array([1, 2, 1, 0, 1, 2], dtype=np.int32),
        kinds=np.array([VALID, NOT_JSON, VALID, VALID, VALID, VALID], dtype=np.int8),
        tick_first=np.array([0, 3, 4]),
        tick_time=np.array([10.0, 10.5, 11.0]),
        keys=3,
        meta={"rate_target": 4},
    )


def test_send_log_times_truth_and_valid_events():
    log = _log()
    assert log.send_times().tolist() == [10.0, 10.0, 10.0, 10.5, 11.0, 11.0]
    users, times = log.valid()
    assert users.tolist() == [1, 1, 0, 1, 2] and times.tolist() == [10.0, 10.0, 10.5, 11.0, 11.0]
    assert log.truth() == {"user1": 3, "user0": 1, "user2": 1}
    assert log.malformed() == 1


def test_send_log_round_trip(tmp_path):
    path = tmp_path / "sends.bin"  # any name: np.savez must not append ".npz"
    _log().save(path)
    back = SendLog.load(path)
    assert back.truth() == _log().truth() and back.meta == {"rate_target": 4}
    assert np.array_equal(back.tick_time, _log().tick_time)


class FakeProducer:
    def __init__(self, config, fail_every=0, full_every=0):
        self.config, self.sent, self.fail_every, self.full_every, self.calls = config, [], fail_every, full_every, 0

    def produce(self, topic, value, key):
        self.calls += 1
        if self.full_every and self.calls % self.full_every == 0:
            raise BufferError("queue full")
        self.sent.append((key, value))

    def poll(self, _t):
        return 0

    def flush(self, _t):
        if self.fail_every:
            for _ in self.sent[:: self.fail_every]:
                self.config["on_delivery"]("broker said no", None)
        return 0


class FakeClock:
    def __init__(self, stall_at=None, stall_s=0.0):
        self.t, self.stall_at, self.stall_s = 1000.0, stall_at, stall_s

    def time(self):
        return self.t

    def sleep(self, s):
        self.t += s
        if self.stall_at is not None and self.t >= self.stall_at:
            self.t += self.stall_s  # the process was descheduled once
            self.stall_at = None


def _run(spec, clock, **fake):
    made = []

    def make(config):
        made.append(FakeProducer(config, **fake))
        return made[0]

    log = loadgen.run(spec, "x:1", "t", clock=clock.time, sleep=clock.sleep, make_producer=make)
    return log, made[0]


def test_run_paces_by_ticks_and_records_what_it_sent():
    spec = LoadSpec(rate=1000, keys=50, events=2000, malformed=0.05)
    clock = FakeClock()
    log, producer = _run(spec, clock, full_every=97)
    assert len(producer.sent) == 2000  # every event, despite a full queue now and then
    users, kinds = plan(spec)
    assert [k for k, _ in producer.sent] == [f"user{u}".encode() for u in users.tolist()]
    assert np.array_equal(log.users, users) and log.malformed() == np.count_nonzero(kinds)
    # Ticks of TICK_S at 1000/s: 1000 * TICK_S events each, on an absolute schedule from 1000.0.
    per_tick = np.diff(np.append(log.tick_first, 2000))
    assert per_tick.max() <= 1000 * loadgen.TICK_S + 1 and per_tick.sum() == 2000
    assert len(log.tick_time) == pytest.approx(2.0 / loadgen.TICK_S, abs=2)
    assert np.all(np.diff(log.tick_time) > 0)
    assert log.tick_time[-1] - 1000.0 == pytest.approx(2.0, abs=0.01)
    # Each event's timestamp is its tick's wall time.
    first_valid = next(v for (_, v), k in zip(producer.sent, kinds) if k == VALID)
    assert json.loads(first_valid)["timestamp"] == 1000
    assert log.meta["rate_achieved"] == pytest.approx(1000, rel=0.01) and not log.meta["fell_behind"]


def test_a_stall_is_caught_up_and_reported():
    clock = FakeClock(stall_at=1000.5, stall_s=0.7)
    log, producer = _run(LoadSpec(rate=1000, keys=5, events=2000), clock)
    assert len(producer.sent) == 2000
    # The tick after the stall sends the 0.7 s it missed at once, and the run still ends on time.
    assert np.diff(np.append(log.tick_first, 2000)).max() >= 690
    assert log.meta["late_max_s"] >= 0.7
    assert not log.meta["fell_behind"]


def test_a_stall_past_the_planned_end_is_falling_behind():
    clock = FakeClock(stall_at=1001.9, stall_s=1.0)
    log, _ = _run(LoadSpec(rate=1000, keys=5, events=2000), clock)
    assert log.meta["fell_behind"] and log.meta["rate_achieved"] < 700


def test_failed_deliveries_fail_the_run():
    with pytest.raises(DeliveryFailed, match="failed"):
        _run(LoadSpec(rate=1000, keys=5, events=100), FakeClock(), fail_every=10)
