"""A small client for Airflow 3's REST API (/api/v2), used by the demo, tests and backfill scripts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx


class AirflowAPIError(RuntimeError):
    def __init__(self, status: int, body: str, what: str):
        super().__init__(f"{what}: HTTP {status}: {body}")
        self.status, self.body = status, body


def log_line(line: Any) -> str:
    """One structured task-log record as text: its event, and a failure's exception type and message."""
    if not isinstance(line, dict):
        return str(line)
    errors = [
        f"{e.get('exc_type')}: {e.get('exc_value')}" for e in line.get("error_detail") or [] if isinstance(e, dict)
    ]
    return " ".join([str(line.get("event", "")), *errors])


class AirflowClient:
    def __init__(self, base_url: str, username: str, password: str, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self._auth = (username, password)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)
        self._token: str | None = None

    def token(self) -> str:
        """A JWT for this user (e.g. for the Baton page's metrics: a scraper's bearer token)."""
        return self._headers()["Authorization"].removeprefix("Bearer ")

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            r = self._http.post("/auth/token", json={"username": self._auth[0], "password": self._auth[1]})
            if r.status_code >= 300:
                raise AirflowAPIError(r.status_code, r.text, "login")
            self._token = r.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def request(self, method: str, path: str, what: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        r = self._http.request(method, f"/api/v2{path}", headers={**self._headers(), **(headers or {})}, **kwargs)
        if r.status_code == 401:  # token expired: log in again once
            self._token = None
            r = self._http.request(method, f"/api/v2{path}", headers={**self._headers(), **(headers or {})}, **kwargs)
        if r.status_code >= 300:
            raise AirflowAPIError(r.status_code, r.text, what)
        return r.json() if r.content else None

    def dags(self) -> list[dict[str, Any]]:
        return self.request("GET", "/dags", "list DAGs", params={"limit": 100})["dags"]

    def wait_for_dags(
        self, timeout_s: float = 120.0, prefix: str = "baton_", should_stop: Callable[[], bool] = lambda: False
    ) -> list[dict[str, Any]]:
        """Wait until the DAG processor has parsed at least one DAG whose id starts with prefix (or until
        `should_stop()`, e.g. a Ctrl-C)."""
        deadline = time.monotonic() + timeout_s
        while True:
            dags = [d for d in self.dags() if d["dag_id"].startswith(prefix)]
            if dags or time.monotonic() > deadline or should_stop():
                return sorted(dags, key=lambda d: d["dag_id"])
            time.sleep(2)

    def connection_types(self) -> dict[str, str]:
        """Connection type -> its name, as the connection form lists them (the UI's API: Airflow 3's
        public one has no such list)."""
        r = self._http.get("/ui/connections/hook_meta", headers=self._headers())
        if r.status_code >= 300:
            raise AirflowAPIError(r.status_code, r.text, "list connection types")
        return {t["connection_type"]: t["hook_name"] for t in r.json()}

    def import_errors(self) -> list[dict[str, Any]]:
        return self.request("GET", "/importErrors", "list import errors")["import_errors"]

    def trigger(
        self, dag_id: str, conf: dict[str, Any], run_id: str | None = None, attempts: int = 4
    ) -> dict[str, Any]:
        """Create a run. A 5xx (an API server or database briefly unavailable) is retried with the same
        run id: a run the failed attempt did create is found (409) instead of doubled."""
        run_id = run_id or f"manual__{uuid.uuid4().hex[:12]}"
        body: dict[str, Any] = {"conf": conf, "logical_date": None, "dag_run_id": run_id}
        for attempt in range(1, attempts + 1):
            try:
                return self.request("POST", f"/dags/{dag_id}/dagRuns", f"trigger {dag_id}", json=body)
            except AirflowAPIError as exc:
                if exc.status == 409 and attempt > 1:
                    return self.dag_run(dag_id, run_id)
                if exc.status < 500 or attempt == attempts:
                    raise
                time.sleep(attempt)
        raise AssertionError("unreachable")

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}", f"get run {run_id}")

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout_s: float = 300.0, should_stop: Callable[[], bool] = lambda: False
    ) -> dict[str, Any]:
        """The run once it ended, or as it stands after timeout_s (or when `should_stop()`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.dag_run(dag_id, run_id)
            if run["state"] in ("success", "failed") or time.monotonic() > deadline or should_stop():
                return run
            time.sleep(2)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        return self.request(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            f"xcom {task_id}",
            params={"map_index": map_index, "deserialize": True},
        )["value"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", f"tasks of {run_id}")[
            "task_instances"
        ]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> list[str]:
        """A task try's log lines (Airflow 3 serves structured records: each one's event text)."""
        body = self.request(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            f"log of {task_id} try {try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        return [log_line(line) for line in (body or {}).get("content") or []]

    def failure_reasons(self, dag_id: str, run_id: str) -> list[str]:
        """Why each failed task of a run failed: the `reason` its operator left in XCom (Baton's operators
        say it there), else the last error line of its log; one "<task>: <why>" line a task."""
        reasons = []
        for ti in self.task_instances(dag_id, run_id):
            if ti.get("state") != "failed":
                continue
            task, index = ti["task_id"], ti.get("map_index", -1)
            name = task if index in (-1, None) else f"{task}[{index}]"
            try:
                why = self.xcom(dag_id, run_id, task, key="reason", map_index=index)
            except AirflowAPIError:
                why = None
            if not why:
                lines = self.task_log(dag_id, run_id, task, ti.get("try_number") or 1, index)
                errors = [line for line in lines if "Error" in line or "error" in line]
                why = (errors or lines or ["(no log)"])[-1]
            reasons.append(f"{name}: {why}")
        return reasons

    def clear_tasks(self, dag_id: str, run_id: str, task_ids: list[str]) -> Any:
        """Clear (re-run) tasks of a run, as the UI's Clear does: the retry path of an operator."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": task_ids,
            "only_failed": False,
            "reset_dag_runs": True,
        }
        return self.request("POST", f"/dags/{dag_id}/clearTaskInstances", f"clear {task_ids} of {run_id}", json=body)

    def close(self) -> None:
        self._http.close()
