"""A handoff under load in the middle of the throughput benchmark's measured window (same app, load
generator and verifier: bench/throughput.py): a cutover at an offset fence, a corrected-output cutover,
a rolling upgrade; for a kill -9 failover this runs bench/dag_failover.py (the platform's own path).

    .venv/bin/python bench/handoff.py --kind cutover     # -> bench/results/handoff_cutover.json/.png
    .venv/bin/python bench/handoff.py --kind corrected_cutover  # -> bench/results/handoff_corrected_cutover.*
    .venv/bin/python bench/handoff.py --kind failover    # -> bench/dag_failover.py: handoff_failover.json/.png
    .venv/bin/python bench/handoff.py --kind rolling_upgrade  # -> bench/results/handoff_rolling_upgrade.json/.png
    .venv/bin/python bench/handoff.py --kind standby_restart  # -> bench/results/handoff_standby_restart.json/.png

cutover: fence F ~2 s of input ahead, blue stops at exactly F, one write makes green the writer
(epoch + 1) and lifts the fence (the baton_cutover DAG's steps, run here directly).
corrected_cutover: the same with corrected output (a reprocess's cutover, baton_cutover correct=true):
green also publishes its whole state (every user's count) beside its batches; the verifier tells
those records apart by their header (republished counts, not duplicates).
failover: the platform's own, through Airflow and the slots' leases: bench/dag_failover.py (this
command runs it).
standby_restart: kill -9 of the standby, a new launch of it --down-s later on its checkpoint, its
catch-up beside the active until it follows again (the active's latency while a restarted standby
catches up; the platform's own path, with baton_health restarting it, is bench/dag_failover.py).
Its CPU figures count the standby's first launch only.
rolling_upgrade: v1 -> v2 of the click-count app (same state), the baton_rolling_upgrade DAG's steps
run here directly: green stopped and started on v2 (restore check: it restored the digest it left; its
first batch on v2 checks the state schema), warm-up (the DAG's gate with the form's defaults: within
50,000 records and 10 s of blue's output, beyond green's pace), state digests agree
at a position P both end a batch at and read on from (the output flows meanwhile), fence, blue holding at F,
cutover, 10 s settle, then blue upgraded the same way.

Reported besides the throughput figures: lost / duplicated / wrong over the whole run, p50/p99/p99.99
latency and the longest output gap in the window, each step's time and how long after it the next
output record became readable.
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

from common import RESULTS, bench, log, machine, start_slot, write_result  # noqa: E402
from throughput import parser, plot, run  # noqa: E402

from baton.conditions import Check, arrival_rate, following  # noqa: E402
from baton.control_plane import ControlPlane, KafkaControlStore  # noqa: E402
from baton.fence_gate import FenceGate  # noqa: E402
from baton.handoff import plan_fence, with_fence, without_fence  # noqa: E402
from baton.kafka.markers import read_last_marker  # noqa: E402
from baton.kafka.tail import end_offsets  # noqa: E402
from baton.records import Slot  # noqa: E402
from baton.upgrade import Policy, ask_state_check, restore_check, states_agree  # noqa: E402

GAP_TARGET_S, P99_99_TARGET_MS = 2.0, 5000


def wait(what: str, check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def plan_ahead(b, app, watch, rate: float, ahead_s: float) -> dict[int, int]:
    """A position `ahead_s` of input beyond its end, never behind the active (blue): a fence or a check position."""
    done = [r for r in watch.of(Slot.BLUE) if r.batch_id >= 0]
    return plan_fence(
        end_offsets(b.bootstrap, app.input.topic, range(app.input.partitions)),
        done[-1].processed if done else {},
        rate_per_s=rate,
        ahead_s=ahead_s,
        partitions=app.input.partitions,
    )


def check_states(b, app, watch, rate: float, ahead_s: float) -> list[tuple[float, str]]:
    """The rolling upgrade's state check, before the fence: both slots end a batch at a position P
    ahead of the input, digest their state there and read on (the output flows); the digests must agree."""
    plane = ControlPlane(KafkaControlStore(b.bootstrap), writer="bench")
    position = plan_ahead(b, app, watch, rate, ahead_s)
    marks = [(time.time(), "state check asked")]
    plane.update(app.name, ask_state_check(position))

    def agree() -> bool:
        check = states_agree(watch.of(Slot.BLUE), watch.of(Slot.GREEN), position, Policy.EXACT)
        if check.failed:
            raise RuntimeError(check.message)
        return check.met

    wait("both slots' state digests", agree, 180)
    marks.append((time.time(), "states agree"))
    log(f"state check at {position}: agreed +{marks[-1][0] - marks[0][0]:.1f}s")
    return marks


def cutover(b, app, procs, watch, rate: float, ahead_s: float, correct: bool = False) -> list[tuple[float, str]]:
    plane = ControlPlane(KafkaControlStore(b.bootstrap), writer="bench")
    rec = plane.require(app.name)
    fence = plan_ahead(b, app, watch, rate, ahead_s)
    marks = [(time.time(), "fence set")]
    plane.update(app.name, with_fence(fence, rec.epoch))

    # The DAG's gate (baton.fence_gate): blue's word that it holds at F, its marker at F, green on its
    # way; it writes the cutover the moment that is met.
    gate = FenceGate(
        plane,
        app.name,
        Slot.GREEN,
        rec.epoch,
        fence,
        lambda: read_last_marker(b.bootstrap, app.commits_topic, app.name),
        lambda: watch.of(Slot.BLUE),
        lambda: watch.of(Slot.GREEN),
        trail_records=app.max_lag_records,
        correct=correct,
    )

    def at_fence() -> bool:
        check: Check = gate.look()
        if check.failed:
            raise RuntimeError(check.message)
        return check.met

    try:
        wait("blue at the fence, green on its way", at_fence, 120)
    except (TimeoutError, RuntimeError) as exc:
        # What the DAG's abort step does: lift the fence, the active goes on as it was.
        plane.update(app.name, without_fence(rec.epoch))
        marks.append((time.time(), "fence lifted"))
        marker = read_last_marker(b.bootstrap, app.commits_topic, app.name)
        last = next((r for r in reversed(watch.of(Slot.GREEN)) if r.batch_id >= 0), None)
        err = type(exc)(
            f"{exc}: fence {fence}, blue emitted {marker.emitted if marker else None}, green processed "
            f"{last.processed if last else None} (batch {last.batch_id if last else None})"
        )
        err.marks = marks  # type: ignore[union-attr]  # read back with getattr by the report
        raise err from None
    marks.append((time.time(), "cutover"))
    if correct:
        wait(
            "green's corrected output",
            lambda: (
                (m := read_last_marker(b.bootstrap, app.commits_topic, app.name)) is not None
                and m.corrected_epoch > rec.epoch
            ),
            120,
        )
        marks.append((time.time(), "corrected output in"))
    log(f"cutover at {fence}: " + ", ".join(f"{label} +{t - marks[0][0]:.2f}s" for t, label in marks))
    return marks


def upgrade_slot(b, app, procs, watch, slot: Slot, definition: Path, conf) -> int:
    """Stop `slot` at a batch boundary (it reports the state it leaves), start `definition` on its
    checkpoint, wait for the restore check; returns when it was launched (ms)."""
    b.procs.stop(slot.value)
    left = next(
        (
            r.state_digest
            for r in reversed(watch.of(slot))
            if r.state_digest is not None and r.state_digest.at == "stop"
        ),
        None,
    )
    launched_ms = int(time.time() * 1000)
    procs[slot] = start_slot(b, definition, slot, conf)

    def restored():
        check = restore_check(left, watch.of(slot), launched_ms)
        if check.failed:
            raise RuntimeError(f"{slot.value}: {check.message}")
        return check.met

    wait(f"{slot.value}'s restore check", restored, 300)
    return launched_ms


def warm(b, app, watch, slot: Slot, since_ms: int) -> None:
    """The DAG's warm-up gate with the form's defaults (50,000 records, 10 s, the app's pace on top), a
    batch of the new code since its start included (its state-schema check)."""

    def within() -> bool:
        check = following(
            watch.of(slot),
            read_last_marker(b.bootstrap, app.commits_topic, app.name),
            arrival_rate(watch.of(slot.other)),
            50_000,
            10.0,
            app.standby_pace_ms / 1000,
            since_ms,
        )
        if check.failed:
            raise RuntimeError(f"{slot.value}: {check.message}")
        return check.met

    wait(f"{slot.value} warm", within, 600)


def standby_restart(b, app, procs, watch, conf, down_s: float) -> list[tuple[float, str]]:
    """kill -9 of the standby's process group, `down_s` later a new launch on its checkpoint (what the
    platform does after baton_health finds it dead), then its catch-up beside the active until it
    follows again: the active's latency while a restarted standby catches up a backlog."""
    marks = [(time.time(), "standby killed")]
    os.killpg(procs[Slot.GREEN].pid, signal.SIGKILL)
    b.procs.stop(Slot.GREEN.value)  # reaps it (dead already: nothing left to signal)
    time.sleep(down_s)
    launched_ms = int(time.time() * 1000)
    procs[Slot.GREEN] = start_slot(b, Path(app.path), Slot.GREEN, conf)
    marks.append((time.time(), "standby started"))
    warm(b, app, watch, Slot.GREEN, launched_ms)
    marks.append((time.time(), "standby following"))
    log("standby restart: " + ", ".join(f"{label} +{t - marks[0][0]:.1f}s" for t, label in marks))
    return marks


def rolling_upgrade(b, app, procs, watch, rate: float, ahead_s: float, conf, settle_s: float = 10.0):
    v2 = Path(app.path).parent / "versions" / app.name / "v2.yaml"
    v2.parent.mkdir(parents=True, exist_ok=True)
    v2.write_text(
        Path(app.path)
        .read_text()
        .replace("version: v1", "version: v2")
        .replace("module: spark_apps.apps.click_counts\n", "module: spark_apps.apps.click_counts_v2\n")
    )
    marks = [(time.time(), "preflight")]
    try:
        _upgrade_both(b, app, procs, watch, rate, ahead_s, conf, settle_s, v2, marks)
    except (TimeoutError, RuntimeError) as exc:
        exc.marks = marks + getattr(exc, "marks", [])  # type: ignore[union-attr]  # the steps it got through, for the report
        raise
    log("rolling upgrade: " + ", ".join(f"{label} +{t - marks[0][0]:.1f}s" for t, label in marks))
    return marks


def _upgrade_both(b, app, procs, watch, rate, ahead_s, conf, settle_s, v2, marks) -> None:
    for slot in (Slot.GREEN, Slot.BLUE):
        marks.append((time.time(), f"stop {slot.value}"))
        launched_ms = upgrade_slot(b, app, procs, watch, slot, v2, conf)
        marks.append((time.time(), f"{slot.value} v2 restored"))
        warm(b, app, watch, slot, launched_ms)
        marks.append((time.time(), f"{slot.value} warm"))
        if slot is Slot.GREEN:
            marks += check_states(b, app, watch, rate, ahead_s)
            marks += cutover(b, app, procs, watch, rate, ahead_s)
            time.sleep(settle_s)
            marks.append((time.time(), "settled"))


def gap_end_s(result: dict) -> float | None:
    end = result["latency"].get("longest_output_gap_end")
    return round(end - result["loadgen"]["started"], 1) if end is not None else None


if __name__ == "__main__":
    if sys.argv[1:3] == ["--kind", "failover"]:  # the platform's own failover: bench/dag_failover.py
        os.execv(
            sys.executable, [sys.executable, str(Path(__file__).resolve().parent / "dag_failover.py"), *sys.argv[3:]]
        )
    ap = parser(__doc__)
    ap.add_argument(
        "--kind", choices=["cutover", "corrected_cutover", "rolling_upgrade", "standby_restart"], default="cutover"
    )
    ap.add_argument("--handoff-at", type=float, default=40.0, help="seconds into the measured window")
    ap.add_argument("--ahead-s", type=float, default=2.0, help="cutover: fence this much input ahead")
    ap.add_argument("--down-s", type=float, default=60.0, help="standby_restart: seconds the standby stays dead")
    ap.set_defaults(seconds=90.0)
    args = ap.parse_args()
    if args.kind == "standby_restart" and "--seconds" not in sys.argv:
        args.seconds = 300.0  # the backlog of --down-s and its catch-up inside the window
    if args.kind == "rolling_upgrade" and "--seconds" not in sys.argv:
        # Both slots restart and catch up a backlog on a machine the other slot's load shares: keep the
        # load on throughout (a fence planned after the input stopped would never be reached).
        args.seconds = 600.0
    if args.kind == "rolling_upgrade" and "--ahead-s" not in sys.argv:
        # While a restarted slot catches up the machine is saturated: a fence 2 s of input ahead was
        # passed by the active before it saw it (measured). Further ahead costs handoff time, not output.
        args.ahead_s = 5.0
    name = args.name if args.name != "throughput" else f"handoff_{args.kind}"
    with bench(name, keep=args.logs) as b:
        during = {
            "cutover": partial(cutover, rate=args.rate, ahead_s=args.ahead_s),
            "corrected_cutover": partial(cutover, rate=args.rate, ahead_s=args.ahead_s, correct=True),
            "rolling_upgrade": partial(rolling_upgrade, rate=args.rate, ahead_s=args.ahead_s, conf=args.conf),
            "standby_restart": partial(standby_restart, conf=args.conf, down_s=args.down_s),
        }[args.kind]
        result = run(b, args, during=during)
    marks = result["marks"]
    result.update(
        {
            "kind": args.kind,
            "rate": result["rate_input"],
            "lost": result["verdict"]["lost"],
            "duplicated": result["verdict"]["duplicated"],
            "wrong": result["verdict"]["wrong"],
            "max_gap_ms": round(result["latency"]["longest_output_gap_s"] * 1000),
            # where it ended, in the run's seconds (the marks' clock): at a handoff step, or elsewhere
            "max_gap_end_s": gap_end_s(result),
            "targets": {"p99_99_ms": P99_99_TARGET_MS, "max_gap_s": GAP_TARGET_S},
            "machine": machine(),
        }
    )
    path = write_result(name, result)
    plot(result, RESULTS / f"{name}.png")
    keys = [
        "rate",
        "lost",
        "duplicated",
        "wrong",
        "p50_ms",
        "p99_ms",
        "p99_99_ms",
        "max_gap_ms",
        "max_gap_end_s",
        "marks",
        "handoff_error",
    ]
    print(json.dumps({k: result.get(k) for k in keys}, indent=1))
    log(f"wrote {path} and {path.with_suffix('.png')}")
    if result["handoff_error"]:
        log(f"the handoff did not complete: {result['handoff_error']}")
    sys.exit(0 if result["verdict"]["ok"] and not result["handoff_error"] else 1)
