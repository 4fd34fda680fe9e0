"""`make demo` stopped while it starts (Ctrl-C, a kill, the terminal closed) stops what it started and
nothing more starts; a closed terminal does not keep it from stopping."""

import os
import signal
from types import SimpleNamespace

import pytest

from baton.local import __main__ as local_main


class Platform:
    """Records what the demo asked of it; `up` delivers `sig` to this process, as a terminal would."""

    def __init__(self, sig, state_dir):
        self.sig, self.calls = sig, []
        self.settings = SimpleNamespace(state_dir=state_dir)

    def up(self, say):
        self.calls.append("up")
        os.kill(os.getpid(), self.sig)

    def down(self, say):
        self.calls.append("down")
        say("broker: stopped")


@pytest.fixture
def handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_during_start_up_stops_the_platform_and_starts_nothing_more(handlers, monkeypatch, tmp_path, sig):
    started = []
    monkeypatch.setattr("baton.local.demo.Demo.start", lambda self, should_stop: started.append("start"))
    monkeypatch.setattr("baton.local.demo.Demo.watch", lambda self, should_stop: started.append("watch"))
    platform = Platform(sig, tmp_path)
    assert local_main.demo(platform) == 0
    assert platform.calls == ["up", "down"] and started == []


def test_a_closed_terminal_does_not_keep_the_demo_from_stopping(monkeypatch):
    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", broken)
    local_main.say_if_heard("stopping ...")  # no error: the stop goes on
