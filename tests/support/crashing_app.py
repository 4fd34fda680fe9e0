"""An app with bad code for crash-loop tests: its transform fails every time the slot starts."""

VALUE_SCHEMA = "user_id STRING, timestamp LONG"
REQUIRED = ("user_id",)


def transform(events):
    raise RuntimeError("injected bug: this app's transform always fails")
