"""The churn load: deterministic, users arrive and leave at the stated rate, and the per-window key
bound the windowed-state test relies on really is an upper bound."""

import json
from collections import defaultdict

import pytest

from baton.tools.churn import Churn


def keys_per_window(churn: Churn, n: int, window_s: int) -> dict[int, set[str]]:
    by = defaultdict(set)
    for i in range(n):
        user, ts = churn.event(i)
        by[ts - ts % window_s].add(user)
    return by


def test_events_are_deterministic_and_serialise_as_click_events():
    churn = Churn(rate=7, new_users_per_s=3, active_users=11, jitter_s=2)
    assert [churn.event(i) for i in range(50)] == [churn.event(i) for i in range(50)]
    assert json.loads(churn.value(8)) == {"user_id": churn.event(8)[0], "timestamp": churn.event(8)[1]}


def test_users_arrive_and_leave_and_time_advances_at_the_rate():
    churn = Churn(rate=10, new_users_per_s=5, active_users=20, base_ts=1000)
    seconds = defaultdict(set)
    for i in range(10 * 30):
        user, ts = churn.event(i)
        assert ts == 1000 + i // 10
        seconds[ts].add(int(user[1:]))
    for ts, users in seconds.items():
        t = ts - 1000
        assert min(users) >= 5 * t and max(users) < 5 * t + 20  # only that second's active users
    assert len(set().union(*seconds.values())) > 100  # users keep coming: the keys grow with time


@pytest.mark.parametrize(
    "churn",
    [
        Churn(rate=20, new_users_per_s=10, active_users=50),
        Churn(rate=50, new_users_per_s=5, active_users=40, jitter_s=4),
        Churn(rate=100, new_users_per_s=7, active_users=30, base_ts=1_700_000_003),
    ],
)
def test_max_keys_per_window_bounds_every_window(churn):
    by = keys_per_window(churn, churn.rate * 200, 10)
    worst = max(len(users) for users in by.values())
    assert worst <= churn.max_keys_per_window(10)
    assert worst >= churn.max_keys_per_window(10) * 0.5  # a bound, not a wild over-estimate


def test_jitter_moves_events_back_by_at_most_jitter_s():
    churn = Churn(rate=10, new_users_per_s=1, active_users=5, base_ts=0, jitter_s=3)
    backs = {i // 10 - churn.event(i)[1] for i in range(1000)}
    assert backs == {0, 1, 2, 3}


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(rate=0, new_users_per_s=1, active_users=1), "rate"),
        (dict(rate=1, new_users_per_s=-1, active_users=1), "new_users_per_s"),
        (dict(rate=1, new_users_per_s=1, active_users=0), "active_users"),
        (dict(rate=1, new_users_per_s=1, active_users=1, jitter_s=-1), "jitter_s"),
    ],
)
def test_bad_parameters_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"Churn.{field}"):
        Churn(**kw)
