"""The click-count app with a nested field in its events, so Spark parses them (from_json) instead of
the source (spark_apps.runtime.source.decode handles flat primitive fields only): the tests of the harness's
other path, where the dead letters are a branch of the query."""

from spark_apps.apps.click_counts import REQUIRED, transform

__all__ = ["REQUIRED", "VALUE_SCHEMA", "transform"]

VALUE_SCHEMA = "user_id STRING, timestamp LONG, device STRUCT<kind: STRING>"
