"""The verifier's pure logic: verdicts, per-event latency (answers worked out by hand), percentiles."""

import math
from collections import Counter

import numpy as np
import pytest

from baton.tools.verify import (
    Observations,
    align_users,
    event_latencies,
    latencies_by_user,
    latency_report,
    latency_timeline,
    longest_gap,
    longest_gap_at,
    percentile,
    verify,
)

# --- verdicts -----------------------------------------------------------------------------------


def test_exact_output_is_ok():
    v = verify(Counter(a=2, b=1), [("a", 1), ("b", 1), ("a", 2)])
    assert v.ok and v.summary() == {"keys": 2, "records": 3, "lost": 0, "duplicated": 0, "wrong": 0, "corrections": 0}


def test_verdicts_name_lost_duplicated_and_wrong_keys():
    truth = Counter(a=3, b=2, c=1, d=1)
    output = [
        ("a", 1),
        ("a", 2),  # a: stops at 2 of 3 -> lost
        ("b", 1),
        ("b", 1),
        ("b", 2),  # b: count 1 twice -> duplicated
        ("c", 2),  # c: above truth -> wrong
        ("x", 1),
    ]  # x: not in the input -> wrong; d never emitted -> lost
    v = verify(truth, output)
    assert not v.ok
    assert sorted(v.lost) == ["a", "d"] and v.duplicated == ["b"] and sorted(v.wrong) == ["c", "x"]


def test_a_corrected_output_record_may_repeat_a_count_but_not_lower_it_or_pass_the_truth():
    truth = Counter(a=3, b=2, c=2, d=2)
    output = [
        ("a", 1),
        ("a", 2),
        ("a", 2),
        ("a", 3),  # a: the correction republished 2: fine
        ("b", 1),
        ("b", 1),
        ("b", 1),
        ("b", 2),  # b: a plain record repeated 1 beside the correction
        ("c", 2),
        ("c", 1),  # c: the correction went back
        ("d", 1),
        ("d", 2),
    ]  # d: nothing to correct
    flags = [False, False, True, False, False, False, True, False, False, True, False, False]
    v = verify(truth, output, flags)
    assert v.duplicated == ["b"] and v.wrong == ["c"] and v.lost == ["c"] and v.corrections == 3
    assert verify(truth, output).duplicated == ["a", "b"]  # unflagged, a republish is a duplicate


def test_decreasing_counts_are_wrong():
    assert verify(Counter(a=2), [("a", 2), ("a", 1), ("a", 2)]).wrong == ["a"]


def test_observations_feed_the_verdict_in_read_order():
    obs = Observations(
        user_ids=["b", "a"],
        users=np.array([1, 0, 1], dtype=np.int32),
        counts=np.array([1, 1, 2]),
        times=np.array([1.0, 1.0, 2.0]),
    )
    assert obs.pairs() == [("a", 1), ("b", 1), ("a", 2)]
    assert verify(Counter(a=2, b=1), obs.pairs()).ok
    assert align_users(obs, {"a": 7, "b": 3}).tolist() == [7, 3, 7]
    assert align_users(obs, {"a": 7}).tolist() == [7, -1, 7]


# --- latency ------------------------------------------------------------------------------------


def test_latency_of_each_event_is_first_output_reaching_its_count():
    sends = [("alice", 10.0), ("bob", 10.5), ("alice", 11.0), ("alice", 11.2), ("carol", 12.0)]
    outputs = [("alice", 2, 12.0), ("bob", 1, 12.0), ("alice", 3, 13.5)]
    got = latencies_by_user(sends, outputs)
    # alice #1 and #2 are reflected by count 2 at 12.0; alice #3 by count 3 at 13.5; carol never.
    assert got[:4] == pytest.approx([2.0, 1.5, 1.0, 2.3])
    assert got[4] is None


def test_a_later_count_that_became_readable_earlier_wins():
    # Counts >= n: the earliest readable one counts, whatever its count (e.g. two partitions'
    # transactions seen in a different order).
    sends = [("a", 0.0), ("a", 1.0)]
    outputs = [("a", 2, 5.0), ("a", 1, 7.0)]
    assert latencies_by_user(sends, outputs) == pytest.approx([5.0, 4.0])


def test_a_repeated_count_uses_its_earliest_copy():
    sends = [("a", 0.0)]
    assert latencies_by_user(sends, [("a", 1, 3.0), ("a", 1, 2.0)]) == pytest.approx([2.0])


def test_no_leak_between_users():
    # bob's output is readable long before alice's; alice's events must not borrow bob's time.
    sends = [("alice", 19.0), ("bob", 0.5)]
    outputs = [("bob", 5, 1.0), ("alice", 1, 20.0)]
    assert latencies_by_user(sends, outputs) == pytest.approx([1.0, 0.5])


def test_an_output_below_the_events_count_does_not_reflect_it():
    sends = [("a", 0.0), ("a", 0.1), ("a", 0.2)]
    assert latencies_by_user(sends, [("a", 2, 1.0)]) == [pytest.approx(1.0), pytest.approx(0.9), None]


def test_absurd_counts_do_not_overflow():
    lat = event_latencies(
        np.array([0, 1]), np.array([0.0, 0.0]), np.array([1, 0]), np.array([2**62, -5]), np.array([3.0, 4.0])
    )
    assert lat[0] != lat[0]  # user 0's only output has a negative count: not reflected (NaN)
    assert lat[1] == pytest.approx(3.0)


def test_no_output_at_all():
    assert latencies_by_user([("a", 1.0)], []) == [None]


def test_vectorised_answer_matches_a_direct_computation():
    rng = np.random.default_rng(7)
    users = rng.integers(0, 50, 2000)
    times = np.sort(rng.uniform(0, 100, 2000))
    # Output: every 5 s, each user's count so far, readable 0-3 s later (not ordered by count).
    outs = []
    for t in np.arange(5, 110, 5.0):
        sent = users[times < t]
        for u in np.unique(sent):
            outs.append((u, int(np.sum(sent == u)), t + rng.uniform(0, 3)))
    ou, oc, ot = (np.array(x) for x in zip(*outs))
    lat = event_latencies(users, times, ou, oc, ot)
    seen: dict[int, int] = {}
    for i, (u, t) in enumerate(zip(users, times)):
        seen[u] = seen.get(u, 0) + 1
        reach = ot[(ou == u) & (oc >= seen[u])]
        expect = reach.min() - t if reach.size else math.nan
        assert (math.isnan(expect) and math.isnan(lat[i])) or lat[i] == pytest.approx(expect, abs=2e-6)


# --- summaries ----------------------------------------------------------------------------------


def test_nearest_rank_percentiles():
    v = np.arange(1, 101, dtype=float)
    assert (percentile(v, 50), percentile(v, 99), percentile(v, 99.99)) == (50, 99, 100)
    assert percentile(np.arange(1, 11), 50) == 5 and percentile(np.arange(1, 11), 99) == 10
    assert percentile(np.array([5.0]), 99.99) == 5
    assert math.isnan(percentile(np.array([]), 50))


def test_longest_gap_between_readable_times():
    assert longest_gap(np.array([1.0, 1.0, 2.0, 5.0, 5.5])) == 3.0
    assert longest_gap(np.array([4.0])) == 0.0
    assert longest_gap_at(np.array([5.5, 1.0, 2.0, 5.0])) == (3.0, 5.0)  # the gap ended at 5.0
    assert longest_gap_at(np.array([4.0])) == (0.0, None)


def test_report_counts_unreflected_events_apart():
    lat = np.array([0.1, 0.2, np.nan, 0.4])
    r = latency_report(lat, np.array([0.0, 2.5]))
    assert (r.events, r.reflected, r.unreflected) == (4, 3, 1)
    assert (r.p50_ms, r.p99_ms, r.max_ms) == (pytest.approx(200), pytest.approx(400), pytest.approx(400))
    assert (r.longest_output_gap_s, r.longest_output_gap_end) == (2.5, 2.5)


def test_timeline_buckets_by_send_time():
    sends = np.array([100.0, 100.4, 100.9, 101.2, 103.0])
    lat = np.array([0.5, 1.5, 1.0, np.nan, 2.0])
    rows = latency_timeline(sends, lat, bucket_s=1.0)
    assert [r["t_s"] for r in rows] == [0.0, 1.0, 3.0]
    assert [r["events"] for r in rows] == [3, 1, 1]
    assert rows[0]["p50_ms"] == pytest.approx(1000) and rows[0]["max_ms"] == pytest.approx(1500)
    assert math.isnan(rows[1]["p50_ms"])
