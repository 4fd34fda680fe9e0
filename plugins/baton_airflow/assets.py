"""Each app's output topic as an Airflow Asset, and the event a handoff emits on it.

A downstream DAG schedules on an app's output (`schedule=[Asset("kafka://<broker>/<topic>")]`, the URI
the Kafka provider and OpenLineage use for a topic) and runs when its producer changed: a cutover, a
rolling upgrade's or a reprocess's cutover (a new version live, or corrected output from the fence on).
The event's extra says what changed (baton.plans.Cutover and the control record's slot): app, epoch,
the new active, its version and generation, the fence, corrected or not, and the run.

The handoff DAGs serve every app, so their cutover steps declare one AssetAlias (HANDOFFS) as their
outlet and attach the event to the app's own Asset when they succeed (Airflow records a task's Asset
events on success only: a rollback that hands the role back fails its run, and says so through it).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import Asset, AssetAlias

log = logging.getLogger(__name__)

HANDOFFS = AssetAlias("baton_handoffs")


def output_asset(bootstrap: str, topic: str) -> Asset:
    """The Asset of a topic on the cluster at `bootstrap` (its first server names the cluster)."""
    first = bootstrap.split(",")[0].strip()
    first = first.split("://", 1)[-1]  # a listener URL's "SSL://host:port" names the same broker
    return Asset(uri=f"kafka://{first}/{topic}")


def emit_handoff(context: Any, asset: Asset, extra: dict[str, Any]) -> None:
    """Attach this handoff's event to `asset` through the task's HANDOFFS outlet. The handoff is done
    when this runs: an event that cannot be attached is logged, never a failed step (a failed cutover
    step after the role moved would fail a run whose handoff happened)."""
    try:
        context["outlet_events"][HANDOFFS].add(asset, extra=extra)
    except Exception as exc:
        log.warning("no Asset event for %s (%s: %s); the handoff itself is done", asset.uri, type(exc).__name__, exc)
