"""Spark's event log, reduced to what a benchmark reports: per job, per stage, wall time and tasks.

A slot started with `event_log_conf(dir)` writes its event log (uncompressed JSON lines) there;
`jobs(dir)` reads it back. Spark names streaming stages after Python call sites, so stages are
identified by their position in the job.
"""

from __future__ import annotations

import json
from pathlib import Path


def event_log_conf(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    return ["spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{directory}", "spark.eventLog.compress=false"]


def jobs(directory: Path) -> list[dict]:
    """[{"job", "wall_ms", "stages": [{"stage", "wall_ms", "tasks", "task_ms_max", "task_ms_sum",
    "task_cpu_ms_sum"}]}] in job order, from every event log file under `directory`."""
    out: dict[int, dict] = {}
    stages: dict[int, dict] = {}
    tasks: dict[int, list[tuple[int, float]]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a log still being written ends in a partial line
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
                        (info["Finish Time"] - info["Launch Time"], (metrics.get("Executor CPU Time") or 0) / 1e6))
    result = []
    for job in sorted(out.values(), key=lambda j: j["job"]):
        rows = []
        for sid in job["stage_ids"]:
            st, ts = stages.get(sid), tasks.get(sid, [])
            if st is None or st["sub"] is None or st["done"] is None:
                continue  # skipped (e.g. a reused shuffle) or unfinished
            rows.append({"stage": sid, "wall_ms": st["done"] - st["sub"], "tasks": len(ts),
                         "task_ms_max": max((t for t, _ in ts), default=0), "task_ms_sum": sum(t for t, _ in ts),
                         "task_cpu_ms_sum": round(sum(c for _, c in ts))})
        if "end" in job:
            result.append({"job": job["job"], "wall_ms": job["end"] - job["start"], "stages": rows})
    return result
