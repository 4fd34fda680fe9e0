"""State digests from a real slot's checkpoint, and the rolling upgrade's schema check: a slot publishes
what it leaves at a stop (its query's row count at its last batch) and what it restores at the next
start (a digest of that batch: they agree); a new version with the
same state restores it on that checkpoint and runs on; one with a different state schema is refused by
Spark at its first batch with the reason, as FAILED, before it could emit."""

import pytest

from baton.upgrade import restore_check
from tests.support.slots import produce_clicks, read_status, start_slot, stop_slot, wait_for, wait_until_emitted

pytestmark = pytest.mark.integration


def last_digest(bootstrap, app, slot, at, since_ms=0):
    for s in reversed(read_status(bootstrap, app.name, slot)):
        if s.ts_ms >= since_ms and s.state_digest is not None and s.state_digest.at == at:
            return s.state_digest
    return None


def version_file(path, app, version, module):
    """versions/<app>/<version>.yaml beside the registry file `path`, same topics, another module."""
    target = path.parent / "versions" / app.name / f"{version}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        path.read_text()
        .replace("version: v1", f"version: {version}")
        .replace("module: spark_apps.apps.click_counts", f"module: {module}")
    )
    return target


def test_stop_and_restore_digests_agree_and_a_new_version_s_first_batch_checks_the_state(
    bootstrap, both_slots_app, tmp_path
):
    app, path = both_slots_app
    truth, _ = produce_clicks(bootstrap, app.input.topic, 6_000, users=200)
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    try:
        wait_until_emitted(bootstrap, app, 6_000)
    finally:
        assert stop_slot(blue) == 0
    # What the slot left: its query's own row count at its last committed batch (no digest job at the stop).
    left = last_digest(bootstrap, app, "blue", "stop")
    assert left is not None and left.rows == len(truth) and left.batch_id >= 0 and left.digest == ""

    restarted_at = read_status(bootstrap, app.name, "blue")[-1].ts_ms + 1
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    try:
        restored = wait_for(
            "the restart's restore digest",
            lambda: last_digest(bootstrap, app, "blue", "restore", restarted_at),
            procs=(blue,),
        )
    finally:
        assert stop_slot(blue) == 0
    assert (restored.batch_id, restored.rows) == (left.batch_id, left.rows)
    assert "user_id" in restored.schema and "count" in restored.schema
    assert restore_check(left, read_status(bootstrap, app.name, "blue"), restarted_at).met

    # The rolling upgrade's way: the new version starts on the slot's own checkpoint (the DAG kept a copy).
    restarted_at = read_status(bootstrap, app.name, "blue")[-1].ts_ms + 1
    v2 = start_slot(bootstrap, version_file(path, app, "v2", "spark_apps.apps.click_counts_v2"), tmp_path, "blue")
    try:
        same = wait_for(
            "v2's restore digest", lambda: last_digest(bootstrap, app, "blue", "restore", restarted_at), procs=(v2,)
        )
        more, _ = produce_clicks(bootstrap, app.input.topic, 1_000, users=200, start=6_000)
        wait_until_emitted(bootstrap, app, 7_000)
    finally:
        assert stop_slot(v2) == 0
    assert (same.batch_id, same.rows, same.digest) == (restored.batch_id, restored.rows, restored.digest)
    stopped = last_digest(bootstrap, app, "blue", "stop")
    assert stopped.rows == len(truth + more)

    restarted_at = read_status(bootstrap, app.name, "blue")[-1].ts_ms + 1
    produce_clicks(bootstrap, app.input.topic, 500, users=200, start=7_000)  # the new version's first batch
    v3 = start_slot(bootstrap, version_file(path, app, "v3", "spark_apps.apps.click_counts_v3"), tmp_path, "blue")
    failed = wait_for(
        "v3's first batch to be refused",
        lambda: next(
            (
                s
                for s in read_status(bootstrap, app.name, "blue")
                if s.ts_ms >= restarted_at and s.state.value == "failed"
            ),
            None,
        ),
    )
    assert v3.wait(120) != 0
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in failed.error, failed.error
    assert all(
        s.batch_id < 0 or s.batch_id <= stopped.batch_id
        for s in read_status(bootstrap, app.name, "blue")
        if s.ts_ms >= restarted_at
    )  # no batch of v3
