"""Starts, finds and stops one slot's Spark driver, detached from whoever started it.

The caller is typically an Airflow task: it may die, time out or be retried at any moment, and the
slot must neither die with it nor be started twice (invariant 4). Per app and slot, under
`<state_dir>/slots/<app>/<slot>/` (beside the slot's `gen-N/` checkpoints):

- `launch.lock`   flock held by whoever is starting or stopping the slot: two starters serialise;
- `driver.json`   the slot's identity, written as an intent (launch id, argv, no pid) BEFORE anything
                  is spawned, then completed with the pid and its process start time;
- `driver.lock`   flock taken by the launcher and handed to the driver's wrapper and the driver, which
                  keep it open: it is held exactly as long as the launch lives (baton.driver_wrapper);
- `driver.pid`    written by the wrapper itself, so a retry can complete the identity of a launch whose
                  launcher died between spawning it and recording it;
- `driver.log`    the driver's output (appended; a header line per launch);
- `driver.exit.json`  how the last launch ended (exit code), written by the wrapper;
- `driver.restarts.json`  what the wrapper does about a driver that died (restarts it in place, within
                  the app's crash-loop guard: baton.driver_wrapper): waiting, relaunched, gave up;
- `driver.next.json`, `driver.next.lock`, `driver.next.pid`  the same for a staged next launch (below).

So "is the slot running?" is answered by the lock, not by a pid: a retried start after a kill -9 of
its launcher at any point either finds the launch alive (and reattaches) or provably dead. Signals
are only ever sent to the recorded pid if it is still the same process (pid AND start time, so a
reused pid is never hit), or to processes of its session carrying its launch id (BATON_LAUNCH_ID).

Backends, chosen by the master URL (docs/backends.md):
- `local[N]`: the driver runs Spark in local mode;
- `spark://host:port`: a Spark standalone cluster in client deploy mode (the Python driver runs here,
  executors on the workers; standalone cannot run Python apps in cluster deploy mode);
- `k8s://...`: documented, not started by this module (the identity would be the driver pod).

Both launched backends run `python -m spark_apps.runtime.run ... --conf spark.master=<master>`
rather than spark-submit: the Python driver is then the wrapper's direct child and a stop's SIGTERM
reaches the harness, which stops at a batch boundary (spark-submit would start a JVM with the
Python driver as its child, and the SIGTERM would reach the JVM instead).

Restarting without the JVM's start-up in the downtime (`stage`): the next launch of a running slot
(a new version, the same checkpoint) can be spawned beside the current one. It starts its interpreter,
JVM and Spark session, then holds: it touches neither the checkpoint nor any topic until
`driver.json` names its launch (spark_apps.runtime.coordination.hold). Once the current launch is gone, the next
`ensure_started` of the same launch promotes it instead of spawning: its lock file becomes
`driver.lock` (an flock belongs to the file, so the rename keeps it held by the launch), then
`driver.json` becomes its record, which releases the hold. A staged launch that is never promoted ends
by itself after its hold timeout; a different launch asked for the slot discards it first.

Stopping: the caller writes the control-topic stop request (desired STOPPED) BEFORE calling `stop`,
so the slot finishes its batch and exits by itself; `stop` backs that up with SIGTERM (also a
graceful stop in the harness), waits `grace_s`, then kills whatever of the launch is left.

No Airflow imports: plugins/baton_airflow/hooks/spark.py wraps this for DAGs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

import psutil

from baton.apps import AppDefinition, definition_path, load_app
from baton.driver_wrapper import HOLD_ARG, HOLD_TIMEOUT_ARG, JVM_TMPDIR_ENV, LAUNCH_ID_ENV
from baton.health_policy import HealthPolicy
from baton.kafka.client_config import CLIENT_CONFIG_ENV
from baton.launch_tmp import launch_tmp_dir, remove_gone
from baton.procfs import tail
from baton.records import Slot
from baton.settings import REPO_ROOT

RECORD_VERSION = 1
STAGED_RECORD, STAGED_LOCK, STAGED_PID = "driver.next.json", "driver.next.lock", "driver.next.pid"
_LOCAL_MASTER = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class LaunchError(RuntimeError):
    """A slot could not be started, found or stopped; the message says why (and points at logs)."""


class SlotBusy(LaunchError):
    """The slot already runs a different launch (generation, version, app or master): stop it first."""


class ForeignHost(LaunchError):
    """The slot was launched on another host; its process cannot be checked or signalled from here."""


def backend_of(master: str) -> str:
    """'local', 'standalone' or 'kubernetes' for a master URL; ValueError naming the field otherwise."""
    if _LOCAL_MASTER.match(master):
        return "local"
    if master.startswith("spark://"):
        if not urlparse(master).port:
            raise ValueError(f"field 'master': {master!r} needs a port (spark://host:7077)")
        return "standalone"
    if master.startswith("k8s://"):
        return "kubernetes"
    raise ValueError(f"field 'master': {master!r} is not local[N], spark://host:port or k8s://...")


@dataclass(frozen=True)
class LaunchSpec:
    """What to run in a slot. `app` is a registry name (include/apps/<name>.yaml) or a .yaml path;
    `state_dir` (checkpoints) defaults to the launcher's state dir."""

    app: str
    slot: Slot
    generation: int = 0
    bootstrap: str = ""
    state_dir: Path | None = None
    master: str = "local[2]"
    conf: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    # The file of the Kafka security settings the slot's clients use (baton.kafka.client_config): its
    # path goes to the slot's environment, its content nowhere else. "": the environment's own.
    client_config_file: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "slot", Slot(self.slot))
        except ValueError:
            raise ValueError(f"field 'slot': {self.slot!r} is not one of {[s.value for s in Slot]}") from None
        if not isinstance(self.generation, int) or self.generation < 0:
            raise ValueError(f"field 'generation': {self.generation!r} must be an integer >= 0")
        if not isinstance(self.bootstrap, str) or not all(_HOST_PORT.match(part) for part in self.bootstrap.split(",")):
            raise ValueError(f"field 'bootstrap': {self.bootstrap!r} must be host:port[,host:port...]")
        backend_of(self.master)
        for k, v in self.conf.items():
            if not isinstance(k, str) or not k or "=" in k or not isinstance(v, str):
                raise ValueError(
                    f"field 'conf': {k!r}={v!r} must be a non-empty string key without '=' and a string value"
                )
        if self.conf.get("spark.master", self.master) != self.master:
            raise ValueError(
                f"field 'conf': spark.master={self.conf['spark.master']!r} contradicts "
                f"master={self.master!r}; set the master once, in 'master'"
            )
        if not self.starting_offsets:
            raise ValueError("field 'starting_offsets': must not be empty")
        if self.state_dir is not None:
            object.__setattr__(self, "state_dir", Path(self.state_dir))

    @property
    def definition_path(self) -> Path:
        return definition_path(self.app)

    def definition(self) -> AppDefinition:
        """The validated app definition (an AppDefinitionError names the file, field and problem)."""
        return load_app(self.app)


@dataclass(frozen=True)
class SlotProcess:
    """The recorded identity of one launch of a slot. pid is None while it is only an intent."""

    app: str
    slot: Slot
    generation: int
    version: str
    definition: str
    master: str
    launch_id: str
    argv: list[str]
    log_path: str
    exit_file: str
    host: str
    launched_at: float
    pid: int | None = None
    create_time: float | None = None
    recorded_at: float | None = None
    client_config_file: str = ""  # LaunchSpec.client_config_file

    def to_json(self) -> str:
        return json.dumps({"v": RECORD_VERSION, **asdict(self), "slot": self.slot.value}, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> SlotProcess:
        try:
            raw = json.loads(text)
            raw.pop("v", None)
            raw["slot"] = Slot(raw["slot"])
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise LaunchError(
                f"{where}: unreadable slot identity record ({exc}); it was left in place "
                "for inspection: check whether its pid still runs, then remove it"
            ) from None


@dataclass(frozen=True)
class ExitInfo:
    """How a launch ended: code is the driver's exit code (negative: killed by that signal)."""

    code: int | None
    ended_at: float | None
    killed_by_stop: bool = False


@dataclass(frozen=True)
class Relaunch:
    """The wrapper's word on its driver (driver.restarts.json): `running` the first since `at` (it will
    restart it if it dies), `waiting` to restart it at `at`, `relaunched` it at `at`, or `gave_up` (the
    crash-loop limit: `reason`). code: the dead driver's."""

    STATES = ("running", "waiting", "relaunched", "gave_up")
    state: str
    restarts: int
    at: float
    code: int | None
    reason: str = ""
    driver_pid: int | None = None  # the launch's current driver (a promoted spare's cmdline still says spare)


@dataclass(frozen=True)
class StopResult:
    was_running: bool
    graceful: bool  # ended by itself within the grace period (no SIGKILL was needed)
    exit: ExitInfo | None
    pid: int | None


ArgvBuilder = Callable[[LaunchSpec, AppDefinition, Path, str], list[str]]


def executors_on_this_host(master: str) -> bool:
    """Local mode, or a standalone cluster on loopback: executors share this machine's interpreter
    and files. A remote cluster's executors bring their own (its image: docs/backends.md)."""
    backend = backend_of(master)
    return backend == "local" or (backend == "standalone" and urlparse(master).hostname in _LOOPBACK)


def driver_conf(spec: LaunchSpec, python: str) -> dict[str, str]:
    """Spark settings every launch gets (the spec's own conf wins, except the master)."""
    # The driver's output goes to a log file: no console progress bars in it.
    conf = {"spark.master": spec.master, "spark.ui.showConsoleProgress": "false"}
    if backend_of(spec.master) == "standalone" and executors_on_this_host(spec.master):
        # Executors run this interpreter and import baton and spark_apps (the Kafka source's reader
        # is unpickled on them) from this checkout, and reach the driver on loopback.
        conf["spark.pyspark.python"] = python
        conf["spark.executorEnv.PYTHONPATH"] = str(REPO_ROOT)
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return {**conf, **spec.conf, "spark.master": spec.master}


def driver_argv(spec: LaunchSpec, app: AppDefinition, state_dir: Path, python: str) -> list[str]:
    """`python -m spark_apps.runtime.run ...`: the slot's driver, for local and standalone masters."""
    backend = backend_of(spec.master)
    if backend == "kubernetes":
        raise LaunchError(
            "master k8s://...: Kubernetes is a documented backend (docs/backends.md) that "
            "this launcher does not start; use local[N] or spark://host:port"
        )
    argv = [
        python,
        "-m",
        "spark_apps.runtime.run",
        "--app",
        str(spec.definition_path),
        "--slot",
        spec.slot.value,
        "--generation",
        str(spec.generation),
        "--bootstrap",
        spec.bootstrap,
        "--state-dir",
        str(state_dir),
        "--starting-offsets",
        spec.starting_offsets,
    ]
    for k, v in driver_conf(spec, python).items():
        argv += ["--conf", f"{k}={v}"]
    return argv


class Launcher:
    def __init__(
        self,
        state_dir: Path,
        argv_builder: ArgvBuilder = driver_argv,
        python: str = sys.executable,
        lock_timeout_s: float = 120.0,
        spawn_timeout_s: float = 30.0,
        restart_driver: bool = True,
    ):
        self.state_dir = Path(state_dir).resolve()
        # A driver that dies is restarted in place by its wrapper (baton.driver_wrapper's policy).
        self.restart_driver = restart_driver
        self.argv_builder = argv_builder
        self.python = python
        self.lock_timeout_s = lock_timeout_s
        self.spawn_timeout_s = spawn_timeout_s
        self.host = socket.gethostname()

    # --- files ----------------------------------------------------------------------------------
    def slot_dir(self, app: str, slot: Slot | str) -> Path:
        return self.state_dir / "slots" / app / Slot(slot).value

    def record_file(self, app: str, slot: Slot | str) -> Path:
        return self.slot_dir(app, slot) / "driver.json"

    def read_record(self, app: str, slot: Slot | str) -> SlotProcess | None:
        """The last recorded launch of the slot, alive or not."""
        path = self.record_file(app, slot)
        try:
            return SlotProcess.from_json(path.read_text(), str(path))
        except FileNotFoundError:
            return None

    def _write_record(self, rec: SlotProcess) -> None:
        write_json_text(self.record_file(rec.app, rec.slot), rec.to_json())

    @contextlib.contextmanager
    def _locked(self, app: str, slot: Slot) -> Iterator[None]:
        path = self.slot_dir(app, slot) / "launch.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        # Opened close-on-exec (Python's default): no spawned process inherits this lock.
        with open(path, "a+") as fh:
            deadline = time.monotonic() + self.lock_timeout_s
            while not _try_flock(fh):
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"{path} is held by another start/stop of {app}/{slot.value} for "
                        f"more than {self.lock_timeout_s:.0f}s"
                    )
                time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # --- liveness -------------------------------------------------------------------------------
    def _held(self, app: str, slot: Slot, lock: str = "driver.lock") -> bool:
        """True while a launch's wrapper or driver lives (they hold its lock file open)."""
        path = self.slot_dir(app, slot) / lock
        if not path.exists():
            return False
        with open(path, "a+") as fh:
            if _try_flock(fh):
                fcntl.flock(fh, fcntl.LOCK_UN)
                return False
            return True

    def _check_host(self, rec: SlotProcess) -> None:
        if rec.host != self.host:
            raise ForeignHost(
                f"{rec.app}/{rec.slot.value} was launched on host {rec.host!r} (pid {rec.pid}); "
                f"this is {self.host!r}: start/stop it there, or remove "
                f"{self.record_file(rec.app, rec.slot)} once that driver is known to be gone"
            )

    def _completed(self, rec: SlotProcess, wait_s: float = 0.0, pid_name: str = "driver.pid") -> SlotProcess:
        """rec with its pid, taken from the wrapper's pid file if the launcher did not record it."""
        deadline = time.monotonic() + wait_s
        while rec.pid is None:
            pid_file = self.slot_dir(rec.app, rec.slot) / pid_name
            try:
                raw = json.loads(pid_file.read_text())
            except (FileNotFoundError, ValueError):
                raw = {}
            if raw.get("launch_id") == rec.launch_id:
                pid = int(raw["pid"])
                return replace(rec, pid=pid, create_time=_create_time(pid), recorded_at=time.time())
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return rec

    def find(self, app: str, slot: Slot | str) -> SlotProcess | None:
        """The slot's recorded launch if it is still running, else None."""
        slot = Slot(slot)
        rec = self.read_record(app, slot)
        if rec is None:
            return None
        self._check_host(rec)
        return self._completed(rec) if self._held(app, slot) else None

    def _leftovers(self, rec: SlotProcess) -> list[int]:
        """Live processes of the launch: the recorded leader if it is still the same process, and
        members of its session that carry its launch id."""
        if rec.pid is None:
            return []
        live = [rec.pid] if rec.create_time is not None and _same_process(rec.pid, rec.create_time) else []
        others = [p for p in _session_members(rec.pid) if p not in live]
        return live + _with_launch_id(others, rec.launch_id)

    # --- start ----------------------------------------------------------------------------------
    def ensure_started(self, spec: LaunchSpec) -> SlotProcess:
        """Start the slot unless it already runs this launch; return its identity.

        Idempotent: a retried task gets the running launch back (reattach), never a second copy;
        a different launch in the slot (generation, version, definition, master) is SlotBusy.
        Returns once the identity is recorded: waiting for the slot to be RUNNING is the caller's
        (the status topic says so)."""
        app = spec.definition()
        state_dir = spec.state_dir or self.state_dir
        with self._locked(app.name, spec.slot):
            self._finish_promotion(app.name, spec.slot)
            recorded = self.read_record(app.name, spec.slot)
            if recorded is not None:
                self._check_host(recorded)
                if self._held(app.name, spec.slot):
                    current = self._completed(recorded, wait_s=self.spawn_timeout_s)
                    if current != recorded:
                        self._write_record(current)
                    self._check_same_launch(current, spec, app)
                    return current
            staged = self._staged(app.name, spec.slot)
            if staged is not None:
                if not self._launch_differs(staged, spec, app):
                    return self._promote(staged)
                self._discard(staged)
            argv = self.argv_builder(spec, app, state_dir, self.python)
            slot_dir = self.slot_dir(app.name, spec.slot)
            intent = self._intent(spec, app, argv)
            for stale in ("driver.pid", "driver.exit.json"):
                (slot_dir / stale).unlink(missing_ok=True)
            self._write_record(intent)  # intent first: a retry after a crash below finds the launch
            self._spawn(intent, app)
            rec = self._completed(intent, wait_s=self.spawn_timeout_s)
            if rec.pid is None:
                raise LaunchError(
                    f"{app.name}/{spec.slot.value}: the driver's wrapper did not report its pid "
                    f"within {self.spawn_timeout_s:.0f}s; see {intent.log_path}:\n{tail(Path(intent.log_path))}"
                )
            self._write_record(rec)
            return rec

    def _intent(self, spec: LaunchSpec, app: AppDefinition, argv: list[str]) -> SlotProcess:
        """A new launch's identity before it is spawned (no pid yet)."""
        slot_dir = self.slot_dir(app.name, spec.slot)
        return SlotProcess(
            app=app.name,
            slot=spec.slot,
            generation=spec.generation,
            version=app.version,
            definition=str(spec.definition_path),
            master=spec.master,
            launch_id=uuid.uuid4().hex,
            argv=argv,
            log_path=str(slot_dir / "driver.log"),
            exit_file=str(slot_dir / "driver.exit.json"),
            host=self.host,
            launched_at=time.time(),
            client_config_file=spec.client_config_file,
        )

    @staticmethod
    def _launch_differs(rec: SlotProcess, spec: LaunchSpec, app: AppDefinition) -> dict[str, tuple]:
        wanted = {
            "generation": spec.generation,
            "version": app.version,
            "definition": str(spec.definition_path),
            "master": spec.master,
        }
        return {k: (getattr(rec, k), v) for k, v in wanted.items() if getattr(rec, k) != v}

    def _check_same_launch(self, rec: SlotProcess, spec: LaunchSpec, app: AppDefinition) -> None:
        differs = self._launch_differs(rec, spec, app)
        if differs:
            what = ", ".join(f"{k} {have!r} (asked {want!r})" for k, (have, want) in differs.items())
            raise SlotBusy(
                f"{rec.app}/{rec.slot.value} already runs pid {rec.pid} with {what}; "
                "stop it before starting a different launch in this slot"
            )

    def _live_launch_ids(self, app: str, slot: Slot) -> set[str]:
        """The launches of the slot that may still run: the recorded one and a staged one, each if its
        lock is held or a process of it is left."""
        live = set()
        slot_dir = self.slot_dir(app, slot)
        for record, lock, pid_name in (
            (self.record_file(app, slot), "driver.lock", "driver.pid"),
            (slot_dir / STAGED_RECORD, STAGED_LOCK, STAGED_PID),
        ):
            try:
                rec = SlotProcess.from_json(record.read_text(), str(record))
            except FileNotFoundError:
                continue
            self._check_host(rec)  # another host's launch: its files are not this host's to judge
            if self._held(app, slot, lock) or self._leftovers(self._completed(rec, pid_name=pid_name)):
                live.add(rec.launch_id)
        return live

    def _remove_ended_tmp(self, app: str, slot: Slot) -> None:
        """Under the slot's lock: the temporary files of the slot's ended launches (baton.launch_tmp).
        With an unreadable record, or another host's, nothing is removed: which launch runs is not known."""
        try:
            live = self._live_launch_ids(app, slot)
        except LaunchError:
            return
        remove_gone(self.slot_dir(app, slot), live)

    def _spawn(
        self, rec: SlotProcess, app: AppDefinition, lock_name: str = "driver.lock", pid_name: str = "driver.pid"
    ) -> None:
        slot_dir = Path(rec.log_path).parent
        policy = HealthPolicy.from_app(app)  # the data plane's restarts count against the same guard
        self._remove_ended_tmp(rec.app, rec.slot)
        jvm_tmp = launch_tmp_dir(slot_dir, rec.launch_id)
        jvm_tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "PYSPARK_DRIVER_PYTHON": self.python,
            "BATON_SPARK_MASTER": rec.master,
            LAUNCH_ID_ENV: rec.launch_id,
            JVM_TMPDIR_ENV: str(jvm_tmp),
        }
        if rec.client_config_file:
            env[CLIENT_CONFIG_ENV] = rec.client_config_file
        if executors_on_this_host(rec.master):
            env["PYSPARK_PYTHON"] = self.python  # else the environment's (e.g. the cluster image's python3)
        staged = " (staged: held until it is the slot's recorded launch)" if lock_name != "driver.lock" else ""
        with open(rec.log_path, "ab") as log, open(slot_dir / lock_name, "a+") as lock:
            log.write(
                f"[baton] launch {rec.launch_id}{staged} of {rec.app}/{rec.slot.value} generation {rec.generation} "
                f"on {rec.master} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode()
            )
            log.flush()
            deadline = time.monotonic() + 2  # a concurrent find() may be probing the lock
            while not _try_flock(lock):
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise LaunchError(
                    f"{slot_dir / lock_name} is held: a launch of {rec.app}/{rec.slot.value} "
                    "is alive although its identity record says otherwise"
                )
            wrapper = [
                self.python,
                "-m",
                "baton.driver_wrapper",
                "--log",
                rec.log_path,
                "--pid-file",
                str(slot_dir / pid_name),
                "--exit-file",
                rec.exit_file,
                "--lock-fd",
                str(lock.fileno()),
                "--restarts-file",
                str(restarts_file_of(rec)),
                "--restart-limit",
                str(policy.max_restarts if self.restart_driver else 0),
                "--restart-window-s",
                f"{policy.restart_window_s:g}",
                "--restart-backoff-s",
                f"{policy.restart_backoff_s:g}",
                "--restart-backoff-max-s",
                f"{policy.restart_backoff_max_s:g}",
                "--restart-stable-s",
                f"{policy.restart_stable_s:g}",
                # The spare starts once the driver's start is behind it: half the stable time, 30 s at most.
                *(
                    ["--spare", "--spare-delay-s", f"{min(30.0, policy.restart_stable_s / 2):g}"]
                    if app.spare_driver
                    else []
                ),
                "--",
                *rec.argv,
            ]
            # The lock's file description goes to the wrapper; closing our copy (never unlocking:
            # that would release it for the wrapper too) leaves it held by the launch alone.
            proc = subprocess.Popen(
                wrapper,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=REPO_ROOT,
                start_new_session=True,
                pass_fds=(lock.fileno(),),
            )
        try:
            proc.wait(self.spawn_timeout_s)  # the wrapper forks and exits at once
        except subprocess.TimeoutExpired:
            raise LaunchError(
                f"{rec.app}/{rec.slot.value}: the driver's wrapper did not detach; see {rec.log_path}"
            ) from None
        if proc.returncode != 0:
            raise LaunchError(
                f"{rec.app}/{rec.slot.value}: the driver's wrapper failed (exit {proc.returncode}); "
                f"see {rec.log_path}:\n{tail(Path(rec.log_path))}"
            )

    # --- staged next launch -------------------------------------------------------------------
    def stage(self, spec: LaunchSpec, hold_timeout_s: float = 600.0) -> SlotProcess | None:
        """Spawn the slot's next launch beside its running one: it starts its JVM and Spark session, then
        holds until promoted (the module's doc). Returns it (an existing staged copy of the same launch
        is returned, a different one discarded), or None when the slot runs nothing: then there is no
        start-up to overlap and ensure_started spawns as usual."""
        app = spec.definition()
        state_dir = spec.state_dir or self.state_dir
        with self._locked(app.name, spec.slot):
            self._finish_promotion(app.name, spec.slot)
            current = self.read_record(app.name, spec.slot)
            if current is None or not self._held(app.name, spec.slot):
                return None
            self._check_host(current)
            staged = self._staged(app.name, spec.slot)
            if staged is not None:
                if not self._launch_differs(staged, spec, app):
                    return staged
                self._discard(staged)
            slot_dir = self.slot_dir(app.name, spec.slot)
            argv = [
                *self.argv_builder(spec, app, state_dir, self.python),
                HOLD_ARG,
                str(self.record_file(app.name, spec.slot)),
                HOLD_TIMEOUT_ARG,
                f"{hold_timeout_s:g}",
            ]
            intent = self._intent(spec, app, argv)
            (slot_dir / STAGED_PID).unlink(missing_ok=True)
            write_json_text(slot_dir / STAGED_RECORD, intent.to_json())  # intent first, as for a launch
            self._spawn(intent, app, lock_name=STAGED_LOCK, pid_name=STAGED_PID)
            rec = self._completed(intent, wait_s=self.spawn_timeout_s, pid_name=STAGED_PID)
            if rec.pid is None:
                raise LaunchError(
                    f"{app.name}/{spec.slot.value}: the staged driver's wrapper did not report its "
                    f"pid within {self.spawn_timeout_s:.0f}s; see {intent.log_path}"
                )
            write_json_text(slot_dir / STAGED_RECORD, rec.to_json())
            return rec

    def discard_staged(self, app: str, slot: Slot | str) -> bool:
        """End the slot's staged launch, if any (a restart that will not happen); True if there was one."""
        slot = Slot(slot)
        with self._locked(app, slot):
            self._finish_promotion(app, slot)
            staged = self._staged(app, slot)
            if staged is None:
                return False
            self._discard(staged)
            self._remove_ended_tmp(app, slot)
            return True

    def _staged(self, app: str, slot: Slot) -> SlotProcess | None:
        """The slot's live staged launch; the record of a dead one is removed."""
        path = self.slot_dir(app, slot) / STAGED_RECORD
        try:
            rec = SlotProcess.from_json(path.read_text(), str(path))
        except FileNotFoundError:
            return None
        rec = self._completed(rec, pid_name=STAGED_PID)
        if self._held(app, slot, STAGED_LOCK) or self._leftovers(rec):
            return rec
        path.unlink(missing_ok=True)
        return None

    def _promote(self, staged: SlotProcess) -> SlotProcess:
        """The staged launch becomes the slot's launch (the current one is gone): its lock first, then the
        record, which releases its hold. _finish_promotion completes this after a crash in between.

        Its launched_at becomes the promotion's time: what callers count the slot's statuses from
        (the previous launch published until it was gone, after the staged one was spawned)."""
        slot_dir = self.slot_dir(staged.app, staged.slot)
        promoted = replace(staged, launched_at=time.time())
        write_json_text(slot_dir / STAGED_RECORD, promoted.to_json())
        os.replace(slot_dir / STAGED_LOCK, slot_dir / "driver.lock")
        self._write_record(promoted)
        (slot_dir / STAGED_RECORD).unlink(missing_ok=True)
        return promoted

    def _finish_promotion(self, app: str, slot: Slot) -> None:
        """A staged record whose lock was already renamed: the promotion stopped before the record."""
        slot_dir = self.slot_dir(app, slot)
        path = slot_dir / STAGED_RECORD
        if path.exists() and not (slot_dir / STAGED_LOCK).exists():
            self._write_record(SlotProcess.from_json(path.read_text(), str(path)))
            path.unlink()

    def _discard(self, staged: SlotProcess, grace_s: float = 15.0) -> None:
        """SIGTERM (a held launch exits at once), SIGKILL what is left after grace_s; forget it."""
        live = self._leftovers(staged)
        for pid in [staged.pid] if staged.pid in live else live:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while (
            self._held(staged.app, staged.slot, STAGED_LOCK) or self._leftovers(staged)
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self._leftovers(staged):
            _signal(pid, signal.SIGKILL)
        (self.slot_dir(staged.app, staged.slot) / STAGED_RECORD).unlink(missing_ok=True)

    # --- stop -----------------------------------------------------------------------------------
    def exit_info(self, rec: SlotProcess) -> ExitInfo | None:
        """How the launch `rec` ended, if its wrapper (or a stop) recorded it."""
        try:
            raw = json.loads(Path(rec.exit_file).read_text())
        except (FileNotFoundError, ValueError):
            return None
        if raw.get("launch_id") != rec.launch_id:
            return None
        return ExitInfo(
            code=raw.get("code"), ended_at=raw.get("ended_at"), killed_by_stop=bool(raw.get("killed_by_stop"))
        )

    def relaunch(self, rec: SlotProcess) -> Relaunch | None:
        """What the launch's wrapper last did about a driver that died, if anything."""
        try:
            raw = json.loads(restarts_file_of(rec).read_text())
        except (FileNotFoundError, ValueError):
            return None
        if raw.get("launch_id") != rec.launch_id or raw.get("state") not in Relaunch.STATES:
            return None
        return Relaunch(
            state=raw["state"],
            restarts=len(raw.get("restarts") or []),
            at=raw.get("at") or raw.get("next_at") or 0.0,
            code=raw.get("code"),
            reason=raw.get("reason", ""),
            driver_pid=raw.get("driver_pid"),
        )

    def stop(
        self, app: str, slot: Slot | str, grace_s: float = 60.0, self_stop_s: float = 0.0, keep_staged: bool = False
    ) -> StopResult:
        """Stop the slot: wait up to self_stop_s for it to end by itself, then SIGTERM (a graceful stop
        at a batch boundary), then SIGKILL whatever is left after grace_s. A staged next launch is
        discarded too, unless keep_staged (the restart that staged it stops the slot to promote it).

        Write the control-topic stop request (desired STOPPED) BEFORE calling this, with self_stop_s
        long enough for a batch to finish: the harness then ends by itself and SIGTERM only backs it
        up. Idempotent: for a slot already gone it returns how the last launch ended
        (was_running=False)."""
        slot = Slot(slot)
        with self._locked(app, slot):
            try:
                return self._stop(app, slot, grace_s, self_stop_s, keep_staged)
            finally:
                self._remove_ended_tmp(app, slot)

    def _stop(self, app: str, slot: Slot, grace_s: float, self_stop_s: float, keep_staged: bool) -> StopResult:
        """stop() under the slot's lock."""
        self._finish_promotion(app, slot)
        if not keep_staged and (staged := self._staged(app, slot)) is not None:
            self._discard(staged)
        recorded = self.read_record(app, slot)
        if recorded is None:
            return StopResult(False, True, None, None)
        self._check_host(recorded)
        rec = self._completed(recorded, wait_s=self.spawn_timeout_s if self._held(app, slot) else 0.0)
        if rec != recorded:
            self._write_record(rec)
        if not self._held(app, slot) and not self._leftovers(rec):
            return StopResult(False, True, self.exit_info(rec), rec.pid)
        if self_stop_s > 0 and self._wait_gone(rec, self_stop_s):
            return StopResult(True, True, self.exit_info(rec), rec.pid)
        live = self._leftovers(rec)
        # The wrapper forwards SIGTERM to the driver alone; without a wrapper, signal what is left.
        for pid in [rec.pid] if rec.pid in live else live:
            _signal(pid, signal.SIGTERM)
        graceful = self._wait_gone(rec, grace_s)
        if not graceful:
            deadline = time.monotonic() + 10
            while (live := self._leftovers(rec)) and time.monotonic() < deadline:
                for pid in live:
                    _signal(pid, signal.SIGKILL)
                time.sleep(0.1)
            if not self._wait_gone(rec, 5):
                raise LaunchError(
                    f"{app}/{slot.value}: launch {rec.launch_id} still alive after SIGKILL "
                    f"(processes {self._leftovers(rec)})"
                )
            if self.exit_info(rec) is None:
                write_json_text(
                    Path(rec.exit_file),
                    json.dumps(
                        {
                            "launch_id": rec.launch_id,
                            "code": -signal.SIGKILL,
                            "ended_at": time.time(),
                            "killed_by_stop": True,
                        }
                    ),
                )
        return StopResult(True, graceful, self.exit_info(rec), rec.pid)

    def _wait_gone(self, rec: SlotProcess, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._held(rec.app, rec.slot) or self._leftovers(rec):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def wait_gone(self, app: str, slot: Slot | str, timeout_s: float) -> ExitInfo | None:
        """Wait until the slot's recorded launch has ended; TimeoutError if it still runs."""
        rec = self.read_record(app, Slot(slot))
        if rec is None:
            return None
        rec = self._completed(rec)
        if not self._wait_gone(rec, timeout_s):
            raise TimeoutError(f"{app}/{Slot(slot).value} (pid {rec.pid}) still running after {timeout_s:.0f}s")
        return self.exit_info(rec)


# --- helpers ------------------------------------------------------------------------------------------


def restarts_file_of(rec: SlotProcess) -> Path:
    return Path(rec.exit_file).with_name("driver.restarts.json")


def write_json_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _try_flock(fh) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid: int, create_time: float) -> bool:
    """pid is alive, not a zombie, and started when the recorded process did (not a reused pid)."""
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and abs(p.create_time() - create_time) < 0.05
    except psutil.Error:
        return False


def _session_members(sid: int) -> list[int]:
    out = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid:
                out.append(pid)
        except OSError:
            continue
    return out


def _with_launch_id(pids: list[int], launch_id: str) -> list[int]:
    """The live (non-zombie) processes among pids whose environment carries this launch id."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(LAUNCH_ID_ENV) == launch_id:
                out.append(pid)
        except psutil.Error:  # gone, or another user's process (so not ours)
            continue
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
