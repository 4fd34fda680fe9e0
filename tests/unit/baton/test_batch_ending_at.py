"""Finding the committed batch that ended at a check position, from Spark's offset and commit logs."""

import json

from baton.checkpoints import batch_ending_at


def checkpoint(tmp_path, ends, committed):
    for log in ("offsets", "commits"):
        (tmp_path / log).mkdir()
    for batch, end in enumerate(ends):
        (tmp_path / "offsets" / str(batch)).write_text(
            "v1\n{}\n" + json.dumps({str(p): o for p, o in end.items()}) + "\n"
        )
        if batch < committed:
            (tmp_path / "commits" / str(batch)).write_text("v1\n{}\n")
    return tmp_path


def test_the_batch_that_ended_there_or_whether_it_was_passed_inside_a_batch(tmp_path):
    cp = checkpoint(tmp_path, [{0: 10, 1: 10}, {0: 20, 1: 25}, {0: 40, 1: 40}, {0: 50, 1: 50}], committed=3)
    assert batch_ending_at(cp, {0: 20, 1: 25}) == (1, True)
    assert batch_ending_at(cp, {0: 40, 1: 40}) == (2, True)
    assert batch_ending_at(cp, {0: 30, 1: 30}) == (None, True)  # inside batch 2: never a digest there
    assert batch_ending_at(cp, {0: 50, 1: 50}) == (None, False)  # planned, not committed yet: look again
    assert batch_ending_at(cp, {0: 20, 1: 60}) == (None, False)  # not reached on partition 1
