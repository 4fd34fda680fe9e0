"""The watch behind baton_watch: a death or a restarted slot's return is reported once; what held
before the watch began, a stop, a live but silent slot on this host and a broker's stall are not."""

from baton.leases import RECOVERY_GRACE_MS, Lease
from baton.records import Role, Slot, SlotState
from baton.slot_changes import DIED, RECENT_UP_MS, UP, SlotChangeWatch

INTERVAL, TTL, HOST = 1000, 4000, "here"


def lease(slot, ts, launch=None, state=SlotState.RUNNING, host=HOST, pid=None, app="app"):
    return Lease(
        app=app,
        slot=slot,
        launch=launch or f"{slot.value}-1",
        host=host,
        pid=pid or (10 if slot is Slot.BLUE else 20),
        pid_start=5,
        state=state,
        role=Role.ACTIVE if slot is Slot.BLUE else Role.STANDBY,
        epoch_seen=1,
        seq=1,
        ts_ms=ts,
        ttl_ms=TTL,
        interval_ms=INTERVAL,
    )


class Host:
    """Processes of this host: pid -> start ticks."""

    def __init__(self, *pids):
        self.procs = {pid: 5 for pid in pids}

    def start_of(self, pid):
        return self.procs.get(pid)


def watching(host, *leases):
    watch = SlotChangeWatch(HOST, host.start_of)
    for item in leases:
        watch.observe(item)
    watch.begin()
    return watch


def renewals(watch, slot, start, end, **kw):
    for ts in range(start, end + 1, INTERVAL):
        watch.observe(lease(slot, ts, **kw))


def test_a_slot_whose_process_is_gone_on_this_host_is_reported_dead_once():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    assert watch.changes() == []
    del host.procs[10]  # kill -9 of the active
    [change] = watch.changes()
    assert (change.app, change.slot, change.kind, change.launch) == ("app", Slot.BLUE, DIED, "blue-1")
    assert "pid 10 on here" in change.why
    assert watch.changes() == []  # reported once


def test_a_pid_reused_by_another_process_counts_as_gone():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    host.procs[10] = 99  # another process started since, with the same pid
    assert [c.kind for c in watch.changes()] == [DIED]


def test_what_held_before_the_watch_began_is_not_reported():
    host = Host(20)  # blue died before the watch; green runs
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    assert watch.changes() == []
    renewals(watch, Slot.GREEN, 1000, 20_000)
    assert watch.changes() == []


def test_a_stop_releases_the_lease_and_is_not_a_death():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    watch.observe(lease(Slot.GREEN, 1000, state=SlotState.STOPPED))
    del host.procs[20]
    assert watch.changes() == []


def test_a_live_but_silent_slot_on_this_host_is_left_to_its_standby_and_baton_health():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    renewals(watch, Slot.GREEN, 1000, 30_000)  # blue stopped (SIGSTOP): alive, not renewing
    assert watch.changes() == []


def test_a_slot_on_another_host_is_dead_once_silent_for_its_ttl_while_the_other_renews():
    host = Host(20)
    watch = watching(host, lease(Slot.BLUE, 0, host="there"), lease(Slot.GREEN, 0))
    renewals(watch, Slot.GREEN, 1000, TTL - 2 * INTERVAL)
    assert watch.changes() == []
    renewals(watch, Slot.GREEN, TTL - INTERVAL, TTL)
    [change] = watch.changes()
    assert (change.slot, change.kind) == (Slot.BLUE, DIED) and "not renewed" in change.why


def test_a_broker_stall_expires_nobody_until_the_grace_after_it():
    host = Host(20)
    watch = watching(host, lease(Slot.BLUE, 0, host="there"), lease(Slot.GREEN, 0))
    # 15 s with no renewal landing (the broker paused), then green's come back first
    renewals(watch, Slot.GREEN, 16_000, 16_000 + RECOVERY_GRACE_MS)
    assert watch.changes() == []
    watch.observe(lease(Slot.BLUE, 16_000 + RECOVERY_GRACE_MS, host="there"))  # blue reconnected within the grace
    renewals(watch, Slot.GREEN, 17_000 + RECOVERY_GRACE_MS, 17_000 + RECOVERY_GRACE_MS + TTL // 2)
    assert watch.changes() == []


def test_a_restarted_slot_is_reported_up_once_it_runs_and_can_die_again():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0))
    del host.procs[10]
    assert [c.kind for c in watch.changes()] == [DIED]
    host.procs[11] = 5  # baton_health restarts blue: a new launch
    watch.observe(lease(Slot.BLUE, 5000, launch="blue-2", pid=11, state=SlotState.RESTORING))
    assert watch.changes() == []
    watch.observe(lease(Slot.BLUE, 6000, launch="blue-2", pid=11))
    [up] = watch.changes()
    assert (up.slot, up.kind, up.launch) == (Slot.BLUE, UP, "blue-2") and "pid 11" in up.why
    watch.observe(lease(Slot.BLUE, 7000, launch="blue-2", pid=11))
    assert watch.changes() == []
    del host.procs[11]
    assert [(c.kind, c.launch) for c in watch.changes()] == [(DIED, "blue-2")]


def test_a_launch_running_at_the_start_is_not_reported_up_and_one_restoring_then_is():
    host = Host(10, 20)
    watch = watching(host, lease(Slot.BLUE, 0), lease(Slot.GREEN, 0, launch="green-2", state=SlotState.RESTORING))
    assert watch.changes() == []
    watch.observe(lease(Slot.GREEN, 1000, launch="green-2"))
    assert [(c.slot, c.kind) for c in watch.changes()] == [(Slot.GREEN, UP)]


def test_apps_are_watched_apart():
    host = Host(10, 20, 30, 40)
    watch = watching(
        host,
        lease(Slot.BLUE, 0),
        lease(Slot.GREEN, 0),
        lease(Slot.BLUE, 0, app="other", pid=30),
        lease(Slot.GREEN, 0, app="other", pid=40),
    )
    del host.procs[40]
    assert [(c.app, c.slot, c.kind) for c in watch.changes()] == [("other", Slot.GREEN, DIED)]


def test_a_launch_that_came_up_between_two_watches_is_reported_while_its_check_is_awaited():
    host = Host(10, 21)
    leases = [lease(Slot.BLUE, 0), lease(Slot.GREEN, 1000, launch="green-2", pid=21)]
    watch = SlotChangeWatch(HOST, host.start_of)
    for item in leases:
        watch.observe(item)
    assert watch.recently_up() == {("app", Slot.BLUE), ("app", Slot.GREEN)}
    watch.begin(awaiting_check={("app", Slot.GREEN)})  # green restarted: desired STARTING still
    assert [(c.slot, c.kind, c.launch) for c in watch.changes()] == [(Slot.GREEN, UP, "green-2")]
    assert watch.changes() == []


def test_a_launch_up_for_longer_than_the_recent_window_is_no_longer_recent():
    host = Host(10, 20)
    watch = SlotChangeWatch(HOST, host.start_of)
    watch.observe(lease(Slot.BLUE, 0))
    watch.observe(lease(Slot.GREEN, 0))
    renewals(watch, Slot.BLUE, 1000, RECENT_UP_MS + 2000)
    assert watch.recently_up() == set()
