"""The lease keeper's stall check: judged from its own delivered renewals, never a broker query."""

from types import SimpleNamespace

import pytest

from baton.kafka import fetch_wait
from spark_apps.runtime.coordination import lease as lease_module
from spark_apps.runtime.coordination.lease import LeaseKeeper


class FakeConsumer:
    def __init__(self):
        self.assigned, self.closed = None, False

    def assign(self, tps):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def close(self):
        self.closed = True

    def get_watermark_offsets(self, *_a, **_k):
        raise AssertionError("the stall check must not ask the broker")


@pytest.fixture
def keeper(monkeypatch):
    monkeypatch.setattr(fetch_wait, "_learned", {})
    k = LeaseKeeper.__new__(LeaseKeeper)
    k.bootstrap, k._fetch_wait = "broker:9092", 50
    k.app, k.slot = SimpleNamespace(name="app"), SimpleNamespace(value="blue")
    k._consumer = FakeConsumer()
    k._position = k._known_end = k._end_before = 0
    k._inflight = True
    made = []
    monkeypatch.setattr(k, "_new_consumer", lambda _wait: made.append(FakeConsumer()) or made[-1])
    k.made = made
    return k


def delivered(k, offset):
    k._delivered(None, SimpleNamespace(offset=lambda: offset))


def test_past_the_renewals_delivered_before_the_last_check_keeps_the_wait(keeper):
    delivered(keeper, 9)
    keeper._unless_stuck()  # the first check only notes the end
    keeper._position = 10  # read past renewal 9
    delivered(keeper, 10)  # one more, not yet read: delivered after the last check
    keeper._unless_stuck()
    assert keeper._fetch_wait == 50 and not keeper.made


def test_short_of_a_renewal_delivered_a_check_ago_reopens_with_a_longer_wait(keeper):
    delivered(keeper, 9)
    keeper._unless_stuck()
    keeper._position = 4  # a stall check later still short of offset 9
    keeper._unless_stuck()
    assert keeper._fetch_wait == 250
    assert keeper.made[0].assigned == [(lease_module.LEASES_TOPIC, 0, 4)]
    assert keeper._consumer is keeper.made[0]


def test_no_delivery_no_lengthening(keeper):
    """A paused or unreachable broker delivers nothing: a longer wait would not help."""
    keeper._position = 0
    for _ in range(3):
        keeper._unless_stuck()
    assert keeper._fetch_wait == 50 and not keeper.made


def test_an_undelivered_renewal_frees_the_next_and_moves_nothing(keeper):
    keeper._delivered(RuntimeError("timed out"), None)
    assert keeper._inflight is False and keeper._known_end == 0
