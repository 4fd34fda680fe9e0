"""The platform's own failover at the seed's rate: kill -9 of the active, again and again, with nothing
in the benchmark noticing the death (issue 21; invariant 7).

    .venv/bin/python bench/dag_failover.py         # -> bench/results/handoff_failover.json/.png
    .venv/bin/python bench/handoff.py --kind failover   # the same

Starts the embedded platform as `make up` does (dag_platform.platform), then what a user does:
baton_topics and baton_lifecycle {"app": "click_counts", "action": "start", "slot": "both"}; both slots
pre-warm; the load (dag_handoff's generator process, --rate events/s over --users users, 1% malformed)
and the verifier run. After --warm seconds, --kills times: wait until both slots run, the standby within
--ready-lag records of the input (after a kill: the dead slot restarted and caught up as the standby),
wait a random 5-20 s, SIGKILL the active driver's process group (the driver, its JVM and Python workers:
a crash; its wrapper lives). What happens next is the platform's: the standby's lease watch sees the
process gone (same host) or the lease expire, fences the writer and takes over; the dead driver's
wrapper starts it again in place (baton.driver_wrapper; before 2026-12-08 baton_health restarted it,
3-35 s after the kill), and it comes back as the standby.
The benchmark only looks afterwards:
- detect_s: the kill to the takeover's control record (its decision time, Handoff.ts_ms);
- resume_s: the kill to the first output committed at the new epoch (its commit marker's time);
- next_output_s: the kill to the next output record the verifier read;
- restart_begun_s: the kill to the new driver's launch (its wrapper's restarts file);
- restarted_s: the kill to the dead slot's first batch in its new driver;
- redundant_again_s: the kill to both slots running again with the standby caught up (the next kill
  waits for it);
- restart_phases: the new driver's own account of its start-up (process start to harness, then seconds
  since the harness began: Spark session, control read, query built and started, first batch);
p50 and max of each over the kills, and over the whole window from the first kill: lost / duplicated /
wrong, latency p50/p99/p99.99 (send -> readable) and the longest owed output gap; p99_99_ms_kills: the
latency of the events sent from the first kill to STALL_LEAD_S before the first stall (the run of kills
the p99.99 target is judged on); p99_99_ms_stalls: from there to the end.
The lease's own cost: a LeaseKeeper alone in a process (`_lease`), renewing and reading the leases
topic beside the platform's slots for 30 s, its process's CPU (all its threads, librdkafka's included).
Then --stalls times SIGSTOP of the active's process group for --stall-s (10 s), SIGCONT: the lease
expires, the standby takes over, the woken slot finds its writer fenced and goes on as the standby
(its figures apart from the kills': stall_resume_s_max). Then --second-fault times: kill the active, and
the new active 10 s after its takeover, while the first is still restarting (back as a running standby
by then, it takes over again; if not, the second comes back as the active in place); its output gap and
restart are `second_fault`.
Targets (issue 21): resume_s max <= 5 s and p99.99 <= 5 s over the run of kills, 0 / 0 / 0, lease <= 0.02
cores, a stall's output resumed within lease_ttl + 2 s. The stall has its own target because the two
cannot hold in one window: a stalled active's lease expires ttl - interval to ttl after its last renewal
(baton.leases.LeaseJudge), 2-4 s after the SIGSTOP by where in its renewal interval the stop falls, and
its last second of input waits for that plus a batch; at the seed's rate a takeover 4 s after the stop
leaves some 20,000 events over 5 s, where a 5-minute run's p99.99 allows 600. The whole run's p99.99
(p99_99_ms, the stall included) is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, Procs, StatusWatch, log, machine, pyplot, total, wait_processed, write_result  # noqa: E402
from dag_handoff import APP, code_rev, load_sends, next_output, slot_batches  # noqa: E402
from dag_platform import Meter, broker_kind, platform, run_dag, slot_driver, wait_dags  # noqa: E402
from dag_report import analyse  # noqa: E402

from baton.records import CommitMarker, ControlRecord, Role, Slot, SlotState  # noqa: E402

NAME = "handoff_failover"
# A standby's batches are this short once it has caught up with the active (paced: ~2 s of input each);
# a restarted one catching up runs batches of up to max_records_per_trigger, ~15 s here.
CAUGHT_UP_BATCH_MS = 5000
RESUME_TARGET_S, P99_99_TARGET_MS, LEASE_TARGET_CORES = 5.0, 5000, 0.02
RESTART_BEGUN_TARGET_S, REDUNDANT_P50_TARGET_S, REDUNDANT_MAX_TARGET_S = 2.0, 15.0, 25.0
STALL_SLACK_S = 2.0  # a stalled active's output resumes within lease_ttl + this
STALL_LEAD_S = 10.0  # the kills' own latency (p99_99_ms_kills) counts events sent up to this before a stall


def ready(plat, watch: StatusWatch, app, ready_lag: int, dead_pid: int | None = None) -> str | None:
    """Both slots' launches alive and desired RUNNING; the active within ready_lag of the input's end;
    the standby running as the standby, within ready_lag of what the active emitted, its catch-up done
    (its last batches within CAUGHT_UP_BATCH_MS): a kill now can be failed over at once, as after a
    quiet day. Returns the active's name then."""
    from baton.kafka.control_log import read_control
    from baton.kafka.tail import end_offsets

    rec = read_control(plat.settings.kafka_bootstrap, APP)
    if rec is None or any(rec.slots.get(s) is None or rec.slots[s].desired is not SlotState.RUNNING for s in Slot):
        return None
    if any(slot_driver(plat.settings.state_dir, APP, s) is None for s in Slot):
        return None
    # A killed driver's records say nothing of the slot now (a fault no standby took over leaves the
    # control record as it was: only a new driver's records show the slot back).
    active = [r for r in watch.of(rec.active) if r.batch_id >= 0 and r.pid != dead_pid]
    standby = [r for r in watch.of(rec.active.other) if r.batch_id >= 0 and r.pid != dead_pid][-3:]
    if not active or len(standby) < 3 or standby[-1].role is not Role.STANDBY or standby[-1].emitted is None:
        return None
    if time.time() - standby[-1].ts_ms / 1000 > 10 or max(r.batch_ms for r in standby) > CAUGHT_UP_BATCH_MS:
        return None
    end = total(end_offsets(plat.settings.kafka_bootstrap, app.input.topic, range(app.input.partitions)))
    trailing = total(standby[-1].emitted) - total(standby[-1].processed)
    return rec.active.value if trailing <= ready_lag and end - total(active[-1].processed) <= ready_lag else None


def wait_ready(plat, app, args, watch: StatusWatch, meter: Meter, dead_pid: int | None = None) -> str:
    deadline = time.monotonic() + args.ready_timeout
    while (active := ready(plat, watch, app, args.ready_lag, dead_pid)) is None:
        meter.follow()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the slots were not both running and caught up within {args.ready_timeout:.0f}s")
        time.sleep(2)
    return active


def control_record(bootstrap: str) -> ControlRecord:
    from baton.kafka.control_log import read_control

    rec = read_control(bootstrap, APP)
    if rec is None:
        raise RuntimeError(f"{APP} has no control record")
    return rec


def kill_active(plat, active: str, stall_s: float = 0.0, wait_s: tuple[float, float] = (5, 20)) -> dict:
    """After a random 5-20 s, SIGKILL the active's process group (or, with stall_s, SIGSTOP it for that
    long, then SIGCONT); then only watch the control record."""
    time.sleep(random.uniform(*wait_s))
    before = control_record(plat.settings.kafka_bootstrap)
    pid = slot_driver(plat.settings.state_dir, APP, before.active)
    if pid is None:
        raise RuntimeError(f"the active {before.active.value}'s driver is not running")
    group = os.getpgid(pid)
    t_kill = time.time()
    os.killpg(group, signal.SIGSTOP if stall_s else signal.SIGKILL)
    log(f"{'stalled' if stall_s else 'killed'} {active} (pid {pid}) at epoch {before.epoch}")
    deadline = time.monotonic() + 120
    try:
        while (rec := control_record(plat.settings.kafka_bootstrap)).epoch == before.epoch:  # observed, not acted on
            if time.monotonic() > deadline:
                raise TimeoutError(f"no failover within 120 s of the {'stall' if stall_s else 'kill'} of {active}")
            time.sleep(0.1)
        time.sleep(max(0.0, t_kill + stall_s - time.time()))
    finally:
        if stall_s:
            os.killpg(group, signal.SIGCONT)
    begun = restart_begun(plat.settings.state_dir, before.active, t_kill) if not stall_s else None
    decided = rec.handoff.ts_ms / 1000 if rec.handoff is not None and rec.handoff.ts_ms else rec.ts_ms / 1000
    log(
        f"epoch {rec.epoch}: {rec.active.value} active, {decided - t_kill:.2f}s after the kill; "
        f"{rec.handoff.reason if rec.handoff else ''}"
    )
    return {
        "killed": active,
        "how": f"SIGSTOP {stall_s:g} s" if stall_s else "SIGKILL",
        "pid": pid,
        "t_kill": t_kill,
        "epoch": rec.epoch,
        "writer": rec.writer,
        "reason": rec.handoff.reason if rec.handoff else "",
        "detect_s": round(decided - t_kill, 3),
        "restart_begun_s": begun,
    }


def second_fault(plat, active: str) -> list[dict]:
    """Kill the active, then the new active 10 s after its takeover, while the first is still restarting:
    a failover again if the first is back as a running standby by then, else the second comes back as
    the active from its checkpoint, in place."""
    first = kill_active(plat, active)
    first["how"] = "SIGKILL, then the new active's 10 s after the takeover"
    time.sleep(10)
    before = control_record(plat.settings.kafka_bootstrap)
    pid = slot_driver(plat.settings.state_dir, APP, before.active)
    if pid is None:
        raise RuntimeError(f"the new active {before.active.value}'s driver is not running")
    t_kill = time.time()
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    log(f"second fault: killed {before.active.value} (pid {pid}) at epoch {before.epoch}")
    second = {
        "killed": before.active.value,
        "how": "SIGKILL 10 s after a failover",
        "pid": pid,
        "t_kill": t_kill,
        "epoch": before.epoch,  # output resumes at this epoch (restarted in place) or the next (a failover)
        "writer": before.writer,
        "reason": "",
        "detect_s": None,
        "restart_begun_s": restart_begun(plat.settings.state_dir, before.active, t_kill),
    }
    return [first, second]


def restart_begun(state_dir: Path, slot: Slot, t_kill: float, timeout_s: float = 30.0) -> float | None:
    """The kill to the new driver's launch by the slot's wrapper (baton.driver_wrapper's restarts file);
    None if no restart in place began within timeout_s (baton_health's is then the way back)."""
    from baton.launcher import Launcher

    launcher = Launcher(state_dir)
    rec = launcher.read_record(APP, slot)
    deadline = time.monotonic() + timeout_s
    while rec is not None and time.monotonic() < deadline:
        said = launcher.relaunch(rec)
        if said is not None and said.state == "relaunched" and said.at >= t_kill:
            return round(said.at - t_kill, 3)
        time.sleep(0.05)
    return None


def restart_phases(state_dir: Path, slot: str, since: float) -> dict[str, float]:
    """The restarted driver's own account of its start-up (its log's start-up line, written with its first
    batch), seconds since the harness began, and its process start to the harness."""
    from restart import startup_phases

    text = (state_dir / "slots" / APP / slot / "driver.log").read_text(errors="replace")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    later = [ln for ln in text.splitlines() if ln[:19] >= stamp]
    return startup_phases("\n".join(later), first=True)


def around(timeline: list[dict], t_s: float, before_s: float = 60.0, after_s: float = 30.0) -> dict:
    """A fault's own mark on latency, apart from the host's load: the worst latency of the events sent
    from 5 s before it to after_s after it, against the p99 of each second in the before_s before."""

    def worst(a: float, b: float, key: str) -> float | None:
        xs = [r[key] for r in timeline if a <= r["t_s"] < b and not math.isnan(r[key])]
        return round(max(xs)) if xs else None

    return {
        "max_ms_around": worst(t_s - 5, t_s + after_s, "max_ms"),
        "p99_ms_before": worst(t_s - before_s, t_s - 5, "p99_ms"),
    }


def markers(bootstrap: str, app) -> list[CommitMarker]:
    from baton.kafka.tail import read_tail

    key = app.name.encode()
    return read_tail(
        bootstrap,
        app.commits_topic,
        lambda m: CommitMarker.from_bytes(m.value()) if m.key() == key else None,
        last_n=None,
        timeout_s=60,
    )


def measure(plat, client, procs: Procs, args) -> dict:
    from baton.apps import load_registry
    from baton.tools.loadgen import LoadSpec
    from baton.tools.loadgen import run as produce
    from baton.tools.verify import Observations

    wait_dags(client, {"baton_topics", "baton_lifecycle", "baton_health"})
    run_dag(client, "baton_topics", {}, 300)
    bootstrap, app = plat.settings.kafka_bootstrap, load_registry()[APP]
    watch = StatusWatch(bootstrap, APP)
    try:
        run_dag(client, "baton_lifecycle", {"app": APP, "action": "start", "slot": "both"}, 600)
        prewarm = produce(
            LoadSpec(rate=math.inf, keys=args.users, events=args.prewarm, malformed=args.malformed, seed=1000),
            bootstrap,
            app.input.topic,
        )
        for s in Slot:
            wait_processed(watch, s, args.prewarm, 600)
        work = Path(tempfile.mkdtemp(prefix="failover-bench-", dir=plat.settings.state_dir))
        seen_path, sends_dir, py = work / "seen.npz", work / "sends", sys.executable
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
        procs.start(
            "loadgen",
            [
                py,
                str(Path(__file__).resolve().parent / "dag_handoff.py"),
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
            ],
        )
        t_load = time.time()
        log(f"load {args.rate:.0f}/s over {args.users} users; warm-up {args.warm:.0f}s")
        time.sleep(args.warm)
        lease = lease_cost(procs, bootstrap)
        log(f"lease keeper alone: {lease['cores']} cores")
        meter = Meter(plat, procs, APP).start()
        t0 = time.time()
        kills: list[dict] = []
        faults: list[float | str] = [0.0] * args.kills + [args.stall_s] * args.stalls + ["second"] * args.second_fault
        for fault in [*faults, None]:
            # A killed driver's records are the dead's; a stalled one lives on as the standby.
            dead = kills[-1]["pid"] if kills and kills[-1]["how"].startswith("SIGKILL") else None
            active = wait_ready(plat, app, args, watch, meter, dead)
            if kills:  # the previous fault's slot is back as a caught-up standby: redundancy restored
                kills[-1]["redundant_again_s"] = round(time.time() - kills[-1]["t_kill"], 1)
            if fault == "second":
                kills.extend(second_fault(plat, active))
            elif fault is not None:
                kills.append(kill_active(plat, active, float(fault)))
        time.sleep(args.tail)
        t_end = time.time()
        cpu = meter.stop()
        if procs.stop("loadgen", 120) != 0:
            raise RuntimeError(f"load generator failed:\n{procs.tail('loadgen')}")
        t_load_end = time.time()
        sent, pieces = load_sends(sends_dir)
        wait_processed(watch, control_record(bootstrap).active, int(sent.users.size) + args.prewarm, args.drain_timeout)
        time.sleep(2)
        if procs.stop("verifier", 180) != 0:
            raise RuntimeError(f"verifier failed:\n{procs.tail('verifier')}")
        obs = Observations.load(seen_path)
        marks = markers(bootstrap, app)
        # The kills' stretch apart from the stalls': a stall's output waits out the lease's ttl by design
        # (stall_resume_s, target ttl + 2 s), so the latency of events sent shortly before and during it
        # exceeds 5 s whatever the platform does. The stretch: from the first kill to STALL_LEAD_S before
        # the first stall (an event sent earlier was out before the stall began unless it was that late).
        first_stall = next((k["t_kill"] - STALL_LEAD_S for k in kills if k["how"] != "SIGKILL"), t_end)
        for k in kills:
            if k["how"] == "SIGKILL 10 s after a failover":  # output again after the kill, at whichever epoch
                first = next((m for m in marks if m.epoch >= k["epoch"] and m.ts_ms / 1000 > k["t_kill"]), None)
            else:
                first = next((m for m in marks if m.epoch == k["epoch"]), None)
            k["resume_s"] = round(first.ts_ms / 1000 - k["t_kill"], 3) if first else None
            k["next_output_s"] = next_output(obs.times, k["t_kill"])
            k["t_kill_s"] = round(k.pop("t_kill") - t0, 1)
        windows = {"kills": (t0, first_stall)}
        if first_stall < t_end:
            windows["stalls"] = (first_stall, t_end)
        result = analyse(args, prewarm, sent, pieces, obs, t0, t_load, t_end, t_load_end, windows=windows)
        result["p99_99_ms_kills"] = result["latency_windows"]["kills"]["p99_99_ms"]
        result["p99_99_ms_stalls"] = result["latency_windows"].get("stalls", {}).get("p99_99_ms")
        for k in kills:
            k.update(around(result["timeline"]["latency"], k["t_kill_s"]))
        result.update(
            {
                "kind": "failover",
                "path": "platform: make up's processes, baton_lifecycle start, "
                "kill -9 of the active driver's process group, nothing in the benchmark acting on it",
                "broker": broker_kind(plat.settings),
                "kills": kills,
                "cpu": cpu,
                "lease": lease,
                "slot_batches": slot_batches(watch, t0),
                "duration_s": round(t_end - t0, 1),
            }
        )
        for k in kills:  # the restarted driver's phases (its log line comes with its first batch)
            if k["how"].startswith("SIGKILL"):
                k["restart_phases"] = restart_phases(plat.settings.state_dir, k["killed"], k["t_kill_s"] + t0)
        for k in kills:  # the dead slot's first batch in a new launch (a new pid): its restart's way back
            later = [b for b in result["slot_batches"][k["killed"]] if b[0] > k["t_kill_s"] and b[4] != k["pid"]]
            k["restarted_s"] = round(later[0][0] - k["t_kill_s"], 1) if later else None
        for key in ("detect_s", "resume_s", "next_output_s", "restart_begun_s", "restarted_s", "redundant_again_s"):
            values = [k[key] for k in kills if k.get(key) is not None and k["how"] == "SIGKILL"]
            result[f"{key}_p50"] = round(float(np.median(values)), 3) if values else None
            result[f"{key}_max"] = round(max(values), 3) if values else None
        seconds = [k for k in kills if k["how"] == "SIGKILL 10 s after a failover"]
        if seconds:
            result["second_fault"] = {
                key: seconds[0].get(key)
                for key in ("resume_s", "next_output_s", "restart_begun_s", "restarted_s", "redundant_again_s")
            }
        stalls = [k for k in kills if k["how"].startswith("SIGSTOP")]
        result["stall_resume_s_max"] = max((k["resume_s"] for k in stalls if k["resume_s"] is not None), default=None)
        result["lease_ttl_s"] = app.lease_ttl_ms / 1000
        result["resume_s"] = result["resume_s_max"]  # the field earlier results had: now the worst kill's
        return result
    finally:
        watch.close()


def lease_cost(procs: Procs, bootstrap: str, seconds: float = 30.0) -> dict:
    """CPU of a process running only a LeaseKeeper (renewing, reading the leases topic) for `seconds`."""
    import psutil

    proc = procs.start("lease", [sys.executable, str(Path(__file__).resolve()), "_lease", bootstrap])
    ps = psutil.Process(proc.pid)
    time.sleep(8)  # imports and start-up are not the lease's steady cost
    c0, t0 = sum(ps.cpu_times()[:2]), time.monotonic()
    time.sleep(seconds)
    cores = (sum(ps.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    procs.stop("lease", 30)
    return {"cores": round(cores, 4), "seconds": seconds, "target_cores": LEASE_TARGET_CORES}


def lease_worker(bootstrap: str) -> int:
    """`dag_failover.py _lease BOOTSTRAP`: a standby's LeaseKeeper for a bench-only app, until SIGTERM."""
    import dataclasses
    from types import SimpleNamespace

    from baton.apps import load_registry
    from spark_apps.runtime.coordination.follower import Follower
    from spark_apps.runtime.coordination.lease import LeaseKeeper

    app = dataclasses.replace(load_registry()[APP], name="bench_lease_cost")  # its renewals are no slot's
    # A stand-in for the Follower: the two members LeaseKeeper reads.
    follower = cast("Follower", SimpleNamespace(snapshot=lambda: (None, None), processed=None))
    keeper = LeaseKeeper(
        app, Slot.GREEN, bootstrap, follower, lambda: SlotState.RUNNING, lambda: True, launch="bench-lease-cost"
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    keeper.start()
    while not stop:
        time.sleep(0.2)
    keeper.stop()
    return 0


def targets(result: dict) -> dict:
    met = {
        "exact": result["lost"] == result["duplicated"] == result["wrong"] == 0,
        "resume_s_max": result["resume_s_max"] is not None and result["resume_s_max"] <= RESUME_TARGET_S,
        "p99_99": result["p99_99_ms_kills"] <= P99_99_TARGET_MS,  # over the kills (module docstring)
        "lease_cores": result["lease"]["cores"] <= LEASE_TARGET_CORES,
        "stall_resume_s": result["stall_resume_s_max"] is None
        or result["stall_resume_s_max"] <= result["lease_ttl_s"] + STALL_SLACK_S,
        # Issue 77: the dead slot restarted by the data plane, redundancy back within seconds.
        "restart_begun_s_max": result["restart_begun_s_max"] is not None
        and result["restart_begun_s_max"] <= RESTART_BEGUN_TARGET_S,
        "redundant_again_s": result["redundant_again_s_p50"] is not None
        and result["redundant_again_s_p50"] <= REDUNDANT_P50_TARGET_S
        and result["redundant_again_s_max"] <= REDUNDANT_MAX_TARGET_S,
    }
    return {
        "resume_s_max": RESUME_TARGET_S,
        "p99_99_ms": P99_99_TARGET_MS,
        "p99_99_over": "p99_99_ms_kills",
        "lease_cores": LEASE_TARGET_CORES,
        "stall_resume_s": result["lease_ttl_s"] + STALL_SLACK_S,
        "restart_begun_s_max": RESTART_BEGUN_TARGET_S,
        "redundant_again_s": {"p50": REDUNDANT_P50_TARGET_S, "max": REDUNDANT_MAX_TARGET_S},
        "met": met,
        "all_met": all(met.values()),
    }


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    lat = [r for r in result["timeline"]["latency"] if not math.isnan(r["p50_ms"]) and r["t_s"] >= -5]
    for key, label in (("max_ms", "max"), ("p99_ms", "p99"), ("p50_ms", "p50")):
        ax1.plot([r["t_s"] for r in lat], [r[key] / 1000 for r in lat], lw=0.8, label=label)
    ax1.axhline(P99_99_TARGET_MS / 1000, color="red", ls="--", lw=0.8, label="p99.99 target")
    for k in result["kills"]:
        for ax in (ax1, ax2):
            ax.axvline(k["t_kill_s"], color="k", lw=0.8)
        ax1.text(
            k["t_kill_s"],
            8,
            f" {k['how']} {k['killed']}\n detect {k['detect_s']}s\n resume {k['resume_s']}s",
            fontsize=7,
            va="top",
        )
    ax1.set_yscale("log")
    ax1.set_ylabel("send -> readable (s)")
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(
        f"failover, the platform's own: {len(result['kills'])} kills at {result['rate']:.0f} ev/s; "
        f"resume max {result['resume_s_max']}s, p50 {result['resume_s_p50']}s; lost/dup/wrong "
        f"{result['lost']}/{result['duplicated']}/{result['wrong']}; p99.99 kills {result['p99_99_ms_kills'] / 1000:.2f}s, "
        f"all {result['p99_99_ms'] / 1000:.2f}s; "
        f"gap {result['max_gap_ms'] / 1000:.1f}s; lease {result['lease']['cores']} cores",
        fontsize=9,
    )
    for slot, rows in result["slot_batches"].items():
        xs, ys = [], []
        for a, b in zip(rows, rows[1:]):
            if a[4] == b[4] and b[0] > a[0]:
                xs.append(b[0])
                ys.append(max(0.0, (b[1] - a[1]) / (b[0] - a[0])))
        ax2.plot(xs, ys, lw=0.8, label=f"{slot} processed")
    ax2.set_ylabel("records/s")
    ax2.set_xlabel("seconds since the first kill's window began")
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    if sys.argv[1:2] == ["_lease"]:
        return lease_worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--stalls", type=int, default=1, help="then SIGSTOP the active this many times (--stall-s each)")
    ap.add_argument("--stall-s", type=float, default=10.0)
    ap.add_argument(
        "--second-fault",
        type=int,
        default=1,
        help="then this many times: kill the active, and the new active 10 s after its takeover",
    )
    ap.add_argument("--rate", type=float, default=20085.0)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--prewarm", type=int, default=100_000)
    ap.add_argument("--warm", type=float, default=60.0)
    ap.add_argument("--tail", type=float, default=20.0)
    ap.add_argument(
        "--ready-lag",
        type=int,
        default=100_000,
        help="records the standby may trail the active's output (and the active the input) before a kill",
    )
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    ap.add_argument("--drain-timeout", type=float, default=300.0)
    ap.add_argument("--logs", type=Path, default=None)
    ap.add_argument("--name", default=NAME)
    args = ap.parse_args()
    load = os.getloadavg()
    with platform(args.logs) as (plat, client, procs):
        result = measure(plat, client, procs, args)
    result["targets"] = targets(result)
    result["code"] = code_rev()
    result["machine"] = {**machine(), "load_avg_at_start": [round(x, 2) for x in load]}
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    keys = [
        "rate",
        "lost",
        "duplicated",
        "wrong",
        "detect_s_p50",
        "detect_s_max",
        "resume_s_p50",
        "resume_s_max",
        "next_output_s_max",
        "stall_resume_s_max",
        "p99_99_ms_kills",
        "p99_99_ms_stalls",
        "p99_99_ms",
        "max_gap_ms",
    ]
    print(
        json.dumps(
            {
                **{k: result.get(k) for k in keys},
                "lease_cores": result["lease"]["cores"],
                "kills": [(k["killed"], k["detect_s"], k["resume_s"]) for k in result["kills"]],
                "targets_met": result["targets"]["met"],
            },
            indent=1,
        )
    )
    log(f"wrote {path} and {path.with_suffix('.png')}")
    return 0 if result["targets"]["met"]["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
