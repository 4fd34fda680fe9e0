"""The product path's handoffs: what a user does, through Airflow's REST API, at the seed's rate.

    .venv/bin/python bench/dag_handoff.py --kind rolling_upgrade         # -> bench/results/dag_rolling_upgrade.*
    .venv/bin/python bench/dag_handoff.py --kind rolling_upgrade_bursty  # -> bench/results/dag_rolling_upgrade_bursty.*
    .venv/bin/python bench/dag_handoff.py --kind cutover                 # -> bench/results/dag_cutover.*
    .venv/bin/python bench/dag_handoff.py --kind reprocess               # -> bench/results/dag_reprocess.*
    .venv/bin/python bench/dag_handoff.py --kind cutover --rate 2000 --users 10000 --warm 20   # a quick look

Starts the embedded platform as `make up` does (baton.local's Platform: the Tansu broker, Baton's
topics, Airflow standalone) on its own ports and state directory, then does what a user does:
baton_topics, then baton_lifecycle {"app": "click_counts", "action": "start", "slot": "both"} (the app
of include/apps: blue active, green its hot standby). Both slots first process --prewarm events
unpaced (a cold slot's first batches take tens of seconds; see bench/throughput.py). Then the load
(baton.tools.loadgen's generator, in a process of its own: paced --rate events/s over --users users,
1% malformed; in 10 s pieces back to back so it can stop when the run is over and still hand over
an exact send log) and the verifier (baton.tools.verify tail, reading the output read_committed)
run; after --warm seconds the DAG is triggered through the REST API with only what a user must say:

    rolling_upgrade, rolling_upgrade_bursty  baton_rolling_upgrade {"app": "click_counts", "version": "v2"}
    cutover                                  baton_cutover {"app": "click_counts"}
    reprocess                                baton_reprocess {"app": "click_counts", "version": "v2"}

(every other field at the form's default). rolling_upgrade_bursty: the input runs 20 s on / 30 s off
from the trigger on (--on-s / --off-s), so the input pauses during the settle (30 s by default) and
any other gate. The run is polled until it ends (--timeout), each task's state change logged; the
load goes on --tail seconds, stops, the backlog drains and the verifier reads to the end.

Measured over the run (trigger to the end of the load; t = 0 is the trigger):
- succeeded (the DAG run's state), duration_s, each task's state, try, start/end and duration, and for
  a failed task the reason it gave (its `reason` XCom or the errors of its log);
- lost / duplicated / wrong over the whole input (pre-warm and warm-up included);
- p50 / p99 / p99.99 latency, send -> output readable, of the events sent from the trigger on;
- the longest output gap, and where it ended: time between two output records while output was owed
  (some event sent and not yet reflected; with steady input that is every gap between output
  records, with bursty input the silence of an input pause is not counted);
- CPU cores by group over the DAG run: each slot (driver, JVM, JIT, Python workers), the broker, the
  load generator and verifier, Airflow's own processes (scheduler, triggerer, API server, DAG
  processor, task processes) and the helpers its tasks start (Spark: the preflight replay); the
  upgrade's own cost is Airflow + helpers (`upgrade_own_cores`). The same over the warm-up before
  the trigger, for comparison.
Targets: the run succeeds; 0 / 0 / 0; p99.99 <= 5 s and longest gap <= 2 s over the whole run;
a rolling upgrade within 3 min.

Everything started is stopped at the end by pid (Airflow with SIGINT, then the slots, then the
broker: baton.local's Platform.down), also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    RESULTS,
    Procs,
    StatusWatch,
    batch_records,
    log,
    machine,
    reports,
    total,
    wait_processed,
    write_result,
)
from dag_platform import Meter, broker_kind, iso_s, platform, poll_run, run_dag, task_reason, task_rows, wait_dags  # noqa: E402
from dag_report import analyse, plot, targets  # noqa: E402

from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.loadgen import LoadSpec, SendLog, producer_config  # noqa: E402
from baton.tools.loadgen import run as produce  # noqa: E402

APP = "click_counts"
KINDS = {
    # kind: (DAG, the conf a user gives: everything else at the form's default)
    "rolling_upgrade": ("baton_rolling_upgrade", {"app": APP, "version": "v2"}),
    "rolling_upgrade_bursty": ("baton_rolling_upgrade", {"app": APP, "version": "v2"}),
    "cutover": ("baton_cutover", {"app": APP}),
    "reprocess": ("baton_reprocess", {"app": APP, "version": "v2"}),
}
CHUNK_S = 10.0  # the steady load's pieces: the longest it takes to stop


# --- the load generator's process ---------------------------------------------------------------


def load_worker(argv: list[str]) -> int:
    """`dag_handoff.py _load ...`: baton.tools.loadgen's paced generator, in pieces until SIGTERM.

    Steady: pieces of --chunk-s back to back through one producer (no flush between them, so no
    pause in the input); with --on-s, once SIGUSR1 came: --on-s of load, then --off-s of none. Each piece's
    send log is written as it ends (sends-NNNN.npz), so the stop leaves an exact record of what was
    sent: the verifier's ground truth."""
    from confluent_kafka import Producer

    ap = argparse.ArgumentParser(prog="dag_handoff.py _load")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--chunk-s", type=float, default=CHUNK_S)
    ap.add_argument("--on-s", type=float, default=0.0, help="bursty: seconds of load per burst (0: steady)")
    ap.add_argument("--off-s", type=float, default=0.0)
    ap.add_argument("--step", type=float, default=0.0, help="stepped: events/s more every --step-s (bench/max_rate.py)")
    ap.add_argument("--step-s", type=float, default=60.0)
    ap.add_argument("--warm-s", type=float, default=0.0, help="stepped: --rate this long before the first step")
    ns = ap.parse_args(argv)
    stop, bursts = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: bursts.set())  # bursty: from the trigger on
    failures: list[str] = []

    def on_error(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({**producer_config(ns.bootstrap), "on_delivery": on_error})

    class Piece:  # what loadgen.run sees: the shared producer, flushed once at the very end
        produce, poll = producer.produce, producer.poll

        @staticmethod
        def flush(_timeout):
            return 0

    ns.out_dir.mkdir(parents=True, exist_ok=True)
    i = 0
    while not stop.is_set():
        bursty = ns.on_s > 0 and bursts.is_set()
        seconds = ns.on_s if bursty else ns.chunk_s
        rate = ns.rate + ns.step * int(max(0.0, i * ns.chunk_s - ns.warm_s) // ns.step_s)  # stepped: its step
        spec = LoadSpec.for_duration(rate, seconds, keys=ns.keys, malformed=ns.malformed, seed=ns.seed + i)
        sent = produce(spec, ns.bootstrap, ns.topic, make_producer=lambda _config: Piece)
        sent.meta["burst"] = bursty
        sent.save(ns.out_dir / f"sends-{i:04d}.npz")
        i += 1
        if bursty and ns.off_s > 0:
            stop.wait(ns.off_s)
    left = producer.flush(120)
    print(json.dumps({"pieces": i, "undelivered": left, "failed": len(failures)}), flush=True)
    if left or failures:
        print(
            f"{left} events not delivered, {len(failures)} failed ({failures[:3]}): the send logs do not "
            "describe the topic",
            file=sys.stderr,
        )
        return 1
    return 0


def load_sends(directory: Path) -> tuple[SendLog, list[dict]]:
    """The pieces' send logs as one (in send order), and each piece's meta."""
    pieces = [SendLog.load(p) for p in sorted(directory.glob("sends-*.npz"))]
    if not pieces:
        raise RuntimeError(f"the load generator wrote no send log under {directory}")
    offsets = np.cumsum([0] + [p.users.size for p in pieces[:-1]])
    sent = SendLog(
        users=np.concatenate([p.users for p in pieces]),
        kinds=np.concatenate([p.kinds for p in pieces]),
        tick_first=np.concatenate([p.tick_first + o for p, o in zip(pieces, offsets)]),
        tick_time=np.concatenate([p.tick_time for p in pieces]),
        keys=pieces[0].keys,
        meta={**pieces[0].meta, "events": int(sum(p.users.size for p in pieces))},
    )
    return sent, [p.meta for p in pieces]


# --- the run --------------------------------------------------------------------------------------


def run(plat, client, procs: Procs, args) -> dict:
    wait_dags(client, {"baton_topics", "baton_lifecycle", "baton_health", KINDS[args.kind][0]})
    run_dag(client, "baton_topics", {}, 300)
    watch = StatusWatch(plat.settings.kafka_bootstrap, APP)
    try:
        return measure(plat, client, procs, args, watch)
    finally:
        watch.close()  # its consumer must not outlive the broker


def measure(plat, client, procs: Procs, args, watch: StatusWatch) -> dict:
    dag_id, conf = KINDS[args.kind]
    bursty = args.kind == "rolling_upgrade_bursty"
    bootstrap = plat.settings.kafka_bootstrap
    app, prewarm = start_both(client, watch, bootstrap, args)
    work = Path(tempfile.mkdtemp(prefix="dag-bench-", dir=plat.settings.state_dir))
    extra = ["--on-s", str(args.on_s), "--off-s", str(args.off_s)] if bursty else []
    loadgen, seen_path, sends_dir = start_load(procs, bootstrap, app, args, work, extra)
    t_load = time.time()
    log(
        f"load {args.rate:.0f}/s over {args.users} users{' (20 s on / 30 s off from the trigger on)' if bursty else ''}; "
        f"warm-up {args.warm:.0f}s"
    )

    warm_meter = Meter(plat, procs, APP).start()
    time.sleep(args.warm)
    caught = caught_up(bootstrap, watch, app, args.rate)
    warm_cpu = warm_meter.stop()
    log(f"warm-up done: {caught}; cores {warm_cpu['cores_used']} of ours, machine {warm_cpu['machine_busy_cores']}")

    meter = Meter(plat, procs, APP).start()
    t0 = time.time()
    if bursty:
        os.kill(loadgen.pid, signal.SIGUSR1)  # 20 s on / 30 s off from the end of the current piece
    triggered = client.trigger(dag_id, conf)
    run_id = triggered["dag_run_id"]
    log(f"triggered {dag_id} {json.dumps(conf)}: run {run_id}")
    dag_run, tis = poll_run(
        client, plat, meter, dag_id, run_id, t0, args.timeout, where=lambda: slot_lag(bootstrap, watch, app)
    )
    t_end = time.time()
    run_cpu = meter.stop()
    succeeded = dag_run.get("state") == "success"
    tasks = task_rows(tis, t0)
    failed = [r for r in tasks if r["state"] in ("failed", "upstream_failed")]
    for r in tasks:  # why a task failed, or why an attempt before this one did
        if r["state"] in ("failed", "up_for_retry") or (r["try_number"] or 0) > 1:
            r["reason"] = task_reason(client, plat, dag_id, run_id, r)
    log(
        f"{dag_id}: {dag_run.get('state')} in {t_end - t0:.0f}s"
        + "".join(f"\n  {r['task_id']}: {r['reason']}" for r in tasks if r.get("reason"))
    )

    cutover_at = None  # when the cutover was written (the new active took over), if the run got there
    if any(r["task_id"] == "cutover" and r["state"] == "success" for r in tasks):
        try:
            cutover_at = client.xcom(dag_id, run_id, "cutover")["at_ms"] / 1000
        except Exception as exc:
            log(f"the cutover's time: {exc}")
    time.sleep(args.tail)
    sent, pieces, obs, active, drained, t_load_end = end_load(
        procs, bootstrap, watch, sends_dir, seen_path, args.prewarm, args.drain_timeout, t0
    )
    result = analyse(args, prewarm, sent, pieces, obs, t0, t_load, t_end, t_load_end)
    result.update(
        {
            "kind": args.kind,
            "dag_id": dag_id,
            "conf": conf,
            "dag_run_id": run_id,
            "state": dag_run.get("state"),
            "succeeded": succeeded,
            "duration_s": round(t_end - t0, 1),
            "run_start_s": round(run_start - t0, 1)
            if (run_start := iso_s(dag_run.get("start_date"))) is not None
            else None,
            "run_end_s": round(run_end - t0, 1) if (run_end := iso_s(dag_run.get("end_date"))) is not None else None,
            "tasks": tasks,
            "failed_tasks": [r["task_id"] for r in failed],
            "cutover_at_s": round(cutover_at - t0, 2) if cutover_at else None,
            # output readable after the cutover was written: the handoff's own gap ends there
            "cutover_next_output_s": next_output(obs.times, cutover_at) if cutover_at else None,
            "failure": None
            if succeeded
            else next(
                (
                    f"{r['task_id']} ({r['state']}): {r.get('reason')}"
                    for r in tasks
                    if r["state"] in ("failed", "up_for_retry")
                ),
                f"run {dag_run.get('state')} after {t_end - t0:.0f}s; unfinished: "
                f"{[r['task_id'] for r in tasks if r['state'] not in ('success', 'skipped', 'failed', 'upstream_failed')]}",
            ),
            "active_after": active.value,
            "drained": drained,
            "warm_caught_up": caught,
            "cpu": run_cpu,
            "cpu_warmup": warm_cpu,
            "slot_batches": slot_batches(watch, t0),
        }
    )
    return result


def start_both(client, watch: StatusWatch, bootstrap: str, args):
    """baton_lifecycle {"app": APP, "action": "start", "slot": "both"}, both slots up, then --prewarm events
    unpaced, processed by both. Returns (the app, the pre-warm's send log or None)."""
    t = time.monotonic()
    run_dag(client, "baton_lifecycle", {"app": APP, "action": "start", "slot": "both"}, 600)
    for s in Slot:
        watch.wait(reports(s, SlotState.RESTORING, SlotState.RUNNING), 300, f"of {s.value} starting")
    log(f"baton_lifecycle start: both slots up in {time.monotonic() - t:.0f}s")
    from baton.apps import load_registry

    app = load_registry()[APP]
    prewarm = None
    if args.prewarm:
        prewarm = produce(
            LoadSpec(rate=math.inf, keys=args.users, events=args.prewarm, malformed=args.malformed, seed=1000),
            bootstrap,
            app.input.topic,
        )
        t = time.monotonic()
        for s in Slot:
            wait_processed(watch, s, args.prewarm, 600)
        log(f"pre-warm: {args.prewarm} events processed by both slots in {time.monotonic() - t:.0f}s")
    return app, prewarm


def start_load(procs: Procs, bootstrap: str, app, args, work: Path, extra: Sequence[str] = ()) -> tuple:
    """The verifier (tail, read_committed) and the load generator's process (load_worker, paced --rate
    over --users; `extra`: more of its options). Returns (the load generator, the verifier's file, the
    send logs' directory)."""
    seen_path, sends_dir = work / "seen.npz", work / "sends"
    py = sys.executable
    procs.start(
        "verifier",
        [
            py,
            "-m",
            "baton.tools.verify",
            "tail",
            "--bootstrap",
            bootstrap,
            "--topic",
            app.output.topic,
            "--partitions",
            str(app.output.partitions),
            "--out",
            str(seen_path),
        ],
    )
    load_argv = [
        py,
        str(Path(__file__).resolve()),
        "_load",
        "--bootstrap",
        bootstrap,
        "--topic",
        app.input.topic,
        "--rate",
        str(args.rate),
        "--keys",
        str(args.users),
        "--malformed",
        str(args.malformed),
        "--out-dir",
        str(sends_dir),
        *extra,
    ]
    return procs.start("loadgen", load_argv), seen_path, sends_dir


def end_load(
    procs: Procs,
    bootstrap: str,
    watch: StatusWatch,
    sends_dir: Path,
    seen_path: Path,
    prewarm: int,
    drain_timeout: float,
    t0: float,
) -> tuple:
    """Stop the load, wait for the active slot to drain the backlog, let the verifier read to the end.
    Returns (send log, its pieces' meta, the verifier's observations, the active slot, drained, when the
    load stopped)."""
    from baton.kafka.control_log import read_control
    from baton.tools.verify import Observations

    code = procs.stop("loadgen", 120)
    t_load_end = time.time()
    log(f"load stopped {t_load_end - t0:.0f}s after the trigger; waiting for the backlog")
    if code != 0:
        raise RuntimeError(f"load generator failed ({code}):\n{procs.tail('loadgen')}")
    sent, pieces = load_sends(sends_dir)
    events = int(sent.users.size) + prewarm
    record = read_control(bootstrap, APP)
    active = record.active if record else Slot.BLUE
    drained = True
    try:
        wait_processed(watch, active, events, drain_timeout)
    except TimeoutError as exc:
        drained = False
        log(f"not drained: {exc}")
    time.sleep(2)
    log("the verifier reads to the end")
    if procs.stop("verifier", 180) != 0:
        raise RuntimeError(f"verifier failed:\n{procs.tail('verifier')}")
    return sent, pieces, Observations.load(seen_path), active, drained, t_load_end


def next_output(readable, t: float) -> float | None:
    later = readable[readable > t]
    return round(float(later.min()) - t, 3) if later.size else None


def slot_lag(bootstrap: str, watch: StatusWatch, app) -> str:
    """Each slot's last batch: records behind the input's end, its role and generation."""
    from baton.kafka.tail import end_offsets

    end = total(end_offsets(bootstrap, app.input.topic, range(app.input.partitions)))
    parts = []
    for s in Slot:
        done = [r for r in watch.of(s) if r.batch_id >= 0]
        if done:
            r = done[-1]
            parts.append(
                f"{s.value} ({r.role.value}, gen {r.generation}) {end - total(r.processed)} behind, "
                f"batch {r.batch_ms} ms"
            )
    return "; ".join(parts)


def caught_up(bootstrap: str, watch: StatusWatch, app, rate: float, timeout_s: float = 120.0) -> str:
    """Wait (up to timeout_s) until both slots are within ~5 s of input of the input's end; say where they stand."""
    from baton.kafka.tail import end_offsets

    deadline = time.monotonic() + timeout_s
    while True:
        end = total(end_offsets(bootstrap, app.input.topic, range(app.input.partitions)))
        lag = {}
        for s in Slot:
            done = [r for r in watch.of(s) if r.batch_id >= 0]
            lag[s.value] = end - total(done[-1].processed) if done else end
        if max(lag.values()) <= 5 * rate or time.monotonic() > deadline:
            return ", ".join(f"{k} {v} records behind" for k, v in lag.items())
        time.sleep(2)


def slot_batches(watch: StatusWatch, t0: float) -> dict:
    """Per slot: (t, processed, batch_ms, role, pid, generation) of each batch, for the plot and the record."""
    out = {}
    for s in Slot:
        out[s.value] = [
            (round(r.ts_ms / 1000 - t0, 2), total(r.processed), r.batch_ms, r.role.value, r.pid, r.generation)
            for r in batch_records(watch, s)
        ]
    return out


def code_rev() -> str | None:
    if os.environ.get("BATON_CODE_REV"):
        return os.environ["BATON_CODE_REV"]
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        changed = [p for p in dirty[1::2] if not p.startswith("bench/")]
        return head + (f" + local changes to {', '.join(changed)}" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> int:
    if sys.argv[1:2] == ["_load"]:
        return load_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--rate", type=float, default=20085.0)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--prewarm", type=int, default=100_000, help="events both slots process before the paced load")
    ap.add_argument("--warm", type=float, default=60.0, help="seconds of paced load before the trigger")
    ap.add_argument("--tail", type=float, default=20.0, help="seconds of load after the run ended")
    ap.add_argument("--on-s", type=float, default=20.0, help="bursty: seconds of load per burst")
    ap.add_argument("--off-s", type=float, default=30.0, help="bursty: seconds of no load between bursts")
    ap.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="give the DAG run this long (the rolling upgrade's warm-up gate alone may wait 15 min)",
    )
    ap.add_argument("--drain-timeout", type=float, default=300.0)
    ap.add_argument("--logs", type=Path, default=None, help="keep the processes', tasks' and slots' logs here")
    ap.add_argument("--name", default=None, help="results file name (default dag_KIND)")
    args = ap.parse_args()
    name = args.name or f"dag_{args.kind}"
    load = os.getloadavg()
    with platform(args.logs) as (plat, client, procs):
        result = run(plat, client, procs, args)
        result["broker"] = broker_kind(plat.settings)
    result["targets"] = targets(result)
    result["code"] = code_rev()
    result["machine"] = {**machine(), "load_avg_at_start": [round(x, 2) for x in load]}
    path = write_result(name, result)
    plot(result, RESULTS / f"{name}.png")
    keys = [
        "succeeded",
        "duration_s",
        "rate",
        "lost",
        "duplicated",
        "wrong",
        "p50_ms",
        "p99_ms",
        "p99_99_ms",
        "max_gap_ms",
        "max_gap_end_s",
        "failure",
    ]
    print(
        json.dumps(
            {
                **{k: result.get(k) for k in keys},
                "tasks": {r["task_id"]: (r["state"], r["duration_s"]) for r in result["tasks"]},
                "cpu": result["cpu"]["groups"],
                "upgrade_own_cores": result["cpu"]["upgrade_own_cores"],
                "targets_met": result["targets"]["met"],
            },
            indent=1,
        )
    )
    log(f"wrote {path} and {path.with_suffix('.png')}")
    if not result["targets"]["all_met"]:
        log(f"targets not met: {[k for k, ok in result['targets']['met'].items() if not ok]}")
    # Like bench/handoff.py: a failed run or wrong output fails; the latency figures are for the record.
    return 0 if result["succeeded"] and result["targets"]["met"]["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
