"""The standby yields the CPU to the active (spark_apps.runtime.coordination.priority): every thread of the slot's
process tree gets the standby's nice value while it is the standby and its start value back as the
active; a host where it could not get that back changes nothing."""

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baton.records import Role
from spark_apps.runtime.coordination import priority
from spark_apps.runtime.coordination.priority import SlotPriority, can_raise_priority, tree_threads

BASE = os.getpriority(os.PRIO_PROCESS, 0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake(threads=(101, 102, 103), may_raise=True, fail=None):
    calls, clock = [], Clock()

    def setpriority(which, tid, nice):
        if fail and tid in fail:
            raise OSError(fail[tid], os.strerror(fail[tid]))
        calls.append((tid, nice))

    slot = SlotPriority(
        10,
        root=100,
        clock=clock,
        threads=lambda root: list(threads),
        may_raise=lambda base: may_raise,
        setpriority=setpriority,
    )
    return slot, calls, clock


def test_the_standby_runs_lower_and_the_active_at_its_start_value():
    slot, calls, clock = fake()
    slot.follow(Role.STANDBY)
    assert calls == [(101, BASE + 10), (102, BASE + 10), (103, BASE + 10)]
    calls.clear()
    slot.follow(Role.STANDBY)  # no change: no walk
    assert calls == []
    clock.now = 1.5  # once more a second later: a thread started during the walk copied the old value
    slot.follow(Role.STANDBY)
    assert [nice for _, nice in calls] == [BASE + 10] * 3
    calls.clear()
    clock.now = 9.0
    slot.follow(Role.STANDBY)
    assert calls == []
    slot.follow(Role.ACTIVE)
    assert calls == [(101, BASE), (102, BASE), (103, BASE)]


def test_a_standby_whose_batch_runs_long_gets_its_priority_back():
    slot, calls, _ = fake()
    slot.follow(Role.STANDBY)
    calls.clear()
    slot.follow(Role.STANDBY, slow_batch=True)
    assert calls == [(101, BASE), (102, BASE), (103, BASE)]
    calls.clear()
    slot.follow(Role.STANDBY)  # its batches quick again
    assert [nice for _, nice in calls] == [BASE + 10] * 3


def test_a_host_that_would_not_let_the_priority_back_up_keeps_it_equal():
    slot, calls, _ = fake(may_raise=False)
    slot.follow(Role.STANDBY)
    assert calls == [] and not slot.enabled


def test_a_thread_that_ended_meanwhile_is_skipped_and_a_refusal_stops_the_changes():
    slot, calls, _ = fake(fail={102: errno.ESRCH})
    slot.follow(Role.STANDBY)
    assert calls == [(101, BASE + 10), (103, BASE + 10)] and slot.enabled
    slot, calls, _ = fake(fail={101: errno.EPERM})
    slot.follow(Role.STANDBY)
    slot.follow(Role.ACTIVE)
    assert calls == [] and not slot.enabled


def test_zero_leaves_the_priority_alone():
    slot = SlotPriority(0, threads=lambda root: pytest.fail("walked the threads"))
    slot.follow(Role.STANDBY)
    assert not slot.enabled


def test_the_tree_holds_every_thread_of_the_process_and_its_descendants(tmp_path):
    def proc(pid, ppid, comm, tids):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1\n")
        for tid in tids:
            (tmp_path / str(pid) / "task" / str(tid)).mkdir(parents=True)

    proc(10, 1, "python", [10, 11])
    proc(20, 10, "java) (x", [20, 21, 22])  # a name with a parenthesis and a space
    proc(30, 20, "python3", [30])
    proc(40, 1, "other", [40])
    (tmp_path / "self").mkdir()
    assert sorted(tree_threads(10, proc=tmp_path)) == [10, 11, 20, 21, 22, 30]
    assert tree_threads(99, proc=tmp_path) == []


def test_may_raise_from_the_capability_or_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(priority.os, "geteuid", lambda: 1000)
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t0000000000800000\n")  # bit 23: CAP_SYS_NICE
    assert can_raise_priority(0, status)
    status.write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    monkeypatch.setattr(priority.resource, "getrlimit", lambda which: (0, 0))
    assert not can_raise_priority(0, status)  # the default limit: only ever lower
    monkeypatch.setattr(priority.resource, "getrlimit", lambda which: (20, 20))
    assert can_raise_priority(0, status)
    assert not can_raise_priority(-1, status)


def test_a_real_process_tree_follows_the_role():
    """A child with a thread and a grandchild: each thread's nice as the kernel reports it. Where the
    priority could not be raised again, nothing is changed."""
    code = (
        "import subprocess, threading, time; threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); "
        "subprocess.Popen(['sleep', '30']); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(tree_threads(child.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)

        def nices():
            out = []
            for tid in tree_threads(child.pid):
                stat = Path(f"/proc/{tid}/stat").read_text()
                out.append(int(stat[stat.rindex(")") + 2 :].split()[16]))
            return out

        assert len(nices()) >= 3
        slot = SlotPriority(10, root=child.pid)
        slot.follow(Role.STANDBY)
        lowered = min(19, BASE + 10) if can_raise_priority(BASE) else BASE
        assert set(nices()) == {lowered}
        slot.follow(Role.ACTIVE)
        assert set(nices()) == {BASE}
    finally:
        os.killpg(child.pid, 9)
        child.wait()


def test_a_promoted_spare_driver_gets_its_wrapper_s_priority_and_follows_its_role_from_there():
    """A spare driver starts and holds 10 nice steps below its wrapper (baton.driver_wrapper.SPARE_NICE);
    once it is the slot's driver, every thread goes back to the wrapper's value, and the standby's
    increment is counted from that."""
    slot, calls, clock = fake()
    slot.rebase(BASE - 10)  # the wrapper's value, 10 below what this process started with
    assert calls == [(101, BASE - 10), (102, BASE - 10), (103, BASE - 10)]
    calls.clear()
    slot.follow(Role.STANDBY)
    assert [nice for _, nice in calls] == [BASE] * 3  # the wrapper's + 10
    calls.clear()
    slot.follow(Role.ACTIVE)
    assert [nice for _, nice in calls] == [BASE - 10] * 3
    calls.clear()
    slot.rebase(BASE - 10)  # the same: nothing to do
    assert calls == []
