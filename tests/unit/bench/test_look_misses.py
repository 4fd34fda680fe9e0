"""bench/throughput.look_misses: the share of events a batch's look missed (output a trigger later than the
first batch that looked after them), from the events' send times and latencies and blue's status records."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # throughput imports its neighbours by name, as when run

import throughput  # noqa: E402

from baton.records import Role, Slot, SlotState, StatusRecord  # noqa: E402


def batch(end_s: float, took_ms: int) -> StatusRecord:
    return StatusRecord(
        app="a",
        slot=Slot.BLUE,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        batch_id=int(end_s),
        batch_ms=took_ms,
        ts_ms=int(end_s * 1000),
    )


def test_an_event_output_a_trigger_after_the_first_batch_that_looked_after_it_is_missed():
    batches = [batch(10.3, 300), batch(11.3, 300), batch(12.3, 300)]  # looks at 10.0, 11.0, 12.0
    sent = np.array([10.2, 10.5, 10.75, 10.85])
    # The first is output by the batch that looked at 11.0 (end 11.3), the second a trigger late: missed. The
    # third, sent 0.25 s before that look, is missed by the 200 ms count only; the last, sent 0.15 s before
    # it, is due at the next batch under either.
    lat = np.array([11.35, 12.35, 12.3, 12.3]) - sent
    assert throughput.look_misses(sent, lat, batches) == {"share_200ms": 0.5, "share_300ms": 0.25}


def test_events_without_a_later_look_or_a_latency_are_not_counted():
    batches = [batch(10.3, 300)]
    sent = np.array([9.0, 9.5, 10.5])
    lat = np.array([1.35, np.nan, 0.5])  # output by the batch; never reflected; sent after the last look
    assert throughput.look_misses(sent, lat, batches) == {"share_200ms": 0.0, "share_300ms": 0.0}
    assert throughput.look_misses(sent, lat, []) == {}
