"""The rolling upgrade's gates on reported digests and statuses."""

import dataclasses

import pytest

from baton.conditions import Check
from baton.control_plane import ControlPlane
from baton.records import CommitMarker, Role, Slot, SlotState, StateDigest, StatusRecord
from baton.upgrade import (
    CORRECTION_GRACE_S,
    Policy,
    ask_state_check,
    compare,
    missed_state_check,
    move_state_check,
    restore_check,
    settle_batch_limit,
    settle_check,
    settle_lag_limit,
    settle_record_cost,
    states_agree,
    too_slow,
)
from tests.support.fakes import MemoryControlStore

SCHEMA = "0:key=struct<user_id:string>;value=struct<count:bigint>"
FENCE = {0: 100, 1: 80}


def digest(at="check", batch=7, rows=10, value="aa", schema=SCHEMA, position=None):
    return StateDigest(at=at, batch_id=batch, rows=rows, digest=value, schema=schema, position=position)


def status(batch=7, processed=None, d=None, ts=1_000, state=SlotState.RUNNING, batch_ms=300, error=""):
    return StatusRecord(
        app="a",
        slot=Slot.GREEN,
        state=state,
        role=Role.STANDBY,
        epoch_seen=1,
        batch_id=batch,
        processed=dict(FENCE if processed is None else processed),
        state_digest=d,
        ts_ms=ts,
        batch_ms=batch_ms,
        error=error,
    )


@pytest.mark.parametrize(
    "new, policy, met, words",
    [
        (digest(), Policy.EXACT, True, "digest"),
        (digest(value="bb"), Policy.EXACT, False, "different values"),
        (digest(value="bb"), Policy.COMPATIBLE, True, "key count"),
        (digest(rows=11), Policy.COMPATIBLE, False, "10 state rows vs 11"),
        (digest(schema="other"), Policy.COMPATIBLE, False, "schema differs"),
    ],
)
def test_compare_under_each_policy(new, policy, met, words):
    check = compare(digest(), new, policy, "x")
    assert (check.met, check.failed) == (met, not met) and words in check.message


def test_restore_check_waits_for_the_restore_digest_then_compares_it():
    left = digest("stop")
    assert restore_check(left, [status(d=left, ts=500)], since_ms=1_000).waiting  # before the restart
    assert restore_check(left, [status(d=digest("restore"), ts=1_500)], since_ms=1_000).met
    lost = restore_check(left, [status(d=digest("restore", batch=-1, rows=0, value="00"), ts=1_500)], 1_000)
    assert lost.failed and "restored 0 rows at batch -1" in lost.message and "left 10 rows" in lost.message
    crashed = restore_check(left, [status(state=SlotState.FAILED, error="boom", ts=1_500)], 1_000)
    assert crashed.failed and "boom" in crashed.message
    assert restore_check(None, [status(d=digest("restore"), ts=1_500)], 1_000).failed


def test_a_stop_without_a_digest_is_compared_by_the_rows_its_query_held():
    counted = digest("stop", value="", schema="")  # Harness.note_left: batch 7, 10 rows, no digest job
    assert restore_check(counted, [status(d=digest("restore"), ts=1_500)], 1_000).met
    fewer = restore_check(counted, [status(d=digest("restore", rows=9), ts=1_500)], 1_000)
    assert fewer.failed and "restored 9 rows at batch 7" in fewer.message and "held 10 rows" in fewer.message
    assert restore_check(counted, [status(d=digest("restore", batch=6), ts=1_500)], 1_000).failed


def test_states_agree_needs_both_digests_taken_at_the_asked_position():
    at = {0: 90, 1: 70}
    checked = [status(d=digest("check", position=at))]
    assert states_agree(checked, [status(processed={0: 99, 1: 80})], at, Policy.EXACT).waiting
    assert states_agree(checked, [status(d=digest("restore"))], at, Policy.EXACT).waiting
    assert states_agree(checked, [status(d=digest("check", position={0: 1, 1: 1}))], at, Policy.EXACT).waiting  # stale
    # Taken while the slots ran on: later batches carry the same digest, whatever they processed.
    assert states_agree(checked, [status(batch=9, d=digest("check", batch=5, position=at))], at, Policy.EXACT).met
    differ = states_agree(checked, [status(d=digest("check", value="bb", position=at))], at, Policy.EXACT)
    assert differ.failed and "different values" in differ.message


def test_the_standbys_digest_of_the_actives_state_stands_for_the_active():
    at = {0: 90, 1: 70}
    both = [
        status(d=digest("check", position=at)),
        dataclasses.replace(
            status(d=digest("check", position=at)), active_digest=digest("check", batch=12, position=at)
        ),
    ]
    assert states_agree([], both, at, Policy.EXACT).met  # the active published nothing
    assert states_agree([], both[:1], at, Policy.EXACT).waiting
    differ = [dataclasses.replace(both[1], active_digest=digest("check", value="bb", position=at))]
    assert states_agree([], differ, at, Policy.EXACT).failed
    passed = [dataclasses.replace(both[1], active_digest=digest("missed", batch=-1, position=at))]
    assert states_agree([], passed, at, Policy.EXACT).failed
    assert "the active slot read past" in missed_state_check([], passed, at)


def test_a_slot_that_read_past_the_check_position_fails_the_state_check_at_once():
    at = {0: 90, 1: 70}
    missed = [status(d=digest("missed", batch=-1, rows=0, value="", schema="", position=at))]
    failed = states_agree(missed, [status(processed={0: 10, 1: 10})], at, Policy.EXACT)  # the other still on its way
    assert failed.failed and "active slot read past the check position" in failed.message
    assert states_agree([status(d=digest("check", position=at))], missed, at, Policy.EXACT).failed
    earlier = [status(d=digest("missed", batch=-1, position={0: 5, 1: 5}))]  # an earlier upgrade's position
    assert states_agree(earlier, [status(d=digest("check", position=at))], at, Policy.EXACT).waiting


def test_asking_for_a_state_check_is_one_idempotent_write():
    plane = ControlPlane(MemoryControlStore(), writer="test")
    plane.move_slot("a", Slot.BLUE, SlotState.STARTING, version="v1")
    asked = plane.update("a", ask_state_check({0: 50, 1: 50}))
    assert asked.check_at == {0: 50, 1: 50}
    assert plane.update("a", ask_state_check({0: 50, 1: 50})).revision == asked.revision


def settle(history, marker=None, end=None, health=Check(met=True), now=40_000, settle_s=30, max_ms=2_000, lag=1_000):
    return settle_check(history, marker, 2, FENCE, end or {0: 100, 1: 80}, health, now, 1_000, settle_s, max_ms, lag)


def test_settle_fails_fast_and_passes_after_the_period():
    ok = [status(batch=9, processed={0: 150, 1: 120}, ts=2_000)]
    marker = CommitMarker(app="a", generation=0, epoch=2, slot=Slot.GREEN, batch_id=9, emitted={0: 150, 1: 120})
    end = {0: 150, 1: 120}
    assert settle(ok, marker, end, now=20_000).waiting
    assert settle(ok, marker, end).met
    past = {0: 101, 1: 80}
    slow = settle([status(batch=9, processed=past, batch_ms=7_000, ts=2_000)], now=3_000)
    assert slow.failed and "took 7000 ms (limit 2000 ms, 3x at most once)" in slow.message
    assert settle([status(batch=9, processed=past, batch_ms=2_100, ts=2_000)], now=3_000).waiting  # one a little over
    strikes = [
        status(batch=b, processed=past, batch_ms=ms, ts=2_000)
        for b, ms in ((9, 2_500), (10, 900), (11, 2_100), (12, 2_200), (13, 2_300))
    ]
    assert settle(strikes[:4], now=3_000).waiting
    three = settle(strikes, now=3_000)
    assert three.failed and "batches 11-13 took 2100, 2200, 2300 ms (limit 2000 ms, 3 in a row)" in three.message
    # The standby's last batch up to the fence, reported after the cutover: not the new active's.
    assert settle([status(batch=8, processed=FENCE, batch_ms=5_000, ts=2_000)] + ok, marker, end).met
    dead = settle(ok, health=Check(failed=True, message="dead: no status"), now=3_000)
    assert dead.failed and "dead" in dead.message
    silent = settle(ok, CommitMarker(app="a", generation=0, epoch=1, slot=Slot.BLUE, batch_id=3, emitted=FENCE), end)
    assert silent.failed and "no output at epoch 2" in silent.message
    behind = settle(ok, marker, {0: 5_000, 1: 120})
    assert behind.failed and "4850 records behind 30 s after the cutover (limit 1000)" in behind.message
    assert settle([], None, None).met  # no input arrived past the fence: nothing to emit yet


def test_settle_judges_the_new_active_by_its_own_progress_not_by_the_input():
    """Seen through Airflow: input paused ~40 s during settle and resumed just before its end; the
    input's end was past F, no batch had read it yet, and the settle check failed (then a rollback)."""
    end = {0: 150, 1: 120}  # input arrived past F ...
    quiet = [status(batch=9, processed=FENCE, ts=2_000)]  # ... but no batch of the new active read it yet
    assert settle(quiet, None, end, lag=100).met
    read_past = [status(batch=10, processed={0: 150, 1: 120}, ts=30_000)]
    silent = settle(read_past, None, end)
    assert silent.failed and "read past the fence" in silent.message and "batch 10" in silent.message


def test_a_corrected_output_cutover_settles_once_its_correction_is_in():
    ok = [dataclasses.replace(status(batch=9, processed={0: 150, 1: 120}, ts=2_000), corrected_epoch=2)]
    end = {0: 150, 1: 120}

    def check(corrected_epoch, now):
        marker = CommitMarker(
            app="a", generation=0, epoch=2, slot=Slot.GREEN, batch_id=9, emitted=end, corrected_epoch=corrected_epoch
        )
        return settle_check(ok, marker, 2, FENCE, end, Check(met=True), now, 1_000, 30, 2_000, 1_000, correct=True)

    assert check(2, 40_000).met
    assert check(1, 40_000).waiting  # an older correction (a previous reprocess's) does not count
    late = check(0, 1_000 + (30 + CORRECTION_GRACE_S) * 1000 + 1)
    assert late.failed and "corrected output of epoch 2 is not in" in late.message


def test_settle_excuses_the_correction_and_the_catch_up_after_it_but_not_a_slow_version():
    """Seen in the reprocess bench: the new active's corrected-output publish (12 s of one task slot)
    made its batches take up to 6.8 s, then 2-3 s for ~20 s while it worked off what arrived meanwhile;
    the settle failed a healthy generation and rolled the reprocess back."""
    end = {0: 100 + 20_000, 1: 80 + 20_000}  # 40,000 records arrived in the 40 s since the cutover: 1,000/s

    def batches(*rows, corrected_from=0):
        out, at, ts = [], dict(FENCE), 2_000
        for i, (ms, read) in enumerate(rows):
            at = {p: o + read // 2 for p, o in at.items()}
            ts += max(ms, 1_000)
            out.append(
                dataclasses.replace(
                    status(batch=20 + i, processed=at, batch_ms=ms, ts=ts),
                    corrected_epoch=2 if i >= corrected_from else 0,
                )
            )
        return out

    marker = CommitMarker(app="a", generation=1, epoch=2, slot=Slot.GREEN, batch_id=30, emitted=end, corrected_epoch=2)

    def check(history, now=40_000):
        return settle_check(
            history, marker, 2, FENCE, end, Check(met=True), now, 1_000, 30, 2_000, 50_000, correct=True
        )

    # While the correction is published (not yet in): 6.8 s, 5.5 s; then catching up at ~2.5x arrival.
    healed = batches(
        (1_000, 1_000),
        (6_800, 4_000),
        (5_500, 6_000),
        (2_900, 7_000),
        (2_700, 6_500),
        (2_600, 6_000),
        (900, 1_000),
        corrected_from=3,
    )
    # The period counts from the correction's status (18,200): at 40,000 it still settles.
    assert "settling: 22 of 30 s after its corrected output went in" in check(healed).message
    assert check(healed, now=48_300).met, check(healed, now=48_300)
    # Slow batches that do not outpace the input: a slow version, whatever the correction.
    slow = batches((1_000, 1_000), (2_500, 2_500), (2_600, 2_600), (2_700, 2_700), corrected_from=0)
    failed = check(slow)  # failed at once, not after the period
    assert failed.failed and "3 in a row" in failed.message


def test_a_corrected_output_cutover_judges_its_lag_a_settle_period_after_the_correction():
    """Seen in the product-path reprocess bench on a busy host: the new active's batches took 18.6 s
    beside its correction's state read, and its lag, judged 30 s after the cutover while the read still
    ran, rolled the reprocess back to the version it was run to correct."""
    end = {0: 100 + 300_000, 1: 80 + 300_000}
    marker = CommitMarker(app="a", generation=1, epoch=2, slot=Slot.GREEN, batch_id=30, emitted=end, corrected_epoch=2)
    reading = [status(batch=20, processed={0: 100 + 50_000, 1: 80 + 50_000}, batch_ms=18_600, ts=20_000)]

    def check(history, now):
        return settle_check(
            history, marker, 2, FENCE, end, Check(met=True), now, 1_000, 30, 20_000, 200_000, correct=True
        )

    # 30 s after the cutover, 500k behind, the correction not in yet: it waits for it, it does not fail.
    waiting = check(reading, 31_001)
    assert (
        waiting.waiting and "waiting for its corrected output (30 s since the cutover, at most 90)" in waiting.message
    )
    # In at 45,000; 30 s later it has worked the stall off: the lag is judged then, and passes.
    caught_up = [
        *reading,
        dataclasses.replace(
            status(batch=21, processed={0: 100 + 240_000, 1: 80 + 240_000}, batch_ms=15_000, ts=45_000),
            corrected_epoch=2,
        ),
        dataclasses.replace(
            status(batch=22, processed={0: 100 + 290_000, 1: 80 + 290_000}, batch_ms=9_000, ts=74_000),
            corrected_epoch=2,
        ),
    ]
    assert check(caught_up, 60_000).waiting
    assert check(caught_up, 75_001).met
    # One still as far behind then fails on its lag.
    behind = [*caught_up[:2], dataclasses.replace(caught_up[2], processed={0: 100 + 150_000, 1: 80 + 150_000})]
    failed = check(behind, 75_001)
    assert failed.failed and "300000 records behind 30 s after its corrected output went in" in failed.message


def test_the_settle_measures_the_new_active_s_lag_as_its_limit_measures_the_old_one_s():
    """Seen in the product-path reprocess bench on a busy host: the new active's batches took ~15 s;
    measured against the input's end now it stood 602k records behind (arrivals during its running
    batch included) against a limit of 574k measured at batch starts, and 190k behind 45 s later:
    rolled back while it caught up. Both are now the backlog a batch started from."""

    def batch(b, read_to, planned_from, ts):
        return dataclasses.replace(
            status(batch=b, processed={0: read_to, 1: read_to}, batch_ms=14_700, ts=ts),
            role=Role.ACTIVE,
            input_end={0: planned_from, 1: planned_from},
            corrected_epoch=2,
        )

    # Batch 21 started with 250k records to read past batch 20 (2 x 125k) and read them; 15 s of
    # arrivals (300k) came in meanwhile: 550k behind the input's end now, 250k at its start.
    history = [batch(20, 1_000_000, 1_000_000, 20_000), batch(21, 1_125_000, 1_125_000, 35_000)]
    end = {0: 1_275_000, 1: 1_275_000}
    marker = CommitMarker(
        app="a",
        generation=1,
        epoch=2,
        slot=Slot.GREEN,
        batch_id=21,
        emitted={0: 1_125_000, 1: 1_125_000},
        corrected_epoch=2,
    )

    def check(history, max_lag):
        return settle_check(
            history, marker, 2, FENCE, end, Check(met=True), 50_001, 1_000, 30, 20_000, max_lag, correct=True
        )

    settled = check(history, 300_000)
    assert settled.met and "lag 250000 records" in settled.message
    assert "250000 records behind" in check(history, 200_000).message
    # Without the input's end its batch planned from (or a batch between): the input's end now, as before.
    unknown = [history[0], dataclasses.replace(history[1], input_end=None)]
    assert "300000 records behind" in check(unknown, 200_000).message
    assert "300000 records behind" in check([history[0], dataclasses.replace(history[1], batch_id=22)], 200_000).message


def test_a_passed_check_position_is_moved_only_while_it_is_the_one_asked_for():
    plane = ControlPlane(MemoryControlStore(), writer="test")
    plane.move_slot("a", Slot.BLUE, SlotState.STARTING, version="v1")
    plane.update("a", ask_state_check({0: 50, 1: 50}))
    moved = plane.update("a", move_state_check({0: 50, 1: 50}, {0: 90, 1: 90}))
    assert moved.check_at == {0: 90, 1: 90}
    # A second mover of the same passed position (a re-created trigger) keeps the newer one.
    assert plane.update("a", move_state_check({0: 50, 1: 50}, {0: 70, 1: 70})).revision == moved.revision
    missed = [status(d=digest("missed", batch=-1, position={0: 50, 1: 50}))]
    assert "standby slot read past" in missed_state_check([], missed, {0: 50, 1: 50})
    assert missed_state_check([], missed, {0: 90, 1: 90}) is None


def active_batches(times_ms, start_ts=1_000, role=Role.ACTIVE, rows=5_000):
    return [
        dataclasses.replace(status(batch=i, ts=start_ts + i * 1_000, batch_ms=ms), role=role, input_rows=rows)
        for i, ms in enumerate(times_ms)
    ]


def test_the_settle_limit_is_the_budget_while_the_old_active_kept_it():
    limit, why = settle_batch_limit(active_batches([900, 1_100, 1_000, 1_300, 950, 1_050]), 100_000, 2_000)
    assert limit == 2_000 and "the budget" in why and "1300 ms" in why


def test_the_settle_limit_follows_an_old_active_slowed_by_a_busy_host():
    """The product-path bench on a host 4.7x slower: the old active's batches took ~9.4 s; the new
    version, as slow, is no regression and must not be rolled back for it; one much slower still is."""
    old = active_batches([9_100, 9_400, 9_350, 8_900, 9_600, 9_200, 9_450, 9_300, 9_000, 9_500])
    limit, why = settle_batch_limit(old, 100_000, 2_000)
    assert limit == 9_600 and "old active's p90" in why
    assert too_slow(active_batches([9_570, 9_400, 9_800], start_ts=200_000), limit) is None
    assert too_slow(active_batches([9_570, 9_400, 9_800], start_ts=200_000), 2_000) is not None  # the budget alone
    assert "took 30000 ms" in too_slow(active_batches([30_000], start_ts=200_000), limit)
    assert too_slow(active_batches([12_000, 11_000, 13_000], start_ts=200_000), limit) is not None


def test_a_batch_over_the_limit_that_cost_no_more_per_record_than_the_old_active_s_is_excused():
    """The product-path reprocess on a saturated host (bench/results of 2026-11-30, not committed): the old
    active's batches read 50-100k records in up to 5.1 s; the new active took over a larger backlog and
    read 190-280k records a batch in ~10 s, 36-53 us a record against 72: larger batches, not a slower version.
    One that costs more per record still breaks the limit; so do the same batches without a baseline."""
    old = [
        dataclasses.replace(b, input_rows=rows)
        for b, rows in zip(
            active_batches([4_772, 5_102, 5_404, 5_058, 5_084, 4_492, 3_797, 3_250]),
            (73_967, 95_919, 98_074, 105_269, 96_890, 67_686, 63_150, 44_550),
        )
    ]
    limit, _ = settle_batch_limit(old, 100_000, 2_000)
    cost, why = settle_record_cost(old, 100_000)
    assert limit == 5_404 and cost == 72 and "72 us a record over its last 8 batches" in why
    larger = [
        dataclasses.replace(b, input_rows=rows)
        for b, rows in zip(active_batches([10_465, 9_891, 10_214], start_ts=200_000), (284_259, 208_500, 190_550))
    ]
    assert too_slow(larger, limit, record_cost_us=cost) is None
    assert "batches 0-2 took 10465, 9891, 10214 ms" in too_slow(larger, limit)
    costlier = [dataclasses.replace(b, input_rows=100_000) for b in larger]  # ~100 us a record
    assert too_slow(costlier, limit, record_cost_us=cost) is not None
    assert too_slow(costlier, limit, record_cost_us=cost) == too_slow(costlier, limit)
    assert settle_record_cost(old[:4], 100_000)[0] is None  # too few batches to compare with
    assert settle_record_cost(old, 1_000)[0] is None  # none before the cutover
    past = {0: 101, 1: 80}
    history = [dataclasses.replace(b, processed=past) for b in larger]
    assert settle_check(
        history, None, 2, FENCE, FENCE, Check(met=True), 203_000, 190_000, 30, limit, 10**6, record_cost_us=cost
    ).waiting
    assert settle_check(history, None, 2, FENCE, FENCE, Check(met=True), 203_000, 190_000, 30, limit, 10**6).failed


def test_the_settle_limit_counts_only_the_old_active_s_own_batches_before_the_cutover():
    slow = [20_000] * 10
    as_standby = active_batches(slow, role=Role.STANDBY)  # a standby's catch-up is not the active's pace
    assert settle_batch_limit(as_standby, 100_000, 2_000)[0] == 2_000
    after = active_batches(slow, start_ts=100_000)  # after the cutover: not the baseline
    assert settle_batch_limit(after, 100_000, 2_000)[0] == 2_000
    idle = active_batches(slow, rows=0)  # batches without input
    assert settle_batch_limit(idle, 100_000, 2_000)[0] == 2_000
    few = active_batches([20_000] * 4)
    limit, why = settle_batch_limit(few, 100_000, 2_000)
    assert limit == 2_000 and "4 batches" in why
    recent = active_batches([20_000] * 30 + [1_000] * 20)  # only its last 20 batches count
    assert settle_batch_limit(recent, 100_000, 2_000)[0] == 2_000


def trailing(behind, start_ts=1_000, role=Role.ACTIVE, step=20_000):
    """Old-active batches each reading `step` records, after each of which the input's end stood
    behind[i] records past it (as the next batch's plan saw it)."""
    recs, read = [], 0
    for i in range(len(behind) + 1):
        end = {0: read + (behind[i - 1] if i else 0)}
        read += step
        recs.append(
            dataclasses.replace(
                status(batch=i, processed={0: read}, ts=start_ts + i * 1_000), role=role, input_end=end, input_rows=step
            )
        )
    return recs


def test_the_settle_lag_limit_is_the_budget_beyond_how_far_the_old_active_stood_behind():
    """The product-path reprocess on a saturated host: the old active stood ~374k behind after its
    batches; the new generation, 421k behind after its settle, did no worse and must not be rolled
    back to the version the reprocess corrects. One far further behind still is."""
    old = trailing([360_000, 374_000, 370_000, 380_000, 365_000, 372_000, 374_000, 368_000, 371_000, 374_000])
    limit, why = settle_lag_limit(old, 100_000, 200_000)
    assert limit == 200_000 + 380_000 and "p90 lag of 380000" in why
    end = {0: 2_000_000}
    history = [
        dataclasses.replace(status(batch=40 + i, processed={0: 1_579_000}, ts=60_000 + i * 1_000), role=Role.ACTIVE)
        for i in range(3)
    ]
    marker = CommitMarker(app="a", generation=1, epoch=2, slot=Slot.GREEN, batch_id=42, emitted={0: 1_579_000})
    args = dict(
        marker=marker,
        epoch=2,
        fence={0: 1_000_000},
        end=end,
        health=Check(met=True),
        now_ms=100_000,
        since_ms=60_000,
        settle_s=30,
        max_batch_ms=20_000,
    )
    assert settle_check(history, max_lag=limit, **args).met  # 421k behind
    assert "421000 records behind" in settle_check(history, max_lag=200_000, **args).message
    far = [dataclasses.replace(r, processed={0: 1_000_000}) for r in history]
    assert "1000000 records behind" in settle_check(far, max_lag=limit, **args).message


def test_the_settle_lag_limit_is_about_the_budget_for_an_old_active_that_kept_up():
    limit, _ = settle_lag_limit(trailing([20_000, 25_000, 18_000, 22_000, 30_000, 21_000]), 100_000, 200_000)
    assert limit == 230_000


def test_the_settle_lag_limit_counts_only_the_old_active_s_own_consecutive_batches_before_the_cutover():
    behind = [400_000] * 10
    assert settle_lag_limit(trailing(behind, role=Role.STANDBY), 100_000, 200_000)[0] == 200_000
    assert settle_lag_limit(trailing(behind, start_ts=100_000), 100_000, 200_000)[0] == 200_000
    gappy = trailing(behind)[::2]  # no two batches in a row: no lag known after any
    assert settle_lag_limit(gappy, 100_000, 200_000)[0] == 200_000
    no_end = [dataclasses.replace(r, input_end=None) for r in trailing(behind)]
    limit, why = settle_lag_limit(no_end, 100_000, 200_000)
    assert limit == 200_000 and "0 batches" in why
    recent = trailing([900_000] * 30 + [10_000] * 20)  # only its last 20 batches count
    assert settle_lag_limit(recent, 100_000, 200_000)[0] == 210_000
