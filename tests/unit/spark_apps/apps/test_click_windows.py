"""The windowed click app's state bound: the number of windows per user its state can hold after a
batch, checked against a direct simulation of Spark's watermark eviction."""

import pytest

from spark_apps.apps.click_windows import WATERMARK_DELAY_S, WINDOW_S, max_windows_in_state, window_start


def simulated_windows_after_batch(max_before: int, span_s: int) -> int:
    """Windows kept after a batch: Spark evicts with the previous batches' watermark
    (max_before - delay) every window whose end <= watermark; the batch's events reach up to
    max_before + span_s. Each window with a start in between may hold a key."""
    watermark = max_before - WATERMARK_DELAY_S
    newest = window_start(max_before + span_s)
    return sum(1 for s in range(newest - 10 * WINDOW_S, newest + 1, WINDOW_S) if s + WINDOW_S > watermark)


@pytest.mark.parametrize("span_s", [0, 1, 5, 9, 10, 11, 20, 21, 35])
def test_bound_is_the_worst_case_over_where_the_batch_starts(span_s):
    worst = max(simulated_windows_after_batch(m, span_s) for m in range(1_700_000_000, 1_700_000_000 + 3 * WINDOW_S))
    assert max_windows_in_state(span_s) == worst


def test_window_start_matches_spark_for_negative_times_too():
    # Spark: start = ts - ((ts % len) + len) % len, i.e. floor to the window length.
    assert window_start(1_700_000_007) == 1_700_000_000
    assert window_start(1_700_000_010) == 1_700_000_010
    assert window_start(-3) == -WINDOW_S


def test_negative_span_is_an_error():
    with pytest.raises(ValueError, match="batch_span_s"):
        max_windows_in_state(-1)
