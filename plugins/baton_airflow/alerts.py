"""Alerts through Airflow's notifiers, configured per deployment.

The Airflow Variable `baton_alert_notifiers` (or AIRFLOW_VAR_BATON_ALERT_NOTIFIERS) lists them:

    [{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
      "kwargs": {"to": "oncall@example.com", "subject": "{{ baton_alert.text }}",
                 "html_content": "{{ baton_alert.message }}"}},
     {"class": "airflow.providers.slack.notifications.slack.SlackNotifier",
      "kwargs": {"text": "{{ baton_alert.text }}", "channel": "#streaming"}}]

Each alert is rendered with the task's context plus `baton_alert` (app, slot, rule, message, text).
baton_health sends its CRITICAL findings and the slots it marks FAILED (baton.alerts says which and
when again); the handoff DAGs send their failed runs. Unset: no alerts (the findings are still in
the task log, XCom and the Baton page). A malformed setting fails the sending task with the reason.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from baton.alerts import Alert

NOTIFIERS_VARIABLE = "baton_alert_notifiers"
SENT_VARIABLE = "baton_alerts_sent"  # {alert key: when last sent (ms)} between baton_health runs

log = logging.getLogger(__name__)


class AlertConfigError(ValueError):
    pass


def parse_notifiers(raw: str | None) -> list[Callable[[], Any]]:
    """Factories of the configured notifiers (a notifier renders its fields in place: one per alert)."""
    if not raw or not raw.strip():
        return []
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise AlertConfigError(f"Variable {NOTIFIERS_VARIABLE} is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise AlertConfigError(f'Variable {NOTIFIERS_VARIABLE} must be a list of {{"class": ..., "kwargs": ...}}')
    factories: list[Callable[[], Any]] = []
    for i, item in enumerate(items):
        where = f"Variable {NOTIFIERS_VARIABLE}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("class"), str):
            raise AlertConfigError(f'{where}: expected an object with a "class" (a notifier\'s import path)')
        kwargs = item.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise AlertConfigError(f'{where}: "kwargs" must be an object')
        module, _, name = item["class"].rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise AlertConfigError(f"{where}: cannot import {item['class']!r}: {exc}") from None
        try:
            cls(**copy.deepcopy(kwargs))  # its arguments checked now, not at the first alert
        except TypeError as exc:
            raise AlertConfigError(f"{where}: {item['class']}: {exc}") from None
        factories.append(functools.partial(_instantiate, cls, kwargs))
    return factories


def _instantiate(cls: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return cls(**copy.deepcopy(kwargs))


def configured_notifiers() -> list[Callable[[], Any]]:
    from airflow.sdk import Variable

    return parse_notifiers(Variable.get(NOTIFIERS_VARIABLE, default=None))


def send(alerts: Sequence[Alert], context: Mapping[str, Any], factories: Sequence[Callable[[], Any]]) -> list[Alert]:
    """Each alert to each notifier; the alerts every notifier took (a failed send is tried again at the
    next run: it is not recorded as sent)."""
    delivered = []
    for alert in alerts:
        ok = True
        for make in factories:
            ctx = {
                **context,
                "baton_alert": {
                    "app": alert.app,
                    "slot": alert.slot,
                    "rule": alert.rule,
                    "message": alert.message,
                    "text": alert.text(),
                },
            }
            try:
                make()(ctx)
            except Exception as exc:  # a mail server down must not stop the health check's actions
                log.error("alert %s not sent: %s", alert.key, exc)
                ok = False
        if ok:
            delivered.append(alert)
    return delivered


def notify_failed_run(context: Mapping[str, Any]) -> None:
    """on_failure_callback of the handoff DAGs: their failed run is an alert."""
    run = context.get("dag_run")
    dag_id = getattr(context.get("dag"), "dag_id", None) or getattr(run, "dag_id", "?")
    run_id = getattr(run, "run_id", "?")
    app = (context.get("params") or {}).get("app") or (getattr(run, "conf", None) or {}).get("app", "?")
    reason = context.get("reason") or "a task failed"
    alert = Alert(app, "-", f"{dag_id} failed", f"run {run_id}: {reason}")
    try:
        factories = configured_notifiers()
    except AlertConfigError as exc:
        log.error("%s", exc)
        return
    send([alert], context, factories)
