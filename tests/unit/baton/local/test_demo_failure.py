"""A demo whose start failed says why and what to do (no traceback): for a checkpoint whose input offsets
the broker lost, starting over with `make reset`."""

from baton.local.demo import what_to_do


def test_input_data_loss_points_at_reset():
    text = what_to_do(["start[0]: slot failed: input data loss on topic 'clicks', partitions 0, 1: ..."])
    assert "keeps its topics in memory" in text and "`make reset`" in text and "`make demo`" in text


def test_another_failure_points_at_the_task_logs_and_reset():
    text = what_to_do(["start[0]: slot failed: app module not found"])
    assert "`make up`" in text and "`make reset`" in text and "in memory" not in text
