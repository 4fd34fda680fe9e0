"""Headroom: the highest input rate the click-count app holds with its hot standby following (issue 24).

    .venv/bin/python bench/max_rate.py                                    # 20,085 events/s, +5,000 every 60 s
    .venv/bin/python bench/max_rate.py --start 5000 --step 2000 --step-s 20 --keys 10000   # a quick look

A component benchmark like bench/throughput.py (its own Tansu broker, the slots started directly, no
Airflow): what the runtime can carry on this machine, not a handoff. Slot blue is active, green its
standby in follow mode; both first process --prewarm events unpaced. Then the input steps up: --start
events/s for --step-s, then --step more every --step-s (bench/dag_handoff.py's load worker in 10 s
pieces, 100k users, 1% malformed), while the verifier reads the output read_committed.

A step is held when, 5 s after it ends, blue stands at most 3 s of that step's input behind what was
sent, and (judged after the run, from the verifier) the p99 of the events sent in it is <= 2 s. The
load stops after two steps in a row fell behind (the active's lag grew for two steps running) or at
--max. `max_rate` is the highest step rate held; `max_rate_keeps_pace` the highest blue kept up with;
`max_rate_standby_close` the highest step held with the standby never more than STANDBY_CLOSE_S of the
step's input behind blue (a niced standby on a busy host falls back). Per step: input and processed
rate, lag, p50/p99, the active's batch durations and look misses (where a step's tail comes from),
standby lag, CPU by process (each slot's JVM with its JIT threads apart, its Python workers, the
broker, the load generator, the verifier) and bytes per event: the input records' own (key and
value), and per event sent what each process moved over its connections to the broker (the fetches
of two readers, produces, transactions) and through read/write calls on files and pipes
(checkpoints, state deltas): bench/io_meter.py.
Writes bench/results/max_rate.json and max_rate.png.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
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
from dag_handoff import CHUNK_S, load_sends  # noqa: E402
from io_meter import IoMeter, mean_record_bytes, per_event  # noqa: E402
from throughput import look_misses  # noqa: E402

from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.loadgen import LoadSpec, SendLog, user_id  # noqa: E402
from baton.tools.loadgen import run as produce  # noqa: E402
from baton.tools.verify import Observations, align_users, event_latencies, latency_report, verify  # noqa: E402

P99_TARGET_MS = 2000
BEHIND_S = 3.0  # a step falls behind when blue is more than this much of its input short, 5 s after it
# The standby follows closely in a step when it never trailed blue by more than this much of the step's input:
# its cap moves to blue's last commit every standby_pace_ms (2 s), and that commit is a batch (1 s) behind what
# blue has read. Further back, a failover replays what it trails before its first output.
STANDBY_CLOSE_S = 3.0
SETTLE_S = 5.0
SERIES_S = 60.0  # the warm-up's CPU series: one window a minute


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=float, default=20085.0)
    ap.add_argument("--step", type=float, default=5000.0)
    ap.add_argument("--step-s", type=float, default=60.0)
    ap.add_argument("--max", type=float, default=60000.0, help="stop stepping up at this rate")
    ap.add_argument(
        "--warmup",
        type=float,
        default=240.0,
        help="seconds at --start before the first step is measured (the JVMs' JIT is still at "
        "~0.06 cores each 4 min in, ~0.01-0.02 after 20: `cpu_warmup_series`)",
    )
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--prewarm", type=int, default=100_000)
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    ap.add_argument("--logs", type=Path, default=None)
    ap.add_argument(
        "--count-rows",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the app's state.count_rows (default: what include/apps/click_counts.yaml says)",
    )
    ap.add_argument("--name", default="max_rate")
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.step_s % CHUNK_S:
        raise SystemExit(f"--step-s must be a multiple of the load's {CHUNK_S:g} s pieces")
    with bench("max_rate", keep=args.logs) as b:
        result = run(b, args)
        result["broker"] = b.broker_kind
    result["machine"] = machine()
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "max_rate",
                    "p99_ms_at_max",
                    "max_rate_keeps_pace",
                    "max_rate_standby_close",
                    "slot_cores_at_start",
                    "slot_cores_warmup",
                    "verdict",
                )
            },
            indent=1,
        )
    )
    log(f"wrote {path} and {path.with_suffix('.png')}")
    return 0 if result["verdict"]["ok"] else 1


def run(b, args) -> dict:
    app, path = click_count_app(b.tmp, count_rows=args.count_rows)
    create_app(b.bootstrap, app, standby=True)
    watch = StatusWatch(b.bootstrap, app.name)
    slots = (Slot.BLUE, Slot.GREEN)
    procs = {s: start_slot(b, path, s) for s in slots}
    for s in slots:
        watch.wait(reports(s, SlotState.RESTORING), 180, f"of {s.value} starting", alive=running(procs[s]))
    prewarm = produce(
        LoadSpec(rate=math.inf, keys=args.keys, events=args.prewarm, malformed=args.malformed, seed=1000),
        b.bootstrap,
        app.input.topic,
    )
    for s in slots:
        wait_processed(watch, s, args.prewarm, 600, alive=lambda s=s: procs[s].poll() is None)
    py, sends = sys.executable, b.tmp / "sends"
    b.procs.start(
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
            str(b.tmp / "seen.npz"),
        ],
    )
    loadgen = b.procs.start(
        "loadgen",
        [
            py,
            str(Path(__file__).resolve().parent / "dag_handoff.py"),
            "_load",
            "--bootstrap",
            b.bootstrap,
            "--topic",
            app.input.topic,
            "--rate",
            str(args.start),
            "--step",
            str(args.step),
            "--step-s",
            str(args.step_s),
            "--warm-s",
            str(args.warmup),
            "--keys",
            str(args.keys),
            "--malformed",
            str(args.malformed),
            "--out-dir",
            str(sends),
        ],
    )
    t0 = time.time() + args.warmup  # the first step's start
    log(f"load from {args.start:.0f}/s ({args.warmup:.0f} s of warm-up), +{args.step:.0f}/s every {args.step_s:.0f} s")
    warm_cpu, warm_io = meters(b, procs)
    series = slot_cpu_series(procs, t0 - args.warmup, t0)
    time.sleep(max(0.0, t0 - time.time()))  # the series ends up to a second early
    warmup = {"cpu": warm_cpu.stop(), "io": warm_io.stop(), "series": series}
    steps, behind_in_a_row, k = [], 0, 0
    while True:
        rate = args.start + k * args.step
        cpu, io = meters(b, procs)
        end = t0 + (k + 1) * args.step_s
        time.sleep(max(0.0, end - time.time()))
        cpu_report, io_report = cpu.stop(), io.stop()
        time.sleep(SETTLE_S)
        # Where blue stood at the step's end: what was sent by then (the saved pieces cover it) less
        # what its last batch before then had processed.
        sent_times = np.concatenate([SendLog.load(p).send_times() for p in sorted(sends.glob("sends-*.npz"))])
        at = [r for r in batch_records(watch, Slot.BLUE) if r.ts_ms / 1000 <= end]
        stood = at[-1].ts_ms / 1000 if at else end
        sent_by = int((sent_times <= stood).sum())
        lag = max(0, sent_by - ((total(at[-1].processed) if at else 0) - args.prewarm))
        behind = lag > BEHIND_S * rate
        steps.append(
            {
                "rate": rate,
                "t_start_s": round(args.warmup + k * args.step_s, 1),
                "sent_total": sent_by,
                "lag_records": lag,
                "lag_s": round(lag / rate, 2),
                "behind": behind,
                "cpu": cpu_report,
                "io": io_report,
            }
        )
        log(
            f"step {k}: {rate:.0f}/s: blue {lag} records ({lag / rate:.1f} s of input) behind"
            f"{' : falling behind' if behind else ''}; cores used {cpu_report['cores_used']:.2f}"
        )
        behind_in_a_row = behind_in_a_row + 1 if behind else 0
        if behind_in_a_row >= 2 or rate + args.step > args.max or any(p.poll() is not None for p in procs.values()):
            break
        k += 1
    loadgen.send_signal(signal.SIGTERM)
    loadgen.wait(180)
    sent, pieces = load_sends(sends)
    events = sent.users.size + args.prewarm
    log(f"load stopped: {sent.users.size} events; waiting for the backlog")
    drained = True
    try:
        for s in slots:
            wait_processed(watch, s, events, args.drain_timeout, alive=lambda s=s: procs[s].poll() is None)
    except TimeoutError as exc:
        drained = False
        log(f"not drained: {exc}")
    time.sleep(2)
    code = b.procs.stop("verifier", 180)
    for s in slots:
        b.procs.stop(s.value)
    watch.close()
    if code != 0:
        raise RuntimeError(f"verifier failed ({code}):\n{b.procs.tail('verifier')}")
    return analyse(args, prewarm, sent, Observations.load(b.tmp / "seen.npz"), watch, steps, drained, warmup)


def meters(b, procs) -> tuple[CpuMeter, IoMeter]:
    """CPU and I/O meters over every process of the run, started."""
    cpu, io = CpuMeter(), IoMeter(broker_port=int(b.bootstrap.rsplit(":", 1)[1]))
    for name in ("loadgen", "verifier"):
        cpu.track(name, b.procs.running[name].pid)
        io.track(name, b.procs.running[name].pid)
    if b.broker_pid is not None:
        cpu.track("broker", b.broker_pid)
        io.track("broker", b.broker_pid)
    for s, proc in procs.items():
        cpu.track(s.value, proc.pid, slot=True)
        io.track(s.value, proc.pid)
    cpu.start()
    io.start()
    return cpu, io


def slot_cpu_series(procs, load_started: float, until: float) -> list[dict]:
    """The slots' CPU in consecutive SERIES_S windows until `until`: how the JVMs' JIT settles at the
    start rate, so a reader can tell a step's figures from a warm-up that had not ended."""
    series = []
    while until - time.time() > 1.0:
        cpu = CpuMeter()
        for s, proc in procs.items():
            cpu.track(s.value, proc.pid, slot=True)
        cpu.start()
        time.sleep(max(0.0, min(until, time.time() + SERIES_S) - time.time()))
        report = cpu.stop()
        series.append(
            {
                "t_s": round(time.time() - load_started, 1),
                "slot_cores": slot_cores(report),
                "jit_cores": jit_cores(report),
                "by_role": {role: v["cores"] for role, v in report["by_role"].items()},
            }
        )
    return series


def jit_cores(cpu_report: dict) -> float:
    """Both slots' JIT compiler threads."""
    return round(sum(v["cores"] for role, v in cpu_report["by_role"].items() if role.endswith(".jvm_jit")), 3)


def slot_cores(cpu_report: dict) -> float:
    """Active + standby: both slots' JVMs (JIT and GC included) and Python."""
    return round(
        sum(v["cores"] for role, v in cpu_report["by_role"].items() if role.split(".")[0] in ("blue", "green")), 3
    )


def analyse(args, prewarm, sent, obs, watch, steps, drained, warmup) -> dict:
    verdict = verify(sent.truth() + prewarm.truth(), obs.pairs(), obs.corrected)
    pre_users, pre_times = prewarm.valid()
    users, times = sent.valid()
    all_users, all_times = np.concatenate([pre_users, users]), np.concatenate([pre_times, times])
    index = {user_id(i): i for i in range(sent.keys)}
    lat = event_latencies(all_users, all_times, align_users(obs, index), obs.counts, obs.times)[pre_users.size :]
    t0 = float(sent.meta["started"])
    blue_batches = batch_records(watch, Slot.BLUE)
    blue = [(r.ts_ms / 1000, total(r.processed)) for r in blue_batches]
    green = [(r.ts_ms / 1000, total(r.processed)) for r in batch_records(watch, Slot.GREEN)]
    for step in steps:
        a, z = t0 + step["t_start_s"], t0 + step["t_start_s"] + args.step_s
        inside = (times >= a) & (times < z)
        report = latency_report(lat[inside], obs.times[(obs.times >= a) & (obs.times < z)])
        step.update(
            p50_ms=round(report.p50_ms, 1),
            p99_ms=round(report.p99_ms, 1),
            events=int(inside.sum()),
            rate_in=round(float(inside.sum()) / args.step_s, 1),
            rate_processed=round(processed_rate(blue, a, z), 1),
            standby_behind_records=standby_behind(blue, green, a, z),
            # where a step's tail comes from: slow batches, or events a batch's look missed (a late
            # fetch), each a trigger late
            batch_ms=step_batch_ms([r for r in blue_batches if a <= r.ts_ms / 1000 < z]),
            look_misses=look_misses(times[inside], lat[inside], blue_batches),
        )
        # I/O over the step's wall-clock window, per event sent in it (rate x step: the same window)
        step["io_per_event"] = per_event(step["io"], int(round(step["rate"] * args.step_s)))
        step["held"] = bool(not step["behind"] and report.p99_ms <= P99_TARGET_MS)
        step["standby_close"] = standby_close(step)
    at_start = slot_cores(steps[0]["cpu"]) if steps else None
    return {
        **headline(steps),
        # active + standby at --start, in the first step: after --warmup s at that rate. The JVMs' JIT
        # takes ~0.2 cores each in the first minute and settles slowly (cpu_warmup_series): its share
        # of a step is jit_cores_at_start
        "slot_cores_at_start": at_start,
        "jit_cores_at_start": jit_cores(steps[0]["cpu"]) if steps else None,
        "slot_cores_at_20085": at_start if abs(args.start - 20085) < 1 else None,
        "slot_cores_warmup": slot_cores(warmup["cpu"]),  # the same over the warm-up, from the load's start
        "warmup_s": args.warmup,
        "cpu_warmup": warmup["cpu"],
        "cpu_warmup_series": warmup["series"],  # the slots' CPU a minute at a time through the warm-up
        "cpu_at_start": steps[0]["cpu"] if steps else None,
        "input_record_bytes": round(mean_record_bytes(sent.users, sent.kinds), 1),  # key + value, no framing
        "io_per_event_at_start": steps[0]["io_per_event"] if steps else None,
        "start": args.start,
        "step": args.step,
        "step_s": args.step_s,
        "keys": args.keys,
        "count_rows": app_count_rows(args.count_rows),  # the app's state.count_rows
        "malformed_share": args.malformed,
        "prewarm_events": args.prewarm,
        "p99_target_ms": P99_TARGET_MS,
        "behind_s": BEHIND_S,
        "steps": steps,
        "drained": drained,
        "verdict": {**verdict.summary(), "ok": verdict.ok},
        "timeline": {
            "blue_processed": [(round(t - t0, 2), p) for t, p in blue],
            "green_processed": [(round(t - t0, 2), p) for t, p in green],
        },
    }


def step_batch_ms(batches) -> dict | None:
    """The durations of the active's batches that ended in a step."""
    if not batches:
        return None
    ms = np.array([r.batch_ms for r in batches])
    return {
        "count": int(ms.size),
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
    }


def headline(steps: list[dict]) -> dict:
    """max_rate: the highest step held (p99 <= 2 s, not behind); max_rate_keeps_pace: the highest step
    blue kept up with (not behind), whatever its latency; max_rate_standby_close: the highest step held
    whose standby stayed close (standby_close). The p99 of a 1 s trigger sits near 2 s at every rate (a
    batch interval, the batch, the commit), so max_rate moves with the host's noise."""
    held = [s for s in steps if s["held"]]
    at_max = max(held, key=lambda s: s["rate"]) if held else None
    close = [s for s in held if standby_close(s)]
    at_close = max(close, key=lambda s: s["rate"]) if close else None
    pace = [s for s in steps if not s["behind"]]
    at_pace = max(pace, key=lambda s: s["rate"]) if pace else None
    return {
        "max_rate": at_max["rate"] if at_max else 0.0,
        "p99_ms_at_max": at_max["p99_ms"] if at_max else None,
        "max_rate_keeps_pace": at_pace["rate"] if at_pace else 0.0,
        "p99_ms_at_keeps_pace": at_pace["p99_ms"] if at_pace else None,
        "max_rate_standby_close": at_close["rate"] if at_close else 0.0,
    }


def standby_close(step: dict) -> bool:
    """The standby never trailed blue by more than STANDBY_CLOSE_S of the step's input (unknown: not close)."""
    behind = step.get("standby_behind_records")
    return behind is not None and behind <= STANDBY_CLOSE_S * step["rate"]


def processed_rate(points, a: float, z: float) -> float:
    inside = [(t, p) for t, p in points if a <= t <= z]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / max(inside[-1][0] - inside[0][0], 1e-9)


def standby_behind(blue, green, a: float, z: float) -> int | None:
    """Green's largest distance behind blue within [a, z] (blue's last position before each green report)."""
    worst, bi = None, 0
    for t, p in green:
        if not a <= t <= z:
            continue
        while bi + 1 < len(blue) and blue[bi + 1][0] <= t:
            bi += 1
        if blue and blue[bi][0] <= t:
            worst = max(worst or 0, blue[bi][1] - p)
    return worst


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    steps = result["steps"]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 10))
    ax2.sharex(ax1)
    x = [s["rate"] for s in steps]
    ax1.plot(x, [s["rate_in"] for s in steps], "o-", label="input rate")
    ax1.plot(x, [s["rate_processed"] for s in steps], "s-", label="blue processed")
    ax1.set_ylabel("events/s")
    ax1.legend()
    ax2.plot(x, [s["p99_ms"] for s in steps], "o-", color="tab:red", label="p99 latency")
    ax2.axhline(P99_TARGET_MS, color="tab:red", ls="--", lw=0.8, label="p99 target")
    ax2b = ax2.twinx()
    ax2b.bar(x, [s["lag_s"] for s in steps], width=result["step"] * 0.4, alpha=0.3, label="blue lag (s of input)")
    ax2.set_ylabel("ms")
    ax2b.set_ylabel("s of input behind")
    ax2.set_xlabel("step rate (events/s)")
    ax2.legend(loc="upper left")
    series = result.get("cpu_warmup_series") or []
    minutes = [w["t_s"] / 60 for w in series]
    ax3.plot(minutes, [w["slot_cores"] for w in series], "o-", label="active + standby")
    ax3.plot(minutes, [w["jit_cores"] for w in series], "s-", label="of it, the JITs")
    ax3.set_xlabel(f"minutes of the warm-up at {result['start']:.0f} events/s")
    ax3.set_ylabel("cores")
    ax3.set_ylim(bottom=0)
    ax3.legend(loc="upper right")
    fig.suptitle(
        f"with the standby following: p99 <= 2 s up to {result['max_rate']:.0f} events/s "
        f"(p99 {result['p99_ms_at_max']} ms); kept pace up to {result['max_rate_keeps_pace']:.0f} events/s "
        f"(p99 {result['p99_ms_at_keeps_pace']} ms)\nheld with the standby close: "
        f"{result.get('max_rate_standby_close') or 0:.0f} events/s; slots' cores at {result['start']:.0f}/s: "
        f"{result['slot_cores_at_start']}; broker: {result.get('broker', 'not recorded')}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
