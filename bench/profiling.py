"""Where a slot's CPU goes: its JVM by thread and by hot code, its Python by hot functions.

- JVM threads: CPU seconds per thread group over the window, from /proc/<jvm>/task/*/stat (the
  JVM names its native threads: "Executor task l..." are Spark tasks, "C2 CompilerThre..." the
  JIT, "GC Thread#..."/"G1 ..." the collector, "stream executio..." the micro-batch loop).
- JVM code: Java Flight Recorder (built into the JDK, `jcmd JFR.start`), execution samples
  attributed to the innermost frame that names a known component (RocksDB, from_json, Python
  exchange, shuffle, ...). Samples cover threads running Java code only; native work (RocksDB's
  C++ side, the JIT, GC) shows in the thread table instead. The slots are launched with a recording
  of the same settings already running (`with_launch_recording`): the first recording in a JVM
  instruments the JDK's classes, and started minutes in, that set the JIT compiling again (~17,000
  compilations in a minute, the JIT at 0.3-0.46 cores a JVM against 0.06-0.09), which the window
  then measured. Started at the launch, the window's JIT stays what an unprofiled slot's is.
- Python (driver and the Python workers under the JVM): py-spy, when it is on PATH (it is not a
  project dependency: `pip install py-spy`); otherwise reported as not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")

JVM_COMPONENTS = [
    ("RocksDB state store", re.compile(r"org\.rocksdb|RocksDB")),
    ("from_json parsing", re.compile(r"JsonToStructs|JacksonParser|com\.fasterxml\.jackson")),
    (
        "Python exchange (Arrow/pickle to Python workers)",
        re.compile(
            r"org\.apache\.spark\.api\.python|sql\.execution\.python|PythonRunner|org\.apache\.arrow|ArrowWriter"
        ),
    ),
    ("shuffle", re.compile(r"org\.apache\.spark\.shuffle|ShuffleBlockFetcher|ExternalSorter|BypassMergeSort")),
    (
        "aggregation / generated code",
        re.compile(r"HashAggregate|UnsafeFixedWidthAggregationMap|GeneratedClass|BytesToBytesMap"),
    ),
    ("checkpoint files (Hadoop FS)", re.compile(r"org\.apache\.hadoop|CheckpointFileManager|HDFSMetadataLog")),
    # Java serialization: the prefetched rows a simple stream reader hands to Spark are stored as a
    # serialized block (spark.serializer), and every task is serialized.
    (
        "serialization (blocks, tasks)",
        re.compile(
            r"java\.io\.Object(Output|Input)Stream|java\.io\.ObjectStreamClass|JavaSerializ|KryoSerializ|esotericsoftware"
        ),
    ),
    # Rows (UnsafeRow, projections) live in catalyst.expressions too: per-row work, not planning.
    (
        "rows (UnsafeRow, projections)",
        re.compile(r"org\.apache\.spark\.sql\.catalyst\.expressions|org\.apache\.spark\.unsafe"),
    ),
    ("query planning (Catalyst)", re.compile(r"org\.apache\.spark\.sql\.catalyst|QueryExecution|SparkPlan\.")),
    ("scheduling / RPC", re.compile(r"io\.netty|org\.apache\.spark\.rpc|org\.apache\.spark\.scheduler")),
    ("py4j gateway", re.compile(r"py4j")),
]

# HotSpot's thread names: the JIT's "C1/C2 CompilerThre..."; the collector's "GC Thread#N" (both
# collectors' workers), G1's "G1 Conc#N" / "G1 Refine#N" / "G1 Main Marker" / "G1 Service", and the
# "VM Thread", which runs the safepoint operations a collection is one of.
JIT_THREAD = re.compile(r"Compiler")
GC_THREAD = re.compile(r"^(GC Thread|G1 |VM Thread)")

THREAD_GROUPS = [
    ("Spark tasks", re.compile(r"^Executor task")),
    ("JIT compiler", JIT_THREAD),
    ("GC", GC_THREAD),
    ("micro-batch loop", re.compile(r"^stream execut")),
    ("Python worker I/O", re.compile(r"(stdout writer|stdin writer|Worker Monitor|python)", re.I)),
    ("py4j gateway", re.compile(r"^Thread-\d+")),
    ("RPC / scheduler", re.compile(r"(dispatcher|netty|rpc|RemoteBlock|shuffle|task-result|driver-heartbeat)", re.I)),
    ("state store maintenance", re.compile(r"(state-store|maintenance)", re.I)),
]


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{tid: (thread name, CPU seconds)} of a process's live threads."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            f = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        out[int(task.name)] = (name, (int(f[11]) + int(f[12])) / TICKS)
    return out


def group_threads(before: dict, after: dict) -> dict[str, float]:
    groups: Counter = Counter()
    for tid, (name, cpu) in after.items():
        delta = cpu - before.get(tid, (name, 0.0))[1]
        label = next((g for g, rx in THREAD_GROUPS if rx.search(name)), f"other ({re.sub(r'[0-9#-]+$', '', name)})")
        groups[label] += delta
    return {k: round(v, 1) for k, v in groups.most_common() if v >= 0.05}


def jfr_summary(path: Path, top: int = 15) -> dict:
    """Execution samples of a JFR file: shares by component and the hottest methods."""
    proc = subprocess.Popen(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    components, methods, samples = Counter[str](), Counter[str](), 0
    frames: list[str] | None = None
    assert proc.stdout is not None  # stdout=PIPE
    for line in proc.stdout:
        s = line.strip()
        if s == "stackTrace = [":
            frames = []
        elif frames is not None and s == "]":
            samples += 1
            if frames:
                methods[frames[0]] += 1
                comp = next((c for f in frames for c, rx in JVM_COMPONENTS if rx.search(f)), None)
                components[comp or f"other ({'.'.join(frames[0].split('.')[:3])})"] += 1
            frames = None
        elif frames is not None and s != "...":
            frames.append(s.split("(", 1)[0])
    proc.wait()
    share = lambda c: [(k, round(100.0 * v / max(samples, 1), 1)) for k, v in c.most_common(top)]  # noqa: E731
    return {"samples": samples, "components_pct": share(components), "top_methods_pct": share(methods)}


# Leaf functions that are waits, not work: py-spy cannot always tell a thread blocked in a C call
# (a socket read, librdkafka's consume) from a running one.
PY_WAITS = re.compile(
    r"^(manager \(.*daemon\.py\)|read_int |SocketIO\.readinto|select |poll |accept |wait |"
    r"Follower\._run |FinalizerWorker\.run|.*\.poll \(.*accumulators\.py\))"
)


def pyspy_summary(path: Path, top: int = 12) -> dict:
    """py-spy raw (collapsed) stacks: hottest leaf functions and most-present source files, over
    the samples that were not waiting (PY_WAITS)."""
    leaf, files, samples, waiting = Counter[str](), Counter[str](), 0, 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if "(" in f]
        if not frames:
            continue
        if PY_WAITS.match(_short(frames[-1])):
            waiting += n
            continue
        samples += n
        leaf[_short(frames[-1])] += n
        for f in {_file(fr) for fr in frames}:
            files[f] += n
    share = lambda c: [(k, round(100.0 * v / max(samples, 1), 1)) for k, v in c.most_common(top)]  # noqa: E731
    return {"samples": samples, "waiting_samples": waiting, "top_functions_pct": share(leaf), "files_pct": share(files)}


def _file(frame: str) -> str:
    m = re.search(r"\(([^:)]+)", frame)
    path = m.group(1) if m else frame
    parts = path.split("/")
    return "/".join(parts[-2:])


def _short(frame: str) -> str:
    m = re.match(r"\s*(\S+) \(([^:)]+)", frame)
    return f"{m.group(1)} ({_file(frame)})" if m else frame


# A continuous recording from the JVM's launch, kept in memory for a short while only: it is there to have
# the JDK's classes instrumented before anything is compiled (module docstring).
LAUNCH_RECORDING = "-XX:StartFlightRecording=settings=profile,name=bench-launch,maxage=30s"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def with_launch_recording(conf: list[str]) -> list[str]:
    """Spark settings (KEY=VALUE) for a profiled slot: the launch recording added to the driver JVM's
    options, before any given (Spark splits them at spaces, HotSpot takes the last of a flag)."""
    given = [c.split("=", 1)[1] for c in conf if c.split("=", 1)[0] == JAVA_OPTIONS]
    rest = [c for c in conf if c.split("=", 1)[0] != JAVA_OPTIONS]
    return [*rest, f"{JAVA_OPTIONS}={' '.join([LAUNCH_RECORDING, *given])}"]


class Profiler:
    def __init__(self, out_dir: Path, seconds: float):
        self.out, self.seconds = out_dir, int(seconds)
        self.out.mkdir(parents=True, exist_ok=True)
        self.pyspy = shutil.which("py-spy")
        self.slots: dict[str, dict] = {}
        self._spies: list[tuple[str, subprocess.Popen, Path]] = []

    def start_slot(self, name: str, driver_pid: int) -> None:
        import psutil

        driver = psutil.Process(driver_pid)
        jvm = next(p for p in driver.children(recursive=True) if p.name() == "java")
        jfr = self.out / f"{name}.jfr"
        subprocess.run(
            [
                "jcmd",
                str(jvm.pid),
                "JFR.start",
                f"name=bench-{name}",
                "settings=profile",
                f"duration={self.seconds}s",
                f"filename={jfr}",
            ],
            check=True,
            capture_output=True,
        )
        self.slots[name] = {"jvm": jvm.pid, "jfr": jfr, "threads": thread_cpu(jvm.pid)}
        if self.pyspy:
            pythons = [("driver", driver_pid)] + [
                (f"workers-{p.pid}", p.pid) for p in jvm.children() if p.name().startswith("python")
            ]
            for part, pid in pythons:
                out = self.out / f"{name}-{part}.txt"
                # The driver alone (its subprocesses are the JVM's workers, profiled apart).
                follow = [] if part == "driver" else ["--subprocesses"]
                proc = subprocess.Popen(
                    [
                        self.pyspy,
                        "record",
                        "--pid",
                        str(pid),
                        *follow,
                        "--nonblocking",
                        "--rate",
                        "50",
                        "--duration",
                        str(self.seconds),
                        "--format",
                        "raw",
                        "--output",
                        str(out),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                self._spies.append((f"{name}.{'driver' if part == 'driver' else 'python_workers'}", proc, out))

    def finish(self) -> dict:
        result: dict = {"seconds": self.seconds, "py_spy": bool(self.pyspy)}
        for name, s in self.slots.items():
            try:
                result[f"{name}.jvm_threads_cpu_s"] = group_threads(s["threads"], thread_cpu(s["jvm"]))
            except FileNotFoundError:
                result[f"{name}.jvm_threads_cpu_s"] = "the JVM exited"
            for _ in range(self.seconds + 30):
                if s["jfr"].exists() and s["jfr"].stat().st_size > 0:
                    break
                import time

                time.sleep(1)
            result[f"{name}.jvm_code"] = jfr_summary(s["jfr"]) if s["jfr"].exists() else "no JFR file"
        merged: dict[str, list[Path]] = {}
        for label, proc, out in self._spies:
            try:
                proc.wait(self.seconds + 30)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(10)
            if out.exists():
                merged.setdefault(label, []).append(out)
        for label, outs in merged.items():
            joined = self.out / f"{label}.all.txt"
            joined.write_text("".join(p.read_text(errors="replace") for p in outs))
            result[f"{label}.python"] = pyspy_summary(joined)
        if not self.pyspy:
            result["python"] = "py-spy not on PATH: Python side not profiled (pip install py-spy to include it)"
        return result
