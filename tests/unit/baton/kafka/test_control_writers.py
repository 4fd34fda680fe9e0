"""The process's cache of control writers stays bounded: the least recently used is closed."""

from baton.kafka import control_log


def test_the_least_recently_used_writer_is_closed_beyond_the_bound(monkeypatch):
    closed: list[str] = []
    monkeypatch.setattr(control_log, "CACHED_WRITERS", 2)
    monkeypatch.setattr(control_log, "_writers", control_log.OrderedDict())
    monkeypatch.setattr(control_log.ControlWriter, "close", lambda self: closed.append(self.app))

    a = control_log._writer("b:1", "a")
    control_log._writer("b:1", "b")
    assert control_log._writer("b:1", "a") is a  # used again: now the most recent
    control_log._writer("b:1", "c")

    assert closed == ["b"]
    assert list(control_log._writers) == [("b:1", "a"), ("b:1", "c")]


def test_close_writers_closes_those_of_one_bootstrap(monkeypatch):
    closed: list[tuple[str, str]] = []
    monkeypatch.setattr(control_log, "_writers", control_log.OrderedDict())
    monkeypatch.setattr(control_log.ControlWriter, "close", lambda self: closed.append((self.bootstrap, self.app)))
    for bootstrap, app in [("b:1", "a"), ("b:2", "a"), ("b:1", "c")]:
        control_log._writer(bootstrap, app)

    control_log.close_writers("b:1")

    assert closed == [("b:1", "a"), ("b:1", "c")]
    assert list(control_log._writers) == [("b:2", "a")]


def test_a_closed_writer_holds_no_clients():
    w = control_log.ControlWriter("b:1", "a")
    w._producer, w._consumer = _Client(), _Client()
    producer, consumer = w._producer, w._consumer

    w.close()

    assert producer.closed and consumer.closed
    assert w._producer is None and w._consumer is None


class _Client:
    closed = False

    def close(self):
        self.closed = True
