"""Spark's event log, reduced to what a benchmark reports: per job, per stage, wall time and tasks;
per batch, where its tasks' time went.

A slot started with `event_log_conf(dir)` writes its event log (uncompressed JSON lines) there;
`jobs(dir)` and `batch_costs(dir, ...)` read it back. Spark names streaming stages after Python call
sites, so stages are identified by their position in the job.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def events(directory: Path):
    """Every event (a dict) of every event log file under `directory`, file by file."""
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue  # a log still being written ends in a partial line


def event_log_conf(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    return ["spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{directory}", "spark.eventLog.compress=false"]


def jobs(directory: Path) -> list[dict]:
    """[{"job", "wall_ms", "stages": [{"stage", "wall_ms", "tasks", "task_ms_max", "task_ms_sum",
    "task_cpu_ms_sum"}]}] in job order, from every event log file under `directory`."""
    out: dict[int, dict] = {}
    stages: dict[int, dict] = {}
    tasks: dict[int, list[tuple[int, float]]] = {}
    for e in events(directory):
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            out[e["Job ID"]] = {"job": e["Job ID"], "start": e["Submission Time"], "stage_ids": e["Stage IDs"]}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in out:
            out[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            si = e["Stage Info"]
            stages[si["Stage ID"]] = {"sub": si.get("Submission Time"), "done": si.get("Completion Time")}
        elif kind == "SparkListenerTaskEnd":
            info, metrics = e["Task Info"], e.get("Task Metrics") or {}
            tasks.setdefault(e["Stage ID"], []).append(
                (info["Finish Time"] - info["Launch Time"], (metrics.get("Executor CPU Time") or 0) / 1e6)
            )
    result = []
    for job in sorted(out.values(), key=lambda j: j["job"]):
        rows = []
        for sid in job["stage_ids"]:
            st, ts = stages.get(sid), tasks.get(sid, [])
            if st is None or st["sub"] is None or st["done"] is None:
                continue  # skipped (e.g. a reused shuffle) or unfinished
            rows.append(
                {
                    "stage": sid,
                    "wall_ms": st["done"] - st["sub"],
                    "tasks": len(ts),
                    "task_ms_max": max((t for t, _ in ts), default=0),
                    "task_ms_sum": sum(t for t, _ in ts),
                    "task_cpu_ms_sum": round(sum(c for _, c in ts)),
                }
            )
        if "end" in job:
            result.append({"job": job["job"], "wall_ms": job["end"] - job["start"], "stages": rows})
    return result


# batch_costs: per-task figures from "Task Metrics" (milliseconds; the CPU time is in nanoseconds) ...
TASK_MS = {"Executor Run Time": "run_ms", "Executor Deserialize Time": "deserialize_ms", "JVM GC Time": "gc_ms"}
# ... and SQL metrics (a task's accumulables) by their display name -> (key, divisor to milliseconds or 1).
SQL_METRICS = {
    "RocksDB: total get call latency": ("state_get_ms", 1),
    "RocksDB: number of get calls": ("state_gets", 1),
    "RocksDB: total put call latency": ("state_put_ms", 1),
    "RocksDB: number of put calls": ("state_puts", 1),
    "time to update": ("state_update_ms", 1),  # the stateful operator's loop over its input, upstream work included
    "time to commit changes": ("state_commit_ms", 1),
    "RocksDB: commit - flush time": ("state_flush_ms", 1),
    "shuffle write time": ("shuffle_write_ms", 1e6),  # nanoseconds
    "number of updated state rows": ("state_rows_updated", 1),
}


def batch_costs(directory: Path, w0_s: float, w1_s: float) -> dict:
    """Where one slot's batches spent their task time, from its tasks launched between the wall-clock
    times w0_s and w1_s: {"batches", "tasks", "per_batch_ms": {...}, "per_key_us": {"state_get",
    "state_put"}, "state_rows_updated_per_batch"}.

    A JFR profile samples Java code only: the state store's RocksDB calls are native and show up as
    thread time, not as code. Spark measures them itself, per task, as SQL metrics. Task times are
    wall times: on a busy host they include a task thread's waits for a core."""
    sums: dict[str, float] = defaultdict(float)
    batches: set[int] = set()
    batch_of_stage: dict[int, int] = {}
    for e in events(directory):
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            batch = (e.get("Properties") or {}).get("streaming.sql.batchId")
            for sid in e.get("Stage IDs", []):
                batch_of_stage[sid] = int(batch) if batch is not None else -1
        elif kind == "SparkListenerTaskEnd":
            info, metrics = e.get("Task Info") or {}, e.get("Task Metrics") or {}
            if not w0_s * 1000 <= info.get("Launch Time", 0) <= w1_s * 1000:
                continue
            sums["tasks"] += 1
            if batch_of_stage.get(e.get("Stage ID"), -1) >= 0:
                batches.add(batch_of_stage[e["Stage ID"]])
            for field, key in TASK_MS.items():
                sums[key] += metrics.get(field) or 0
            sums["cpu_ms"] += (metrics.get("Executor CPU Time") or 0) / 1e6
            for acc in info.get("Accumulables", []):
                if (found := SQL_METRICS.get(acc.get("Name"))) is not None:
                    try:
                        sums[found[0]] += float(acc.get("Update", 0)) / found[1]
                    except (TypeError, ValueError):
                        pass
    n = len(batches)

    def per_key(ms: str, count: str):
        return round(1000 * sums[ms] / sums[count], 2) if sums[count] else None

    return {
        "batches": n,
        "tasks": int(sums["tasks"]),
        "per_batch_ms": {k: round(v / n, 1) for k, v in sorted(sums.items()) if k.endswith("_ms")} if n else {},
        "per_key_us": {
            "state_get": per_key("state_get_ms", "state_gets"),
            "state_put": per_key("state_put_ms", "state_puts"),
        },
        "state_rows_updated_per_batch": round(sums["state_rows_updated"] / n) if n else 0,
    }
