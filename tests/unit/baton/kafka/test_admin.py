"""Topic specs are deduplicated before a create request: apps may share an input topic."""

from types import SimpleNamespace

import pytest

from baton.apps import APPS_DIR, load_registry
from baton.kafka.admin import (
    REPLICATION_FACTOR_ENV,
    TopicMismatch,
    TopicSpec,
    listed_partitions,
    replication_factor,
    unique_specs,
)


def test_the_shipped_apps_share_the_clicks_topic_and_ask_for_it_once():
    apps = load_registry(APPS_DIR)
    specs = [t for app in apps.values() for t in app.topics()]
    assert [s.name for s in specs].count("clicks") == sum(app.input.topic == "clicks" for app in apps.values()) >= 2
    assert [s.name for s in unique_specs(specs)].count("clicks") == 1


def test_the_same_topic_asked_for_differently_is_an_error_naming_both():
    with pytest.raises(TopicMismatch, match="asked for twice"):
        unique_specs([TopicSpec("clicks", 4), TopicSpec("clicks", 2)])


def test_a_topic_listed_without_partitions_for_a_moment_is_asked_again():
    """Apache Kafka lists a just-created topic with 0 partitions (or not at all) for a moment."""
    answers = iter([{}, {"t": SimpleNamespace(partitions={})}, {"t": SimpleNamespace(partitions={0: 1, 1: 1})}])
    admin = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics=next(answers)))
    assert listed_partitions(admin, ["t"], timeout_s=5, every_s=0) == {"t": 2}
    stuck = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics={}))
    assert listed_partitions(stuck, ["t"], timeout_s=0.05, every_s=0.01) == {"t": 0}  # then TopicMismatch says so


@pytest.mark.parametrize("raw, factor", [(None, 1), ("", 1), ("3", 3), ("-1", -1)])
def test_the_replication_factor_is_one_unless_the_cluster_asks_for_more(raw, factor):
    assert replication_factor({} if raw is None else {REPLICATION_FACTOR_ENV: raw}) == factor


@pytest.mark.parametrize("raw", ["0", "-2", "three"])
def test_a_replication_factor_that_is_no_count_is_refused_with_the_variable(raw):
    with pytest.raises(ValueError, match=f"{REPLICATION_FACTOR_ENV}={raw!r} must be a positive integer"):
        replication_factor({REPLICATION_FACTOR_ENV: raw})
