"""Throughput of the baton-kafka source: records/s and CPU per record, Spark local mode.

    .venv/bin/python bench/source_read.py --records 500000

Starts its own Tansu broker (state in a temp dir, free port), produces N records of ~100-byte JSON
to a fresh topic, then reads them all through the source with Trigger.AvailableNow into Spark's
"noop" sink (every column is materialised by the Python reader; nothing is written). A small
warm-up query runs first so Python worker start-up is not timed. Prints wall time, records/s and
CPU seconds per record of the read phase, counted over this process and all its descendants
(Spark's JVM and its Python workers) from /proc, excluding the broker, whose CPU is shown apart;
plus resource.getrusage(self + children) over the whole run (children are counted once they
have exited, i.e. after Spark and the broker stop). Stops the broker and Spark at the end.
Writes bench/results/source_read.json and source_read.png.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from baton.kafka.admin import TopicSpec, ensure_topics  # noqa: E402
from baton.local.broker import Broker  # noqa: E402
from baton.local.procs import free_port  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from common import machine, proc_cpu_s, pyplot, write_result  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int, exclude: set[int]) -> float:
    """CPU seconds (user + system) of `root` and its live descendants, minus `exclude` subtrees.
    Includes the reaped children's time each process has accumulated (cutime/cstime)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        pid = int(entry.name)
        stats[pid] = fields
        children.setdefault(int(fields[1]), []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        if pid in exclude or pid not in stats:
            continue
        f = stats[pid]
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])  # utime stime cutime cstime
        stack.extend(children.get(pid, []))
    return total / TICKS


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    pad = "x" * 24
    produce_ = p.produce
    for i in range(n):
        value = (
            f'{{"user":"u{i % 100_000:06d}","page":"/p/{i % 10_000:05d}",'
            f'"ts":{1_700_000_000_000 + i},"n":{i},"pad":"{pad}"}}'
        )
        while True:
            try:
                produce_(topic, value=value.encode(), key=b"u%06d" % (i % 100_000), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
        tmpd = Path(tmp)
        broker = Broker(state_dir=tmpd / "broker", port=free_port())
        broker.start()
        spark = None
        try:
            bs = broker.bootstrap
            topic, warm = "bench-source", "bench-warmup"
            ensure_topics(bs, [TopicSpec(topic, args.partitions), TopicSpec(warm, args.partitions)])
            t0 = time.monotonic()
            produce(bs, topic, args.records, args.partitions)
            produce(bs, warm, 1000, args.partitions)
            print(
                f"produced {args.records} records to {args.partitions} partitions in {time.monotonic() - t0:.1f}s",
                flush=True,
            )

            from pyspark.sql import SparkSession

            from spark_apps.runtime.source.kafka_source import KafkaSource

            spark = (
                SparkSession.builder.master(f"local[{args.cores}]")
                .appName("bench-source-read")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", str(args.cores))
                .config("spark.local.dir", str(tmpd / "spark"))
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(KafkaSource)

            def read_all(name: str) -> StreamingQuery:
                q = (
                    spark.readStream.format("baton-kafka")
                    .option("kafka.bootstrap.servers", bs)
                    .option("topic", name)
                    .option("startingOffsets", "earliest")
                    .load()
                    .writeStream.format("noop")
                    .trigger(availableNow=True)
                    .option("checkpointLocation", str(tmpd / f"ck-{name}"))
                    .start()
                )
                q.awaitTermination()
                if (failure := q.exception()) is not None:
                    raise failure
                return q

            read_all(warm)
            broker_pid = broker.proc.pid()
            assert broker_pid is not None  # the broker runs
            me = os.getpid()
            cpu0, bcpu0, w0 = tree_cpu(me, {broker_pid}), proc_cpu_s(broker_pid), time.monotonic()
            q = read_all(topic)
            wall = time.monotonic() - w0
            cpu = tree_cpu(me, {broker_pid}) - cpu0
            bcpu = proc_cpu_s(broker_pid) - bcpu0
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            assert rows == args.records, f"read {rows} rows, produced {args.records}"
            result = {
                "records": rows,
                "partitions": args.partitions,
                "spark_cores": args.cores,
                "batches": len(q.recentProgress),
                "wall_s": round(wall, 3),
                "records_per_s": round(rows / wall),
                "cpu_s_per_record_spark": f"{cpu / rows:.3e}",
                "cpu_s_spark": round(cpu, 2),
                "cpu_s_broker": round(bcpu, 2),
            }
            print(json.dumps(result, indent=1), flush=True)
        finally:
            if spark is not None:
                spark.stop()
                stop_jvm()
            broker.stop()
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru_self.ru_utime + ru_self.ru_stime + ru_children.ru_utime + ru_children.ru_stime
    print(
        f"whole run (produce, Spark start-up, warm-up, read), getrusage self + reaped children "
        f"(the JVM; not the broker, which runs detached): {total:.1f} CPU s"
    )
    result["cpu_s_whole_run"] = round(total, 1)
    result["machine"] = machine()
    path = write_result("source_read", result)
    plot(result, path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.5))
    ax1.bar(["records/s"], [result["records_per_s"]], color="#3182bd")
    ax1.text(0, result["records_per_s"], f"{result['records_per_s']:,}", ha="center", va="bottom")
    ax1.set_title(f"baton-kafka source read, {result['records']:,} records", fontsize=9)
    us = 1e6 / result["records"]
    parts = {"Spark (JVM + Python)": result["cpu_s_spark"] * us, "broker": result["cpu_s_broker"] * us}
    ax2.bar(list(parts), list(parts.values()), color=["#3182bd", "#9ecae1"])
    for i, v in enumerate(parts.values()):
        ax2.text(i, v, f"{v:.2f}", ha="center", va="bottom")
    ax2.set_ylabel("CPU µs per record")
    ax2.set_title(f"{result['partitions']} partitions, local[{result['spark_cores']}]", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stop_jvm(timeout_s: float = 30.0) -> None:
    """spark.stop() leaves the JVM gateway running until this interpreter exits; end it now (it
    exits when its stdin closes) and reap it, so that it is gone and its CPU time is counted."""
    from pyspark import SparkContext

    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None)
    if gw is None or proc is None:
        return
    try:
        gw.shutdown()
    except Exception:
        pass
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except Exception:
        proc.kill()
        proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


if __name__ == "__main__":
    main()
