"""The product-path benchmarks' figures and picture (bench/dag_handoff.py): latency and the longest
owed output gap from the verifier's observations and the exact send log, the targets, and the PNG
(latency over time, each slot's rate, the DAG's tasks)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
from common import pyplot

from baton.tools.loadgen import SendLog, user_id

P99_99_TARGET_MS, GAP_TARGET_S, UPGRADE_TARGET_S = 5000, 2.0, 180.0


def owed_gap(
    send_times: np.ndarray, lat: np.ndarray, out_times: np.ndarray, since: float
) -> tuple[float, float | None]:
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


def analyse(
    args,
    prewarm,
    sent: SendLog,
    pieces: list[dict],
    obs,
    t0: float,
    t_load: float,
    t_end: float,
    t_load_end: float,
    windows: dict[str, tuple[float, float]] | None = None,
) -> dict:
    """The run's verdict and latency; `windows` (name -> [a, b) in epoch seconds): the latency of the events
    sent in each, apart (latency_windows)."""
    from baton.tools.verify import (
        align_users,
        event_latencies,
        latency_report,
        latency_timeline,
        longest_gap_at,
        verify,
    )

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
    apart = {
        name: latency_report(lat[(times >= a) & (times < b)], obs.times[(obs.times >= a) & (obs.times < b)]).summary()
        for name, (a, b) in (windows or {}).items()
    }
    warm = (times >= t_load) & ~in_run
    warm_report = latency_report(lat[warm], obs.times[(obs.times >= t_load) & (obs.times < t0)])
    gap, gap_end = owed_gap(times, lat, obs.times, t0)
    plain_gap, plain_end = longest_gap_at(obs.times[obs.times >= t0])
    all_times = sent.send_times()
    on = sum(p["elapsed_s"] for p in pieces)
    bursts = [
        (round(p["started"] - t0, 1), round(p["started"] + p["elapsed_s"] - t0, 1)) for p in pieces if p.get("burst")
    ]
    return {
        "rate_target": args.rate,
        "rate": round(sum(p["events"] for p in pieces) / max(on, 1e-9), 1),
        "events": int(all_times.size) + args.prewarm,
        "events_in_run": int((all_times >= t0).sum()),
        "users": args.users,
        "malformed_share": args.malformed,
        "prewarm_events": args.prewarm,
        "warm_s": args.warm,
        "tail_s": args.tail,
        "lost": len(verdict.lost),
        "duplicated": len(verdict.duplicated),
        "wrong": len(verdict.wrong),
        "verdict": {
            **verdict.summary(),
            "ok": verdict.ok,
            "unreadable_output": obs.unreadable,
            "examples": {"lost": verdict.lost[:5], "duplicated": verdict.duplicated[:5], "wrong": verdict.wrong[:5]},
        },
        "p50_ms": round(report.p50_ms, 1),
        "p99_ms": round(report.p99_ms, 1),
        "p99_99_ms": round(report.p99_99_ms, 1),
        "max_ms": round(report.max_ms, 1),
        "max_gap_ms": round(gap * 1000),
        "max_gap_end_s": round(gap_end - t0, 1) if gap_end is not None else None,
        "max_output_gap_ms": round(plain_gap * 1000),  # between any two output records (input pauses included)
        "max_output_gap_end_s": round(plain_end - t0, 1) if plain_end is not None else None,
        "latency": report.summary(),
        "latency_warmup": warm_report.summary(),
        "latency_windows": apart,
        "load_s": round(t_load_end - t0, 1),
        "bursts": bursts,
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
    met = {
        "succeeded": result["succeeded"],
        "exact": result["lost"] == result["duplicated"] == result["wrong"] == 0,
        "p99_99": result["p99_99_ms"] <= P99_99_TARGET_MS,
        "max_gap": result["max_gap_ms"] <= GAP_TARGET_S * 1000,
    }
    if result["kind"].startswith("rolling_upgrade"):
        met["duration"] = result["duration_s"] <= UPGRADE_TARGET_S
    return {
        "p99_99_ms": P99_99_TARGET_MS,
        "max_gap_s": GAP_TARGET_S,
        "duration_s": UPGRADE_TARGET_S if result["kind"].startswith("rolling_upgrade") else None,
        "met": met,
        "all_met": all(met.values()),
    }


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


STATE_COLOURS = {
    "success": "tab:green",
    "failed": "tab:red",
    "upstream_failed": "tab:orange",
    "skipped": "0.8",
    "up_for_retry": "tab:pink",
}


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    tasks = [r for r in result["tasks"] if r["start_s"] is not None]
    fig, (ax1, ax2, ax3) = plt.subplots(
        3, 1, figsize=(12, 10), sharex=True, gridspec_kw={"height_ratios": [3, 2, max(2, len(tasks) * 0.3)]}
    )
    lat = [r for r in result["timeline"]["latency"] if not math.isnan(r["p50_ms"])]
    xs = [r["t_s"] for r in lat]
    for key, label, style in (
        ("max_ms", "max", {"lw": 0.6, "color": "0.6"}),
        ("p99_ms", "p99", {"lw": 1}),
        ("p50_ms", "p50", {"lw": 1}),
    ):
        ax1.plot(*broken(xs, [r[key] / 1000 for r in lat], 1.5), label=label, **style)
    ax1.axhline(P99_99_TARGET_MS / 1000, color="red", ls="--", lw=0.8, label="p99.99 target")
    if result["max_gap_end_s"] is not None:
        end = result["max_gap_end_s"]
        ax1.axvspan(
            end - result["max_gap_ms"] / 1000,
            end,
            color="red",
            alpha=0.25,
            label=f"longest gap {result['max_gap_ms'] / 1000:.1f}s",
        )
    if result.get("cutover_at_s") is not None:
        ax1.axvline(result["cutover_at_s"], color="tab:purple", ls="--", lw=0.9, label="cutover written")
    ax1.set_yscale("log")
    ax1.set_ylabel("send -> readable (s)\nby send time")
    ax1.legend(loc="upper left", fontsize=8)
    ok = "succeeded" if result["succeeded"] else f"{result['state']}"
    ax1.set_title(
        f"{result['dag_id']} {json.dumps(result['conf'])} at {result['rate']:.0f} ev/s"
        f"{' (bursty)' if result['bursts'] else ''}: {ok} in {result['duration_s']:.0f}s; "
        f"lost/dup/wrong {result['lost']}/{result['duplicated']}/{result['wrong']}; p50 "
        f"{result['p50_ms'] / 1000:.2f}s p99 {result['p99_ms'] / 1000:.2f}s p99.99 "
        f"{result['p99_99_ms'] / 1000:.2f}s; gap {result['max_gap_ms'] / 1000:.1f}s",
        fontsize=9,
    )
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
        ax3.text(
            end + 1,
            i,
            f"{r['task_id']} {r['duration_s'] if r['duration_s'] is not None else '?'}s",
            va="center",
            fontsize=7,
        )
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
