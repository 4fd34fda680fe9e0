"""State size and speed of the click count with a state TTL (click_counts_ttl) under steady key churn,
against the same app without one (click_counts), at the seed's rate.

    .venv/bin/python bench/ttl_state.py [--minutes 10] [--rate 20085]

Component benchmark: for each app, its own broker and one slot (active) of the app as shipped
(include/apps/, TTL idle 60 s of event time, disorder 10 s), in its harness as a subprocess
(bench/common.py). A producer thread sends --rate click events per second in real time for --minutes,
event time = the wall clock (record timestamps too), with steady user churn (baton/tools/churn.py):
every second --new-users-per-s users arrive and as many leave, so the users ever seen grow all run long
while the users seen within the TTL do not.

Figures, from the slot's status records (one per batch): state rows against the bound the TTL implies
(users with an event within idle + disorder + the longest batch's event-time span: the watermark is
the newest event time minus disorder, and a key leaves the state in the first batch after the
watermark passes its last event + idle), the processed rate, and the end-to-end latency each batch
reports (its oldest record's timestamp to the batch's end: the worst latency of the batch's events).
Writes bench/results/ttl_state.json (`max_state_rows`, `bound_rows`, `p99_ms`, `rate`, and the same for
the app without TTL) and bench/results/ttl_state.png.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    StatusWatch,
    batch_records,
    bench,
    churn_args,
    create_app,
    log,
    machine,
    pyplot,
    save_lower_axes,
    start_slot,
    stop_run,
    total,
    wait_processed,
    write_result,
)
from confluent_kafka import Producer  # noqa: E402

from baton.apps import APPS_DIR, load_definition  # noqa: E402
from baton.records import Slot, SlotState  # noqa: E402
from baton.tools.churn import Churn  # noqa: E402

NAME = "ttl_state"


class ChurnProducer(threading.Thread):
    """Sends churn events 0, 1, ... at `churn.rate` per second of wall clock, keyed by user, each with
    its event time as its record timestamp."""

    def __init__(self, bootstrap: str, topic: str, churn: Churn):
        super().__init__(name="churn-producer", daemon=True)
        self.topic, self.churn = topic, churn
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            while not self.stop.is_set():
                due = int((time.monotonic() - t0) * self.churn.rate)
                while self.sent < due:
                    user, ts = self.churn.event(self.sent)
                    try:
                        self.producer.produce(
                            self.topic, self.churn.value(self.sent), user.encode(), timestamp=ts * 1000
                        )
                    except BufferError:
                        self.producer.poll(0.05)
                        continue
                    self.sent += 1
                self.producer.poll(0)
                time.sleep(0.005)
            if self.producer.flush(60):
                raise RuntimeError("the producer could not deliver every event within 60 s")
        except BaseException as exc:  # re-raised by the main thread
            self.error = exc
        finally:
            del self.producer


def run_app(app_file: str, args, env_note: dict) -> dict:
    app = load_definition(APPS_DIR / app_file)
    with bench(f"ttl-{app.name}") as b:
        create_app(b.bootstrap, app)
        watch = StatusWatch(b.bootstrap, app.name)
        proc = start_slot(b, Path(app.path), Slot.BLUE)
        alive = lambda: proc.poll() is None  # noqa: E731
        producer = None
        try:
            watch.wait(
                lambda r: r.slot is Slot.BLUE and r.state is SlotState.RESTORING, 180, "saying the query started", alive
            )
            start = time.time()
            churn = Churn(
                rate=args.rate, new_users_per_s=args.new_users_per_s, active_users=args.active_users, base_ts=int(start)
            )
            producer = ChurnProducer(b.bootstrap, app.input.topic, churn)
            producer.start()
            log(f"{app.name}: sending {churn.rate} events/s for {args.minutes} min")
            end = time.monotonic() + args.minutes * 60
            while time.monotonic() < end and alive() and producer.error is None:
                time.sleep(1)
            producer.stop.set()
            producer.join()
            if producer.error is not None:
                raise producer.error
            sent, duration_s = producer.sent, time.time() - start
            wait_processed(watch, Slot.BLUE, sent, 300, alive)
            drained_s = time.time() - start - duration_s
        finally:
            stop_run(b, watch, producer)
    batches = [r for r in batch_records(watch, Slot.BLUE) if r.input_rows > 0]
    starts = [0] + [total(r.processed) for r in batches[:-1]]
    span_s = max(-(-(total(r.processed) - s) // churn.rate) + 1 for s, r in zip(starts, batches))
    ttl = app.state.ttl
    # Users with an event in an event-time interval of w seconds: w * new_users_per_s + active_users.
    window_s = (ttl.idle_ms + ttl.disorder_ms) // 1000 + span_s + 1 if ttl else None
    bound = window_s * churn.new_users_per_s + churn.active_users if window_s is not None else None
    steady = batches[len(batches) // 5 :]  # after the start-up's backlog
    lat = sorted(r.latency_ms for r in steady if r.latency_ms is not None)
    users_seen = (int(duration_s) + 1) * churn.new_users_per_s + churn.active_users
    return {
        "app": app.name,
        "ttl": {"idle_ms": ttl.idle_ms, "disorder_ms": ttl.disorder_ms} if ttl else None,
        "rate_target": churn.rate,
        "events": sent,
        "duration_s": round(duration_s, 1),
        "rate": round(sent / duration_s),
        "drained_after_s": round(drained_s, 1),
        "users_seen": users_seen,
        "batches": len(batches),
        "batch_span_s_max": span_s,
        "max_state_rows": max((r.state_rows for r in batches if r.state_rows is not None), default=None),
        "last_state_rows": batches[-1].state_rows,
        "bound_rows": bound,
        "p50_ms": lat[len(lat) // 2] if lat else None,
        "p99_ms": lat[int(len(lat) * 0.99)] if lat else None,
        "max_latency_ms": lat[-1] if lat else None,
        "batch_ms_median": sorted(r.batch_ms for r in steady)[len(steady) // 2],
        "series": [
            {
                "t_s": round(r.ts_ms / 1000 - start, 1),
                "state_rows": r.state_rows,
                "latency_ms": r.latency_ms,
                "batch_ms": r.batch_ms,
            }
            for r in batches
        ],
        "machine": env_note,
    }


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for key, color in (("ttl", "tab:blue"), ("plain", "tab:gray")):
        r = result[key]
        t = [p["t_s"] for p in r["series"]]
        ax.plot(t, [p["state_rows"] for p in r["series"]], color=color, label=f"{r['app']} state rows")
        bx.plot(t, [p["latency_ms"] or 0 for p in r["series"]], color=color, label=f"{r['app']} batch latency (oldest)")
    ax.axhline(
        result["ttl"]["bound_rows"],
        color="tab:red",
        linestyle="--",
        label="bound: users within idle + disorder + a batch",
    )
    ax.set_ylabel("rows")
    ax.set_title(
        f"state TTL under churn: {result['ttl']['rate_target']} events/s, idle "
        f"{result['ttl']['ttl']['idle_ms'] // 1000} s of event time"
    )
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    save_lower_axes(fig, bx, "ms", path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    churn_args(ap, NAME, minutes=10.0, rate=20085, new_users_per_s=200, active_users=2000)
    ap.add_argument(
        "--first",
        choices=("ttl", "plain"),
        default="ttl",
        help="which app runs first (the host drifts: A/B in both orders)",
    )
    args = ap.parse_args()
    env = machine()
    files = {"ttl": "click_counts_ttl.yaml", "plain": "click_counts.yaml"}
    order = [args.first] + [k for k in files if k != args.first]
    result: dict[str, Any] = {k: run_app(files[k], args, env) for k in order}
    result["order"] = order
    t, p = result["ttl"], result["plain"]
    result["summary"] = {
        "max_state_rows": t["max_state_rows"],
        "bound_rows": t["bound_rows"],
        "within_bound": t["max_state_rows"] <= t["bound_rows"],
        "p99_ms": t["p99_ms"],
        "rate": t["rate"],
        "p99_ms_without_ttl": p["p99_ms"],
        "rate_without_ttl": p["rate"],
        "state_rows_without_ttl": p["max_state_rows"],
    }
    out = write_result(args.name, result)
    plot(result, out.with_suffix(".png"))
    for k, v in result["summary"].items():
        print(f"{k}: {v}")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
