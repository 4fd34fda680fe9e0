"""The newest commit marker of an app: what its output holds, read from its commits topic."""

from __future__ import annotations

from baton.records import CommitMarker


def read_last_marker(bootstrap: str, commits_topic: str, app: str, timeout_s: float = 15.0) -> CommitMarker | None:
    """The newest committed marker of `app` (read_committed, to the partition's true end).

    The commits topic has one partition and one small record per batch, appended in order: its
    tail holds the newest marker (baton.kafka.tail reads to EOF, not to Tansu's ListOffsets end)."""
    from baton.kafka.tail import read_tail

    key = app.encode()
    markers = read_tail(
        bootstrap,
        commits_topic,
        lambda m: CommitMarker.from_bytes(m.value()) if m.key() == key else None,
        last_n=2000,
        timeout_s=timeout_s,
    )
    return markers[-1] if markers else None
