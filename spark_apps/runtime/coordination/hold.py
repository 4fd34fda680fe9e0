"""Holds of a driver started ahead of its turn, with Spark up and nothing of the slot touched.

A staged launch's hold (baton.launcher.stage): start the interpreter, the JVM and the Spark session
while the slot's current launch still runs, then wait, touching neither the checkpoint nor any topic,
until the slot's identity record names this launch. The launcher writes that record only once the
previous launch is gone, so the start-up (7-10 s at the seed's rate) runs while the old launch stops
(2-3 s) instead of after it.

A spare driver's hold (SpareHold): the wrapper keeps one beside the driver and hands it a dead driver's
place, so a restart skips the interpreter, JVM and Spark session start."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from baton.driver_wrapper import LAUNCH_ID_ENV, RELAUNCH_ENV

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hold:
    record: Path  # the slot's driver.json
    timeout_s: float  # a staged launch never promoted (its restart failed) ends by itself after this

    def recorded(self, launch_id: str) -> bool:
        try:
            return json.loads(self.record.read_text()).get("launch_id") == launch_id
        except (FileNotFoundError, ValueError):  # mid-replace or not there: not yet
            return False

    def wait(self, stop: threading.Event, launch_id: str | None = None, poll_s: float = 0.1) -> bool:
        """True once the record names this launch (BATON_LAUNCH_ID); False on a stop or the timeout."""
        launch_id = launch_id if launch_id is not None else os.environ.get(LAUNCH_ID_ENV, "")
        if not launch_id:
            raise RuntimeError(f"a staged launch needs {LAUNCH_ID_ENV} (set by baton.launcher) to know its record")
        started = time.monotonic()
        while not stop.is_set():
            if self.recorded(launch_id):
                log.warning(
                    "staged launch %s promoted after %.1f s: the query starts", launch_id, time.monotonic() - started
                )
                return True
            if time.monotonic() - started > self.timeout_s:
                log.error(
                    "staged launch %s was not promoted within %.0f s (the restart that staged it did not "
                    "complete): exiting without touching the slot",
                    launch_id,
                    self.timeout_s,
                )
                return False
            stop.wait(poll_s)
        return False


@dataclass(frozen=True)
class SpareHold:
    """A spare driver's hold (baton.driver_wrapper.Drivers): Spark is up, nothing of the slot touched,
    until the restarts file names this process as the replacement of a driver that died. Then the
    relaunch record the wrapper would have passed a new driver is put in this process's environment
    (RELAUNCH_ENV), and the spare goes on as that driver. It ends (False) on a stop, or once its wrapper
    is gone (it must not outlive the launch: it holds the launch's lock)."""

    restarts_file: Path
    parent: int = field(default_factory=os.getppid)

    def promoted(self) -> dict | None:
        try:
            raw = json.loads(self.restarts_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if raw.get("state") != "relaunched" or raw.get("spare_pid") != os.getpid():
            return None
        return raw

    def wait(self, stop: threading.Event, poll_s: float = 0.05) -> bool:
        started = time.monotonic()
        while not stop.is_set():
            if (raw := self.promoted()) is not None:
                relaunch = {
                    "restart": len(raw.get("restarts") or []),
                    "code": raw.get("code"),
                    "at": raw.get("at"),
                    "fresh": bool(raw.get("fresh")),
                }
                os.environ[RELAUNCH_ENV] = json.dumps(relaunch)
                log.warning(
                    "spare driver promoted after %.0f s held: it replaces the driver that died",
                    time.monotonic() - started,
                )
                return True
            if os.getppid() != self.parent:
                log.warning("the wrapper is gone: this spare driver ends")
                return False
            stop.wait(poll_s)
        return False
