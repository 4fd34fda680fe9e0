"""What a stopping slot leaves for its restore check (StateDigests.note_left): the row count its query
reported at its last committed batch, or, when the app's state store keeps no count, a digest of it."""

import dataclasses
from pathlib import Path

from baton.apps import AppDefinition, StateSettings, TopicRef
from baton.generations import SlotPaths
from baton.records import Slot
from spark_apps.runtime.state.digests import StateDigests


def stopped_slot(tmp_path: Path, count_rows: bool) -> tuple[StateDigests, list]:
    app = AppDefinition(
        name="demo",
        module="spark_apps.apps.click_counts",
        version="1",
        input=TopicRef("clicks", 1),
        output=TopicRef("counts", 1),
        state=StateSettings(count_rows=count_rows),
    )
    paths = SlotPaths(tmp_path / "slot")
    (paths.checkpoint / "commits").mkdir(parents=True)
    (paths.checkpoint / "commits" / "7").write_text("v1\n{}\n")
    (paths.checkpoint / "state" / "0").mkdir(parents=True)
    progress = {"batchId": 7, "stateOperators": [{"numRowsTotal": 0 if not count_rows else 1234}]}
    published: list = []
    digests = StateDigests(
        app,
        Slot.BLUE,
        tmp_path,
        paths,
        follower=None,
        spark=lambda: None,
        publish=lambda: published.append(True),
        last_progress=lambda: progress,
    )
    taken: list = []
    digests.take = lambda batch, at: taken.append((batch, at))
    return digests, taken


def test_a_counted_state_leaves_its_query_s_row_count_without_a_digest_job(tmp_path):
    digests, taken = stopped_slot(tmp_path, count_rows=True)
    digests.note_left()
    assert taken == []
    assert dataclasses.astuple(digests.digest)[:4] == ("stop", 7, 1234, "")


def test_an_uncounted_state_is_digested_at_the_stop_not_reported_as_empty(tmp_path):
    digests, taken = stopped_slot(tmp_path, count_rows=False)
    digests.note_left()
    assert taken == [(7, "stop")]  # Spark's 0 for a count it does not keep is never the restore check's figure
    assert digests.digest is None
