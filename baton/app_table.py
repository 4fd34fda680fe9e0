"""`baton apps` and `baton app NAME`: the apps' views as terminal tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from baton.app_view import AppView, SlotView


def _n(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}"
    return f"{v:,}{unit}"


def _mib(n: int) -> str:
    return f"{n / 1024**2:,.1f} MiB" if n else "-"


def _when(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ts_ms else "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]


SLOT_HEADER = (
    "app",
    "slot",
    "role",
    "desired",
    "reported",
    "version",
    "gen",
    "epoch",
    "lag",
    "lag s",
    "in/s",
    "batch ms",
    "latency s",
    "state rows",
    "dead",
    "lease age",
    "restarts",
)


def _slot_row(app: str, s: SlotView) -> list[str]:
    return [
        app,
        s.slot,
        s.role,
        s.desired,
        s.state or "-",
        s.version or "-",
        str(s.generation),
        str(s.epoch_seen),
        _n(s.lag_records),
        _n(s.lag_s),
        _n(round(s.input_rate)),
        _n(s.batch_ms),
        "-" if s.latency_ms is None else f"{s.latency_ms / 1000:.2f}",
        _n(s.state_rows),
        _n(s.dead_letters),
        _n(s.lease_age_s, " s"),
        str(s.restarts),
    ]


def apps_table(views: Sequence[AppView]) -> str:
    """One row per slot of every app that was ever started; a line for the ones never started."""
    rows = [_slot_row(v.app, s) for v in views if v.revision for s in v.slots]
    idle = [v.app for v in views if not v.revision]
    lines = _table(SLOT_HEADER, rows) if rows else ["no app has been started yet"]
    if idle:
        lines.append(f"never started: {', '.join(idle)}")
    return "\n".join(lines)


def app_detail(view: AppView) -> str:
    if not view.revision:
        return f'{view.app}: never started (trigger baton_lifecycle with {{"app": "{view.app}", "action": "start"}})'
    head = f"{view.app}: epoch {view.epoch}, {view.active} active, control revision {view.revision}"
    if view.fence:
        head += f", fenced at {sum(view.fence.values()):,}"
    if view.operation:
        head += f", {view.operation}"
    lines = [head, "", *_table(SLOT_HEADER, [_slot_row(view.app, s) for s in view.slots])]
    for s in view.slots:
        extra = [f"state {_mib(s.state_bytes)} on disk, {_mib(s.state_memory_bytes)} in memory"]
        if s.host:
            extra.append(f"pid {s.pid} on {s.host}")
        if s.report_age_s is not None:
            extra.append(f"last report {s.report_age_s:,.1f} s ago")
        if s.reason:
            extra.append(f"reason: {s.reason}")
        if s.error:
            extra.append(f"error: {s.error.splitlines()[0]}")  # whole: a data-loss error ends with the way out
        lines.append(f"  {s.slot}: " + "; ".join(extra))
    if view.events:
        lines += ["", "history (newest last):"]
        for e in view.events[-15:]:
            took = f" ({e.duration_ms / 1000:.1f} s)" if e.duration_ms is not None else ""
            lines.append(f"  {_when(e.ts_ms)}  r{e.revision:<4} {e.kind:<12} {e.text}{took}  [{e.writer or '?'}]")
    return "\n".join(lines)
