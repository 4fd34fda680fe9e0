"""What a batch costs each role: the active collects its output to emit it; the standby runs its batch
for the state alone (the noop sink, nothing copied into Python), and a role that comes while a
standby's batch runs still gets every output it owes."""

from types import SimpleNamespace

import pytest

from baton.records import ControlRecord, Slot
from spark_apps.runtime.sink import batch_sink
from spark_apps.runtime.sink.batch_sink import RoleGatedSink

END = {0: 120, 1: 80}
START = {0: 100, 1: 60}


class FakeTable:
    def __init__(self, rows):
        self.rows, self.column_names = rows, ["key", "value"]

    def column(self, name):
        i = self.column_names.index(name)
        return SimpleNamespace(to_pylist=lambda: [r[i] for r in self.rows])


class FakeContext:
    """A thread's local properties, as the stream thread holds them when a batch starts."""

    def __init__(self):
        self.properties = {batch_sink.CALL_SITE_SHORT: "start at NativeMethodAccessorImpl.java:0"}

    def getLocalProperty(self, key):
        return self.properties.get(key)

    def setLocalProperty(self, key, value):
        self.properties[key] = value


class FakeFrame:
    """A foreachBatch frame: counts how the batch was run."""

    def __init__(self, rows, columns=("key", "value")):
        self.rows, self.columns = rows, list(columns)
        self.collected, self.noop_runs = 0, 0
        self.sparkSession = SimpleNamespace(sparkContext=FakeContext())
        frame = self

        class Writer:
            def format(self, name):
                assert name == "noop"
                return self

            def mode(self, mode):
                assert mode == "overwrite"
                return self

            def save(self):
                frame.noop_runs += 1

        self.write = Writer()

    def toArrow(self):  # as PySpark's: its job's call site set, then unset (SCCallSiteSync)
        self.collected += 1
        self.sparkSession.sparkContext.setLocalProperty(batch_sink.CALL_SITE_SHORT, None)
        return FakeTable(self.rows)


class FakeFollower:
    """snapshot() answers the role before the batch, then the role after it."""

    def __init__(self, *controls):
        self.controls, self.processed = list(controls), []

    def snapshot(self):
        control = self.controls.pop(0) if len(self.controls) > 1 else self.controls[0]
        return control, None

    def note_processed(self, end, emitted_epoch=None):
        self.processed.append((end, emitted_epoch))


class FakeEmitter:
    def __init__(self, emitted_up_to=None):
        self.emitted_up_to, self.acquired, self.emits, self.released = emitted_up_to, [], [], 0
        self.holding, self.epoch, self.corrected = False, None, False

    def acquire(self, epoch):
        self.acquired.append(epoch)
        self.holding, self.epoch = True, epoch

    def release(self):
        self.released += 1
        self.holding = False

    def already_emitted(self, end, start=None):
        return self.emitted_up_to is not None and all(self.emitted_up_to.get(p, -1) >= o for p, o in end.items())

    def emit(self, batch_id, start, end, out, dead):
        skipped = self.already_emitted(end, start)
        self.emits.append((batch_id, list(out), skipped))
        return SimpleNamespace(skipped=skipped)


def control(active: Slot, epoch: int = 1) -> ControlRecord:
    return ControlRecord(app="cc", revision=1, epoch=epoch, active=active)


@pytest.fixture
def make(monkeypatch, tmp_path):
    spooled = [
        SimpleNamespace(key=None, value=b"{", reason="invalid JSON", partition=0, offset=o) for o in (101, 102)
    ]  # two dead letters in the spool for the batch's range
    monkeypatch.setattr(batch_sink, "read_offset_log", lambda _ck, b: END if b == 5 else START)
    monkeypatch.setattr(batch_sink, "collect", lambda _spool, start, end: list(spooled))
    monkeypatch.setattr(batch_sink, "purge", lambda _spool, end: None)

    def build(follower, emitter):
        return RoleGatedSink(
            SimpleNamespace(input=SimpleNamespace(topic="clicks")),
            Slot.GREEN,
            SimpleNamespace(checkpoint=tmp_path, spool=tmp_path),
            follower,
            emitter,
            SimpleNamespace(note=lambda *a: None),
            mark=lambda phase: None,
        )

    return build


ROWS = [(b"alice", b'{"count": 3}'), (b"bob", b'{"count": 1}')]


def test_the_standby_runs_its_batch_for_its_state_without_collecting_its_output(make):
    follower, emitter, df = FakeFollower(control(Slot.BLUE)), FakeEmitter(), FakeFrame(ROWS)
    make(follower, emitter).on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (1, 0)
    assert emitter.acquired == [] and emitter.emits == []
    assert follower.processed == [(END, None)]


def test_the_standby_still_counts_its_dead_letters(make):
    h = make(FakeFollower(control(Slot.BLUE)), FakeEmitter())
    h.on_batch(FakeFrame(ROWS), 5)
    assert h.counters.dead_letters == 2


def test_the_active_collects_and_emits_its_output(make):
    follower, emitter, df = FakeFollower(control(Slot.GREEN, epoch=3)), FakeEmitter(), FakeFrame(ROWS)
    h = make(follower, emitter)
    h.on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (0, 1)
    assert emitter.emits == [(5, ROWS, False)] and h.counters.dead_letters == 2
    assert follower.processed == [(END, 3)]


def test_collecting_a_batch_leaves_the_stream_threads_call_site_as_it_was(make):
    df = FakeFrame(ROWS)
    make(FakeFollower(control(Slot.GREEN, epoch=3)), FakeEmitter()).on_batch(df, 5)
    assert df.collected == 1
    assert (
        df.sparkSession.sparkContext.getLocalProperty(batch_sink.CALL_SITE_SHORT)
        == "start at NativeMethodAccessorImpl.java:0"
    )


def test_a_role_that_came_during_a_standby_batch_whose_output_is_owed_runs_it_again_and_emits(make):
    follower = FakeFollower(control(Slot.BLUE), control(Slot.GREEN, epoch=2))
    emitter, df = FakeEmitter(emitted_up_to={0: 110, 1: 80}), FakeFrame(ROWS)  # partition 0 not emitted to 120
    make(follower, emitter).on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (1, 1)
    assert emitter.emits == [(5, ROWS, False)]
    assert follower.processed == [(END, 2)]


def test_a_role_that_came_during_a_standby_batch_the_active_had_emitted_runs_nothing_again(make):
    follower = FakeFollower(control(Slot.BLUE), control(Slot.GREEN, epoch=2))
    emitter, df = FakeEmitter(emitted_up_to={0: 500, 1: 500}), FakeFrame(ROWS)
    make(follower, emitter).on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (1, 0)
    assert emitter.emits == [(5, [], True)]
    assert follower.processed == [(END, None)]


def test_an_app_whose_dead_letters_travel_in_the_frame_collects_them_on_the_standby_too(make):
    h = make(FakeFollower(control(Slot.BLUE)), FakeEmitter())
    df = FakeFrame([], columns=("key", "value", "kind"))
    h.split = lambda table, start, end: ([], [("k", "v", [])])
    h.on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (0, 1)
    assert h.counters.dead_letters == 1


def test_a_standby_keeping_a_state_image_runs_its_batches_with_their_output_and_folds_them_in(make):
    """While a state image collects (spark_apps.runtime.state.state_image), no batch goes to the noop sink:
    the standby's output is taken into the image, and nothing is emitted."""
    follower, emitter = FakeFollower(control(Slot.BLUE)), FakeEmitter()
    sink = make(follower, emitter)
    assert sink.arm_image("run:1", committed=3) == 3  # no batch run by this launch yet: the committed one
    sink.last_batch = 4
    assert sink.arm_image("run:1", committed=3) == 4  # after the last batch its sink ran
    df = FakeFrame(ROWS)
    sink.on_batch(df, 5)
    assert (df.noop_runs, df.collected) == (0, 1) and emitter.emits == [] and emitter.acquired == []
    assert sink.image.through == 5 and sink.last_batch == 5
    assert sink.image.base(4, [(b"alice", b'{"count": 2}'), (b"carol", b'{"count": 1}')])
    assert sorted(sink.image.records_less(set())) == [
        (b"alice", b'{"count": 3}'),
        (b"bob", b'{"count": 1}'),
        (b"carol", b'{"count": 1}'),
    ]
    sink.image.drop()
    plain = FakeFrame(ROWS)
    sink.on_batch(plain, 6)
    assert (plain.noop_runs, plain.collected) == (1, 0)  # no image: the noop sink again
