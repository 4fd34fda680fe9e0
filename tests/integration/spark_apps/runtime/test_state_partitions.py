"""A checkpoint keeps the number of state partitions it was started with: an app definition whose
`state.partitions` changed (or a Baton whose default did) restarts a running app's slots on the
checkpoint's own number, never re-partitioning its state; a new checkpoint takes the new number."""

from tests.support.rate_counts import run_rate_counts


def state_partitions(spark, checkpoint: str) -> set[int]:
    """The number of state partitions each stateful operator of the checkpoint records."""
    rows = spark.read.format("state-metadata").load(checkpoint).collect()
    assert rows, "the checkpoint has no state operator"
    return {r["numPartitions"] for r in rows}


def test_a_checkpoint_keeps_its_state_partitions_when_the_setting_changes(spark, tmp_path):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        old, new = str(tmp_path / "old"), str(tmp_path / "new")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        run_rate_counts(spark, old, 2)
        assert state_partitions(spark, old) == {4}

        spark.conf.set("spark.sql.shuffle.partitions", "1")
        run_rate_counts(spark, old, 2)  # restarted: the checkpoint's 4 win over the session's 1
        assert state_partitions(spark, old) == {4}
        run_rate_counts(spark, new, 2)
        assert state_partitions(spark, new) == {1}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
