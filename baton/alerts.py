"""Which health findings become alerts, and when one is sent again. Pure; the sending is Airflow's
(baton_airflow.alerts: the notifiers a deployment configures).

An alert is a CRITICAL finding of a slot (dead, lease expired, stuck, lag growing past its budget,
state or disk over budget) or an action that needs a person (a slot marked FAILED, a failover). The
same alert (app, slot, rule) is sent once, then again every `repeat_s` while it holds, so a slot
that stays dead is not forgotten and a page does not arrive every minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from baton.health import Severity, SlotHealth

REPEAT_S = 3600.0


@dataclass(frozen=True)
class Alert:
    app: str
    slot: str
    rule: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.app}/{self.slot}/{self.rule}"

    def text(self) -> str:
        return f"Baton: {self.app}/{self.slot} {self.rule}: {self.message}"


def alerts_of(healths: Iterable[SlotHealth], failed: Mapping[str, str] | None = None) -> list[Alert]:
    """The CRITICAL findings of each slot, and `failed` ({"app/slot": reason}): slots marked FAILED now."""
    out = [
        Alert(h.app, h.slot.value, f.rule, f.message)
        for h in healths
        for f in h.findings
        if f.severity is Severity.CRITICAL
    ]
    for key, reason in (failed or {}).items():
        app, _, slot = key.partition("/")
        out.append(Alert(app, slot, "failed", reason))
    return out


def due(
    alerts: Iterable[Alert], sent: Mapping[str, int], now_ms: int, repeat_s: float = REPEAT_S
) -> tuple[list[Alert], dict[str, int]]:
    """(the alerts to send now, when each alert still holding was last sent). An alert no longer
    holding is forgotten: if it comes back, it is sent at once."""
    send, keep = [], {}
    for a in alerts:
        if a.key in keep:
            continue  # one per (app, slot, rule) a run
        last = sent.get(a.key)
        if last is None or now_ms - last >= repeat_s * 1000:
            send.append(a)
            keep[a.key] = now_ms
        else:
            keep[a.key] = last
    return send, keep
