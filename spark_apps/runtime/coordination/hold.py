"""A staged launch's hold (baton.launcher.stage): start the interpreter, the JVM and the Spark session
while the slot's current launch still runs, then wait, touching neither the checkpoint nor any topic,
until the slot's identity record names this launch. The launcher writes that record only once the
previous launch is gone, so the start-up (7-10 s at the seed's rate) runs while the old launch stops
(2-3 s) instead of after it."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from baton.driver_wrapper import LAUNCH_ID_ENV

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
