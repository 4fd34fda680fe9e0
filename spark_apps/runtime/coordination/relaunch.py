"""A driver started again by its wrapper after it died (baton.driver_wrapper): what it does first.

The wrapper restarts a dead driver at once, as a container runtime would, with no look at the control
record (it is standard library only). So the restarted driver looks, before anything else:
- the control record no longer wants the slot running (a stop, FAILED, a reprocess that moved it on
  since the death): it exits 0, which the wrapper does not restart;
- else it records the restart in the slot's spec (`restarts`, the crash-loop guard's count, which
  baton_health reads, begun afresh when the dead driver had run well: RestartPolicy.stable_s;
  `reason`; the record's writer names the supervisor) and goes on. Its role comes from the control
  record like any start; a restarted active whose standby runs hands it the role first
  (runtime.coordination.step_down). A record the write loses to (a handoff moved the slot meanwhile) is
  not retried: the slot runs on, the count is one short.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

from baton.driver_wrapper import RELAUNCH_ENV, describe_exit
from baton.health import prune_restarts
from baton.health_policy import HealthPolicy
from baton.records import ControlRecord, Slot, SlotState

log = logging.getLogger(__name__)

SUPERVISOR = "supervisor"  # the control record's writer: "<slot> (supervisor)"
RESTARTED_BY_SUPERVISOR = "restarted by its supervisor"


@dataclass(frozen=True)
class Relaunch:
    restart: int  # how many times the wrapper restarted this launch's driver in its current count
    code: int  # how the previous driver ended
    at_ms: int
    fresh: bool = False  # the previous driver had run restart_stable_s: the crash-loop count begins again

    @classmethod
    def from_env(cls, environ=os.environ) -> Relaunch | None:
        raw = environ.get(RELAUNCH_ENV)
        if not raw:
            return None
        try:
            d = json.loads(raw)
            return cls(int(d["restart"]), int(d["code"]), int(float(d["at"]) * 1000), bool(d.get("fresh")))
        except (ValueError, KeyError, TypeError):
            log.warning("%s=%r is not a relaunch record: taken as a first start", RELAUNCH_ENV, raw)
            return None

    def reason(self) -> str:
        return (
            f"{RESTARTED_BY_SUPERVISOR} (restart {self.restart} of this launch): the driver {describe_exit(self.code)}"
        )


def wanted_running(control: ControlRecord | None, slot: Slot) -> str:
    """ "" if the control record still wants the slot running; else why the restart goes no further."""
    spec = control.slots.get(slot) if control is not None else None
    if spec is None:
        return "the control record names no such slot"
    if spec.desired not in (SlotState.STARTING, SlotState.RUNNING):
        return f"the control record wants it {spec.desired.value}" + (f" ({spec.reason})" if spec.reason else "")
    return ""


def record_restart(plane, app: str, slot: Slot, control: ControlRecord, relaunch: Relaunch, policy: HealthPolicy):
    """Append this restart to the slot's spec (the guard's count) at the desired state it has."""
    from baton.control_plane import SlotMoved, StaleEpoch
    from baton.lifecycle import IllegalTransition

    spec = control.slots[slot]
    now_ms = int(time.time() * 1000)
    kept = () if relaunch.fresh else prune_restarts(spec.restarts, now_ms, policy)
    restarts = (*kept, relaunch.at_ms)
    try:
        return plane.move_slot(app, slot, spec.desired, reason=relaunch.reason(), restarts=restarts, if_unchanged=spec)
    except (SlotMoved, StaleEpoch, IllegalTransition) as exc:
        log.warning("%s/%s: the restart was not recorded: %s", app, slot.value, exc)
        return None
