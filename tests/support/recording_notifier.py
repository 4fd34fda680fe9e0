"""A notifier that records what it was sent (one JSON line per alert in `path`): what a deployment's
SMTP or Slack notifier would have delivered, for the alert tests."""

from __future__ import annotations

import json

from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, path: str, text: str = "{{ baton_alert.text }}", fail: bool = False):
        super().__init__()
        self.path, self.text, self.fail = path, text, fail

    def notify(self, context) -> None:
        if self.fail:
            raise ConnectionError("the mail server is down")
        alert = context.get("baton_alert", {})
        with open(self.path, "a") as f:
            f.write(
                json.dumps(
                    {"text": self.text, "rule": alert.get("rule"), "app": alert.get("app"), "slot": alert.get("slot")}
                )
                + "\n"
            )


def read(path) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
