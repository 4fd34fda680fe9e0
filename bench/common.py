"""Shared pieces of the app benchmarks: an own broker, app topics and control record, slot
processes, status and commit-marker watching, per-process CPU accounting, results files.

Everything a benchmark starts is registered in `Bench.procs` and stopped by pid when the `bench()`
context exits, on success, on an error or on Ctrl-C/SIGTERM alike.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from baton.apps import APPS_DIR, AppDefinition, load_definition  # noqa: E402
from baton.driver_wrapper import JVM_TMPDIR_ENV  # noqa: E402
from baton.kafka.admin import TopicSpec, ensure_topics  # noqa: E402
from baton.kafka.control_log import close_writers, write_control  # noqa: E402
from baton.local.broker import Broker  # noqa: E402
from baton.local.procs import free_port, stop_group  # noqa: E402
from baton.records import ControlRecord, Slot, SlotSpec, SlotState, StatusRecord  # noqa: E402
from baton.settings import CONTROL_TOPIC, STATUS_TOPIC  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- processes ----------------------------------------------------------------------------------


@dataclass
class Procs:
    """Subprocesses started by a benchmark, each in its own session, with its log in `logs`."""

    logs: Path
    running: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], stdout=None, env: dict[str, str] | None = None) -> subprocess.Popen:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **(env or {}),
        }
        self.logs.mkdir(parents=True, exist_ok=True)
        err = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else err,
            stderr=err,
            start_new_session=True,
        )
        err.close()
        self.running[name] = proc
        return proc

    def stop(self, name: str, timeout_s: float = 90.0) -> int | None:
        """SIGTERM to the process itself (a slot then stops at a batch boundary and ends its JVM),
        wait, then SIGKILL whatever of its process group is left. Returns its exit code."""
        proc = self.running.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            stop_group(proc.pid, signal.SIGTERM, timeout_s, leader_only=True)
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.running):
            try:
                self.stop(name, timeout_s=60.0)
            except Exception as exc:  # keep stopping the others
                log(f"stopping {name}: {exc}")

    def tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


class ExternalBroker:
    """A Kafka cluster given as BATON_KAFKA_BOOTSTRAP (as `make up` takes it) instead of an own Tansu:
    the benchmark neither starts nor stops it; BATON_BENCH_KAFKA_PID (a broker on this host) is the
    process its CPU is counted from."""

    def __init__(self, bootstrap: str, pid: int | None):
        self.bootstrap, self.pid = bootstrap, pid

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def describe(self) -> str:
        return f"Kafka cluster at {self.bootstrap} (BATON_KAFKA_BOOTSTRAP)"


def external_broker() -> ExternalBroker | None:
    """The cluster named by BATON_KAFKA_BOOTSTRAP (None: none named, the benchmark runs its own)."""
    bootstrap = os.environ.get("BATON_KAFKA_BOOTSTRAP", "").strip()
    if not bootstrap:
        return None
    pid = os.environ.get("BATON_BENCH_KAFKA_PID", "").strip()
    return ExternalBroker(bootstrap, int(pid) if pid.isdigit() else None)


def embedded_kind(bootstrap: str) -> str:
    return f"embedded Tansu at {bootstrap}"


@dataclass
class Bench:
    tmp: Path
    broker: Broker | ExternalBroker
    procs: Procs

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def broker_pid(self) -> int | None:
        """The broker's process for the CPU figures (None: an external one not on this host)."""
        if isinstance(self.broker, ExternalBroker):
            return self.broker.pid
        return self.broker.proc.pid()

    @property
    def broker_kind(self) -> str:
        if isinstance(self.broker, ExternalBroker):
            return self.broker.describe()
        return embedded_kind(self.bootstrap)


class Interrupted(KeyboardInterrupt):
    pass


def interrupt_once(*_) -> None:
    """SIGTERM's handler while a benchmark runs: the run stops (Interrupted) and its cleanup, which
    stops every process it started, runs to its end: a second SIGTERM (a `timeout` that forwards its
    own, then a kill by hand) used to cut the cleanup short and leave the broker, Airflow and the
    slots running. The caller restores the previous handler at the end of its cleanup."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted("SIGTERM")


@contextmanager
def bench(prefix: str, keep: Path | None = None) -> Iterator[Bench]:
    """A temp dir, an own Tansu broker on a free port (or the cluster named by BATON_KAFKA_BOOTSTRAP,
    left running), and a process registry; all gone at exit.
    `keep`: a directory to keep the process logs in (else they go with the temp dir)."""
    previous = signal.signal(signal.SIGTERM, interrupt_once)
    with tempfile.TemporaryDirectory(prefix=f"baton-bench-{prefix}-") as tmp:
        tmpd = Path(tmp)
        broker = external_broker() or Broker(state_dir=tmpd / "broker", port=free_port())
        procs = Procs(keep or tmpd / "logs")
        broker.start()
        try:
            yield Bench(tmpd, broker, procs)
        finally:
            procs.stop_all()
            close_writers(broker.bootstrap)  # else their clients retry the stopped broker until exit
            broker.stop()
            signal.signal(signal.SIGTERM, previous)


# --- the app under test -------------------------------------------------------------------------


def app_count_rows(given: bool | None) -> bool:
    """The bench app's state.count_rows: `given`, else what the shipped click_counts says."""
    return given if given is not None else load_definition(APPS_DIR / "click_counts.yaml").state.count_rows


def click_count_app(
    directory: Path,
    partitions: int = 4,
    trigger_ms: int = 1000,
    max_records_per_trigger: int = 500_000,
    standby_nice: int | None = None,
    standby_pace_ms: int | None = None,
    count_rows: bool | None = None,
) -> tuple[AppDefinition, Path]:
    """A fresh click-count app definition (unique name and topics) written to `directory`;
    `standby_nice`, `standby_pace_ms` None: the app definition's default; `count_rows` (state.count_rows)
    None: what the shipped click_counts (include/apps/click_counts.yaml) says, so the bench runs that app."""
    count_rows = app_count_rows(count_rows)
    name = f"cc_bench_{uuid.uuid4().hex[:6]}"
    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nmodule: spark_apps.apps.click_counts\nversion: v1\n"
        f"input: {{topic: clicks-{name}, partitions: {partitions}}}\n"
        f"output: {{topic: counts-{name}, partitions: {partitions}}}\n"
        f"trigger_ms: {trigger_ms}\nmax_records_per_trigger: {max_records_per_trigger}\n"
        + (f"standby_nice: {standby_nice}\n" if standby_nice is not None else "")
        + (f"standby_pace_ms: {standby_pace_ms}\n" if standby_pace_ms is not None else "")
        + f"state: {{count_rows: {str(count_rows).lower()}}}\n"
    )
    return load_definition(path), path


def create_app(bootstrap: str, app: AppDefinition, active: Slot = Slot.BLUE, standby: bool = False) -> None:
    """The app's topics and the control-plane topics, and a control record naming `active`."""
    ensure_topics(
        bootstrap,
        [TopicSpec(CONTROL_TOPIC, 1, {"cleanup.policy": "compact"}), TopicSpec(STATUS_TOPIC, 1), *app.topics()],
    )
    slots = {active: SlotSpec(SlotState.RUNNING, app.version)}
    if standby:
        slots[active.other] = SlotSpec(SlotState.RUNNING, app.version)
    write_control(
        bootstrap,
        ControlRecord(
            app=app.name, revision=1, epoch=1, active=active, slots=slots, writer="bench", ts_ms=int(time.time() * 1000)
        ),
    )


def reports(slot: Slot, *states: SlotState) -> Callable[[StatusRecord], bool]:
    """StatusWatch.wait's predicate: a status record of `slot` in one of `states`."""
    return lambda r: r.slot is slot and r.state in states


def running(proc: subprocess.Popen) -> Callable[[], bool]:
    """StatusWatch.wait's `alive`: the process has not exited."""
    return lambda: proc.poll() is None


def start_slot(
    b: Bench, app_path: Path, slot: Slot, conf: Sequence[str] = (), name: str | None = None
) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "spark_apps.runtime.run",
        "--app",
        str(app_path),
        "--slot",
        slot.value,
        "--bootstrap",
        b.bootstrap,
        "--state-dir",
        str(b.tmp / "state"),
    ]
    for item in conf:
        argv += ["--conf", item]
    # Its JVM's scratch files in the bench's temp dir, gone with it, also after a kill -9 (baton.launch_tmp).
    jvm_tmp = Path(tempfile.mkdtemp(prefix=f"jvm-{name or slot.value}-", dir=b.tmp))
    return b.procs.start(name or slot.value, argv, env={JVM_TMPDIR_ENV: str(jvm_tmp)})


# --- observing the slots ------------------------------------------------------------------------


class StatusWatch:
    """Follows the status topic in a thread: every status record of one app, with its arrival time."""

    def __init__(self, bootstrap: str, app: str):
        from confluent_kafka import Consumer, TopicPartition

        self.app = app
        self.records: list[tuple[float, StatusRecord]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-status-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 200,
            }
        )
        self._c.assign([TopicPartition(STATUS_TOPIC, 0, 0)])
        self._thread = threading.Thread(target=self._run, name="bench-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        prefix = f"{self.app}/".encode()
        while not self._stop.is_set():
            for m in self._c.consume(1000, 0.1):
                if m.error() or not (m.key() or b"").startswith(prefix):
                    continue
                rec = StatusRecord.from_bytes(m.value())
                with self._cond:
                    self.records.append((time.time(), rec))
                    self._cond.notify_all()
        self._c.close()

    def of(self, slot: Slot, since: float = 0.0) -> list[StatusRecord]:
        with self._cond:
            return [r for t, r in self.records if r.slot is slot and t >= since]

    def wait(
        self,
        pred: Callable[[StatusRecord], bool],
        timeout_s: float,
        what: str,
        alive: Callable[[], bool] = lambda: True,
    ) -> tuple[float, StatusRecord]:
        """(arrival time, record) of the first record (of any time) for which pred holds."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._cond:
            while True:
                for t, r in self.records[seen:]:
                    if pred(r):
                        return t, r
                seen = len(self.records)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no status record {what} within {timeout_s:.0f}s")
                if not alive():
                    raise RuntimeError(f"the slot exited before a status record {what}")
                self._cond.wait(0.5)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def batch_records(watch: StatusWatch, slot: Slot) -> list[StatusRecord]:
    """One status record per completed batch of `slot`: the first one published for it (idle
    heartbeats repeat the last batch's figures later; they are dropped)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for r in watch.of(slot):
        if r.batch_id >= 0 and (r.pid, r.batch_id) not in seen:
            seen.add((r.pid, r.batch_id))
            out.append(r)
    return out


def total(positions: dict[int, int] | None) -> int:
    return sum((positions or {}).values())


def wait_processed(watch: StatusWatch, slot: Slot, records: int, timeout_s: float, alive=lambda: True) -> StatusRecord:
    """The first status record of `slot` whose processed position covers `records` input records."""
    return watch.wait(
        lambda r: r.slot is slot and total(r.processed) >= records,
        timeout_s,
        f"of {slot.value} with {records} records processed",
        alive,
    )[1]


# --- CPU accounting -----------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one process, its threads included, from /proc."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def jvm_split_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of a JVM's JIT compiler threads and of its garbage collector's threads (by the
    thread names profiling.JIT_THREAD and GC_THREAD match)."""
    from profiling import GC_THREAD, JIT_THREAD, thread_cpu

    try:
        threads = thread_cpu(pid)
    except OSError:  # the JVM has exited
        return 0.0, 0.0
    jit = sum(cpu for name, cpu in threads.values() if JIT_THREAD.search(name))
    return jit, sum(cpu for name, cpu in threads.values() if GC_THREAD.match(name))


class CpuMeter:
    """CPU seconds (user + system) per role over a window, sampled with psutil.

    Roles are named process trees: `track(role, pid)`. A slot's tree is split into its Python
    driver (the root), its JVM (java processes; its JIT compiler threads apart, as `jvm_jit`, and its
    collector's, as `jvm_gc`) and its Python workers (everything under the JVM).
    A process seen for the first time after `start()` counts from zero (it was born inside the
    window); the CPU of children their parent has reaped is taken from the parent's children_*
    times, less what those children were already counted for when last sampled (a child that
    lived through samples is counted once: its last sample for itself, the rest for its parent).
    """

    def __init__(self, interval_s: float = 1.0):
        import psutil

        self._psutil = psutil
        self.interval_s = interval_s
        self.roots: dict[str, tuple[int, bool, Callable | None]] = {}
        self._base: dict[object, float] = {}  # by pid, and (pid, "jit" | "gc") for a JVM's compiler / GC threads
        self._last: dict[object, tuple[str, float]] = {}
        self._seen: dict[int, tuple[int, float]] = {}  # pid -> (parent pid, its CPU with children_*) when last sampled
        self._reaped: dict[int, float] = {}  # pid -> CPU of its dead children already counted for them
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.started = self.stopped = 0.0

    def track(self, role: str, pid: int, slot: bool = False, label: Callable[[object], str] | None = None) -> None:
        """Count the process tree of `pid` as `role`; a slot's tree is split into its parts.
        `label(process)`, for a tree that is not a slot's, names each process's role instead (e.g.
        Airflow's own processes apart from the Spark helpers its tasks start). Tracking a role
        again moves it to another tree (a slot restarted); what its old tree used stays counted.
        A process in two tracked trees counts once, for the role tracked first."""
        self.roots[role] = (pid, slot, label)

    def _part(self, p, root: int, parents: dict[int, int], names: dict[int, str]) -> str:
        if p.pid == root:
            return "driver"
        pid = p.pid
        while pid in parents and pid != root:
            if names.get(pid) == "java":
                return "jvm" if pid == p.pid else "python_workers"
            pid = parents[pid]
        return "other"

    def _sample(self, first: bool = False) -> None:
        ps = self._psutil
        for pid, (ppid, seconds) in list(self._seen.items()):
            if not ps.pid_exists(pid):  # gone, reaped: its parent's children_* times now hold it
                self._reaped[ppid] = self._reaped.get(ppid, 0.0) + seconds
                del self._seen[pid]
        claimed: set[int] = set()
        for role, (root, slot, label_of) in list(self.roots.items()):
            try:
                top = ps.Process(root)
                tree = [top] + top.children(recursive=True)
            except ps.Error:
                continue
            parents, names = {}, {}
            for p in tree:
                try:
                    parents[p.pid], names[p.pid] = p.ppid(), p.name()
                except ps.Error:
                    pass
            for p in tree:
                if p.pid in claimed:
                    continue
                claimed.add(p.pid)
                try:
                    t = p.cpu_times()
                    label = label_of(p) if label_of is not None and not slot else role
                except ps.Error:
                    continue
                cpu = t.user + t.system + t.children_user + t.children_system
                self._seen[p.pid] = (parents.get(p.pid, 0), cpu)
                cpu -= self._reaped.get(p.pid, 0.0)
                part = self._part(p, root, parents, names) if slot else ""
                if slot:
                    label = f"{role}.{part}"
                counted = [(p.pid, label, cpu)]
                if part == "jvm":  # the JIT apart (a young JVM spends a third of its CPU compiling), and GC
                    jit, gc = jvm_split_cpu_s(p.pid)
                    counted = [
                        (p.pid, label, cpu - jit - gc),
                        ((p.pid, "jit"), f"{role}.jvm_jit", jit),
                        ((p.pid, "gc"), f"{role}.jvm_gc", gc),
                    ]
                for key, name, seconds in counted:
                    if first:
                        self._base[key] = seconds
                    else:
                        self._base.setdefault(key, 0.0)
                    self._last[key] = (name, seconds)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _busy(self) -> tuple[float, float]:
        """(CPU seconds this machine's processes ran, seconds the hypervisor gave to other guests)."""
        t = self._psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0), getattr(t, "steal", 0.0)

    def start(self) -> None:
        self.started = time.monotonic()
        self._busy0 = self._busy()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        """{"window_s", "cores_used", "machine_busy_cores", "other_processes_cores", "steal_cores",
        "by_role": {role: {"cpu_s", "cores"}}} (roles biggest first). steal_cores: what the
        hypervisor ran elsewhere while this VM wanted the CPU; on a noisy host it is what makes a
        run slow without any process of this machine using more."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._sample()
        self.stopped = time.monotonic()
        window = max(self.stopped - self.started, 1e-9)
        (busy_s, steal_s), (busy0, steal0) = self._busy(), self._busy0
        busy, steal = (busy_s - busy0) / window, (steal_s - steal0) / window
        by: dict[str, float] = {}
        for pid, (role, cpu) in self._last.items():
            by[role] = by.get(role, 0.0) + max(0.0, cpu - self._base.get(pid, 0.0))
        roles = {
            r: {"cpu_s": round(s, 1), "cores": round(s / window, 3)}
            for r, s in sorted(by.items(), key=lambda kv: -kv[1])
        }
        ours = sum(by.values()) / window
        # Busy cores machine-wide, and what of it was not this benchmark (other load skews a run).
        return {
            "window_s": round(window, 1),
            "cores_used": round(ours, 3),
            "machine_busy_cores": round(busy, 3),
            "other_processes_cores": round(max(0.0, busy - ours), 3),
            "steal_cores": round(steal, 3),
            "by_role": roles,
        }


# --- results ------------------------------------------------------------------------------------


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=_jsonable) + "\n")
    return path


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def machine() -> dict:
    import platform

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "host": platform.node(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "calibration_ms": calibration_ms(),
    }


def calibration_ms() -> float:
    """How fast this host's CPU is right now: the best of 3 runs of a fixed loop of 2M additions, in ms.
    A shared host's speed changes by phases (97 ms in a fast moment, 150-207 ms in a slow phase here, and
    a hypervisor does not always report it as steal); a figure beside each result says which phase it was taken in."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def stop_run(b: Bench, watch: StatusWatch, producer, slot: str = "blue") -> None:
    """End a one-slot run: the load thread (if it started), the slot, the status watch; a slot that did
    not stop cleanly fails the run, with its log's tail."""
    if producer is not None:
        producer.stop.set()
        producer.join()
    code = b.procs.stop(slot)
    watch.close()
    if code != 0:
        raise RuntimeError(f"the slot stopped with exit code {code}:\n{b.procs.tail(slot)}")


def churn_args(ap, name: str, minutes: float, rate: int, new_users_per_s: int, active_users: int) -> None:
    """The options of a benchmark that sends baton.tools.churn events, with its defaults."""
    ap.add_argument("--minutes", type=float, default=minutes)
    ap.add_argument("--rate", type=int, default=rate, help="events per second")
    ap.add_argument("--new-users-per-s", type=int, default=new_users_per_s)
    ap.add_argument("--active-users", type=int, default=active_users)
    ap.add_argument("--name", default=name, help="results file name (bench/results/NAME.json/.png)")


def save_lower_axes(fig, bx, ylabel: str, path: Path) -> None:
    """Finish a two-plot figure whose lower plot `bx` is over time since the load started; write it."""
    bx.set_ylabel(ylabel)
    bx.set_xlabel("seconds since the load started")
    bx.legend(loc="upper left", fontsize=8)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
