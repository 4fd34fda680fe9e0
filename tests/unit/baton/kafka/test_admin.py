"""Topic specs are deduplicated before a create request: apps may share an input topic."""

import pytest

from baton.apps import APPS_DIR, load_registry
from baton.kafka.admin import TopicMismatch, TopicSpec, unique_specs


def test_the_shipped_apps_share_the_clicks_topic_and_ask_for_it_once():
    specs = [t for app in load_registry(APPS_DIR).values() for t in app.topics()]
    assert [s.name for s in specs].count("clicks") == 2
    assert [s.name for s in unique_specs(specs)].count("clicks") == 1


def test_the_same_topic_asked_for_differently_is_an_error_naming_both():
    with pytest.raises(TopicMismatch, match="asked for twice"):
        unique_specs([TopicSpec("clicks", 4), TopicSpec("clicks", 2)])
