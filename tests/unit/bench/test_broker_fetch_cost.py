"""bench/broker_fetch_cost.fetch_costs: a reader's fetches' cost to the broker, from windows with and
without it (what producing cost on either side is taken off)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # the bench imports its neighbours by name, as when run

from broker_fetch_cost import Window, fetch_costs  # noqa: E402


def test_a_reading_window_costs_what_it_used_above_the_quiet_windows_beside_it_per_fetch():
    ws = [
        Window(0, False, 0.03, 0),
        Window(30, True, 0.13, 10.0),
        Window(60, False, 0.05, 0),
        Window(90, True, 0.45, 20.0),
        Window(120, False, 0.05, 0),
    ]
    # 0.13 against the mean of 0.03 and 0.05: 0.09 cores over 10 fetches a second, 9 ms a fetch; then
    # 0.40 cores over 20 a second, 20 ms a fetch.
    assert fetch_costs(ws) == [
        {"t_s": 30, "reader_cores": 0.09, "fetches_per_s": 10.0, "broker_ms_per_fetch": 9.0},
        {"t_s": 90, "reader_cores": 0.4, "fetches_per_s": 20.0, "broker_ms_per_fetch": 20.0},
    ]


def test_a_reading_window_with_one_quiet_neighbour_uses_it_and_one_with_none_is_left_out():
    ws = [Window(0, True, 0.5, 5.0), Window(30, False, 0.1, 0), Window(60, True, 0.2, 5.0)]
    assert fetch_costs(ws) == [
        {"t_s": 0, "reader_cores": 0.4, "fetches_per_s": 5.0, "broker_ms_per_fetch": 80.0},
        {"t_s": 60, "reader_cores": 0.1, "fetches_per_s": 5.0, "broker_ms_per_fetch": 20.0},
    ]
    assert fetch_costs([Window(0, True, 0.5, 5.0)]) == []


def test_no_fetches_gives_no_cost_per_fetch_and_the_noise_below_the_quiet_level_counts_as_none():
    ws = [Window(0, False, 0.1, 0), Window(30, True, 0.08, 0.0), Window(60, False, 0.1, 0)]
    assert fetch_costs(ws) == [{"t_s": 30, "reader_cores": 0.0, "fetches_per_s": 0.0, "broker_ms_per_fetch": None}]
