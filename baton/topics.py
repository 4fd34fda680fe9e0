"""The topics Baton needs: its control plane's and every registered app's.

Used by the ensure_topics operator and by the local platform's `up` (baton.local.platform).
"""

from __future__ import annotations

from baton.apps import load_registry
from baton.kafka.admin import TopicSpec
from baton.settings import (
    CONTROL_TOPIC,
    LEASES_TOPIC,
    LEASES_TOPIC_CONFIG,
    STATUS_TOPIC,
)


def platform_topics() -> list[TopicSpec]:
    """The control plane's topics and every registered app's topics."""
    specs = [
        # Latest desired state per app; compaction keeps the newest record per key.
        TopicSpec(CONTROL_TOPIC, 1, {"cleanup.policy": "compact"}),
        TopicSpec(STATUS_TOPIC, 1),
        TopicSpec(LEASES_TOPIC, 1, LEASES_TOPIC_CONFIG),
    ]
    for app in load_registry().values():
        specs.extend(app.topics())
    return specs
