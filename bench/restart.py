"""Restart time of the click-count app: from process start to the first completed batch, with
100k and 1M keys of state.

    .venv/bin/python bench/restart.py                      # keys 100000 and 1000000
    .venv/bin/python bench/restart.py --keys 100000 --conf spark.sql.streaming.stateStore.minDeltasForSnapshot=10

For each key count, on its own broker-side app: one event per key is produced and slot blue runs
until its output covers all of them (so its state holds one row per key); then, as a live app
would, it runs at a steady rate (the seed's 20,085 events/s over the same keys, 30 s: long enough
for the state store's snapshot cadence to apply, spark_apps.runtime.spark); then it is stopped
gracefully (SIGTERM, exit 0 required), a small batch of new events is produced, and the slot is
started again. (`--steady-seconds 0` stops right after the build: a state never snapshotted, whose
every changelog a restart replays.) Measured:
- first_batch_s: wall time from starting the process to the first completed batch, taken from
  the status record that batch publishes (its ts_ms; the harness stamps it after the batch);
- restore_ms: the harness's own figure (from its start-up, after Python imports, to the first
  completed batch), the query start (status RESTORING) and the first batch's duration, which is
  where the state is loaded;
- the state on disk (checkpoint bytes, changelog and snapshot files) the restart had to load;
- the first batch's Spark job by stage, from the restarted slot's event log (where it waits);
- the harness's start-up phases from its log (Spark session, query built and started, first batch).
The output after the restart is verified against the input (lost/duplicated/wrong = 0).
Writes bench/results/restart.json and restart.png. Target: first_batch_s <= 10 s at 1M keys.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    Bench,
    StatusWatch,
    bench,
    click_count_app,
    create_app,
    log,
    machine,
    pyplot,
    start_slot,
    wait_processed,
    write_result,
)
from sparklog import event_log_conf, jobs  # noqa: E402

from baton.generations import slot_paths  # noqa: E402
from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.loadgen import LoadSpec  # noqa: E402
from baton.tools.loadgen import run as produce  # noqa: E402
from baton.tools.verify import read_output, verify  # noqa: E402

TARGET_S = 10.0
NEW_EVENTS = 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument(
        "--steady-seconds",
        type=float,
        default=30.0,
        help="seconds of steady input after the build, before the stop (0: stop right after it)",
    )
    ap.add_argument("--steady-rate", type=float, default=20_085.0, help="events/s of the steady input")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    ap.add_argument("--timeout", type=float, default=900.0, help="per phase")
    ap.add_argument("--name", default="restart", help="results file name (bench/results/NAME.json/.png)")
    ap.add_argument("--logs", type=Path, default=None, help="keep the processes' logs in this directory")
    args = ap.parse_args()

    runs = []
    with bench("restart", keep=args.logs) as b:
        for keys in args.keys:
            runs.append(one_run(b, keys, args))
            log(f"{keys} keys: first batch after {runs[-1]['first_batch_s']:.1f}s")
    result = {
        "target_first_batch_s": TARGET_S,
        "partitions": args.partitions,
        "steady_s": args.steady_seconds,
        "steady_rate": args.steady_rate,
        "conf": args.conf,
        "runs": runs,
        "machine": machine(),
    }
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    print(
        json.dumps([{k: r[k] for k in ("keys", "first_batch_s", "restore_ms", "verdict_ok")} for r in runs], indent=1)
    )
    log(f"wrote {path} and {path.with_suffix('.png')}")
    return 0 if all(r["verdict_ok"] for r in runs) else 1


def one_run(b: Bench, keys: int, args) -> dict:
    app, path = click_count_app(b.tmp, args.partitions)
    create_app(b.bootstrap, app)
    watch = StatusWatch(b.bootstrap, app.name)
    name = f"blue-{keys}"
    try:
        first = produce(LoadSpec(rate=math.inf, keys=keys, events=keys, sequential=True), b.bootstrap, app.input.topic)
        proc = start_slot(b, path, Slot.BLUE, args.conf, name=name)
        t0 = time.monotonic()
        wait_processed(watch, Slot.BLUE, keys, args.timeout, alive=lambda: proc.poll() is None)
        build_s = time.monotonic() - t0
        log(f"{keys} keys: state built in {build_s:.0f}s (including start-up)")
        sent = [first]
        if args.steady_seconds > 0:
            sent.append(
                produce(
                    LoadSpec.for_duration(args.steady_rate, args.steady_seconds, keys=keys, seed=3),
                    b.bootstrap,
                    app.input.topic,
                )
            )
            wait_processed(
                watch, Slot.BLUE, keys + sent[-1].users.size, args.timeout, alive=lambda: proc.poll() is None
            )
            log(f"{keys} keys: {args.steady_seconds:.0f}s at {args.steady_rate:,.0f} events/s processed")
        code = b.procs.stop(name)
        if code != 0:
            raise RuntimeError(f"graceful stop of {name} exited {code}:\n{b.procs.tail(name)}")
        state = state_on_disk(b.tmp / "state", app.name)

        sent.append(
            produce(LoadSpec(rate=math.inf, keys=keys, events=NEW_EVENTS, seed=2), b.bootstrap, app.input.topic)
        )
        produced = sum(s.users.size for s in sent)
        events = b.tmp / f"eventlog-{keys}"
        started = time.time()
        proc = start_slot(b, path, Slot.BLUE, [*args.conf, *event_log_conf(events)], name=name)
        mine = lambda r: r.pid == proc.pid  # noqa: E731
        alive = lambda: proc.poll() is None  # noqa: E731
        _, boot = watch.wait(lambda r: mine(r), args.timeout, "of the new process", alive)
        _, query = watch.wait(
            lambda r: mine(r) and r.state is SlotState.RESTORING, args.timeout, "of query start", alive
        )
        _, batch = watch.wait(lambda r: mine(r) and r.batch_id >= 0, args.timeout, "of a first batch", alive)
        wait_processed(watch, Slot.BLUE, produced, args.timeout, alive)
        time.sleep(2)  # the batch's transaction commits just after its status record
        truth = sum((s.truth() for s in sent), Counter())
        verdict = verify(truth, read_output(b.bootstrap, app.output.topic, app.output.partitions, timeout_s=300))
        code = b.procs.stop(name)
        first_job = next(iter(jobs(events)), None)
        phases = startup_phases((b.procs.logs / f"{name}.log").read_text(errors="replace"))
    finally:
        watch.close()
    return {
        "keys": keys,
        "first_batch_s": round(batch.ts_ms / 1000 - started, 2),
        "python_start_s": round(boot.ts_ms / 1000 - started, 2),  # interpreter and imports: first status
        "query_start_s": round(query.ts_ms / 1000 - started, 2),  # + control catch-up, JVM, Spark session
        "restore_ms": batch.restore_ms,
        "first_batch_ms": batch.batch_ms,
        "first_batch_rows": batch.input_rows,
        "state_rows": batch.state_rows,
        "state_on_disk": state,
        # The first batch's Spark job: stage 0 reads and parses the input (the Python workers
        # start here) and pre-aggregates; stage 1 loads and updates the state store (and reads
        # the input again for the dead-letter branch).
        "first_job": first_job,
        # The restarted harness's own account (its log line): seconds since it began, per phase.
        "startup_phases_s": phases,
        "build_s": round(build_s, 1),
        "stop_exit_code": code,
        "verdict": verdict.summary(),
        "verdict_ok": verdict.ok,
    }


def startup_phases(log_text: str, first: bool = False) -> dict[str, float]:
    """The last (or first) start-up line of a slot's log -> {phase: seconds since the harness began}, with
    the interpreter's start and imports before it as "process start to harness" (spark_apps.runtime.harness).
    A spare driver's line counts from its promotion ("spare promoted")."""
    found = re.findall(
        r"start-up \((?:process start to harness ([\d.]+)s; )?since the harness began\): ([^;]*);", log_text
    )
    if not found:
        return {}
    before, marks = found[0] if first else found[-1]
    phases = {"process start to harness": float(before)} if before else {}
    for m in marks.split(","):
        if m.strip():
            phases[m.rsplit(" ", 1)[0].strip()] = float(m.rsplit(" ", 1)[1].rstrip("s"))
    return phases


def state_on_disk(state_dir: Path, app: str) -> dict:
    """Bytes and file counts of the slot's state store checkpoint (what a restart loads)."""
    root = slot_paths(state_dir, app, Slot.BLUE, 0).checkpoint / "state"
    files = [p for p in root.rglob("*") if p.is_file()]
    kinds = Counter(p.suffix or p.name for p in files)
    return {
        "bytes": sum(p.stat().st_size for p in files),
        "changelog_files": kinds.get(".changelog", 0),
        "snapshot_files": kinds.get(".zip", 0),
        "files": len(files),
    }


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    runs = result["runs"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    labels = [f"{r['keys']:,} keys" for r in runs]
    start = [r["query_start_s"] for r in runs]
    state = [state_stage_s(r) for r in runs]
    rest = [r["first_batch_s"] - a - b for r, a, b in zip(runs, start, state)]
    ax.bar(labels, start, color="#c6dbef", label="process start -> query started (Python, JVM, Spark session)")
    ax.bar(
        labels, rest, bottom=start, color="#6baed6", label="first batch: planning, reading (Python workers start), emit"
    )
    ax.bar(
        labels,
        state,
        bottom=[a + b for a, b in zip(start, rest)],
        color="#08519c",
        label="first batch: state-store stage (state load + update)",
    )
    for i, r in enumerate(runs):
        ax.text(i, r["first_batch_s"], f"{r['first_batch_s']:.1f}s", ha="center", va="bottom")
    ax.axhline(result["target_first_batch_s"], color="red", ls="--", lw=0.8, label="target")
    ax.set_ylim(0, max(r["first_batch_s"] for r in runs) * 1.45)
    ax.set_ylabel("seconds from process start")
    conf = ", ".join(c.rsplit(".", 1)[-1] for c in result["conf"]) or "default settings"
    steady = (
        f"after {result['steady_s']:.0f} s at {result['steady_rate']:,.0f} events/s"
        if result.get("steady_s")
        else "right after the build"
    )
    ax.set_title(f"click counts: restart to first completed batch, {steady} ({conf})", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def state_stage_s(run: dict) -> float:
    """Wall time of the first job's state-store stage (0 when the event log had none)."""
    stages = (run.get("first_job") or {}).get("stages") or []
    return stages[1]["wall_ms"] / 1000 if len(stages) > 1 else 0.0


if __name__ == "__main__":
    sys.exit(main())
