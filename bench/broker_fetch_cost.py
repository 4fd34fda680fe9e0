"""What one reader's fetches cost the broker as its topic grows (issue 24: the embedded broker's share).

    .venv/bin/python bench/broker_fetch_cost.py                      # the embedded Tansu, 7 min at 20,085/s
    BATON_KAFKA_BOOTSTRAP=127.0.0.1:39092 BATON_BENCH_KAFKA_PID=<pid> \\
        .venv/bin/python bench/broker_fetch_cost.py --name broker_fetch_cost_apache_kafka

A broker benchmark, no Spark: the load generator writes a fresh 4-partition topic at --rate (its 50 ms
batching, as in every benchmark), and one tail reader (read_committed, a fetch held up to 200 ms, as
the slots' readers) fetches in every other window of --window-s and is paused in the rest. The
broker's CPU in the windows without the reader is what producing costs it; in those with it, the
difference is what the reader's fetches cost, divided by the fetches it sent (librdkafka's own count)
the broker's CPU per fetch. On Tansu 0.6.0 with memory storage every fetch that finds records passes
over every batch the partition holds, so that figure grows with the run (docs/operations.md, "The embedded
broker"); on Apache Kafka a fetch finds its place in an index and the figure stays flat.
Writes bench/results/NAME.json and NAME.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import RESULTS, bench, log, machine, proc_cpu_s, pyplot, write_result  # noqa: E402

from baton.kafka.admin import TopicSpec, ensure_topics  # noqa: E402

PARTITIONS = 4


@dataclass(frozen=True)
class Window:
    t_s: float  # its start, seconds since the load started
    reading: bool  # the reader fetched in it
    broker_cores: float
    fetches_per_s: float  # the reader's fetch requests (0 while paused)


def fetch_costs(windows: list[Window]) -> list[dict]:
    """Per window with the reader: its fetches' cost to the broker, against the mean of the windows
    without it on either side (what producing cost then): cores and ms of broker CPU per fetch."""
    out = []
    for i, w in enumerate(windows):
        if not w.reading:
            continue
        quiet = [windows[j].broker_cores for j in (i - 1, i + 1) if 0 <= j < len(windows) and not windows[j].reading]
        if not quiet:
            continue
        extra = max(0.0, w.broker_cores - sum(quiet) / len(quiet))
        per_fetch = extra / w.fetches_per_s * 1000 if w.fetches_per_s > 0 else None
        out.append(
            {
                "t_s": w.t_s,
                "reader_cores": round(extra, 3),
                "fetches_per_s": round(w.fetches_per_s, 1),
                "broker_ms_per_fetch": None if per_fetch is None else round(per_fetch, 2),
            }
        )
    return out


def reader(bootstrap: str, topic: str, flag: Path, counts: Path) -> None:
    """Tail `topic` while `flag` exists, paused while it does not; write the fetch count to `counts`."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    fetches = [0]

    def on_stats(js: str) -> None:
        stats = json.loads(js)
        fetches[0] = sum(b.get("req", {}).get("Fetch", 0) for b in stats.get("brokers", {}).values())
        tmp = counts.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fetches": fetches[0], "t": time.time()}))
        os.replace(tmp, counts)

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "broker-fetch-cost",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 200,
            "statistics.interval.ms": 500,
            "stats_cb": on_stats,
        }
    )
    parts = [TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)]
    c.assign(parts)
    c.pause(parts)
    paused = True
    while True:
        want = flag.exists()
        if want and paused:
            c.resume(parts)
            paused = False
        elif not want and not paused:
            c.pause(parts)
            paused = True
        c.consume(10_000, 0.1)


def read_count(path: Path) -> tuple[int, float]:
    for _ in range(50):
        try:
            d = json.loads(path.read_text())
            return int(d["fetches"]), float(d["t"])
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.1)
    raise RuntimeError(f"the reader wrote no fetch count to {path}")


def run(args) -> dict:
    with bench("broker-fetch-cost") as b:
        if b.broker_pid is None:
            raise SystemExit(
                "the broker's CPU is the measurement: give BATON_BENCH_KAFKA_PID with BATON_KAFKA_BOOTSTRAP"
            )
        topic = f"fetch-cost-{int(time.time())}"
        ensure_topics(b.bootstrap, [TopicSpec(topic, PARTITIONS)])
        flag, counts = b.tmp / "reading", b.tmp / "fetches.json"
        py = sys.executable
        rd = b.procs.start(
            "reader",
            [
                py,
                __file__,
                "--reader",
                "--bootstrap",
                b.bootstrap,
                "--topic",
                topic,
                "--flag",
                str(flag),
                "--counts",
                str(counts),
            ],
        )
        windows = int(args.seconds // args.window_s)
        b.procs.start(
            "loadgen",
            [
                py,
                "-m",
                "baton.tools.loadgen",
                "--bootstrap",
                b.bootstrap,
                "--topic",
                topic,
                "--rate",
                str(args.rate),
                "--seconds",
                str(windows * args.window_s + 5),
                "--quiet",
            ],
        )
        log(f"load {args.rate:.0f}/s for {windows} windows of {args.window_s:.0f} s; the reader in every other one")
        t0, rows = time.time(), []
        for k in range(windows):
            reading = k % 2 == 1
            flag.touch() if reading else flag.unlink(missing_ok=True)
            time.sleep(min(2.0, args.window_s / 5))  # the pause or resume takes effect, the stats catch up
            c0, f0 = proc_cpu_s(b.broker_pid), read_count(counts)
            w0 = time.time()
            time.sleep(args.window_s - min(2.0, args.window_s / 5))
            c1, f1 = proc_cpu_s(b.broker_pid), read_count(counts)
            w1 = time.time()
            if rd.poll() is not None:
                raise RuntimeError(f"the reader stopped:\n{b.procs.tail('reader')}")
            span = max(1e-3, f1[1] - f0[1])
            w = Window(
                round(w0 - t0, 1),
                reading,
                round((c1 - c0) / (w1 - w0), 3),
                round((f1[0] - f0[0]) / span, 1) if reading else 0.0,
            )
            rows.append(w)
            log(json.dumps(asdict(w)))
        flag.unlink(missing_ok=True)
        costs = fetch_costs(rows)
        quiet = [w.broker_cores for w in rows if not w.reading]
        return {
            "rate": args.rate,
            "window_s": args.window_s,
            "partitions": PARTITIONS,
            "broker": b.broker_kind,
            "produce_cores_first": quiet[0] if quiet else None,
            "produce_cores_last": quiet[-1] if quiet else None,
            "broker_ms_per_fetch_first": costs[0]["broker_ms_per_fetch"] if costs else None,
            "broker_ms_per_fetch_last": costs[-1]["broker_ms_per_fetch"] if costs else None,
            "reader_cores_last": costs[-1]["reader_cores"] if costs else None,
            "costs": costs,
            "windows": [asdict(w) for w in rows],
            "machine": machine(),
        }


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ws = result["windows"]
    for reading, colour, label in ((False, "tab:grey", "producing only"), (True, "tab:red", "with the tail reader")):
        pts = [(w["t_s"], w["broker_cores"]) for w in ws if w["reading"] is reading]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=label)
    ax.set_ylabel("broker cores")
    ax.set_title(f"{result['broker']}: {result['rate']:.0f} events/s, {result['partitions']} partitions")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    cs = [c for c in result["costs"] if c["broker_ms_per_fetch"] is not None]
    bx.plot([c["t_s"] for c in cs], [c["broker_ms_per_fetch"] for c in cs], "o-", color="tab:red")
    bx.set_ylabel("broker CPU ms per fetch")
    bx.set_xlabel("seconds since the load started")
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20085.0)
    ap.add_argument("--seconds", type=float, default=420.0, help="the run's length (whole windows)")
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--name", default="broker_fetch_cost", help="results file name (bench/results/NAME.json/.png)")
    ap.add_argument("--reader", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--flag", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--counts", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reader:
        reader(args.bootstrap, args.topic, args.flag, args.counts)
        return 0
    if args.window_s < 5 or args.seconds < 3 * args.window_s:
        ap.error("--window-s must be at least 5 and --seconds at least three windows")
    result = run(args)
    path = write_result(args.name, result)
    plot(result, RESULTS / f"{args.name}.png")
    log(
        f"wrote {path}: producing {result['produce_cores_first']} -> {result['produce_cores_last']} cores, "
        f"a fetch {result['broker_ms_per_fetch_first']} -> {result['broker_ms_per_fetch_last']} ms of broker CPU"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
