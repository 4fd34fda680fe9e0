"""The thresholds of the health check (baton.health) and of a slot's own stall watch (the harness).

Defaults here; an app's definition overrides them in its `health` section (baton.apps checks that section
by building a HealthPolicy), and HealthPolicy.from_app derives the rest from the app. Its own module so
that baton.apps and baton.health both import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from baton.apps import AppDefinition


@dataclass(frozen=True)
class HealthPolicy:
    heartbeat_max_age_s: float = 30.0
    # Time to get from launch to the RESTORING record: JVM and Spark session start, plus the follower's
    # catch-up on the control and commits topics (its own timeout is 30 s).
    start_grace_s: float = 120.0
    # The first batch after a start also restores the state store, so it can take much longer than a normal batch.
    restore_max_s: float = 1800.0
    # Ten completed batches in a row with no progress while input waits is not one slow or replayed batch.
    stuck_after_triggers: int = 10
    max_lag_records: int = 200_000
    lag_window_s: float = 600.0  # growth is judged over the last ~10 runs of the every-minute DAG
    batch_ms_budget: int = 2000
    recent_window_s: float = 300.0  # only batches this recent count for the batch-time and dead-letter rules
    min_batch_samples: int = 3  # a median of one or two batches is just noise
    state_max_rows: int = 5_000_000
    state_max_bytes: int = 2 * 1024**3
    disk_max_bytes: int = 6 * 1024**3
    # Some malformed events are normal; one in twenty means a producer or schema change broke the input.
    dead_letter_max_share: float = 0.05
    dead_letter_min_rows: int = 100  # do not compute a share from a few rows (1 bad row in 3 is not "33%")
    clock_skew_tolerance_s: float = 5.0
    # Restarts wait 0, 30, 60 s... A slot that dies three times in ten minutes will die again: FAILED with
    # its reason is better than an endless series of restore pauses (and output gaps while it is active).
    restart_backoff_s: float = 30.0
    restart_backoff_max_s: float = 300.0
    max_restarts: int = 3
    restart_window_s: float = 600.0
    # A driver that ran this long before it died had started well: its wrapper's restart begins a new
    # count (baton.driver_wrapper), so a slot killed now and then is never taken for a crash loop.
    restart_stable_s: float = 60.0

    def __post_init__(self) -> None:
        for name in (
            "heartbeat_max_age_s",
            "start_grace_s",
            "restore_max_s",
            "stuck_after_triggers",
            "max_lag_records",
            "batch_ms_budget",
            "state_max_rows",
            "state_max_bytes",
            "disk_max_bytes",
            "max_restarts",
            "restart_window_s",
            "restart_backoff_s",
            "restart_stable_s",
            "lag_window_s",
            "recent_window_s",
            "dead_letter_max_share",
            "min_batch_samples",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"HealthPolicy.{name} must be > 0, got {getattr(self, name)}")
        # The guard counts restarts inside the window. If the backoffs alone spread N restarts wider than
        # the window, the count never reaches N and a crash loop would go on forever.
        spread = sum(self.backoff_s(k) for k in range(1, self.max_restarts))
        if spread >= self.restart_window_s:
            raise ValueError(
                f"HealthPolicy.restart_window_s={self.restart_window_s:g} must exceed the {spread:g} s "
                f"that backoff puts between {self.max_restarts} restarts, "
                "or the crash-loop guard never trips"
            )

    def backoff_s(self, recent_restarts: int) -> float:
        """How long to wait after the last restart when `recent_restarts` are in the window: 0, b, 2b, 4b ... cap."""
        if recent_restarts <= 0:
            return 0.0
        return min(self.restart_backoff_s * 2 ** (recent_restarts - 1), self.restart_backoff_max_s)

    @classmethod
    def from_app(cls, app: AppDefinition, **overrides) -> HealthPolicy:
        # Five times (trigger + batch budget): a busy slot publishes once per trigger, so missing
        # five in a row is not jitter or a GC pause. Never under 30 s, so fast triggers do not cause false alarms.
        heartbeat = max(30.0, 5 * (app.trigger_ms + app.batch_ms_budget) / 1000)
        # The checkpoint holds the live RocksDB files plus the snapshots and changelogs kept for
        # min_batches_to_retain. Three times the state budget leaves room for that and for compaction,
        # and still catches retention that grows without limit (the seed's disk lesson).
        base = dict(
            heartbeat_max_age_s=heartbeat,
            batch_ms_budget=app.batch_ms_budget,
            max_lag_records=app.max_lag_records,
            state_max_rows=app.state.max_rows,
            state_max_bytes=app.state.max_bytes,
            disk_max_bytes=3 * app.state.max_bytes,
        )
        return cls(**{**base, **app.health, **overrides})
