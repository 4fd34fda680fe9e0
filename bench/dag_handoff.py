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
from collections import Counter
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO, RESULTS, CpuMeter, Interrupted, Procs, StatusWatch, batch_records, log, machine, pyplot, total,
    wait_processed, write_result,
)

from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.loadgen import LoadSpec, SendLog, producer_config, user_id  # noqa: E402
from baton.tools.loadgen import run as produce  # noqa: E402

APP = "click_counts"
KINDS = {
    # kind: (DAG, the conf a user gives: everything else at the form's default)
    "rolling_upgrade": ("baton_rolling_upgrade", {"app": APP, "version": "v2"}),
    "rolling_upgrade_bursty": ("baton_rolling_upgrade", {"app": APP, "version": "v2"}),
    "cutover": ("baton_cutover", {"app": APP}),
    "reprocess": ("baton_reprocess", {"app": APP, "version": "v2"}),
}
P99_99_TARGET_MS, GAP_TARGET_S, UPGRADE_TARGET_S = 5000, 2.0, 180.0
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
        spec = LoadSpec.for_duration(ns.rate, seconds, keys=ns.keys, malformed=ns.malformed, seed=ns.seed + i)
        sent = produce(spec, ns.bootstrap, ns.topic, make_producer=lambda _config: Piece)
        sent.meta["burst"] = bursty
        sent.save(ns.out_dir / f"sends-{i:04d}.npz")
        i += 1
        if bursty and ns.off_s > 0:
            stop.wait(ns.off_s)
    left = producer.flush(120)
    print(json.dumps({"pieces": i, "undelivered": left, "failed": len(failures)}), flush=True)
    if left or failures:
        print(f"{left} events not delivered, {len(failures)} failed ({failures[:3]}): the send logs do not "
              "describe the topic", file=sys.stderr)
        return 1
    return 0


def load_sends(directory: Path) -> tuple[SendLog, list[dict]]:
    """The pieces' send logs as one (in send order), and each piece's meta."""
    pieces = [SendLog.load(p) for p in sorted(directory.glob("sends-*.npz"))]
    if not pieces:
        raise RuntimeError(f"the load generator wrote no send log under {directory}")
    offsets = np.cumsum([0] + [p.users.size for p in pieces[:-1]])
    sent = SendLog(users=np.concatenate([p.users for p in pieces]), kinds=np.concatenate([p.kinds for p in pieces]),
                   tick_first=np.concatenate([p.tick_first + o for p, o in zip(pieces, offsets)]),
                   tick_time=np.concatenate([p.tick_time for p in pieces]), keys=pieces[0].keys,
                   meta={**pieces[0].meta, "events": int(sum(p.users.size for p in pieces))})
    return sent, [p.meta for p in pieces]


# --- the platform -------------------------------------------------------------------------------

@contextmanager
def platform(keep: Path | None) -> Iterator[tuple[object, object, Procs]]:
    """The embedded platform (as `make up`, on free ports and its own state directory, as the e2e
    suite starts it), a REST client logged in as its admin, and a registry for the bench's own
    processes. Stopped by pid at exit, on an error or Ctrl-C/SIGTERM alike."""
    from baton.airflow_api import AirflowClient
    from baton.local.platform import Platform
    from baton.local.procs import free_port
    from baton.settings import Settings

    def on_term(*_):
        raise Interrupted("SIGTERM")
    previous = signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="baton-bench-dag-") as tmp:
        root = Path(tmp)
        kafka_port = free_port()
        settings = Settings(state_dir=root / "state", kafka_port=kafka_port, airflow_port=free_port(),
                            kafka_bootstrap=f"127.0.0.1:{kafka_port}", spark_master="local[2]")
        os.environ["BATON_HOME"] = str(settings.state_dir)  # what the platform's processes inherit
        plat = Platform(settings)
        procs = Procs(keep or root / "logs")
        client = None
        try:
            t = time.monotonic()
            plat.up(say=lambda msg: log(msg.splitlines()[0]))
            client = AirflowClient(plat.airflow.url, "admin", plat.airflow.password())
            log(f"platform up in {time.monotonic() - t:.0f}s: broker {plat.broker.bootstrap}, Airflow {plat.airflow.url}, "
                f"state {settings.state_dir}")
            yield plat, client, procs
        finally:
            procs.stop_all()
            if client is not None:
                client.close()
            if keep is not None:  # the Airflow task logs and slot logs, for the record
                for sub in ("airflow/logs", "slots"):
                    src = settings.state_dir / sub
                    if src.exists():
                        subprocess.run(["cp", "-r", str(src), str(keep / sub.replace("/", "_"))], check=False)
            plat.down(say=lambda msg: log(msg))
            signal.signal(signal.SIGTERM, previous)


def wait_dags(client, dag_ids: set[str], timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    ids: set[str] = set()
    while time.monotonic() < deadline:
        ids = {d["dag_id"] for d in client.wait_for_dags()}
        if dag_ids <= ids:
            break
        time.sleep(3)
    if not dag_ids <= ids:
        raise RuntimeError(f"DAGs {sorted(dag_ids - ids)} not parsed within {timeout_s:.0f}s")
    errors = client.import_errors()
    if errors:
        raise RuntimeError(f"import errors: {errors}")


def run_dag(client, dag_id: str, conf: dict, timeout_s: float) -> dict:
    run = client.trigger(dag_id, conf)
    done = client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=timeout_s)
    if done["state"] != "success":
        raise RuntimeError(f"{dag_id} {conf}: {done['state']}: {client.task_instances(dag_id, run['dag_run_id'])}")
    return done


def slot_driver(state_dir: Path, slot: Slot) -> int | None:
    """The pid of a slot's Python driver: the child of the wrapper its identity record names."""
    import psutil

    try:
        wrapper = json.loads((state_dir / "slots" / APP / slot.value / "driver.json").read_text()).get("pid")
        kids = psutil.Process(int(wrapper)).children()
    except (OSError, ValueError, TypeError, psutil.Error):
        return None
    for p in kids:
        try:
            if "spark_apps.runtime.run" in " ".join(p.cmdline()):
                return p.pid
        except psutil.Error:
            pass
    return None


def airflow_or_helper(p) -> str:
    """Airflow's own processes, or a Spark helper a task started (the preflight's replay, its JVM and
    Python workers)."""
    cmd = " ".join(p.cmdline())
    return "helpers" if p.name() == "java" or "spark_apps" in cmd or "pyspark" in cmd else "airflow"


class Meter:
    """CpuMeter over the platform's processes, following the slots through restarts."""

    def __init__(self, plat, procs: Procs):
        self.plat, self.procs = plat, procs
        self.cpu = CpuMeter()
        self.drivers: dict[Slot, int] = {}
        self.follow()
        self.cpu.track("broker", plat.broker.proc.pid())
        for name in ("loadgen", "verifier"):
            if name in procs.running:
                self.cpu.track(name, procs.running[name].pid)
        self.cpu.track("airflow", plat.airflow.proc.pid(), label=airflow_or_helper)

    def follow(self) -> list[str]:
        """Track each slot's current driver; returns what moved."""
        moved = []
        for slot in Slot:
            pid = slot_driver(self.plat.settings.state_dir, slot)
            if pid is not None and pid != self.drivers.get(slot):
                self.drivers[slot] = pid
                self.cpu.track(slot.value, pid, slot=True)
                moved.append(f"{slot.value} driver pid {pid}")
        return moved

    def start(self) -> "Meter":
        self.cpu.start()
        return self

    def stop(self) -> dict:
        report = self.cpu.stop()
        by = report["by_role"]

        def cores(*prefixes):
            return round(sum(v["cores"] for k, v in by.items() if k.split(".")[0] in prefixes), 3)
        report["groups"] = {"blue": cores("blue"), "green": cores("green"), "broker": cores("broker"),
                            "loadgen_verifier": cores("loadgen", "verifier"), "airflow": cores("airflow"),
                            "helpers": cores("helpers")}
        report["upgrade_own_cores"] = round(report["groups"]["airflow"] + report["groups"]["helpers"], 3)
        return report


# --- the run --------------------------------------------------------------------------------------

def iso_s(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def task_rows(tis: list[dict], t0: float) -> list[dict]:
    rows = []
    for ti in tis:
        start, end = iso_s(ti.get("start_date")), iso_s(ti.get("end_date"))
        rows.append({"task_id": ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else ""),
                     "state": ti.get("state"), "try_number": ti.get("try_number"), "operator": ti.get("operator"),
                     "start_s": round(start - t0, 1) if start else None, "end_s": round(end - t0, 1) if end else None,
                     "duration_s": round(end - start, 1) if start and end else None})
    return sorted(rows, key=lambda r: (r["start_s"] is None, r["start_s"] or 0.0))


def task_reason(client, plat, dag_id: str, run_id: str, row: dict) -> str:
    """Why a task failed: its `reason` XCom if it left one, else the errors at the end of its log."""
    task = row["task_id"].split("[")[0]
    try:
        reason = client.xcom(dag_id, run_id, task, key="reason")
        if reason:
            return str(reason)
    except Exception:
        pass
    lines: list[str] = []
    for path in sorted((plat.airflow.home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task}/attempt=*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                lines.append(raw)
                continue
            if rec.get("level") in ("error", "critical", "warning") or rec.get("error_detail"):
                detail = rec.get("error_detail")
                text = rec.get("event", "")
                if detail:
                    text += " | " + "; ".join(f"{d.get('exc_type')}: {d.get('exc_value')}" for d in detail
                                              if isinstance(d, dict))
                lines.append(text)
    return "\n".join(lines[-8:])[-3000:] or "(no reason found)"


def poll_run(client, plat, meter: Meter, dag_id: str, run_id: str, t0: float, timeout_s: float,
             where=lambda: "") -> tuple[dict, list]:
    """Poll the run until it ends or timeout_s passes; log each task's state changes and, every
    minute, where the run stands (`where()`: the slots' lag). Returns (the run, its task instances)."""
    seen: dict[str, tuple] = {}
    deadline, next_note = time.monotonic() + timeout_s, time.monotonic() + 60
    run, tis = {"state": "queued"}, []
    while True:
        try:
            run = client.dag_run(dag_id, run_id)
            tis = client.task_instances(dag_id, run_id)
        except Exception as exc:  # a busy API server: say so and ask again
            log(f"REST API: {exc}")
            time.sleep(3)
            if time.monotonic() > deadline:
                break
            continue
        now = time.time() - t0
        for ti in tis:
            key = ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else "")
            state = (ti.get("state"), ti.get("try_number"))
            if seen.get(key) != state:
                seen[key] = state
                if state[0] is not None:
                    log(f"+{now:6.1f}s  {key}: {state[0]} (try {state[1]})")
        for moved in meter.follow():
            log(f"+{now:6.1f}s  {moved}")
        if run["state"] in ("success", "failed"):
            break
        if time.monotonic() > deadline:
            log(f"the run did not end within {timeout_s:.0f}s")
            break
        if time.monotonic() > next_note:
            active = [k for k, (s, _) in seen.items() if s in ("running", "deferred", "up_for_retry", "queued",
                                                              "scheduled", "up_for_reschedule")]
            try:
                lag = where()
            except Exception as exc:  # a busy broker: say so
                lag = f"lag unknown ({exc})"
            log(f"+{now:6.1f}s  run {run['state']}; now at: {', '.join(active) or '-'}; {lag}")
            next_note += 60
        time.sleep(2)
    return run, tis


def run(plat, client, procs: Procs, args) -> dict:
    wait_dags(client, {"baton_topics", "baton_lifecycle", "baton_health", KINDS[args.kind][0]})
    run_dag(client, "baton_topics", {}, 300)
    watch = StatusWatch(plat.broker.bootstrap, APP)
    try:
        return measure(plat, client, procs, args, watch)
    finally:
        watch.close()  # its consumer must not outlive the broker


def measure(plat, client, procs: Procs, args, watch: StatusWatch) -> dict:
    from baton.kafka.control_log import read_control

    dag_id, conf = KINDS[args.kind]
    bursty = args.kind == "rolling_upgrade_bursty"
    bootstrap = plat.broker.bootstrap
    t = time.monotonic()
    run_dag(client, "baton_lifecycle", {"app": APP, "action": "start", "slot": "both"}, 600)
    for s in Slot:
        watch.wait(lambda r, s=s: r.slot is s and r.state in (SlotState.RESTORING, SlotState.RUNNING), 300,
                   f"of {s.value} starting")
    log(f"baton_lifecycle start: both slots up in {time.monotonic() - t:.0f}s")
    from baton.apps import load_registry

    app = load_registry()[APP]
    prewarm = None
    if args.prewarm:
        prewarm = produce(LoadSpec(rate=math.inf, keys=args.users, events=args.prewarm, malformed=args.malformed,
                                   seed=1000), bootstrap, app.input.topic)
        t = time.monotonic()
        for s in Slot:
            wait_processed(watch, s, args.prewarm, 600)
        log(f"pre-warm: {args.prewarm} events processed by both slots in {time.monotonic() - t:.0f}s")

    work = Path(tempfile.mkdtemp(prefix="dag-bench-", dir=plat.settings.state_dir))
    seen_path, sends_dir = work / "seen.npz", work / "sends"
    py = sys.executable
    procs.start("verifier", [py, "-m", "baton.tools.verify", "tail", "--bootstrap", bootstrap, "--topic",
                             app.output.topic, "--partitions", str(app.output.partitions), "--out", str(seen_path)])
    load_argv = [py, str(Path(__file__).resolve()), "_load", "--bootstrap", bootstrap, "--topic", app.input.topic,
                 "--rate", str(args.rate), "--keys", str(args.users), "--malformed", str(args.malformed),
                 "--out-dir", str(sends_dir)]
    if bursty:
        load_argv += ["--on-s", str(args.on_s), "--off-s", str(args.off_s)]
    loadgen = procs.start("loadgen", load_argv)
    t_load = time.time()
    log(f"load {args.rate:.0f}/s over {args.users} users{' (20 s on / 30 s off from the trigger on)' if bursty else ''}; "
        f"warm-up {args.warm:.0f}s")

    warm_meter = Meter(plat, procs).start()
    time.sleep(args.warm)
    caught = caught_up(bootstrap, watch, app, args.rate)
    warm_cpu = warm_meter.stop()
    log(f"warm-up done: {caught}; cores {warm_cpu['cores_used']} of ours, machine {warm_cpu['machine_busy_cores']}")

    meter = Meter(plat, procs).start()
    t0 = time.time()
    if bursty:
        os.kill(loadgen.pid, signal.SIGUSR1)  # 20 s on / 30 s off from the end of the current piece
    triggered = client.trigger(dag_id, conf)
    run_id = triggered["dag_run_id"]
    log(f"triggered {dag_id} {json.dumps(conf)}: run {run_id}")
    dag_run, tis = poll_run(client, plat, meter, dag_id, run_id, t0, args.timeout,
                            where=lambda: slot_lag(bootstrap, watch, app))
    t_end = time.time()
    run_cpu = meter.stop()
    succeeded = dag_run.get("state") == "success"
    tasks = task_rows(tis, t0)
    failed = [r for r in tasks if r["state"] in ("failed", "upstream_failed")]
    for r in tasks:  # why a task failed, or why an attempt before this one did
        if r["state"] in ("failed", "up_for_retry") or (r["try_number"] or 0) > 1:
            r["reason"] = task_reason(client, plat, dag_id, run_id, r)
    log(f"{dag_id}: {dag_run.get('state')} in {t_end - t0:.0f}s"
        + "".join(f"\n  {r['task_id']}: {r['reason']}" for r in tasks if r.get("reason")))

    cutover_at = None  # when the cutover was written (the new active took over), if the run got there
    if any(r["task_id"] == "cutover" and r["state"] == "success" for r in tasks):
        try:
            cutover_at = client.xcom(dag_id, run_id, "cutover")["at_ms"] / 1000
        except Exception as exc:
            log(f"the cutover's time: {exc}")
    time.sleep(args.tail)
    code = procs.stop("loadgen", 120)
    t_load_end = time.time()
    log(f"load stopped {t_load_end - t0:.0f}s after the trigger; waiting for the backlog")
    if code != 0:
        raise RuntimeError(f"load generator failed ({code}):\n{procs.tail('loadgen')}")
    sent, pieces = load_sends(sends_dir)
    events = int(sent.users.size) + args.prewarm
    record = read_control(bootstrap, APP)
    active = record.active if record else Slot.BLUE
    drained = True
    try:
        wait_processed(watch, active, events, args.drain_timeout)
    except TimeoutError as exc:
        drained = False
        log(f"not drained: {exc}")
    time.sleep(2)
    log("the verifier reads to the end")
    if procs.stop("verifier", 180) != 0:
        raise RuntimeError(f"verifier failed:\n{procs.tail('verifier')}")
    from baton.tools.verify import Observations

    obs = Observations.load(seen_path)
    result = analyse(args, prewarm, sent, pieces, obs, t0, t_load, t_end, t_load_end)
    result.update({
        "kind": args.kind, "dag_id": dag_id, "conf": conf, "dag_run_id": run_id, "state": dag_run.get("state"),
        "succeeded": succeeded, "duration_s": round(t_end - t0, 1),
        "run_start_s": round(iso_s(dag_run.get("start_date")) - t0, 1) if dag_run.get("start_date") else None,
        "run_end_s": round(iso_s(dag_run.get("end_date")) - t0, 1) if dag_run.get("end_date") else None,
        "tasks": tasks, "failed_tasks": [r["task_id"] for r in failed],
        "cutover_at_s": round(cutover_at - t0, 2) if cutover_at else None,
        # output readable after the cutover was written: the handoff's own gap ends there
        "cutover_next_output_s": next_output(obs.times, cutover_at) if cutover_at else None,
        "failure": None if succeeded else next(
            (f"{r['task_id']} ({r['state']}): {r.get('reason')}" for r in tasks
             if r["state"] in ("failed", "up_for_retry")),
            f"run {dag_run.get('state')} after {t_end - t0:.0f}s; unfinished: "
            f"{[r['task_id'] for r in tasks if r['state'] not in ('success', 'skipped', 'failed', 'upstream_failed')]}"),
        "active_after": active.value, "drained": drained, "warm_caught_up": caught,
        "cpu": run_cpu, "cpu_warmup": warm_cpu,
        "slot_batches": slot_batches(watch, t0),
    })
    return result


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
            parts.append(f"{s.value} ({r.role.value}, gen {r.generation}) {end - total(r.processed)} behind, "
                         f"batch {r.batch_ms} ms")
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
        out[s.value] = [(round(r.ts_ms / 1000 - t0, 2), total(r.processed), r.batch_ms, r.role.value, r.pid,
                         r.generation) for r in batch_records(watch, s)]
    return out


def owed_gap(send_times: np.ndarray, lat: np.ndarray, out_times: np.ndarray, since: float) -> tuple[float, float | None]:
    """The longest time output was owed and none came: between consecutive distinct readable times
    u[k-1] < u[k], from the later of u[k-1] and the send time of the earliest event first reflected
    at u[k] (an input pause is no gap). (gap s, the readable time that ended it), gaps ending >= since."""
    u = np.unique(out_times)
    if u.size < 2:
        return 0.0, None
    ok = ~np.isnan(lat)
    reflected = send_times[ok] + lat[ok]
    idx = np.clip(np.searchsorted(u, reflected - 1e-4), 0, u.size - 1)
    earliest = np.full(u.size, -np.inf)
    first = np.full(u.size, np.inf)
    np.minimum.at(first, idx, send_times[ok])
    earliest[np.isfinite(first)] = first[np.isfinite(first)]
    gaps = u[1:] - np.maximum(u[:-1], earliest[1:])
    gaps[u[1:] < since] = 0.0
    i = int(np.argmax(gaps))
    return float(max(gaps[i], 0.0)), float(u[i + 1])


def analyse(args, prewarm, sent: SendLog, pieces: list[dict], obs, t0: float, t_load: float, t_end: float,
            t_load_end: float) -> dict:
    from baton.tools.verify import align_users, event_latencies, latency_report, latency_timeline, longest_gap_at, verify

    truth = sent.truth() + (prewarm.truth() if prewarm is not None else Counter())
    verdict = verify(truth, obs.pairs(), obs.corrected)
    users, times = sent.valid()
    if prewarm is not None:
        pre_users, pre_times = prewarm.valid()
        users, times = np.concatenate([pre_users, users]), np.concatenate([pre_times, times])
    index = {user_id(i): i for i in range(sent.keys)}
    lat = event_latencies(users, times, align_users(obs, index), obs.counts, obs.times)
    in_run = times >= t0
    report = latency_report(lat[in_run], obs.times[obs.times >= t0])
    warm = (times >= t_load) & ~in_run
    warm_report = latency_report(lat[warm], obs.times[(obs.times >= t_load) & (obs.times < t0)])
    gap, gap_end = owed_gap(times, lat, obs.times, t0)
    plain_gap, plain_end = longest_gap_at(obs.times[obs.times >= t0])
    all_times = sent.send_times()
    on = sum(p["elapsed_s"] for p in pieces)
    bursts = [(round(p["started"] - t0, 1), round(p["started"] + p["elapsed_s"] - t0, 1)) for p in pieces
              if p.get("burst")]
    return {
        "rate_target": args.rate,
        "rate": round(sum(p["events"] for p in pieces) / max(on, 1e-9), 1),
        "events": int(all_times.size) + args.prewarm, "events_in_run": int((all_times >= t0).sum()),
        "users": args.users, "malformed_share": args.malformed, "prewarm_events": args.prewarm,
        "warm_s": args.warm, "tail_s": args.tail,
        "lost": len(verdict.lost), "duplicated": len(verdict.duplicated), "wrong": len(verdict.wrong),
        "verdict": {**verdict.summary(), "ok": verdict.ok, "unreadable_output": obs.unreadable,
                    "examples": {"lost": verdict.lost[:5], "duplicated": verdict.duplicated[:5],
                                 "wrong": verdict.wrong[:5]}},
        "p50_ms": round(report.p50_ms, 1), "p99_ms": round(report.p99_ms, 1), "p99_99_ms": round(report.p99_99_ms, 1),
        "max_ms": round(report.max_ms, 1),
        "max_gap_ms": round(gap * 1000), "max_gap_end_s": round(gap_end - t0, 1) if gap_end is not None else None,
        "max_output_gap_ms": round(plain_gap * 1000),  # between any two output records (input pauses included)
        "max_output_gap_end_s": round(plain_end - t0, 1) if plain_end is not None else None,
        "latency": report.summary(), "latency_warmup": warm_report.summary(),
        "load_s": round(t_load_end - t0, 1), "bursts": bursts,
        "timeline": {
            "latency": latency_timeline(times[times >= t_load], lat[times >= t_load], 1.0, start=t0),
            "input_per_s": per_second(all_times, t_load, t0),
        },
    }


def per_second(times: np.ndarray, start: float, t0: float) -> list[tuple[float, int]]:
    if times.size == 0:
        return []
    start = min(start, float(times.min()))
    counts = np.bincount(np.floor(times - start).astype(np.int64))
    return [(round(start - t0 + i, 1), int(c)) for i, c in enumerate(counts)]


def targets(result: dict) -> dict:
    met = {"succeeded": result["succeeded"],
           "exact": result["lost"] == result["duplicated"] == result["wrong"] == 0,
           "p99_99": result["p99_99_ms"] <= P99_99_TARGET_MS,
           "max_gap": result["max_gap_ms"] <= GAP_TARGET_S * 1000}
    if result["kind"].startswith("rolling_upgrade"):
        met["duration"] = result["duration_s"] <= UPGRADE_TARGET_S
    return {"p99_99_ms": P99_99_TARGET_MS, "max_gap_s": GAP_TARGET_S,
            "duration_s": UPGRADE_TARGET_S if result["kind"].startswith("rolling_upgrade") else None,
            "met": met, "all_met": all(met.values())}


# --- the picture ----------------------------------------------------------------------------------

def broken(xs: list, ys: list, max_dx: float) -> tuple[list, list]:
    """The points with a break (NaN) where x jumps more than max_dx: no line across an input pause."""
    bx, by = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i and x - xs[i - 1] > max_dx:
            bx.append(x)
            by.append(math.nan)
        bx.append(x)
        by.append(y)
    return bx, by


STATE_COLOURS = {"success": "tab:green", "failed": "tab:red", "upstream_failed": "tab:orange", "skipped": "0.8",
                 "up_for_retry": "tab:pink"}


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    tasks = [r for r in result["tasks"] if r["start_s"] is not None]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(12, 10), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 2, max(2, len(tasks) * 0.3)]})
    lat = [r for r in result["timeline"]["latency"] if not math.isnan(r["p50_ms"])]
    xs = [r["t_s"] for r in lat]
    for key, label, style in (("max_ms", "max", {"lw": 0.6, "color": "0.6"}), ("p99_ms", "p99", {"lw": 1}),
                              ("p50_ms", "p50", {"lw": 1})):
        ax1.plot(*broken(xs, [r[key] / 1000 for r in lat], 1.5), label=label, **style)
    ax1.axhline(P99_99_TARGET_MS / 1000, color="red", ls="--", lw=0.8, label="p99.99 target")
    if result["max_gap_end_s"] is not None:
        end = result["max_gap_end_s"]
        ax1.axvspan(end - result["max_gap_ms"] / 1000, end, color="red", alpha=0.25,
                    label=f"longest gap {result['max_gap_ms'] / 1000:.1f}s")
    if result.get("cutover_at_s") is not None:
        ax1.axvline(result["cutover_at_s"], color="tab:purple", ls="--", lw=0.9, label="cutover written")
    ax1.set_yscale("log")
    ax1.set_ylabel("send -> readable (s)\nby send time")
    ax1.legend(loc="upper left", fontsize=8)
    ok = "succeeded" if result["succeeded"] else f"{result['state']}"
    ax1.set_title(f"{result['dag_id']} {json.dumps(result['conf'])} at {result['rate']:.0f} ev/s"
                  f"{' (bursty)' if result['bursts'] else ''}: {ok} in {result['duration_s']:.0f}s; "
                  f"lost/dup/wrong {result['lost']}/{result['duplicated']}/{result['wrong']}; p50 "
                  f"{result['p50_ms'] / 1000:.2f}s p99 {result['p99_ms'] / 1000:.2f}s p99.99 "
                  f"{result['p99_99_ms'] / 1000:.2f}s; gap {result['max_gap_ms'] / 1000:.1f}s", fontsize=9)
    pts = result["timeline"]["input_per_s"][:-1]
    ax2.plot([p[0] for p in pts], [p[1] for p in pts], lw=0.8, color="0.5", label="input sent")
    for slot, rows in result["slot_batches"].items():
        xs2, ys = [], []
        for a, b in zip(rows, rows[1:]):
            if a[4] == b[4] and a[5] == b[5] and b[0] > a[0]:  # same process and generation
                xs2.append(b[0])
                ys.append(max(0.0, (b[1] - a[1]) / (b[0] - a[0])))
        ax2.plot(*broken(xs2, ys, 10.0), lw=0.8, label=f"{slot} processed")
    ax2.set_ylabel("records/s")
    ax2.legend(loc="upper left", fontsize=8)
    for i, r in enumerate(tasks):
        end = r["end_s"] if r["end_s"] is not None else result["duration_s"]
        ax3.barh(i, max(end - r["start_s"], 0.3), left=r["start_s"], color=STATE_COLOURS.get(r["state"], "tab:blue"))
        ax3.text(end + 1, i, f"{r['task_id']} {r['duration_s'] if r['duration_s'] is not None else '?'}s",
                 va="center", fontsize=7)
    ax3.set_yticks([])
    ax3.invert_yaxis()
    ax3.set_xlabel("seconds since the trigger (tasks: green success, red failed, pink up for retry, blue unfinished)")
    for ax in (ax1, ax2, ax3):
        ax.axvline(0, color="k", lw=0.8)
        for a, b in result["bursts"]:
            ax.axvspan(a, b, color="tab:blue", alpha=0.06)
        for r in tasks:
            if ax is not ax3:
                ax.axvline(r["start_s"], color="0.75", ls=":", lw=0.6)
        if result.get("cutover_at_s") is not None and ax is not ax1:
            ax.axvline(result["cutover_at_s"], color="tab:purple", ls="--", lw=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def code_rev() -> str | None:
    if os.environ.get("BATON_CODE_REV"):
        return os.environ["BATON_CODE_REV"]
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.split()
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
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="give the DAG run this long (the rolling upgrade's warm-up gate alone may wait 15 min)")
    ap.add_argument("--drain-timeout", type=float, default=300.0)
    ap.add_argument("--logs", type=Path, default=None, help="keep the processes', tasks' and slots' logs here")
    ap.add_argument("--name", default=None, help="results file name (default dag_KIND)")
    args = ap.parse_args()
    name = args.name or f"dag_{args.kind}"
    load = os.getloadavg()
    with platform(args.logs) as (plat, client, procs):
        result = run(plat, client, procs, args)
    result["targets"] = targets(result)
    result["code"] = code_rev()
    result["machine"] = {**machine(), "load_avg_at_start": [round(x, 2) for x in load]}
    path = write_result(name, result)
    plot(result, RESULTS / f"{name}.png")
    keys = ["succeeded", "duration_s", "rate", "lost", "duplicated", "wrong", "p50_ms", "p99_ms", "p99_99_ms",
            "max_gap_ms", "max_gap_end_s", "failure"]
    print(json.dumps({**{k: result.get(k) for k in keys},
                      "tasks": {r["task_id"]: (r["state"], r["duration_s"]) for r in result["tasks"]},
                      "cpu": result["cpu"]["groups"], "upgrade_own_cores": result["cpu"]["upgrade_own_cores"],
                      "targets_met": result["targets"]["met"]}, indent=1))
    log(f"wrote {path} and {path.with_suffix('.png')}")
    if not result["targets"]["all_met"]:
        log(f"targets not met: {[k for k, ok in result['targets']['met'].items() if not ok]}")
    # Like bench/handoff.py: a failed run or wrong output fails; the latency figures are for the record.
    return 0 if result["succeeded"] and result["targets"]["met"]["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
