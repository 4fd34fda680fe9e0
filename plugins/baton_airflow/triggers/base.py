"""What every wait on a slot shares: the poll loop in the triggerer, the deadline, and the event a
deferred task resumes with.

A trigger is one kind of wait (baton_airflow.triggers.status, .upgrade, .cutover) with its own small
typed arguments. Serialisable: only plain values cross to the triggerer (positions as {"partition":
offset}). Each poll runs `check()` in a thread with fresh clients closed before it returns, so a
cancelled trigger leaves nothing open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from baton.conditions import Check
from baton.kafka.client_config import registered_file, use_file
from baton.records import Positions

# How often a waiting trigger logs where its condition stands (the task's log shows a trigger's lines).
PROGRESS_EVERY_S = 10.0


def met_or_raise(context: Any, event: dict[str, Any], *, lead: str = "", detail: str = "") -> str:
    """A deferred task resumed with a wait's event: its message if the condition was met; else the
    reason is pushed (XCom "reason", for a later step that reports it: an abort, a rollback) and the task
    fails, for good if the condition failed, with a retry if it timed out. A failure's message starts
    with `lead` (what did not happen) and ends with `detail` (e.g. where the driver's log is)."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    message = str(event.get("message", ""))
    if event.get("status") != "met":
        message = f"{lead}: {message}" if lead else message
        context["ti"].xcom_push(key="reason", value=message)
    suffix = f"; {detail}" if detail else ""
    if event.get("status") == "failed":
        raise AirflowFailException(message + suffix)
    if event.get("status") != "met":
        raise AirflowException((message or f"unexpected trigger event {event!r}") + suffix)
    return message


def positions(raw: dict[Any, Any] | None) -> Positions:
    """{partition: offset} from its serialised form (JSON object keys are strings)."""
    return {int(p): int(o) for p, o in (raw or {}).items()}


def positions_arg(value: dict[Any, Any] | None) -> dict[str, int]:
    """The serialised form of a position."""
    return {str(p): int(o) for p, o in sorted(positions(value).items())}


class SlotWaitTrigger(BaseTrigger):
    """Polls `check()` every `poll_s` until it is met or failed, or until the deadline (`timeout_s`
    from the first creation: absolute, so a trigger re-created after a triggerer restart keeps it).
    A subclass names its wait (`kind`), its own arguments (`args()`, serialised beside the common
    ones) and its check."""

    kind: ClassVar[str] = "wait"

    def __init__(
        self,
        *,
        app: str,
        slot: str,
        bootstrap: str,
        timeout_s: float = 600.0,
        poll_s: float = 2.0,
        deadline_ts: float | None = None,
        client_config_file: str | None = None,
    ):
        super().__init__()
        self.app, self.slot, self.bootstrap = app, slot, bootstrap
        self.timeout_s, self.poll_s = float(timeout_s), float(poll_s)
        self.deadline_ts = float(deadline_ts) if deadline_ts is not None else time.time() + self.timeout_s
        # The cluster's security settings travel as the path of their private file (registered by the
        # Kafka hook in the deferring task's process), never as values: the trigger's arguments are
        # stored in Airflow's database and shown in its UI.
        self.client_config_file = client_config_file if client_config_file is not None else security_file(bootstrap)

    def args(self) -> dict[str, Any]:
        """This wait's own arguments, as plain values."""
        return {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            dict(
                app=self.app,
                slot=self.slot,
                bootstrap=self.bootstrap,
                timeout_s=self.timeout_s,
                poll_s=self.poll_s,
                deadline_ts=self.deadline_ts,
                client_config_file=self.client_config_file,
                **self.args(),
            ),
        )

    def check(self) -> Check:
        """One blocking poll (runs in a thread)."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        use_file(self.bootstrap, self.client_config_file or None)  # this cluster's clients in the triggerer
        what = f"{self.app}/{self.slot} {self.kind}"
        last_error = ""
        logged_at = time.monotonic()
        while True:
            try:
                result = await asyncio.to_thread(self.check)
                last_error = ""
            except Exception as exc:  # the broker may blip: keep waiting, report it if we time out
                result, last_error = None, f"{type(exc).__name__}: {exc}"
            if result is not None and (result.met or result.failed):
                status = "met" if result.met else "failed"
                yield TriggerEvent({"status": status, "message": f"{what}: {result.message}"})
                return
            if time.monotonic() - logged_at >= PROGRESS_EVERY_S:  # a long wait says where it stands
                logged_at = time.monotonic()
                self.log.info(
                    "%s: waiting: %s; %.0f s left",
                    what,
                    (result.message if result is not None else last_error) or "nothing reported yet",
                    max(0.0, self.deadline_ts - time.time()),
                )
            if time.time() >= self.deadline_ts:
                extra = f" (last error: {last_error})" if last_error else ""
                yield TriggerEvent(
                    {"status": "timeout", "message": f"{what}: not met within {self.timeout_s:.0f}s{extra}"}
                )
                return
            await asyncio.sleep(self.poll_s)


def security_file(bootstrap: str) -> str:
    """The path of the security settings registered for `bootstrap` in this process ("" if none)."""
    from baton_airflow.hooks.kafka import security_dir

    path = registered_file(bootstrap, security_dir())
    return str(path) if path else ""


def run_writer(writer: str | None) -> str:
    """Who the control writes a trigger makes are by: the deferring task's run (the history names it).
    Resolved when the task creates the trigger, and carried to the triggerer as a plain value."""
    if writer is not None:
        return writer
    from baton_airflow.hooks.control import current_run_writer

    return current_run_writer()
