"""The host-wide lock around a transactional.id's init and commit: held by one process at a time, and a
holder that never lets go delays the others by the wait only."""

import subprocess
import sys
import time

from baton.kafka.txn_window import lock_path, txn_window

HOLD = """
import sys, time
from pathlib import Path
from baton.kafka.txn_window import txn_window
with txn_window("b:9092", "baton.control.app", root=Path(sys.argv[1])) as held:
    print("held" if held else "not held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold_in_another_process(root, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_another_process_waits_for_the_holder_to_let_go(tmp_path):
    holder = hold_in_another_process(tmp_path, 1.0)
    t0 = time.monotonic()
    with txn_window("b:9092", "baton.control.app", wait_s=10, root=tmp_path) as held:
        waited = time.monotonic() - t0
    holder.wait(10)
    assert held and 0.5 < waited < 5, waited


def test_a_holder_that_never_lets_go_costs_the_wait_then_the_write_goes_on(tmp_path):
    holder = hold_in_another_process(tmp_path, 30)
    try:
        t0 = time.monotonic()
        with txn_window("b:9092", "baton.control.app", wait_s=0.5, root=tmp_path) as held:
            waited = time.monotonic() - t0
        assert not held and 0.5 <= waited < 3, waited
    finally:
        holder.kill()
        holder.wait(10)
    # A killed holder's lock is the kernel's to release: the next one takes it at once.
    with txn_window("b:9092", "baton.control.app", wait_s=0.5, root=tmp_path) as held:
        assert held


def test_ids_and_clusters_have_locks_of_their_own(tmp_path):
    holder = hold_in_another_process(tmp_path, 30)
    try:
        for bootstrap, txn_id in (("b:9092", "baton.control.other"), ("c:9092", "baton.control.app")):
            with txn_window(bootstrap, txn_id, wait_s=0.5, root=tmp_path) as held:
                assert held
    finally:
        holder.kill()
        holder.wait(10)
    assert lock_path("b:9092", "x/y z", tmp_path).parent == tmp_path


def test_no_lock_file_means_no_lock_not_a_failed_write(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the lock directory would be
    with txn_window("b:9092", "baton.control.app", root=blocked / "locks") as held:
        assert held is False
