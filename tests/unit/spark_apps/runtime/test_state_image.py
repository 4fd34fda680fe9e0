"""The state image a reprocess's correction publishes instead of reading the state at the cutover
(spark_apps.runtime.state.state_image): a base read at batch J and every later batch's output, each key's
newest record; anything that breaks the chain drops it (the correction reads the state then)."""

from types import SimpleNamespace

from spark_apps.apps import click_counts, click_counts_ttl, click_counts_v2
from spark_apps.runtime.state.state_image import StateImage, keeps_image
from tests.support import buggy_counts


def test_the_base_and_the_batches_after_it_give_each_keys_newest_record():
    image = StateImage()
    image.arm(after=7, request="run:1")
    assert image.collecting and not image.ready
    image.fold(7, [(b"a", b"old")])  # the base's own batch: in the base already
    image.fold(8, [(b"a", b"8"), (b"c", b"8")])  # while the base was read
    assert image.base(7, [(b"a", b"7"), (b"b", b"7")])
    image.fold(9, [(b"b", b"9")])
    assert image.ready and image.through == 9
    assert sorted(image.records_less(set())) == [(b"a", b"8"), (b"b", b"9"), (b"c", b"8")]
    assert sorted(image.records_less({b"b"})) == [(b"a", b"8"), (b"c", b"8")]


def test_a_batch_not_folded_in_or_a_base_of_another_batch_drops_the_image():
    skipped = StateImage()
    skipped.arm(after=7)
    skipped.fold(8, [(b"a", b"8")])
    skipped.fold(10, [(b"a", b"10")])  # batch 9 ran without its output being taken
    assert not skipped.collecting and not skipped.base(7, [(b"a", b"7")]) and not skipped.ready

    elsewhere = StateImage()
    elsewhere.arm(after=7)
    assert not elsewhere.base(8, [(b"a", b"8")]) and not elsewhere.collecting

    again = StateImage()
    again.arm(after=7)
    again.fold(8, [(b"a", b"8")])
    again.fold(8, [(b"a", b"8")])  # a batch run again (after a fenced commit): not the next one
    assert not again.collecting


def test_too_many_keys_or_too_long_without_a_correction_drop_it():
    big = StateImage(max_keys=2)
    big.arm(after=1)
    assert not big.base(1, [(b"a", b""), (b"b", b""), (b"c", b"")]) and not big.collecting
    growing = StateImage(max_keys=2)
    growing.arm(after=1)
    assert growing.base(1, [(b"a", b""), (b"b", b"")])
    growing.fold(2, [(b"c", b"")])
    assert not growing.collecting

    now = [100.0]
    kept = StateImage(clock=lambda: now[0], keep_s=60)
    assert not kept.expired()  # not armed
    kept.arm(after=1)
    now[0] += 59
    assert not kept.expired()
    now[0] += 2
    assert kept.expired()


def test_only_apps_whose_output_is_their_state_keep_an_image():
    assert keeps_image(click_counts) and keeps_image(click_counts_v2) and keeps_image(buggy_counts)
    assert not keeps_image(click_counts_ttl)  # idle users leave its state without output
    assert not keeps_image(SimpleNamespace(OUTPUT_IS_STATE=True))  # no state_output to read the base with
    assert not keeps_image(SimpleNamespace(OUTPUT_IS_STATE="yes", state_output=None))
