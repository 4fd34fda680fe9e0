"""A handoff under load: a cutover at an offset fence, or a kill -9 failover, in the middle of the
throughput benchmark's measured window (same app, load generator and verifier: bench/throughput.py).

    .venv/bin/python bench/handoff.py --kind cutover     # -> bench/results/handoff_cutover.json/.png
    .venv/bin/python bench/handoff.py --kind failover    # -> bench/results/handoff_failover.json/.png

cutover: fence F ~2 s of input ahead, both slots stop at exactly F, one write makes green the writer
(epoch + 1) and lifts the fence (the baton_cutover DAG's steps, run here directly).
failover: SIGKILL of blue's whole process group; its death is noticed by polling the process (0.2 s,
what a dedicated failover sensor would do; the every-minute health DAG adds up to its interval), then
baton.handoff.fail_over: fence at blue's last emitted position, green reaches it, green is active.
Blue is not restarted here (the health DAG does that), so green runs alone afterwards.

Reported besides the throughput figures: lost / duplicated / wrong over the whole run, p50/p99/p99.99
latency and the longest output gap in the window, each step's time and how long after it the next
output record became readable (for a failover, `resume_s`: kill to the next readable output).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, bench, log, machine, write_result  # noqa: E402
from throughput import parser, plot, run  # noqa: E402

from baton.conditions import Check  # noqa: E402
from baton.control_plane import ControlPlane, KafkaControlStore  # noqa: E402
from baton.handoff import cut_over, fail_over, fence_reached, plan_fence, with_fence  # noqa: E402
from baton.kafka.tail import end_offsets  # noqa: E402
from baton.records import Slot  # noqa: E402
from spark_apps.runtime.kafka_sink import read_last_marker  # noqa: E402

GAP_TARGET_S, RESUME_TARGET_S, P99_99_TARGET_MS = 2.0, 5.0, 5000


def wait(what: str, check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (value := check()):
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def cutover(b, app, procs, watch, rate: float, ahead_s: float) -> list[tuple[float, str]]:
    plane = ControlPlane(KafkaControlStore(b.bootstrap), writer="bench")
    rec = plane.current(app.name)
    done = [r for r in watch.of(Slot.BLUE) if r.batch_id >= 0]
    fence = plan_fence(end_offsets(b.bootstrap, app.input.topic, range(app.input.partitions)),
                       done[-1].processed if done else {}, rate_per_s=rate, ahead_s=ahead_s,
                       partitions=app.input.partitions)
    marks = [(time.time(), "fence set")]
    plane.update(app.name, with_fence(fence, rec.epoch))

    def at_fence() -> bool:
        check: Check = fence_reached(read_last_marker(b.bootstrap, app.commits_topic, app.name),
                                     watch.of(Slot.GREEN), fence, rec.epoch)
        if check.failed:
            raise RuntimeError(check.message)
        return check.met
    wait("both slots at the fence", at_fence, 120)
    marks.append((time.time(), "both at F"))
    plane.update(app.name, cut_over(Slot.GREEN, rec.epoch))
    marks.append((time.time(), "cutover"))
    log(f"cutover at {fence}: " + ", ".join(f"{label} +{t - marks[0][0]:.2f}s" for t, label in marks))
    return marks


def failover(b, app, procs, watch) -> list[tuple[float, str]]:
    plane = ControlPlane(KafkaControlStore(b.bootstrap), writer="bench")
    rec = plane.current(app.name)
    blue = procs[Slot.BLUE]
    os.killpg(blue.pid, signal.SIGKILL)
    marks = [(time.time(), "kill -9 active")]
    wait("blue's process to be gone", lambda: blue.poll() is not None, 30)
    marks.append((time.time(), "death seen"))
    marker = read_last_marker(b.bootstrap, app.commits_topic, app.name)

    def green_processed():
        done = [r for r in watch.of(Slot.GREEN) if r.batch_id >= 0]
        return done[-1].processed if done else {}

    ok, message = fail_over(plane, app.name, app.input.partitions, Slot.BLUE, rec.epoch,
                            dict(marker.emitted) if marker else {}, green_processed)
    if not ok:
        raise RuntimeError(message)
    marks.append((time.time(), "green active"))
    log(message + ": " + ", ".join(f"{label} +{t - marks[0][0]:.2f}s" for t, label in marks))
    return marks


def resume_s(marks: list[dict]) -> float | None:
    """Kill to the first output of the new active: output readable right after the kill is the dead
    active's last transactions being stamped, not a resumption."""
    kill, active = marks[0], marks[-1]
    if active["next_output_s"] is None:
        return None
    return round(active["t_s"] + active["next_output_s"] - kill["t_s"], 3)


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--kind", choices=["cutover", "failover"], default="cutover")
    ap.add_argument("--handoff-at", type=float, default=40.0, help="seconds into the measured window")
    ap.add_argument("--ahead-s", type=float, default=2.0, help="cutover: fence this much input ahead")
    ap.set_defaults(seconds=90.0)
    args = ap.parse_args()
    name = args.name if args.name != "throughput" else f"handoff_{args.kind}"
    with bench(name) as b:
        during = partial(cutover, rate=args.rate, ahead_s=args.ahead_s) if args.kind == "cutover" else failover
        result = run(b, args, during=during)
    marks = result["marks"]
    result.update({
        "kind": args.kind,
        "rate": result["rate_input"],
        "lost": result["verdict"]["lost"], "duplicated": result["verdict"]["duplicated"],
        "wrong": result["verdict"]["wrong"],
        "max_gap_ms": round(result["latency"]["longest_output_gap_s"] * 1000),
        "targets": {"p99_99_ms": P99_99_TARGET_MS, "max_gap_s": GAP_TARGET_S, "resume_s": RESUME_TARGET_S},
        "machine": machine(),
    })
    if args.kind == "failover":
        result["resume_s"] = resume_s(marks)
    path = write_result(name, result)
    plot(result, RESULTS / f"{name}.png")
    keys = ["rate", "lost", "duplicated", "wrong", "p50_ms", "p99_ms", "p99_99_ms", "max_gap_ms", "resume_s", "marks"]
    print(json.dumps({k: result.get(k) for k in keys}, indent=1))
    log(f"wrote {path} and {path.with_suffix('.png')}")
    sys.exit(0 if result["verdict"]["ok"] else 1)
