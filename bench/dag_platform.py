"""The embedded platform for the product-path benchmarks (bench/dag_handoff.py): started as `make up`
starts it, on free ports and its own state directory, with a REST client logged in as its admin; the
DAG runs it triggers, polled and recorded task by task; the CPU of its processes, following the slots
through their restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from common import CpuMeter, Procs, embedded_kind, external_broker, interrupt_once, log

from baton.records import Slot

if TYPE_CHECKING:
    from baton.airflow_api import AirflowClient
    from baton.local.platform import Platform


@contextmanager
def platform(keep: Path | None) -> Iterator[tuple[Platform, AirflowClient, Procs]]:
    """The embedded platform (as `make up`, on free ports and its own state directory, as the e2e
    suite starts it), a REST client logged in as its admin, and a registry for the bench's own
    processes. Stopped by pid at exit, on an error or Ctrl-C/SIGTERM alike."""
    from baton.airflow_api import AirflowClient
    from baton.local.platform import Platform
    from baton.local.procs import free_port
    from baton.settings import Settings

    previous = signal.signal(signal.SIGTERM, interrupt_once)
    with tempfile.TemporaryDirectory(prefix="baton-bench-dag-") as tmp:
        root = Path(tmp)
        kafka_port = free_port()
        # BATON_KAFKA_BOOTSTRAP: a Kafka cluster instead of the embedded broker, as `make up` takes it
        # (a fresh one per run: the benchmark's topics and control records start empty).
        external = external_broker()
        settings = Settings(
            state_dir=root / "state",
            kafka_port=kafka_port,
            airflow_port=free_port(),
            kafka_bootstrap=external.bootstrap if external else f"127.0.0.1:{kafka_port}",
            external_kafka=external is not None,
            spark_master="local[2]",
        )
        os.environ["BATON_HOME"] = str(settings.state_dir)  # what the platform's processes inherit
        plat = Platform(settings)
        procs = Procs(keep or root / "logs")
        client = None
        try:
            t = time.monotonic()
            plat.up(say=lambda msg: log(msg.splitlines()[0]))
            client = AirflowClient(plat.airflow.url, "admin", plat.airflow.password())
            log(
                f"platform up in {time.monotonic() - t:.0f}s: broker {broker_kind(settings)}, Airflow {plat.airflow.url}, "
                f"state {settings.state_dir}"
            )
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


def broker_kind(settings) -> str:
    """What the run's broker is, for its result."""
    if settings.external_kafka and (external := external_broker()) is not None:
        return external.describe()
    return embedded_kind(settings.kafka_bootstrap)


def broker_pid(plat) -> int | None:
    """The broker's process for the CPU figures: the embedded one's, or an external one's given as
    BATON_BENCH_KAFKA_PID (a broker on this host); None: not counted."""
    if plat.settings.external_kafka and (external := external_broker()) is not None:
        return external.pid
    return plat.broker.proc.pid()


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


def slot_driver(state_dir: Path, app: str, slot: Slot, spare: bool = False) -> int | None:
    """The pid of a slot's Python driver: the child of the wrapper its identity record names that the
    wrapper's restarts file names the driver; with `spare`, the other one, the spare driver holding beside
    it (baton.driver_wrapper: a promoted spare's command line still says it was one)."""
    import psutil

    from baton.launcher import Launcher

    launcher = Launcher(state_dir)
    try:
        rec = launcher.read_record(app, slot)
        kids = psutil.Process(int(rec.pid)).children() if rec is not None and rec.pid else []
    except (OSError, ValueError, TypeError, psutil.Error):
        return None
    said = launcher.relaunch(rec) if rec is not None else None
    driver = said.driver_pid if said is not None else None
    for p in kids:
        try:
            if "spark_apps.runtime.run" not in " ".join(p.cmdline()):
                continue
        except psutil.Error:
            continue
        if (p.pid == driver) != spare or (driver is None and not spare):
            return p.pid
    return None


def airflow_or_helper(p) -> str:
    """Airflow's own processes, or a Spark helper a task started (the preflight's replay, its JVM and
    Python workers)."""
    cmd = " ".join(p.cmdline())
    return "helpers" if p.name() == "java" or "spark_apps" in cmd or "pyspark" in cmd else "airflow"


class Meter:
    """CpuMeter over the platform's processes, following the slots through restarts."""

    def __init__(self, plat, procs: Procs, app: str):
        self.plat, self.procs, self.app = plat, procs, app
        self.cpu = CpuMeter()
        self.drivers: dict[Slot, int] = {}
        self.follow()
        if (pid := broker_pid(plat)) is not None:
            self.cpu.track("broker", pid)
        for name in ("loadgen", "verifier"):
            if name in procs.running:
                self.cpu.track(name, procs.running[name].pid)
        self.cpu.track("airflow", plat.airflow.proc.pid(), label=airflow_or_helper)

    def follow(self) -> list[str]:
        """Track each slot's current driver; returns what moved."""
        moved = []
        for slot in Slot:
            pid = slot_driver(self.plat.settings.state_dir, self.app, slot)
            if pid is not None and pid != self.drivers.get(slot):
                self.drivers[slot] = pid
                self.cpu.track(slot.value, pid, slot=True)
                moved.append(f"{slot.value} driver pid {pid}")
        return moved

    def start(self) -> Meter:
        self.cpu.start()
        return self

    def stop(self) -> dict:
        report = self.cpu.stop()
        by = report["by_role"]

        def cores(*prefixes):
            return round(sum(v["cores"] for k, v in by.items() if k.split(".")[0] in prefixes), 3)

        report["groups"] = {
            "blue": cores("blue"),
            "green": cores("green"),
            "broker": cores("broker"),
            "loadgen_verifier": cores("loadgen", "verifier"),
            "airflow": cores("airflow"),
            "helpers": cores("helpers"),
        }
        report["upgrade_own_cores"] = round(report["groups"]["airflow"] + report["groups"]["helpers"], 3)
        return report


def iso_s(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def task_rows(tis: list[dict], t0: float) -> list[dict]:
    rows = []
    for ti in tis:
        start, end = iso_s(ti.get("start_date")), iso_s(ti.get("end_date"))
        rows.append(
            {
                "task_id": ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else ""),
                "state": ti.get("state"),
                "try_number": ti.get("try_number"),
                "operator": ti.get("operator"),
                "start_s": round(start - t0, 1) if start else None,
                "end_s": round(end - t0, 1) if end else None,
                "duration_s": round(end - start, 1) if start and end else None,
            }
        )
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
    for path in sorted(
        (plat.airflow.home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task}/attempt=*.log")
    ):
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
                    text += " | " + "; ".join(
                        f"{d.get('exc_type')}: {d.get('exc_value')}" for d in detail if isinstance(d, dict)
                    )
                lines.append(text)
    return "\n".join(lines[-8:])[-3000:] or "(no reason found)"


class FollowsSlots(Protocol):
    """What poll_run asks of a meter: to follow the slots' processes anew (after a restart), saying what
    changed."""

    def follow(self) -> list[str]: ...


def poll_run(
    client, plat, meter: FollowsSlots, dag_id: str, run_id: str, t0: float, timeout_s: float, where=lambda: ""
) -> tuple[dict, list]:
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
            active = [
                k
                for k, (s, _) in seen.items()
                if s in ("running", "deferred", "up_for_retry", "queued", "scheduled", "up_for_reschedule")
            ]
            try:
                lag = where()
            except Exception as exc:  # a busy broker: say so
                lag = f"lag unknown ({exc})"
            log(f"+{now:6.1f}s  run {run['state']}; now at: {', '.join(active) or '-'}; {lag}")
            next_note += 60
        time.sleep(2)
    return run, tis
