"""Preflight of a rolling upgrade: replay a slot's last batch with the new version, on a copy.

    python -m spark_apps.runtime.replay --app NEW.yaml --checkpoint SLOT_CHECKPOINT --work DIR

Copies the checkpoint (the slot keeps running on the original), drops the last batch's commit so a
query started on the copy re-runs it, and runs that one batch with the new version's code: Spark
restores the previous state version and checks the new code's state schema against the stored one
(an incompatible one fails the batch: STATE_STORE_*_SCHEMA_NOT_COMPATIBLE), then applies the batch.
The output goes nowhere (noop sink). Prints one JSON line:

    {"ok": true, "batch": N, "before": digest, "after": digest}   the replayed batch's state as the
                                                                   slot holds it / as the new code built it
    {"ok": true, "batch": null, ...}                               nothing committed: nothing to restore
    {"ok": false, "batch": N, "error": "..."}                      the new version cannot run on this state

Exit code 0 when it could tell (ok or not), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from baton.apps import AppDefinitionError, load_app
from baton.settings import Settings


# Infrastructure, not the new version: Spark gives a Python worker 10 s to connect back, which a
# starved 2-core machine can miss. Such a replay is tried again (a fresh copy each time).
TRANSIENT = ("Python worker failed to connect back", "Timed out while waiting for the Python worker")


def replay(app, checkpoint: Path, work: Path, bootstrap: str, timeout_s: float = 300.0, attempts: int = 3) -> dict:
    for attempt in range(1, attempts + 1):
        result = replay_once(app, checkpoint, work, bootstrap, timeout_s)
        if result["ok"] or not any(t in result.get("error", "") for t in TRANSIENT):
            return result
        print(f"replay attempt {attempt}: {result['error']}", file=sys.stderr, flush=True)
    return {**result, "transient": True}


def replay_once(app, checkpoint: Path, work: Path, bootstrap: str, timeout_s: float) -> dict:
    from spark_apps.runtime.follower import write_cap_file
    from spark_apps.runtime.harness import build_frame, read_offset_log
    from spark_apps.runtime.spark import session
    from spark_apps.runtime.state_check import copy_checkpoint, digest_state, uncommit

    copy = work / "checkpoint"
    batch = copy_checkpoint(checkpoint, copy)
    if batch is None:
        return {"ok": True, "batch": None, "note": "no committed batch: there is no state to restore"}
    # Always local: one batch on a copy in a local folder.
    spark = session(f"baton-replay-{app.name}-{app.version}", app, {"spark.master": "local[2]"})
    before = digest_state(spark, copy, batch, "replay")
    uncommit(copy, batch)
    # The source reads no further than the replayed batch's end: exactly that batch runs, then none.
    cap = work / "cap.json"
    write_cap_file(cap, read_offset_log(copy, batch))
    frame = build_frame(spark, app, bootstrap, "earliest", cap, work / "dead-letters")
    query = (frame.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(copy))
             .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + timeout_s
    try:
        while not (copy / "commits" / str(batch)).exists():
            if query.awaitTermination(0.2):
                break
            if time.monotonic() > deadline:
                return {"ok": False, "batch": batch, "error": f"the replay of batch {batch} did not finish in {timeout_s:.0f} s"}
        if (exc := query.exception()) is not None:
            return {"ok": False, "batch": batch, "error": _first_line(str(exc))}
    finally:
        query.stop()
    after = digest_state(spark, copy, batch, "replay")
    return {"ok": True, "batch": batch, "before": before.to_json(), "after": after.to_json()}


def _first_line(message: str) -> str:
    """Spark's error class and message without the JVM stack (the first lines that say something)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " ".join(lines[:3])[:1000]


def main(argv: list[str] | None = None) -> int:
    settings = Settings.load()
    ap = argparse.ArgumentParser(prog="spark_apps.runtime.replay")
    ap.add_argument("--app", required=True, help="the new version's definition (.yaml path or registry name)")
    ap.add_argument("--checkpoint", required=True, type=Path, help="the slot's checkpoint (read only)")
    ap.add_argument("--work", required=True, type=Path, help="scratch folder for the copy (removed after)")
    ap.add_argument("--bootstrap", default=settings.kafka_bootstrap)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args(argv)
    try:
        app = load_app(args.app)
    except AppDefinitionError as exc:
        print(f"bad app definition: {exc}", file=sys.stderr)
        return 2
    if not args.checkpoint.is_dir():
        print(f"--checkpoint {args.checkpoint}: no such folder", file=sys.stderr)
        return 2
    try:
        result = replay(app, args.checkpoint, args.work, args.bootstrap, args.timeout_s)
    except Exception as exc:  # noqa: BLE001 - the new code failed to even build: that is the answer
        result = {"ok": False, "batch": None, "error": _first_line(f"{type(exc).__name__}: {exc}")}
    finally:
        shutil.rmtree(args.work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
