"""A graceful stop never waits on the batch it stops: Spark's query.stop() joins the batch thread,
which may be entering the sink (on_batch) right then."""

import threading
from types import SimpleNamespace

import pytest

from spark_apps.runtime.harness import Harness
from spark_apps.runtime.sink.batch_sink import RoleGatedSink, SlotStopping


class FakeQuery:
    """query.stop() as Spark does it: wait for the batch thread to end (here at most 5 s)."""

    def __init__(self, batch_thread: threading.Thread):
        self.batch_thread = batch_thread
        self.stopped_in_time = None

    def stop(self):
        self.batch_thread.join(5)
        self.stopped_in_time = not self.batch_thread.is_alive()


def bare_harness() -> Harness:
    h = Harness.__new__(Harness)  # only what stop_query and the sink's entry use
    h.sink = RoleGatedSink(SimpleNamespace(), None, SimpleNamespace(), None, None, None, mark=lambda phase: None)
    return h


def test_a_batch_entering_the_sink_during_the_stop_does_not_run_and_does_not_block_it():
    h = bare_harness()
    raised = []
    entered = threading.Event()

    def batch():  # the batch thread: it reaches on_batch while stop_query runs
        entered.wait(5)
        try:
            h.sink.on_batch(None, 7)
        except SlotStopping as exc:
            raised.append(str(exc))

    thread = threading.Thread(target=batch)
    h.query = FakeQuery(thread)
    thread.start()
    original = h.query.stop

    def stop_with_batch_arriving():
        entered.set()  # the batch thread calls on_batch now, while Spark waits for it
        original()

    h.query.stop = stop_with_batch_arriving
    h.stop_query()
    assert h.query.stopped_in_time is True
    assert raised == ["batch 7 not run: the slot is stopping"] and h.sink.refused_batch


def test_a_running_batch_finishes_its_sink_before_the_stop():
    h = bare_harness()
    order = []
    h.sink.lock.acquire()  # a batch is in its sink

    def finish_batch():
        order.append("batch done")
        h.sink.lock.release()

    timer = threading.Timer(0.3, finish_batch)
    h.query = type("Q", (), {"stop": lambda self: order.append("query stopped")})()
    timer.start()
    h.stop_query()
    timer.join()
    assert order == ["batch done", "query stopped"]
    with pytest.raises(SlotStopping):
        h.sink.on_batch(None, 8)
