"""Which apps the source keeps the input's partitions abreast for (frame.uses_event_time): those whose
transform sets an event-time watermark, found in the plan of a test stream, the shipped apps and one
that cannot be planned on a stream of nulls alike."""

from types import SimpleNamespace

import pytest

from baton.apps import load_app
from spark_apps.runtime.frame import uses_event_time

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "name, expected",
    [
        ("click_counts", False),  # a count per user: the order across partitions changes nothing
        ("click_windows", True),  # tumbling windows closed by the watermark
        ("click_counts_ttl", True),  # idle keys evicted by event-time timers
    ],
)
def test_shipped_apps(spark, name, expected):
    app = load_app(name)
    module = __import__(app.module, fromlist=["transform"])
    assert uses_event_time(spark, module, app) is expected


def test_a_transform_that_cannot_be_planned_on_a_test_stream_counts_as_event_time(spark):
    def transform(events):
        raise RuntimeError("needs the real input")

    module = SimpleNamespace(VALUE_SCHEMA="user_id STRING, timestamp LONG", transform=transform)
    assert uses_event_time(spark, module, load_app("click_counts"))
