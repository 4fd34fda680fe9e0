"""bench/sparklog.batch_costs on a hand-written event log: what a slot's batches spent, per batch and per
state store call, from the tasks launched inside the window only."""

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("sparklog", Path(__file__).parents[3] / "bench" / "sparklog.py")
sparklog = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sparklog)


def job(job_id: int, batch: int | None, stages: list[int]) -> dict:
    props = {"streaming.sql.batchId": str(batch)} if batch is not None else {}
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job_id,
        "Submission Time": 0,
        "Stage IDs": stages,
        "Properties": props,
    }


def task(stage: int, launch_ms: int, run_ms: int, cpu_ms: float, acc: dict[str, float]) -> dict:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Info": {
            "Launch Time": launch_ms,
            "Finish Time": launch_ms + run_ms,
            "Accumulables": [{"Name": k, "Update": v} for k, v in acc.items()],
        },
        "Task Metrics": {
            "Executor Run Time": run_ms,
            "Executor CPU Time": cpu_ms * 1e6,
            "Executor Deserialize Time": 5,
            "JVM GC Time": 1,
        },
    }


def write_log(path: Path, events: list[dict], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail)


def state_acc(gets: int, get_ms: float, update_ms: float) -> dict[str, float]:
    return {
        "RocksDB: number of get calls": gets,
        "RocksDB: total get call latency": get_ms,
        "RocksDB: number of put calls": gets,
        "RocksDB: total put call latency": get_ms / 2,
        "time to update": update_ms,
        "number of updated state rows": gets,
        "internal.metrics.x": 99,
    }


def test_sums_the_window_s_tasks_per_batch_and_per_state_call(tmp_path):
    log = tmp_path / "blue" / "eventlog_v2_local-1" / "events_1_local-1"
    write_log(
        log,
        [
            job(0, 0, [0, 1]),  # batch 0: before the window
            task(0, 500, 100, 80, {}),
            task(1, 600, 300, 200, state_acc(10_000, 40, 150)),
            job(1, 1, [2, 3]),  # batch 1, inside
            task(2, 2_000, 50, 40, {"shuffle write time": 2e6}),
            task(3, 2_100, 200, 150, state_acc(20_000, 60, 120)),
            job(2, None, [4]),  # a job outside any batch (a digest): counted, no batch of its own
            task(4, 2_500, 10, 10, {}),
            job(3, 2, [5]),  # batch 2, inside
            task(5, 3_000, 200, 100, state_acc(10_000, 30, 80)),
            job(4, 3, [6]),  # batch 3: after the window
            task(6, 9_000, 999, 999, state_acc(1, 999, 999)),
        ],
        tail='{"Event": "SparkListenerTaskEnd", "Stage',
    )  # a log cut short by the process's end
    costs = sparklog.batch_costs(tmp_path / "blue", 1.0, 5.0)
    assert costs["batches"] == 2 and costs["tasks"] == 4
    per = costs["per_batch_ms"]
    assert per["run_ms"] == pytest.approx((50 + 200 + 10 + 200) / 2)
    assert per["cpu_ms"] == pytest.approx((40 + 150 + 10 + 100) / 2)
    assert per["state_get_ms"] == pytest.approx(45) and per["state_put_ms"] == pytest.approx(22.5)
    assert per["state_update_ms"] == pytest.approx(100) and per["shuffle_write_ms"] == pytest.approx(1)
    assert costs["per_key_us"] == {"state_get": 3.0, "state_put": 1.5}
    assert costs["state_rows_updated_per_batch"] == 15_000


def test_a_window_without_batches_reports_none(tmp_path):
    write_log(tmp_path / "green" / "app-1", [job(0, 0, [0]), task(0, 500, 100, 80, state_acc(5, 1, 1))])
    costs = sparklog.batch_costs(tmp_path / "green", 10.0, 20.0)
    assert costs == {
        "batches": 0,
        "tasks": 0,
        "per_batch_ms": {},
        "per_key_us": {"state_get": None, "state_put": None},
        "state_rows_updated_per_batch": 0,
    }
