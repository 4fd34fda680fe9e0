"""The dead-letter spool between the read tasks and the sink: a file per partition range, required for
every range a batch read, replaced atomically, purged once handled."""

import pytest

from spark_apps.runtime.sink.dead_letters import (
    SpoolIncomplete,
    collect,
    purge,
    read_initial,
    write_initial,
    write_spool,
)


def test_a_batch_collects_the_dead_letters_of_its_ranges_in_partition_and_offset_order(tmp_path):
    write_spool(str(tmp_path), 1, 10, 20, [b"k"], [b"v1"], ["not a JSON object"], [12])
    write_spool(str(tmp_path), 0, 5, 9, [None, b"k2"], [b"a", None], ["r1", "r2"], [5, 8])
    got = collect(tmp_path, {0: 5, 1: 10}, {0: 9, 1: 20})
    assert [(d.partition, d.offset, d.key, d.value, d.reason) for d in got] == [
        (0, 5, None, b"a", "r1"),
        (0, 8, b"k2", None, "r2"),
        (1, 12, b"k", b"v1", "not a JSON object"),
    ]


def test_a_range_read_without_its_file_fails_loudly_and_an_empty_file_means_none(tmp_path):
    write_spool(str(tmp_path), 0, 0, 10, [], [], [], [])
    assert collect(tmp_path, {0: 0, 1: 4}, {0: 10, 1: 4}) == []  # partition 1 read nothing: no file needed
    with pytest.raises(SpoolIncomplete, match=r"partition 1 offsets \[4, 6\)"):
        collect(tmp_path, {0: 0, 1: 4}, {0: 10, 1: 6})


def test_files_of_other_ranges_are_not_taken(tmp_path):
    write_spool(str(tmp_path), 0, 0, 5, [b"old"], [b"x"], ["r"], [1])  # an earlier batch, not purged yet
    write_spool(str(tmp_path), 0, 5, 9, [b"new"], [b"y"], ["r"], [6])
    assert [d.key for d in collect(tmp_path, {0: 5}, {0: 9})] == [b"new"]


def test_a_new_partition_is_matched_by_its_end(tmp_path):
    write_spool(str(tmp_path), 2, 0, 3, [b"k"], [b"v"], ["r"], [0])
    assert [d.partition for d in collect(tmp_path, {0: 1}, {0: 1, 2: 3})] == [2]


def test_rewriting_a_range_replaces_it_and_purge_removes_handled_ranges(tmp_path):
    write_spool(str(tmp_path), 0, 0, 5, [b"a"], [b"x"], ["r"], [1])
    write_spool(str(tmp_path), 0, 0, 5, [b"a"], [b"x"], ["r"], [1])  # a retried task: same file
    write_spool(str(tmp_path), 0, 5, 9, [], [], [], [])
    assert len(collect(tmp_path, {0: 0}, {0: 5})) == 1
    assert purge(tmp_path, {0: 5}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-5-9.arrow"]


def test_initial_offsets_round_trip(tmp_path):
    assert read_initial(tmp_path) is None
    write_initial(str(tmp_path), {0: 3, 1: 0})
    assert read_initial(tmp_path) == {0: 3, 1: 0}
