"""The deployment's notifiers: parsed with a clear error, rendered with the alert, a failed send retried."""

import json

import pytest

from baton.alerts import Alert
from baton_airflow.alerts import AlertConfigError, parse_notifiers, send
from tests.support.recording_notifier import read

NOTIFIER = "tests.support.recording_notifier.RecordingNotifier"


@pytest.mark.parametrize(
    "raw, words",
    [
        ("{not json", "is not JSON"),
        ('{"class": "x"}', "must be a list"),
        ('[{"kwargs": {}}]', '[0]: expected an object with a "class"'),
        ('[{"class": "no.such.Notifier"}]', "cannot import 'no.such.Notifier'"),
        (json.dumps([{"class": NOTIFIER, "kwargs": {"nope": 1}}]), "unexpected keyword argument 'nope'"),
        (json.dumps([{"class": NOTIFIER, "kwargs": []}]), '"kwargs" must be an object'),
    ],
)
def test_a_malformed_setting_is_refused_with_where_and_why(raw, words):
    with pytest.raises(AlertConfigError, match="baton_alert_notifiers") as exc:
        parse_notifiers(raw)
    assert words in str(exc.value)


def test_no_setting_is_no_notifier():
    assert parse_notifiers(None) == [] and parse_notifiers("  ") == []


def test_each_alert_reaches_each_notifier_rendered_and_a_failed_send_is_not_recorded(tmp_path):
    out = tmp_path / "alerts.jsonl"
    ok = parse_notifiers(
        json.dumps(
            [
                {
                    "class": NOTIFIER,
                    "kwargs": {
                        "path": str(out),
                        "text": "{{ baton_alert.app }}/{{ baton_alert.slot }}: {{ baton_alert.message }}",
                    },
                }
            ]
        )
    )
    a, b = Alert("app", "blue", "lease", "not renewed"), Alert("app", "green", "failed", "crash loop")
    assert send([a, b], {}, ok) == [a, b]
    assert [r["text"] for r in read(out)] == ["app/blue: not renewed", "app/green: crash loop"]
    failing = parse_notifiers(json.dumps([{"class": NOTIFIER, "kwargs": {"path": str(out), "fail": True}}]))
    assert send([a], {}, ok + failing) == []  # one notifier failed: tried again next run
    assert len(read(out)) == 3
