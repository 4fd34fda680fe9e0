"""`baton reset` (`make reset`): start the local platform over, explicitly.

It stops whatever of the platform runs, then deletes what the platform keeps under its state dir,
saying what each thing is. Nothing outside the state dir is touched: an external Kafka cluster
(BATON_KAFKA_BOOTSTRAP) keeps its topics, and the app definitions in include/apps stay.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from baton.local.platform import Platform

# What the platform keeps in its state dir, and what it is, in the order it is said.
KEPT = {
    "slots": "the slots' checkpoints (their state and input positions), launch records and logs",
    "archive": "checkpoints of earlier generations kept by reprocess runs",
    "postgres": "Airflow's metadata database: DAG runs, task history, connections and variables",
    "airflow": "Airflow's home: task logs, airflow.cfg, the admin password and the API's JWT secret",
    "kafka-client": "Kafka client files written from Airflow connections (certificates)",
}


def reset(platform: Platform, say: Callable[[str], None] = print) -> list[Path]:
    """Stop the platform, delete its data; the paths deleted."""
    state = platform.settings.state_dir
    platform.down(say=say)
    if not state.exists():
        say(f"nothing to delete: {state} does not exist")
        return []
    deleted: list[Path] = []
    for name, what in KEPT.items():
        path = state / name
        if path.exists():
            shutil.rmtree(path)
            deleted.append(path)
            say(f"deleted {path}: {what}")
    logs = sorted(p for p in state.iterdir() if p.is_file() and p.suffix in (".log", ".pid"))
    for path in logs:
        path.unlink()
        deleted.append(path)
    if logs:
        say(f"deleted {len(logs)} process logs and pid files in {state}")
    if platform.settings.external_kafka:
        say(
            f"kept: the topics on the Kafka cluster at {platform.settings.kafka_bootstrap} (not the platform's "
            f"to delete; the control topic there still holds each app's record)"
        )
    else:
        say("the embedded broker keeps its topics in memory: they went when it stopped")
    others = sorted(p.name for p in state.iterdir())
    if others:
        say(f"left alone in {state} (not the platform's): {', '.join(others)}")
    say("start again with `make up` or `make demo`")
    return deleted
