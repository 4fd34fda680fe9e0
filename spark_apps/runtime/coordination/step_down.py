"""A restarted active hands the role to its running standby before it starts (baton.leases.decide_step_down
says when and why it is the restarted active's move, not the standby's).

In this order, each step for the reason given:
1. read the standby's newest status (running, as the standby, fresh, how far it got) and decide without
   touching anything: most restarts of an active find no running standby (both slots died) and go on;
2. fence the app's writer (spark_apps.runtime.coordination.lease.fence_writer): nobody can commit from
   now on but a writer initialised later, and the only one that could initialise one, this driver,
   does not until it is the active with a query running;
3. read the last commit marker, final now: the failover fence F the standby reads up to, then emits from;
4. decide again with F;
5. one compare-and-set at the epoch read (baton.handoff.take_over for the standby), written by
   "<slot> (supervisor)": a standby that took over by its own lease watch first (it saw this slot's dead
   process) makes it a no-op (HandoffError, StaleEpoch);
6. hand the record to the follower at once: this slot starts as the standby.
"""

from __future__ import annotations

import logging
import time

from baton.apps import AppDefinition
from baton.handoff import HandoffError, take_over
from baton.kafka.markers import read_last_marker
from baton.kafka.tail import read_tail
from baton.leases import decide_step_down
from baton.records import ControlRecord, RecordError, Slot, StatusRecord
from baton.settings import STATUS_TOPIC
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.coordination.lease import fence_writer
from spark_apps.runtime.coordination.relaunch import SUPERVISOR

log = logging.getLogger(__name__)


def newest_standby_status(bootstrap: str, app: str, slot: Slot, last_n: int = 2000) -> StatusRecord | None:
    """The slot's newest status record that reports a batch, among the last `last_n` of the status topic."""
    key = f"{app}/{slot.value}".encode()

    def keep(m):
        if m.key() != key:
            return None
        try:
            rec = StatusRecord.from_bytes(m.value())
        except RecordError:
            return None
        return rec if rec.batch_id >= 0 else None

    found = read_tail(bootstrap, STATUS_TOPIC, keep, last_n=last_n)
    return found[-1] if found else None


def step_down_if_standby_runs(
    bootstrap: str, app: AppDefinition, slot: Slot, control: ControlRecord, follower: Follower
) -> ControlRecord | None:
    """Hand the role to the running standby (the module's steps); the record written, or None: go on as
    the active."""
    if control.active is not slot:
        return None
    standby = newest_standby_status(bootstrap, app.name, slot.other)  # 1
    last = read_last_marker(bootstrap, app.commits_topic, app.name)
    emitted = dict(last.emitted) if last is not None else {}
    decision = decide_step_down(control, slot, standby, emitted, app.max_lag_records, int(time.time() * 1000))
    if not decision.go:
        log.info("%s/%s restarts as the active: %s", app.name, slot.value, decision.reason)
        return None
    t0 = time.monotonic()
    fence_writer(bootstrap, app.name)  # 2
    final = read_last_marker(bootstrap, app.commits_topic, app.name)  # 3
    fence = {p: (final.emitted.get(p, 0) if final else 0) for p in range(app.input.partitions)}
    decision = decide_step_down(control, slot, standby, fence, app.max_lag_records, int(time.time() * 1000))  # 4
    if not decision.go:
        log.warning("%s/%s: no step-down after fencing the writer: %s", app.name, slot.value, decision.reason)
        return None
    from baton.control_plane import ControlPlane, KafkaControlStore, StaleEpoch

    plane = ControlPlane(KafkaControlStore(bootstrap), writer=f"{slot.value} ({SUPERVISOR})")
    try:  # 5
        record = plane.update(
            app.name,
            take_over(slot.other, control.epoch, fence, decision.reason, int(time.time() * 1000)),
            expected_epoch=control.epoch,
        )
    except (HandoffError, StaleEpoch) as exc:
        log.warning("%s/%s: step-down not written (the standby took over first?): %s", app.name, slot.value, exc)
        return None
    follower.apply_control(record)  # 6
    log.warning(
        "%s/%s: handed the active role to %s at epoch %d at %s in %.2f s: %s",
        app.name,
        slot.value,
        slot.other.value,
        record.epoch,
        fence,
        time.monotonic() - t0,
        decision.reason,
    )
    return record
