"""State size of the windowed click app (click_windows) under steady key churn.

    .venv/bin/python bench/window_state.py [--minutes 5] [--rate 1000]

Starts its own broker and one slot of the app as shipped (include/apps/click_windows.yaml), active,
in its harness as a subprocess (bench/common.py). Once the slot's query has started, a producer
thread sends --rate click events per second in real time for --minutes, with event time = start +
i // rate (event time follows the wall clock) and steady user churn: every second
--new-users-per-s users arrive and as many leave (baton/tools/churn.py), so the (user, window) keys
ever seen grow all run long. Events go round-robin over the input partitions, so a batch's
processed offsets say how many events (0..n-1) it has read, hence which keys it has seen (exact to
within one event per partition).

Figures: the slot's status records (one per batch: state rows and the harness's state bytes) and
the size on disk of the slot's state checkpoint, sampled every 2 s. Writes
bench/results/window_state.json (series and maxima) and bench/results/window_state.png: state rows
against keys seen over time, with the bound the app's window and watermark imply, and state bytes.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sys
import threading
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    StatusWatch,
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
from baton.generations import slot_paths  # noqa: E402
from baton.records import Slot, SlotState, StatusRecord  # noqa: E402
from baton.tools.churn import Churn  # noqa: E402
from spark_apps.apps.click_windows import WATERMARK_DELAY_S, WINDOW_S, max_windows_in_state, window_start  # noqa: E402

NAME = "window_state"


class SteadyProducer(threading.Thread):
    """Sends churn events 0, 1, ... at `churn.rate` per second of wall clock, round-robin over the
    partitions; records the distinct (user, window) keys among the first n events for every n,
    and how many events had been sent when."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, churn: Churn):
        super().__init__(name="churn-producer", daemon=True)
        self.topic, self.partitions, self.churn = topic, partitions, churn
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.keys_after = array("q", [0])  # keys_after[n]: distinct keys among events 0..n-1
        self.sent_at: list[tuple[float, int]] = []  # (epoch s, events sent by then)
        self.users: set[str] = set()
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # re-raised by the main thread
            self.error = exc

    def _run(self) -> None:
        window, in_window, keys = None, set[str](), 0
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.churn.rate)
            while self.sent < due:
                i = self.sent
                user, ts = self.churn.event(i)
                # Event times never go back (no jitter): a window's keys are all seen when the next starts.
                if window_start(ts) != window:
                    window, in_window = window_start(ts), set()
                if user not in in_window:
                    in_window.add(user)
                    keys += 1
                self.keys_after.append(keys)
                self.users.add(user)
                while True:
                    try:
                        self.producer.produce(
                            self.topic, self.churn.value(i), user.encode(), partition=i % self.partitions
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.sent += 1
            self.sent_at.append((time.time(), self.sent))
            self.producer.poll(0)
            time.sleep(0.01)
        left = self.producer.flush(60)
        del self.producer  # gone before the broker stops, so librdkafka logs no reconnects
        if left:
            raise RuntimeError(f"the producer could not deliver {left} events within 60 s")

    def sent_by(self, t: float) -> int:
        i = bisect.bisect_right(self.sent_at, (t, float("inf"))) - 1
        return self.sent_at[i][1] if i >= 0 else 0


def dir_bytes(path: Path) -> int:
    size = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                size += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:  # removed by Spark's cleanup while we walk
                pass
    return size


def series(records: list[tuple[float, StatusRecord]], start: float, producer: SteadyProducer) -> list[dict]:
    pts = []
    for arrived, s in records:
        if s.batch_id < 0 or s.processed is None:
            continue
        n = min(total(s.processed), len(producer.keys_after) - 1)
        pts.append(
            {
                "t_s": round(arrived - start, 2),
                "batch_id": s.batch_id,
                "records": n,
                "keys_seen": producer.keys_after[n],
                "state_rows": s.state_rows,
                "state_bytes": s.state_bytes,
                "batch_ms": s.batch_ms,
                "lag_records": max(0, producer.sent_by(arrived) - n),
            }
        )
    return pts


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    pts, disk = result["series"], result["checkpoint_bytes_series"]
    t = [p["t_s"] for p in pts]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=[3, 2])
    ax.plot(t, [p["keys_seen"] for p in pts], label="(user, window) keys seen", color="tab:gray")
    ax.plot(t, [p["state_rows"] for p in pts], label="state rows", color="tab:blue", linewidth=2)
    ax.axhline(
        result["state_rows_bound"],
        color="tab:red",
        linestyle="--",
        label=f"bound: {result['windows_in_state_bound']} windows x {result['max_keys_per_window']} keys",
    )
    ax.set_ylabel("rows / keys")
    ax.set_title(
        f"click_windows under churn: {result['rate']} events/s, {result['churn']['new_users_per_s']} "
        f"new users/s, {WINDOW_S} s windows, {WATERMARK_DELAY_S} s watermark"
    )
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    bx.plot(
        t,
        [p["state_bytes"] / 1e6 for p in pts],
        color="tab:green",
        label="status state_bytes (RocksDB memory until the first snapshot, then SST files)",
    )
    bx.plot(
        [d["t_s"] for d in disk],
        [d["bytes"] / 1e6 for d in disk],
        color="tab:purple",
        label="state checkpoint on disk (changelogs + snapshots)",
    )
    save_lower_axes(fig, bx, "MB", path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 1000 events/s leaves a 2-core machine ahead of the input, so batches stay a second or two of
    # traffic and the figure shows the steady state rather than a backlog being worked off.
    churn_args(ap, NAME, minutes=5.0, rate=1000, new_users_per_s=100, active_users=1000)
    ap.add_argument("--logs", type=Path, help="keep the slot's log in this directory")
    args = ap.parse_args()

    app = load_definition(APPS_DIR / "click_windows.yaml")
    env = machine()
    with bench("window-state", keep=args.logs) as b:
        create_app(b.bootstrap, app)
        watch = StatusWatch(b.bootstrap, app.name)
        proc = start_slot(b, Path(app.path), Slot.BLUE)
        alive = lambda: proc.poll() is None  # noqa: E731
        producer: SteadyProducer | None = None
        try:
            watch.wait(
                lambda r: r.slot is Slot.BLUE and r.state is SlotState.RESTORING, 180, "saying the query started", alive
            )
            checkpoint = slot_paths(b.tmp / "state", app.name, Slot.BLUE, 0).checkpoint / "state"
            start = time.time()
            churn = Churn(
                rate=args.rate, new_users_per_s=args.new_users_per_s, active_users=args.active_users, base_ts=int(start)
            )
            producer = SteadyProducer(b.bootstrap, app.input.topic, app.input.partitions, churn)
            producer.start()
            log(f"sending {churn.rate} events/s for {args.minutes} min")
            disk: list[dict] = []
            end = time.monotonic() + args.minutes * 60
            while time.monotonic() < end and alive() and producer.error is None:
                disk.append({"t_s": round(time.time() - start, 2), "bytes": dir_bytes(checkpoint)})
                time.sleep(2)
            producer.stop.set()
            producer.join()
            if producer.error is not None:
                raise producer.error
            duration_s = time.time() - start
            load_after = [round(x, 2) for x in os.getloadavg()]
            log(f"sent {producer.sent} events; waiting for the slot to read them all")
            wait_processed(watch, Slot.BLUE, producer.sent, 180, alive)
            disk.append({"t_s": round(time.time() - start, 2), "bytes": dir_bytes(checkpoint)})
        except BaseException:
            last = next((r for r in reversed(watch.of(Slot.BLUE)) if r.batch_id >= 0), None)
            log(f"sent {getattr(producer, 'sent', 0)} events; last batch status: {last}")
            log(f"slot log:\n{b.procs.tail('blue')}")
            raise
        finally:
            stop_run(b, watch, producer)
        records = [(t, r) for t, r in watch.records if r.slot is Slot.BLUE]

    pts = series(records, start, producer)
    if not pts:
        raise RuntimeError("the slot published no batch status")
    # A batch's event-time span: the events it read over the rate, + 1 s for a partial second.
    starts = [0] + [p["records"] for p in pts[:-1]]
    span_s = max(-(-(p["records"] - s) // churn.rate) + 1 for s, p in zip(starts, pts))
    windows = max_windows_in_state(span_s)
    per_window = churn.max_keys_per_window(WINDOW_S)
    later = pts[len(pts) // 2 :]
    result = {
        "app": app.name,
        "window_s": WINDOW_S,
        "watermark_delay_s": WATERMARK_DELAY_S,
        "rate": churn.rate,
        "churn": {"new_users_per_s": churn.new_users_per_s, "active_users": churn.active_users},
        "duration_s": round(duration_s, 1),
        "events": producer.sent,
        "batches": len(pts),
        "users_seen_total": len(producer.users),
        "keys_seen_total": pts[-1]["keys_seen"],
        "state_rows_max": max(p["state_rows"] for p in pts),
        "state_rows_max_second_half": max(p["state_rows"] for p in later),
        "state_rows_last": pts[-1]["state_rows"],
        "state_bytes_max": max(p["state_bytes"] for p in pts),
        "state_bytes_max_second_half": max(p["state_bytes"] for p in later),
        "checkpoint_bytes_max": max(d["bytes"] for d in disk),
        "checkpoint_bytes_max_second_half": max(d["bytes"] for d in disk[len(disk) // 2 :]),
        "batch_span_s_max": span_s,
        "windows_in_state_bound": windows,
        "max_keys_per_window": per_window,
        "state_rows_bound": windows * per_window,
        "batch_ms_median": sorted(p["batch_ms"] for p in pts)[len(pts) // 2],
        "batch_ms_max": max(p["batch_ms"] for p in pts),
        "lag_records_max": max(p["lag_records"] for p in pts),
        # Other work on the machine slows batches and so lengthens their event-time span.
        "machine": {**env, "load_avg_at_end": load_after},
        "series": pts,
        "checkpoint_bytes_series": disk,
    }
    out = write_result(args.name, result)
    plot(result, out.with_suffix(".png"))
    for k, v in result.items():
        if not k.endswith("series"):
            print(f"{k}: {v}")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
