"""A reprocess's invariant gate: the app's own checks on a slot's state.

    python -m spark_apps.runtime.invariants --app DEF.yaml --checkpoint SLOT_CHECKPOINT

Reads the state after the checkpoint's last committed batch (Spark's state reader; the slot keeps
running) and applies the app module's `check_state(state) -> DataFrame` (one row per violation, a
`problem` column). Prints one JSON line: {"ok": bool, "batch": N, "rows": state rows, "violations": n,
"examples": [up to 10 problems]}; an app without check_state passes with a note; a read that kept
failing says so ("unchecked": true, "error"). Exit 0 when it could tell, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from baton.apps import AppDefinitionError, load_app


# The state is read while the slot runs on, from its own checkpoint: a read the slot's snapshot upload or
# maintenance changed files under fails (seen in CI while a new generation still caught up at full
# speed: a Py4JJavaError from collectToPython, no STDS_ error class), and a read of the next committed
# batch a few seconds later does not. An error after the last attempt is "could not check", never a
# violation (InvariantsOperator retries it).
READ_ATTEMPTS = 5


def _reason(exc: Exception) -> str:
    """The first line of the error and, for a Java error, its root cause's."""
    lines = str(exc).splitlines()
    cause = next((ln.strip() for ln in reversed(lines) if ln.strip().startswith("Caused by:")), "")
    return " ".join(x for x in (lines[0][:300] if lines else type(exc).__name__, cause[:300]) if x)


def check(app, checkpoint: Path) -> dict:
    from spark_apps.runtime.spark import session
    from spark_apps.runtime.state_check import state_frame
    from baton.checkpoints import last_committed_batch

    module = importlib.import_module(app.module)
    if not hasattr(module, "check_state"):
        return {"ok": True, "batch": None, "note": f"{app.module} defines no check_state: nothing to check"}
    spark = session(f"baton-invariants-{app.name}", app, {"spark.master": "local[2]"})
    for attempt in range(1, READ_ATTEMPTS + 1):
        batch = last_committed_batch(checkpoint)
        if batch is None:
            return {"ok": False, "batch": None, "error": "the slot has no committed batch: no state to check"}
        try:
            state = state_frame(spark, checkpoint, batch)
            rows = state.count()
            problems = module.check_state(state)
            count = problems.count()
            examples = [r["problem"] for r in problems.limit(10).collect()]
            return {"ok": count == 0, "batch": batch, "rows": rows, "violations": count, "examples": examples}
        except Exception as exc:  # noqa: BLE001 - the running slot's maintenance moved files under the read
            print(f"invariants: reading the state of batch {batch} failed (attempt {attempt}): {_reason(exc)}",
                  file=sys.stderr, flush=True)
            if attempt == READ_ATTEMPTS:
                raise
            time.sleep(3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_apps.runtime.invariants")
    ap.add_argument("--app", required=True, help="the definition the slot runs (.yaml path or registry name)")
    ap.add_argument("--checkpoint", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        app = load_app(args.app)
    except AppDefinitionError as exc:
        print(f"bad app definition: {exc}", file=sys.stderr)
        return 2
    try:
        result = check(app, args.checkpoint)
    except Exception as exc:  # noqa: BLE001 - the check itself could not run: that is the answer, with its reason
        result = {"ok": False, "batch": None, "unchecked": True, "error": f"{type(exc).__name__}: {_reason(exc)}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
