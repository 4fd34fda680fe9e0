"""Deterministic click load with steady key churn, for tests and benchmarks of windowed apps.

Event i happens at event second t = i // rate (plus `base_ts`). At second t the active users are
the ids [t * new_users_per_s, t * new_users_per_s + active_users): every second `new_users_per_s`
users arrive and as many leave, so users are never reused and the number of (user, window) keys
ever seen grows without bound, while the number in any one window does not.

`jitter_s` > 0 moves event i back by up to that many seconds (deterministically), for apps that
must tolerate disorder; event times then are not monotone in i.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Churn:
    rate: int  # events per event second
    new_users_per_s: int  # users arriving (and leaving) each event second
    active_users: int  # users active in any one event second
    base_ts: int = 1_700_000_000
    jitter_s: int = 0

    def __post_init__(self) -> None:
        for name in ("rate", "new_users_per_s", "active_users"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Churn.{name} must be > 0, got {getattr(self, name)}")
        if self.jitter_s < 0:
            raise ValueError(f"Churn.jitter_s must be >= 0, got {self.jitter_s}")

    def event(self, i: int) -> tuple[str, int]:
        """(user_id, timestamp in epoch seconds) of event i."""
        t = i // self.rate
        user = t * self.new_users_per_s + i % self.active_users
        # A multiplicative hash spreads the jitter over events without a random generator.
        back = (i * 2654435761 >> 7) % (self.jitter_s + 1) if self.jitter_s else 0
        return f"u{user}", self.base_ts + t - back

    def value(self, i: int) -> bytes:
        user, ts = self.event(i)
        return json.dumps({"user_id": user, "timestamp": ts}).encode()

    def max_keys_per_window(self, window_s: int) -> int:
        """An upper bound of the distinct users with an event in any one window of `window_s`
        seconds: users active in any of the window's seconds (widened by the jitter)."""
        return (window_s - 1 + self.jitter_s) * self.new_users_per_s + self.active_users
