"""An hour on the product path (issue 75, item 4): steady load with cutovers and rolling upgrades through
Airflow's REST API, and whether anything drifts.

    .venv/bin/python bench/soak.py                                   # -> bench/results/soak.json / .png
    .venv/bin/python bench/soak.py --minutes 8 --cutover-every-min 3 --upgrade-every-min 6 --window-min 2 \\
        --name scratch/soak_smoke                                    # a short trial (bench/results/scratch/)

Starts the platform as `make up` does (bench/dag_platform.py's platform(): baton.local's Platform on free
ports, its own state directory; BATON_KAFKA_BOOTSTRAP selects an external broker), runs baton_topics, then
baton_lifecycle {"app": "click_counts", "action": "start", "slot": "both"} and the pre-warm, the verifier
(baton.tools.verify tail, read_committed) and the load generator's process at --rate events/s over --users
users, exactly as bench/dag_handoff.py does (its start_both / start_load / end_load). After --warm seconds
the soak's clock starts (t = 0) and runs --minutes; during it, through the REST API with the forms'
defaults:

    every --cutover-every-min   baton_cutover          {"app": "click_counts"}
    every --upgrade-every-min   baton_rolling_upgrade  {"app": "click_counts", "version": V}

V alternates v2, v1, v2, ... (include/apps/versions/click_counts/ has v2; v1 is the registry's own; v3
cannot restore v1/v2 state; an upgrade to the version that runs is refused). Handoffs due at the same
time run one after the other (cutover first): the DAGs refuse a second handoff while one runs; one that
falls due while another still runs starts when that one ended. None is started at or after the end; the
load goes on until the last one has ended. The health DAG and the watcher run as deployed.

Measured (t = 0 is the soak's start; the warm-up before it is not counted):
- lost / duplicated / wrong over the whole input (pre-warm and warm-up included), p50 / p99 / p99.99 of
  the events sent from t = 0 on;
- each handoff: kind, DAG, conf, run id, state, start (since t = 0) and duration, and a failed task's reason;
- per --window-min window (5 by default; a last shorter window is kept, marked "full": false, and left
  out of the drifts): p50 / p99 of the events sent in it; CPU cores (bench/common.CpuMeter, through
  dag_platform.Meter, restarted each window and following the slots through their restarts) and mean
  RSS bytes (summed over each process tree, sampled every --sample-s) of the broker, Airflow (its whole
  process tree: scheduler, triggerer, API server, DAG processor, task processes and the Spark helpers
  they start), Airflow's metadata PostgreSQL (`airflow_db`, apart), and each slot (blue, green: driver
  + JVM + Python workers; a restarted slot's new tree from its restart on);
- drifts: the last span over the first span, where a span is the first (last) two full windows or 10
  minutes of them, whichever is shorter (at 5-minute windows: 10 minutes; at 2-minute windows: 4
  minutes; never more than half the full windows): `p99_drift` is the p99 of the events sent in the last
  span over that of the first; `broker_cpu_drift`, `broker_rss_drift` the same ratio of the spans'
  window means.
Targets: every handoff succeeded; 0 / 0 / 0; p99.99 <= 5000 ms; each drift <= 1.25 (a drift that could
not be measured, e.g. an external broker without BATON_BENCH_KAFKA_PID, is None and not judged).

Everything started is stopped at the end by pid (platform() stops Airflow, the slots, the broker), also on
an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, Procs, StatusWatch, log, machine, write_result  # noqa: E402
from dag_handoff import APP, caught_up, code_rev, end_load, slot_lag, start_both, start_load  # noqa: E402
from dag_platform import (  # noqa: E402
    Meter,
    airflow_or_helper,
    broker_kind,
    broker_pid,
    platform,
    poll_run,
    run_dag,
    slot_driver,
    task_reason,
    task_rows,
    wait_dags,
)
from dag_report import P99_99_TARGET_MS, analyse  # noqa: E402

from baton.records import Slot  # noqa: E402

DRIFT_TARGET = 1.25
DRIFT_SPAN_S = 600.0  # "the first / last 10 minutes", at most two windows
UPGRADE_VERSIONS = ("v2", "v1")  # v1: the registry's own (include/apps/click_counts.yaml); v2: versions/
GROUPS = ("broker", "airflow", "airflow_db", "blue", "green")


# --- the pure parts -----------------------------------------------------------------------------


def handoff_schedule(
    minutes: float, cutover_every_min: float, upgrade_every_min: float, versions: tuple[str, ...] = UPGRADE_VERSIONS
) -> list[dict]:
    """The handoffs in the order they fall due: {"at_s", "kind", "dag_id", "conf"}; a cutover every
    cutover_every_min, an upgrade every upgrade_every_min (0: none), each strictly before the end; the
    upgrades' versions cycle through `versions`; at the same time the cutover comes first."""
    end = minutes * 60.0
    due = []
    for kind, every in (("cutover", cutover_every_min), ("rolling_upgrade", upgrade_every_min)):
        if every > 0:
            k = 1
            while k * every * 60.0 < end - 1e-9:
                due.append((round(k * every * 60.0, 3), kind))
                k += 1
    due.sort(key=lambda d: (d[0], d[1] != "cutover"))
    out, upgrades = [], 0
    for at, kind in due:
        if kind == "cutover":
            out.append({"at_s": at, "kind": kind, "dag_id": "baton_cutover", "conf": {"app": APP}})
        else:
            out.append(
                {
                    "at_s": at,
                    "kind": kind,
                    "dag_id": "baton_rolling_upgrade",
                    "conf": {"app": APP, "version": versions[upgrades % len(versions)]},
                }
            )
            upgrades += 1
    return out


def window_bounds(duration_s: float, window_s: float) -> list[tuple[float, float, bool]]:
    """[a, b) of each window since t = 0, and whether it is full; a last shorter one (>= 1 s) is kept."""
    out, a = [], 0.0
    while a + window_s <= duration_s + 1e-9:
        out.append((a, a + window_s, True))
        a += window_s
    if duration_s - a >= 1.0:
        out.append((a, duration_s, False))
    return out


def drift_windows(full: int, window_s: float, span_s: float = DRIFT_SPAN_S) -> int:
    """How many full windows make the first (last) span: two, or as many as fit in span_s if that is
    shorter, at least one, and at most half of them (the spans do not overlap; 0 with fewer than two)."""
    if full < 2:
        return 0
    return max(1, min(2, int(span_s // window_s + 1e-9), full // 2))


def window_means(samples: list[tuple[float, dict]], bounds: list[tuple[float, float, bool]]) -> list[dict]:
    """Per window: the mean of each group's samples (t since t = 0, {group: value or None}) taken in
    [a, b); a group without a sample there: None."""
    out = []
    for a, b, _ in bounds:
        sums: dict[str, list[float]] = {}
        for t, values in samples:
            if a <= t < b:
                for g, v in values.items():
                    if v is not None:
                        sums.setdefault(g, []).append(v)
        out.append({g: sum(vs) / len(vs) for g, vs in sums.items()})
    return out


def ratio(last: float | None, first: float | None) -> float | None:
    if last is None or first is None or first <= 0 or math.isnan(first) or math.isnan(last):
        return None
    return round(last / first, 3)


def span_mean(windows: list[dict], key: str, n: int, last: bool) -> float | None:
    """The mean of `key` over the first (last) n full windows; None if any of them lacks it."""
    full = [w for w in windows if w["full"]]
    if n <= 0 or len(full) < n:
        return None
    picked = full[-n:] if last else full[:n]
    values = [w.get(key) for w in picked]
    present = [float(v) for v in values if v is not None]
    if len(present) < len(values):
        return None
    return sum(present) / n


def drifts(windows: list[dict], n: int, first_p99: float | None, last_p99: float | None) -> dict:
    """p99_drift (the spans' own p99s, given), broker_cpu_drift and broker_rss_drift (window means)."""
    return {
        "p99_drift": ratio(last_p99, first_p99),
        "broker_cpu_drift": ratio(
            span_mean(windows, "broker_cpu_cores", n, True), span_mean(windows, "broker_cpu_cores", n, False)
        ),
        "broker_rss_drift": ratio(
            span_mean(windows, "broker_rss_bytes", n, True), span_mean(windows, "broker_rss_bytes", n, False)
        ),
    }


def soak_targets(result: dict) -> dict:
    """Every handoff succeeded; 0 / 0 / 0; p99.99 <= 5 s; each drift <= 1.25 (None: not measured, not judged)."""
    met = {
        "handoffs_succeeded": bool(result["handoffs"]) and all(h["state"] == "success" for h in result["handoffs"]),
        "exact": result["lost"] == result["duplicated"] == result["wrong"] == 0,
        "p99_99": result["p99_99_ms"] <= P99_99_TARGET_MS,
    }
    for key in ("p99_drift", "broker_cpu_drift", "broker_rss_drift"):
        met[key] = None if result[key] is None else result[key] <= DRIFT_TARGET
    return {
        "p99_99_ms": P99_99_TARGET_MS,
        "drift": DRIFT_TARGET,
        "met": met,
        "all_met": all(v is not False for v in met.values()),
        "not_judged": [k for k, v in met.items() if v is None],
    }


# --- resources over the run ---------------------------------------------------------------------


class Sampler:
    """In a thread: every sample_s the RSS of each group's process tree; a dag_platform.Meter (CPU)
    restarted at each window boundary (t0 + k * window_s), following the slots through restarts."""

    def __init__(self, plat, procs: Procs, t0: float, window_s: float, sample_s: float):
        self.plat, self.procs, self.t0, self.window_s, self.sample_s = plat, procs, t0, window_s, sample_s
        self.rss: list[tuple[float, dict]] = []
        self.cpu: list[tuple[float, float, dict]] = []  # (a, b) since t0, the Meter's report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._meter = self._new_meter()
        self._meter_from = 0.0

    def _db_pid(self) -> int | None:
        try:
            return self.plat.postgres.proc.pid()
        except Exception:
            return None

    def _new_meter(self) -> Meter:
        meter = Meter(self.plat, self.procs, APP)
        if (pid := self._db_pid()) is not None:
            meter.cpu.track("airflow_db", pid)
        return meter.start()

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _roots(self) -> list[tuple[str, int | None, object]]:
        state = self.plat.settings.state_dir
        return [
            ("blue", slot_driver(state, APP, Slot.BLUE), None),
            ("green", slot_driver(state, APP, Slot.GREEN), None),
            ("broker", broker_pid(self.plat), None),
            ("airflow_db", self._db_pid(), None),
            ("airflow", self.plat.airflow.proc.pid(), airflow_or_helper),
        ]

    def sample_rss(self) -> dict:
        """RSS bytes per group, each process counted once (for the first group whose tree holds it)."""
        import psutil

        claimed: set[int] = set()
        out: dict[str, float | None] = {}
        for group, pid, _ in self._roots():
            if pid is None:
                out[group] = None
                continue
            try:
                top = psutil.Process(pid)
                tree = [top] + top.children(recursive=True)
            except psutil.Error:
                out[group] = None
                continue
            total = 0
            for p in tree:
                if p.pid in claimed:
                    continue
                claimed.add(p.pid)
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            out[group] = float(total)
        return out

    def _close_window(self, now_rel: float) -> None:
        report = self._meter.stop()
        self.cpu.append((self._meter_from, now_rel, report))
        self._meter_from = now_rel

    def _run(self) -> None:
        while not self._stop.wait(self.sample_s):
            try:
                now = time.time() - self.t0
                self.rss.append((now, self.sample_rss()))
                self._meter.follow()
                if now >= (len(self.cpu) + 1) * self.window_s:
                    self._close_window(now)
                    self._meter = self._new_meter()
            except Exception as exc:  # a process gone mid-sample: say so, sample on
                log(f"sampler: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._close_window(time.time() - self.t0)


def cpu_by_window(cpu: list[tuple[float, float, dict]], bounds: list[tuple[float, float, bool]]) -> list[dict]:
    """Each window's CPU cores per group: the Meter report whose span holds most of the window (the
    Meter restarts at the boundaries, within a sample interval of them)."""
    out: list[dict] = []
    for a, b, _ in bounds:
        best, overlap = None, 0.0
        for ca, cb, report in cpu:
            o = min(b, cb) - max(a, ca)
            if o > overlap:
                best, overlap = report, o
        if best is None:
            out.append({})
            continue
        by = best["by_role"]

        def cores(*prefixes, by=by):
            return round(sum(v["cores"] for k, v in by.items() if k.split(".")[0] in prefixes), 3)

        out.append(
            {
                "broker": cores("broker"),
                "airflow": cores("airflow", "helpers"),
                "airflow_db": cores("airflow_db"),
                "blue": cores("blue"),
                "green": cores("green"),
                "machine_busy": best["machine_busy_cores"],
                "steal": best["steal_cores"],
            }
        )
    return out


# --- the run --------------------------------------------------------------------------------------


class _Followed:
    """poll_run's meter: the Sampler follows the slots itself."""

    @staticmethod
    def follow() -> list[str]:
        return []


def run_handoff(client, plat, bootstrap: str, watch: StatusWatch, app, h: dict, t0: float, timeout_s: float) -> dict:
    start = time.time()
    triggered = client.trigger(h["dag_id"], h["conf"])
    run_id = triggered["dag_run_id"]
    log(f"+{start - t0:.0f}s (due +{h['at_s']:.0f}s): triggered {h['dag_id']} {json.dumps(h['conf'])}: run {run_id}")
    dag_run, tis = poll_run(
        client, plat, _Followed(), h["dag_id"], run_id, start, timeout_s, where=lambda: slot_lag(bootstrap, watch, app)
    )
    end = time.time()
    tasks = task_rows(tis, start)
    for r in tasks:
        if r["state"] in ("failed", "up_for_retry") or (r["try_number"] or 0) > 1:
            r["reason"] = task_reason(client, plat, h["dag_id"], run_id, r)
    state = dag_run.get("state")
    log(
        f"{h['dag_id']}: {state} in {end - start:.0f}s"
        + "".join(f"\n  {r['task_id']}: {r['reason']}" for r in tasks if r.get("reason"))
    )
    return {
        "kind": h["kind"],
        "dag_id": h["dag_id"],
        "conf": h["conf"],
        "run_id": run_id,
        "state": state,
        "due_s": h["at_s"],
        "start_s": round(start - t0, 1),
        "end_s": round(end - t0, 1),
        "duration_s": round(end - start, 1),
        "failed_tasks": [r["task_id"] for r in tasks if r["state"] in ("failed", "upstream_failed")],
        "tasks": tasks,
    }


def sleep_until(t: float, loadgen) -> None:
    while (left := t - time.time()) > 0:
        if loadgen.poll() is not None:
            raise RuntimeError(f"the load generator exited ({loadgen.returncode}) during the soak")
        time.sleep(min(left, 5.0))


def soak(plat, client, procs: Procs, args, watch: StatusWatch) -> dict:
    bootstrap = plat.settings.kafka_bootstrap
    app, prewarm = start_both(client, watch, bootstrap, args)
    work = Path(tempfile.mkdtemp(prefix="soak-", dir=plat.settings.state_dir))
    loadgen, seen_path, sends_dir = start_load(procs, bootstrap, app, args, work)
    t_load = time.time()
    log(f"load {args.rate:.0f}/s over {args.users} users; warm-up {args.warm:.0f}s, then {args.minutes:g} min")
    time.sleep(args.warm)
    caught = caught_up(bootstrap, watch, app, args.rate)
    log(f"warm-up done: {caught}")

    window_s = args.window_min * 60.0
    schedule = handoff_schedule(args.minutes, args.cutover_every_min, args.upgrade_every_min)
    log(
        "handoffs due: "
        + ", ".join(f"+{h['at_s']:.0f}s {h['kind']} {h['conf'].get('version', '')}".rstrip() for h in schedule)
    )
    t0 = time.time()
    end = t0 + args.minutes * 60.0
    sampler = Sampler(plat, procs, t0, window_s, args.sample_s).start()
    handoffs = []
    try:
        for h in schedule:
            sleep_until(t0 + h["at_s"], loadgen)
            handoffs.append(run_handoff(client, plat, bootstrap, watch, app, h, t0, args.timeout))
        sleep_until(end, loadgen)
    finally:
        sampler.stop()
    t_end = time.time()
    sent, pieces, obs, active, drained, t_load_end = end_load(
        procs, bootstrap, watch, sends_dir, seen_path, args.prewarm, args.drain_timeout, t0
    )
    raw = dict(
        prewarm=prewarm,
        sent=sent,
        pieces=pieces,
        obs=obs,
        active=active,
        drained=drained,
        caught=caught,
        t0=t0,
        t_load=t_load,
        t_end=t_end,
        t_load_end=t_load_end,
        rss=sampler.rss,
        cpu=sampler.cpu,
        handoffs=handoffs,
    )
    return summarise(args, **raw)


def summarise(
    args, prewarm, sent, pieces, obs, active, drained, caught, t0, t_load, t_end, t_load_end, rss, cpu, handoffs
) -> dict:
    """The result from what the run collected: latency and verdict (dag_report.analyse), the windows, drifts."""
    window_s = args.window_min * 60.0
    duration = t_end - t0
    bounds = window_bounds(duration, window_s)
    n = drift_windows(sum(1 for b in bounds if b[2]), window_s)
    full = [b for b in bounds if b[2]]
    spans = {f"w{i}": (t0 + a, t0 + b) for i, (a, b, _) in enumerate(bounds)}
    if n:
        spans["first"] = (t0 + full[0][0], t0 + full[n - 1][1])
        spans["last"] = (t0 + full[-n][0], t0 + full[-1][1])
    result = analyse(args, prewarm, sent, pieces, obs, t0, t_load, t_end, t_load_end, windows=spans)
    lat = result.pop("latency_windows")
    rss = window_means(rss, bounds)
    cpu = cpu_by_window(cpu, bounds)
    windows = []
    for i, (a, b, is_full) in enumerate(bounds):
        w = {
            "start_s": round(a, 1),
            "end_s": round(b, 1),
            "full": is_full,
            "events": lat[f"w{i}"]["events"],
            "p50_ms": lat[f"w{i}"]["p50_ms"],
            "p99_ms": lat[f"w{i}"]["p99_ms"],
            "p99_99_ms": lat[f"w{i}"]["p99_99_ms"],
            "max_ms": lat[f"w{i}"]["max_ms"],
            "handoffs": [hh["kind"] for hh in handoffs if a <= hh["start_s"] < b],
        }
        for g in GROUPS:
            w[f"{g}_cpu_cores"] = cpu[i].get(g)
            w[f"{g}_rss_bytes"] = round(rss[i][g]) if rss[i].get(g) is not None else None
        w["machine_busy_cores"], w["steal_cores"] = cpu[i].get("machine_busy"), cpu[i].get("steal")
        windows.append(w)
    first_p99 = lat["first"]["p99_ms"] if n else None
    last_p99 = lat["last"]["p99_ms"] if n else None
    result.update(
        {
            "duration_s": round(duration, 1),
            "minutes": args.minutes,
            "window_s": window_s,
            "cutover_every_min": args.cutover_every_min,
            "upgrade_every_min": args.upgrade_every_min,
            "handoffs": handoffs,
            "windows": windows,
            "drift_windows": n,
            "drift_span_s": n * window_s,
            "p99_first_ms": first_p99,
            "p99_last_ms": last_p99,
            **drifts(windows, n, first_p99, last_p99),
            "active_after": active.value,
            "drained": drained,
            "warm_caught_up": caught,
        }
    )
    return result


def nan_if_none(x: float | None, scale: float = 1.0) -> float:
    return math.nan if x is None else x / scale


def plot(result: dict, path: Path) -> None:
    from common import pyplot

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    ws = result["windows"]
    mid = [(w["start_s"] + w["end_s"]) / 120 for w in ws]
    lat = [r for r in result["timeline"]["latency"] if r["t_s"] >= 0 and not math.isnan(r["p99_ms"])]
    ax1.plot([r["t_s"] / 60 for r in lat], [r["p99_ms"] / 1000 for r in lat], lw=0.4, color="0.75", label="p99 per s")
    for key, label in (("p99_ms", "p99 per window"), ("p50_ms", "p50 per window")):
        ax1.plot(mid, [nan_if_none(w[key], 1000) for w in ws], marker="o", label=label)
    ax1.axhline(P99_99_TARGET_MS / 1000, color="red", ls="--", lw=0.8, label="p99.99 target")
    ax1.set_yscale("log")
    ax1.set_ylabel("send -> readable (s)")
    ax1.legend(loc="upper left", fontsize=8)
    ok = sum(h["state"] == "success" for h in result["handoffs"])
    ax1.set_title(
        f"soak: {result['duration_s'] / 60:.0f} min at {result['rate']:.0f} ev/s, {ok}/{len(result['handoffs'])} "
        f"handoffs succeeded; lost/dup/wrong {result['lost']}/{result['duplicated']}/{result['wrong']}; "
        f"p99.99 {result['p99_99_ms'] / 1000:.2f}s; drift p99 {result['p99_drift']}, broker CPU "
        f"{result['broker_cpu_drift']}, RSS {result['broker_rss_drift']}",
        fontsize=9,
    )
    ax2.plot(
        mid, [nan_if_none(w["broker_cpu_cores"]) for w in ws], marker="o", color="tab:blue", label="broker CPU (cores)"
    )
    ax2.set_ylabel("broker CPU (cores)")
    ax3 = ax2.twinx()
    ax3.plot(
        mid,
        [nan_if_none(w["broker_rss_bytes"], 2**20) for w in ws],
        marker="s",
        color="tab:orange",
        label="broker RSS (MiB)",
    )
    ax3.set_ylabel("broker RSS (MiB)")
    ax2.legend(loc="upper left", fontsize=8)
    ax3.legend(loc="upper right", fontsize=8)
    ax2.set_xlabel(
        "minutes since the soak started (windows: markers at their middle; purple: cutover, "
        "orange: rolling upgrade, red: failed)"
    )
    for ax in (ax1, ax2):
        for w in ws:
            ax.axvline(w["start_s"] / 60, color="0.85", lw=0.6)
        for h in result["handoffs"]:
            colour = (
                "tab:red" if h["state"] != "success" else ("tab:purple" if h["kind"] == "cutover" else "tab:orange")
            )
            ax.axvspan(h["start_s"] / 60, h["end_s"] / 60, color=colour, alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def own_plugins() -> None:
    """This checkout's plugins/ ahead on the PYTHONPATH Airflow's processes inherit (baton.local.airflow
    puts the repository root there, not plugins/): the DAGs import baton_airflow as a package, and with
    a venv shared between worktrees its editable install maps that to the checkout the venv was made in,
    so the tasks ran another checkout's operators against this one's baton (a rolling upgrade failed on
    it: 'ControlPlane' object has no attribute 'require')."""
    plugins = str(REPO / "plugins")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != plugins]
    os.environ["PYTHONPATH"] = os.pathsep.join([plugins, *paths])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="the soak's length, from t = 0 (after --warm)")
    ap.add_argument("--rate", type=float, default=20085.0)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--malformed", type=float, default=0.01)
    ap.add_argument("--prewarm", type=int, default=100_000, help="events both slots process before the paced load")
    ap.add_argument("--warm", type=float, default=60.0, help="seconds of paced load before t = 0 (not counted)")
    ap.add_argument("--cutover-every-min", type=float, default=10.0, help="0: no cutovers")
    ap.add_argument("--upgrade-every-min", type=float, default=20.0, help="0: no rolling upgrades")
    ap.add_argument("--window-min", type=float, default=5.0, help="the windows' length")
    ap.add_argument("--sample-s", type=float, default=5.0, help="how often the RSS is sampled")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give each DAG run this long")
    ap.add_argument("--drain-timeout", type=float, default=300.0)
    ap.add_argument("--logs", type=Path, default=None, help="keep the processes', tasks' and slots' logs here")
    ap.add_argument("--name", default="soak", help="results file name under bench/results (scratch/NAME: git-ignored)")
    args = ap.parse_args()
    args.tail = 0.0  # analyse's record: no fixed tail, the load ends with the soak (or the last handoff)
    load = os.getloadavg()
    own_plugins()
    with platform(args.logs) as (plat, client, procs):
        wait_dags(client, {"baton_topics", "baton_lifecycle", "baton_health", "baton_cutover", "baton_rolling_upgrade"})
        run_dag(client, "baton_topics", {}, 300)
        watch = StatusWatch(plat.settings.kafka_bootstrap, APP)
        try:
            result = soak(plat, client, procs, args, watch)
        finally:
            watch.close()  # its consumer must not outlive the broker
        result["broker"] = broker_kind(plat.settings)
    result["targets"] = soak_targets(result)
    result["code"] = code_rev()
    result["machine"] = {**machine(), "load_avg_at_start": [round(x, 2) for x in load]}
    (RESULTS / args.name).parent.mkdir(parents=True, exist_ok=True)
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    keys = [
        "duration_s",
        "rate",
        "lost",
        "duplicated",
        "wrong",
        "p50_ms",
        "p99_ms",
        "p99_99_ms",
        "p99_drift",
        "broker_cpu_drift",
        "broker_rss_drift",
    ]
    print(
        json.dumps(
            {
                **{k: result.get(k) for k in keys},
                "handoffs": [
                    (h["kind"], h["conf"].get("version"), h["state"], h["duration_s"]) for h in result["handoffs"]
                ],
                "windows": [
                    (w["start_s"], w["p99_ms"], w["broker_cpu_cores"], w["broker_rss_bytes"]) for w in result["windows"]
                ],
                "targets_met": result["targets"]["met"],
            },
            indent=1,
        )
    )
    log(f"wrote {path} and {path.with_suffix('.png')}")
    if not result["targets"]["all_met"]:
        log(f"targets not met: {[k for k, ok in result['targets']['met'].items() if ok is False]}")
    # Like bench/dag_handoff.py: a failed handoff or wrong output fails; latency and drift are for the record.
    met = result["targets"]["met"]
    return 0 if met["handoffs_succeeded"] and met["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
