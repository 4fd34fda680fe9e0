"""An app's output topic as an Asset: the URI the Kafka provider and OpenLineage give a topic, the same
whichever way the cluster's bootstrap is written."""

import pytest

from baton_airflow.assets import output_asset


@pytest.mark.parametrize(
    "bootstrap",
    ["k1:9093", "k1:9093,k2:9093", " k1:9093 , k2:9093", "SSL://k1:9093,SSL://k2:9093"],
)
def test_a_topic_s_asset_is_named_by_the_cluster_s_first_broker(bootstrap):
    asset = output_asset(bootstrap, "user_counts")
    assert asset.uri == "kafka://k1:9093/user_counts" and asset.name == asset.uri


def test_an_event_that_cannot_be_attached_never_fails_the_handoff_step(caplog):
    from baton_airflow.assets import emit_handoff

    emit_handoff({}, output_asset("k1:9093", "user_counts"), {"epoch": 2})  # no outlet_events: a bare context
    assert "no Asset event for kafka://k1:9093/user_counts" in caplog.text
