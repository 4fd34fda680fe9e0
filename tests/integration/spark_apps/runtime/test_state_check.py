"""State digests from a real slot's checkpoint, and the rolling upgrade's preflight replay: a slot
publishes what it leaves at a stop and what it restores at the next start (they agree); a new version
with the same state replays the last batch to the same state, one with a different state schema is
refused with Spark's reason; the slot's own checkpoint is never written by the replay."""

import json
import subprocess
import sys

import pytest

from tests.support.slots import REPO, produce_clicks, read_status, start_slot, stop_slot, wait_for, wait_until_emitted

pytestmark = pytest.mark.integration


def last_digest(bootstrap, app, slot, at, since_ms=0):
    for s in reversed(read_status(bootstrap, app.name, slot)):
        if s.ts_ms >= since_ms and s.state_digest is not None and s.state_digest.at == at:
            return s.state_digest
    return None


def replay(bootstrap, definition, checkpoint, work):
    out = subprocess.run([sys.executable, "-m", "spark_apps.runtime.replay", "--app", str(definition),
                          "--checkpoint", str(checkpoint), "--work", str(work), "--bootstrap", bootstrap],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def version_file(path, app, version, module):
    """versions/<app>/<version>.yaml beside the registry file `path`, same topics, another module."""
    target = path.parent / "versions" / app.name / f"{version}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(path.read_text().replace("version: v1", f"version: {version}")
                      .replace("module: spark_apps.apps.click_counts", f"module: {module}"))
    return target


def test_stop_and_restore_digests_agree_and_the_replay_checks_a_new_version(bootstrap, both_slots_app, tmp_path):
    app, path = both_slots_app
    truth, _ = produce_clicks(bootstrap, app.input.topic, 6_000, users=200)
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    try:
        wait_until_emitted(bootstrap, app, 6_000)
    finally:
        assert stop_slot(blue) == 0
    left = last_digest(bootstrap, app, "blue", "stop")
    assert left is not None and left.rows == len(truth) and left.batch_id >= 0
    assert "user_id" in left.schema and "count" in left.schema

    restarted_at = read_status(bootstrap, app.name, "blue")[-1].ts_ms + 1
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    try:
        restored = wait_for("the restart's restore digest",
                            lambda: last_digest(bootstrap, app, "blue", "restore", restarted_at), procs=(blue,))
    finally:
        assert stop_slot(blue) == 0
    assert (restored.batch_id, restored.rows, restored.digest, restored.schema) == \
        (left.batch_id, left.rows, left.digest, left.schema)

    checkpoint = tmp_path / "slots" / app.name / "blue" / "gen-0" / "checkpoint"
    before = sorted((p.relative_to(checkpoint), p.stat().st_mtime_ns) for p in checkpoint.rglob("*"))
    same_state = replay(bootstrap, version_file(path, app, "v2", "spark_apps.apps.click_counts_v2"),
                        checkpoint, tmp_path / "replay-v2")
    assert same_state["ok"], same_state
    assert same_state["before"]["rows"] == len(truth)
    assert same_state["after"]["digest"] == same_state["before"]["digest"]
    refused = replay(bootstrap, version_file(path, app, "v3", "spark_apps.apps.click_counts_v3"),
                     checkpoint, tmp_path / "replay-v3")
    assert not refused["ok"]
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in refused["error"], refused
    assert sorted((p.relative_to(checkpoint), p.stat().st_mtime_ns) for p in checkpoint.rglob("*")) == before
    assert not (tmp_path / "replay-v2").exists() and not (tmp_path / "replay-v3").exists()
