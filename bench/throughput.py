"""Throughput and end-to-end latency of the click-count app, with its standby following beside it.

    .venv/bin/python bench/throughput.py                       # the seed: 20,085 events/s, 100k users, 180 s
    .venv/bin/python bench/throughput.py --seconds 20 --rate 5000 --no-standby   # a quick look

Starts its own broker, a fresh click-count app (4 input partitions, trigger 1000 ms) with slot blue
active and, unless --no-standby, slot green as the standby in follow mode (its source is capped at
blue's commits). Both slots first process --prewarm events (a cold slot's first batches take tens
of seconds: JIT, Python workers; a backlog built then would take minutes to clear and say nothing
about the steady state). Then the load generator (a separate process) sends --rate events/s over
--keys users (--malformed of them malformed) for --warmup + --seconds, and the verifier (a
separate process) stamps every output record when it becomes readable (read_committed).

Measured over the --seconds after the warm-up:
- rate_sustained: input records blue processed per second (its status records' positions);
- p50/p99/p99.99 end-to-end latency, send -> output readable (baton.tools.verify);
- the verifier's verdict over the whole run (lost/duplicated/wrong keys must be 0);
- the standby's lag behind the active (records and seconds);
- CPU seconds per process: load generator, verifier, broker, and each slot's Python driver, JVM
  and Python workers; with --profile also where each spends it (bench/profiling.py).
Writes bench/results/throughput.json and throughput.png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    Bench,
    CpuMeter,
    StatusWatch,
    app_count_rows,
    batch_records,
    bench,
    click_count_app,
    create_app,
    log,
    machine,
    pyplot,
    reports,
    running,
    start_slot,
    total,
    wait_processed,
    write_result,
)
from sparklog import batch_costs, event_log_conf  # noqa: E402

from baton.apps import AppDefinition  # noqa: E402
from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.loadgen import LoadSpec, SendLog, user_id  # noqa: E402
from baton.tools.loadgen import run as produce  # noqa: E402
from baton.tools.verify import (  # noqa: E402
    Observations,
    align_users,
    event_latencies,
    latency_report,
    latency_timeline,
    verify,
)

P99_TARGET_MS = 2000


def parser(doc: str = __doc__) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20085.0)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--seconds", type=float, default=180.0, help="measured time, after the warm-up")
    ap.add_argument(
        "--prewarm",
        type=int,
        default=100_000,
        help="events both slots process before the paced load starts (their first batches are "
        "slow: JVM JIT, Python workers); part of the ground truth, not of the latency",
    )
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds of paced load before measuring")
    ap.add_argument("--standby", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trigger-ms", type=int, default=1000)
    ap.add_argument(
        "--standby-nice",
        type=int,
        default=None,
        help="the app's standby_nice (default: the app definition's, 10; 0: both slots at one priority)",
    )
    ap.add_argument(
        "--standby-pace-ms",
        type=int,
        default=None,
        help="the app's standby_pace_ms (default: the app definition's, 2000)",
    )
    ap.add_argument("--drain-timeout", type=float, default=300.0, help="wait this long for the backlog after the load")
    ap.add_argument(
        "--count-rows",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the app's state.count_rows (default: what include/apps/click_counts.yaml says)",
    )
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting for both slots"
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="JFR on the slots' JVMs (a recording from their launch), py-spy on their Python (if installed)",
    )
    ap.add_argument(
        "--stage-metrics",
        action="store_true",
        help="Spark's event log in each slot: its batches' task times and state store calls (sparklog.batch_costs)",
    )
    ap.add_argument("--logs", type=Path, default=None, help="keep the processes' logs in this directory")
    ap.add_argument("--name", default="throughput", help="results file name (bench/results/NAME.json/.png)")
    return ap


def main() -> int:
    args = parser().parse_args()

    with bench("throughput", keep=args.logs) as b:
        result = run(b, args)
        result["broker"] = b.broker_kind
    result["machine"] = machine()
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    summary = {
        k: result[k]
        for k in (
            "rate_target",
            "rate_sustained",
            "duration_s",
            "p50_ms",
            "p99_ms",
            "p99_99_ms",
            "standby_running",
            "keeps_pace",
            "verdict",
        )
    }
    print(json.dumps(summary, indent=1))
    log(f"wrote {path} and {path.with_suffix('.png')}")
    return 0 if result["verdict"]["ok"] else 1


def run(b: Bench, args, during=None) -> dict:
    """The measured run. `during(b, app, procs, watch)`, if given, runs `args.handoff_at` seconds into
    the measured window and returns [(wall time, label)] marks (bench/handoff.py)."""
    app, path = click_count_app(
        b.tmp,
        args.partitions,
        args.trigger_ms,
        standby_nice=args.standby_nice,
        standby_pace_ms=args.standby_pace_ms,
        count_rows=args.count_rows,
    )
    create_app(b.bootstrap, app, standby=args.standby)
    watch = StatusWatch(b.bootstrap, app.name)
    slots = [Slot.BLUE] + ([Slot.GREEN] if args.standby else [])
    event_logs = {s: b.tmp / "eventlog" / s.value for s in slots} if args.stage_metrics else {}
    conf = list(args.conf)
    if args.profile:
        from profiling import with_launch_recording

        conf = with_launch_recording(conf)
    procs = {s: start_slot(b, path, s, [*conf, *(event_log_conf(event_logs[s]) if event_logs else [])]) for s in slots}
    for s in slots:  # the query is starting once a slot reports RESTORING
        watch.wait(reports(s, SlotState.RESTORING), 180, f"of {s.value} starting", alive=running(procs[s]))
    prewarm = None
    if args.prewarm:
        prewarm = produce(
            LoadSpec(rate=math.inf, keys=args.keys, events=args.prewarm, malformed=args.malformed, seed=1000),
            b.bootstrap,
            app.input.topic,
        )
        t = time.monotonic()
        for s in slots:
            wait_processed(watch, s, args.prewarm, 600, alive=lambda s=s: procs[s].poll() is None)
        log(
            f"pre-warm: {args.prewarm} events processed by {', '.join(s.value for s in slots)} "
            f"in {time.monotonic() - t:.0f}s"
        )
    log(
        f"slots {', '.join(s.value for s in slots)} started; load {args.rate:.0f}/s over {args.keys} users "
        f"for {args.warmup:.0f}s warm-up + {args.seconds:.0f}s"
    )

    sends, seen = b.tmp / "sends.npz", b.tmp / "seen.npz"
    py = sys.executable
    verifier = b.procs.start(
        "verifier",
        [
            py,
            "-m",
            "baton.tools.verify",
            "tail",
            "--bootstrap",
            b.bootstrap,
            "--topic",
            app.output.topic,
            "--partitions",
            str(app.output.partitions),
            "--out",
            str(seen),
        ],
    )
    loadgen = b.procs.start(
        "loadgen",
        [
            py,
            "-m",
            "baton.tools.loadgen",
            "--bootstrap",
            b.bootstrap,
            "--topic",
            app.input.topic,
            "--rate",
            str(args.rate),
            "--keys",
            str(args.keys),
            "--malformed",
            str(args.malformed),
            "--seconds",
            str(args.warmup + args.seconds),
            "--out",
            str(sends),
        ],
    )
    cpu = CpuMeter()
    cpu.track("loadgen", loadgen.pid)
    cpu.track("verifier", verifier.pid)
    if b.broker_pid is not None:
        cpu.track("broker", b.broker_pid)
    for s in slots:
        cpu.track(s.value, procs[s].pid, slot=True)
    time.sleep(args.warmup)
    cpu.start()
    window_start = time.time()
    profiler = None
    if args.profile:
        from profiling import Profiler

        profiler = Profiler((args.logs or b.tmp) / "profile", seconds=max(10.0, args.seconds - 10))
        for s in slots:
            profiler.start_slot(s.value, procs[s].pid)
    marks, handoff_error = [], None
    if during is not None:
        time.sleep(args.handoff_at)
        try:
            marks = during(b, app, procs, watch)
        except (TimeoutError, RuntimeError) as exc:  # not completed: the run is measured and reported all the same
            handoff_error, marks = str(exc), list(getattr(exc, "marks", []))
            log(f"the handoff failed: {exc}")
    try:
        loadgen.wait(args.seconds + 120)
    except Exception:
        raise RuntimeError(f"the load generator did not finish in time:\n{b.procs.tail('loadgen')}") from None
    cpu_report = cpu.stop()
    window_end = time.time()
    if loadgen.returncode != 0:
        raise RuntimeError(f"load generator failed ({loadgen.returncode}):\n{b.procs.tail('loadgen')}")
    sent = SendLog.load(sends)
    events = int(sent.users.size) + args.prewarm
    log(f"load done: {events} events at {sent.meta['rate_achieved']}/s; waiting for the backlog")

    drained = True
    try:
        live = [s for s in slots if procs[s].poll() is None]  # a failover bench killed one
        for i, s in enumerate(live):
            wait_processed(
                watch, s, events, args.drain_timeout if i == 0 else 120, alive=lambda s=s: procs[s].poll() is None
            )
    except TimeoutError as exc:
        drained = False
        log(f"not drained: {exc}")
    # Let the verifier stamp the last output while it is still tailing (its final drain would
    # stamp it later than it became readable).
    time.sleep(2 * args.trigger_ms / 1000)
    profile = profiler.finish() if profiler is not None else None
    codes = {"verifier": b.procs.stop("verifier", 180)}
    for s in slots:
        codes[s.value] = b.procs.stop(s.value)
    watch.close()
    if codes["verifier"] != 0:
        raise RuntimeError(f"verifier failed ({codes['verifier']}):\n{b.procs.tail('verifier')}")
    obs = Observations.load(seen)
    result = analyse(args, prewarm, sent, obs, watch, cpu_report, profile, drained, codes)
    t0 = float(sent.meta["started"])
    result["handoff_error"] = handoff_error
    if event_logs:
        result["stage_metrics"] = {s.value: batch_costs(d, window_start, window_end) for s, d in event_logs.items()}
    if marks:  # each slot's batches around the handoff: where a gap in the output comes from
        lo, hi = marks[0][0] - 10, marks[-1][0] + 40
        result["handoff_batches"] = [
            {
                "slot": r.slot.value,
                "t_s": round(t - t0, 2),
                "batch": r.batch_id,
                "role": r.role.value,
                "epoch_seen": r.epoch_seen,
                "batch_ms": r.batch_ms,
                "rows": r.input_rows,
            }
            for t, r in watch.records
            if lo <= t <= hi and r.batch_id >= 0
        ]
    result["marks"] = [
        {"label": label, "t_s": round(t - t0, 3), "next_output_s": next_output(obs.times, t)} for t, label in marks
    ]
    return result


def next_output(readable_times, t: float) -> float | None:
    """Seconds from t until the next output record became readable."""
    later = readable_times[readable_times > t]
    return round(float(later.min()) - t, 3) if later.size else None


def analyse(
    args,
    prewarm: SendLog | None,
    sent: SendLog,
    obs: Observations,
    watch: StatusWatch,
    cpu_report,
    profile,
    drained,
    codes,
) -> dict:
    truth = sent.truth() + (prewarm.truth() if prewarm is not None else Counter())
    verdict = verify(truth, obs.pairs(), obs.corrected)
    users, times = sent.valid()
    if prewarm is not None:  # sent first: a user's n-th event counts the pre-warm ones too
        pre_users, pre_times = prewarm.valid()
        users, times = np.concatenate([pre_users, users]), np.concatenate([pre_times, times])
    index = {user_id(i): i for i in range(sent.keys)}
    lat = event_latencies(users, times, align_users(obs, index), obs.counts, obs.times)
    t0 = float(sent.meta["started"])
    w0, w1 = t0 + args.warmup, float(sent.tick_time[-1])
    in_window = times >= w0
    report = latency_report(lat[in_window], obs.times[(obs.times >= w0)])
    warming = (times >= t0) & ~in_window  # the paced warm-up (not the pre-warm)
    warm = latency_report(lat[warming], obs.times[(obs.times >= t0) & (obs.times < w0)])
    blue = [(r.ts_ms / 1000, total(r.processed), r) for r in batch_records(watch, Slot.BLUE)]
    green = [(r.ts_ms / 1000, total(r.processed), r) for r in batch_records(watch, Slot.GREEN)]
    rate_sustained = sustained_rate(blue, w0, w1)
    all_times = sent.send_times()
    input_rate = float(((all_times >= w0) & (all_times <= w1)).sum() / max(w1 - w0, 1e-9))
    batches = [r for _, _, r in blue if w0 <= r.ts_ms / 1000 <= w1]
    keeps_pace = bool(drained and rate_sustained >= 0.97 * input_rate and report.p99_ms <= P99_TARGET_MS)
    return {
        "rate_target": args.rate,
        "rate_input": round(input_rate, 1),
        "rate_sustained": round(rate_sustained, 1),
        "duration_s": round(w1 - w0, 1),
        "warmup_s": args.warmup,
        "prewarm_events": args.prewarm,
        "keys": args.keys,
        "malformed_share": args.malformed,
        "partitions": args.partitions,
        "trigger_ms": args.trigger_ms,
        "standby_nice": args.standby_nice if args.standby_nice is not None else AppDefinition.standby_nice,
        "standby_pace_ms": (
            args.standby_pace_ms if args.standby_pace_ms is not None else AppDefinition.standby_pace_ms
        ),
        "count_rows": app_count_rows(args.count_rows),  # the app's state.count_rows
        "p50_ms": round(report.p50_ms, 1),
        "p99_ms": round(report.p99_ms, 1),
        "p99_99_ms": round(report.p99_99_ms, 1),
        "max_ms": round(report.max_ms, 1),
        "p99_target_ms": P99_TARGET_MS,
        "keeps_pace": keeps_pace,
        "drained": drained,
        "latency": report.summary(),
        "latency_warmup": warm.summary(),
        "standby_running": bool(args.standby and green and codes.get("green") == 0),
        "standby": standby_lag(blue, green, w0, w1) if args.standby else None,
        "batches": batch_stats(batches),
        "look_misses": look_misses(times[in_window], lat[in_window], [r for _, _, r in blue]),
        "verdict": {**verdict.summary(), "ok": verdict.ok, "unreadable_output": obs.unreadable},
        "loadgen": sent.meta,
        "exit_codes": codes,
        "conf": args.conf,
        "cpu": cpu_report,
        "profile": profile,
        "timeline": {
            "latency": latency_timeline(times[times >= t0], lat[times >= t0], 1.0, start=t0),
            "input_per_s": per_second(all_times, t0),
            "blue_processed": [(round(t - t0, 2), p) for t, p, _ in blue],
            "green_processed": [(round(t - t0, 2), p) for t, p, _ in green],
            "warmup_end_s": args.warmup,
        },
    }


def sustained_rate(points, w0: float, w1: float) -> float:
    """Input records processed per second between the first status at/after w0 and the last at/before w1."""
    inside = [(t, p) for t, p, _ in points if w0 <= t <= w1]
    if len(inside) < 2:
        return 0.0
    (ta, pa), (tb, pb) = inside[0], inside[-1]
    return (pb - pa) / max(tb - ta, 1e-9)


def standby_lag(blue, green, w0: float, w1: float) -> dict:
    """How far green was behind blue: records (blue's position at green's report minus green's)
    and seconds (green's report time minus when blue first reached green's position)."""
    records, seconds = [], []
    bi = 0
    for t, p, _ in green:
        if not w0 <= t <= w1:
            continue
        while bi + 1 < len(blue) and blue[bi + 1][0] <= t:
            bi += 1
        if blue and blue[bi][0] <= t:
            records.append(blue[bi][1] - p)
        reached = next((bt for bt, bp, _ in blue if bp >= p), None)
        if reached is not None:
            seconds.append(t - reached)

    def stats(xs):
        xs = sorted(xs)
        if not xs:
            return None
        return {"p50": round(xs[len(xs) // 2], 2), "max": round(xs[-1], 2), "mean": round(sum(xs) / len(xs), 2)}

    return {"batches": len(green), "lag_records": stats(records), "lag_s": stats(seconds)}


# How long before a batch's look an event must have been sent to be counted as missed by it: the load
# generator's batching (50 ms) and the produce's round trip come first; the look's time is estimated from the
# status record (its publication, on the slot's 100 ms tick, comes after the batch's end).
LOOK_MISS_SLACKS_S = (0.2, 0.3)
# An event read by a later batch than the first that looked after it is readable a trigger later: this
# much after that first batch's end counts as missed (the verifier's fetch and the status's tick are less).
LOOK_MISS_MARGIN_S = 0.4


def look_misses(send_times: np.ndarray, lat: np.ndarray, batches: list) -> dict:
    """The share of events not output by the first batch that looked at the input at least `slack` seconds
    after they were sent (a late fetch, a budget): each costs its event a trigger interval of latency. A
    batch's look is estimated as its status time less its duration."""
    if not batches:
        return {}
    ends = np.array([r.ts_ms / 1000 for r in batches])
    looks = ends - np.array([r.batch_ms / 1000 for r in batches])
    ok = ~np.isnan(lat)
    out = {}
    for slack in LOOK_MISS_SLACKS_S:
        k = np.searchsorted(looks, send_times + slack)
        counted = ok & (k < len(looks))
        due = ends[np.minimum(k, len(looks) - 1)]
        missed = counted & (send_times + np.nan_to_num(lat) > due + LOOK_MISS_MARGIN_S)
        out[f"share_{int(slack * 1000)}ms"] = round(float(missed.sum() / max(1, counted.sum())), 5)
    return out


def batch_stats(batches) -> dict:
    if not batches:
        return {"count": 0}
    ms = sorted(r.batch_ms for r in batches)
    rows = sorted(r.input_rows for r in batches)
    return {
        "count": len(batches),
        "batch_ms_p50": ms[len(ms) // 2],
        "batch_ms_max": ms[-1],
        "rows_p50": rows[len(rows) // 2],
        "rows_max": rows[-1],
        "state_rows": batches[-1].state_rows,
        "state_bytes": batches[-1].state_bytes,
        "dead_letters": batches[-1].dead_letters,
    }


def per_second(times, t0: float) -> list[int]:
    if len(times) == 0:
        return []
    return np.bincount(np.floor(np.asarray(times) - t0).astype(np.int64)).tolist()


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    tl = result["timeline"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    lat = [r for r in tl["latency"] if not math.isnan(r["p50_ms"])]
    xs = [r["t_s"] for r in lat]
    ax1.plot(xs, [r["max_ms"] / 1000 for r in lat], lw=0.6, color="0.6", label="max")
    ax1.plot(xs, [r["p99_ms"] / 1000 for r in lat], lw=1, label="p99")
    ax1.plot(xs, [r["p50_ms"] / 1000 for r in lat], lw=1, label="p50")
    ax1.axhline(P99_TARGET_MS / 1000, color="red", ls="--", lw=0.8, label="p99 target")
    ax1.set_ylabel("send -> readable (s)")
    ax1.set_yscale("log")
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(
        f"click counts at {result['rate_target']:.0f} ev/s, {result['keys']} users"
        f"{', standby beside it' if result['standby_running'] else ''}: "
        f"p50 {result['p50_ms'] / 1000:.2f}s, p99 {result['p99_ms'] / 1000:.2f}s, "
        f"p99.99 {result['p99_99_ms'] / 1000:.2f}s",
        fontsize=10,
    )
    sent = tl["input_per_s"][:-1]  # the last second is partial
    ax2.plot(range(len(sent)), sent, lw=0.8, color="0.5", label="input sent")
    for key, label in (("blue_processed", "blue (active) processed"), ("green_processed", "green (standby) processed")):
        pts = tl[key]
        if len(pts) > 1:  # the mean rate between two consecutive status records, over that interval
            rate = [(b[1] - a[1]) / max(b[0] - a[0], 1e-9) for a, b in zip(pts, pts[1:])]
            ax2.step([a[0] for a in pts], rate + rate[-1:], where="post", lw=1, label=label)
    ax2.set_ylabel("records/s")
    ax2.set_xlabel("seconds since the load started")
    ax2.legend(loc="lower right", fontsize=8)
    for ax in (ax1, ax2):
        ax.axvline(tl["warmup_end_s"], color="k", ls=":", lw=0.8)
        for i, mark in enumerate(result.get("marks") or []):
            ax.axvline(mark["t_s"], color=f"C{3 + i}", ls="--", lw=0.8, label=mark["label"] if ax is ax1 else None)
    if result.get("marks"):
        ax1.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
