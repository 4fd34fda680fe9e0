"""The apps' views as Prometheus metrics (text exposition format), for the tools people already run.

Every figure is per app and slot, labelled {app, slot}; the app-wide ones by {app}. Served by the Baton
page's API (`/baton/metrics`, behind Airflow's authentication: give Prometheus a bearer token) and by
`baton metrics --port N` (a plain exporter for a scraper that cannot authenticate).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from baton.app_view import AppView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric name, help, SlotView attribute, scale)
SLOT_GAUGES = (
    ("baton_slot_lag_records", "Input records not yet processed by the slot", "lag_records", 1),
    ("baton_slot_lag_seconds", "The backlog at the slot's recent input rate (estimate)", "lag_s", 1),
    ("baton_slot_batch_duration_seconds", "The slot's last batch, trigger to commit", "batch_ms", 0.001),
    (
        "baton_slot_latency_seconds",
        "End-to-end latency at the slot's last batch: its oldest input record's timestamp to the batch's end",
        "latency_ms",
        0.001,
    ),
    (
        "baton_slot_latency_newest_seconds",
        "The same for the last batch's newest input record",
        "latency_newest_ms",
        0.001,
    ),
    ("baton_slot_input_rate", "Records per second arriving, over the slot's last batch", "input_rate", 1),
    ("baton_slot_processing_rate", "Records per second the slot processed in its last batch", "processing_rate", 1),
    ("baton_slot_state_rows", "Rows in the slot's state store", "state_rows", 1),
    ("baton_slot_state_bytes", "The slot's state store size (RocksDB files when reported)", "state_bytes", 1),
    ("baton_slot_state_memory_bytes", "The slot's state store memory (RocksDB)", "state_memory_bytes", 1),
    ("baton_slot_lease_age_seconds", "Since the slot's last lease renewal", "lease_age_s", 1),
    ("baton_slot_report_age_seconds", "Since the slot's last status record", "report_age_s", 1),
    ("baton_slot_epoch_seen", "The control epoch the slot last reported", "epoch_seen", 1),
    ("baton_slot_generation", "The slot's generation (a new launch of a version is a new generation)", "generation", 1),
    # Not a total: the restarts inside the crash-loop guard's window (HealthPolicy.restart_window_s).
    ("baton_slot_recent_restarts", "Restarts the crash-loop guard still counts (inside its window)", "restarts", 1),
)
# Totals (Prometheus counters: `<name>_total`; a new launch starts again from 0, a reset rate() handles).
SLOT_COUNTERS = (
    (
        "baton_slot_dead_letters",
        "Events the slot's current launch sent to the dead-letter topic",
        "dead_letters",
    ),
)


class ViewCollector(Collector):
    def __init__(self, views: Sequence[AppView]):
        self.views = views

    def collect(self) -> Iterable:
        slots = [(v, s) for v in self.views if v.revision for s in v.slots]
        for name, doc, attr, scale in SLOT_GAUGES:
            g = GaugeMetricFamily(name, doc, labels=["app", "slot"])
            for v, s in slots:
                value = getattr(s, attr)
                if value is not None:
                    g.add_metric([v.app, s.slot], value * scale)
            yield g
        for name, doc, attr in SLOT_COUNTERS:
            c = CounterMetricFamily(name, doc, labels=["app", "slot"])
            for v, s in slots:
                if (value := getattr(s, attr)) is not None:
                    c.add_metric([v.app, s.slot], value)
            yield c
        active = GaugeMetricFamily(
            "baton_slot_active", "1 if the slot is the app's active slot", labels=["app", "slot"]
        )
        up = GaugeMetricFamily(
            "baton_slot_desired_running", "1 if the control plane wants the slot running", labels=["app", "slot"]
        )
        state = GaugeMetricFamily(
            "baton_slot_state", "1 for the state the slot last reported", labels=["app", "slot", "state"]
        )
        desired = GaugeMetricFamily(
            "baton_slot_desired_state",
            "1 for the state the control plane wants the slot in (failed: the crash-loop guard gave up)",
            labels=["app", "slot", "state"],
        )
        for v, s in slots:
            active.add_metric([v.app, s.slot], 1.0 if s.role == "active" else 0.0)
            up.add_metric([v.app, s.slot], 1.0 if s.desired == "running" else 0.0)
            if s.state:
                state.add_metric([v.app, s.slot, s.state], 1.0)
            if s.desired:
                desired.add_metric([v.app, s.slot, s.desired], 1.0)
        yield from (active, up, state, desired)
        epoch = GaugeMetricFamily(
            "baton_app_epoch", "The app's control epoch (one more per cutover or failover)", labels=["app"]
        )
        fenced = GaugeMetricFamily(
            "baton_app_fenced", "1 while a handoff's fence holds the app's output", labels=["app"]
        )
        handoffs = CounterMetricFamily(
            "baton_handoffs",
            "Handoffs in the control history read (cutover, failover, fence lifted: abandoned)",
            labels=["app", "kind"],
        )
        took = SummaryMetricFamily(
            "baton_handoff_duration_seconds",
            "Handoffs from their fence set to the epoch's "
            "change (cutover, failover) or to the fence lifted without one (abandoned)",
            labels=["app", "kind"],
        )
        last = GaugeMetricFamily(
            "baton_last_handoff_duration_seconds",
            "The app's last handoff of each kind, fence set to its end",
            labels=["app", "kind"],
        )
        for v in self.views:
            if not v.revision:
                continue
            epoch.add_metric([v.app], v.epoch)
            fenced.add_metric([v.app], 1.0 if v.fence else 0.0)
            for h in v.handoffs:
                handoffs.add_metric([v.app, h.kind], h.count)
                if h.timed:
                    took.add_metric([v.app, h.kind], count_value=h.timed, sum_value=h.total_s)
                    if h.last_s is not None:  # set whenever a handoff was timed
                        last.add_metric([v.app, h.kind], h.last_s)
        yield from (epoch, fenced, handoffs, took, last)


def render(views: Sequence[AppView]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(views))
    return generate_latest(registry)
