"""Baton's plan rule (jvm/src/baton/plan/SinglePartitionStateRule.java) in a slot's own session, on real
Spark: a streaming count whose one-partition read feeds a one-partition state runs without the shuffle
between them and without the partial aggregation's merge that shuffle needed, and counts the same, also on
a checkpoint a session without the rule started, and with an aggregate Spark runs in its object hash
aggregation (collect_set); a read of two partitions, or a state of two, keeps both."""

import json
import subprocess
import sys

from baton.settings import REPO_ROOT

SCRIPT = r"""
import json, sys
from pathlib import Path
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader
from baton.apps import load_app
from spark_apps.runtime.spark import session

root = Path(sys.argv[1])
BATCHES = json.loads((root / "batches.json").read_text())  # each a batch: its users, one event each

def available():
    return int((root / "available").read_text())

class DriverRead(SimpleDataSourceStreamReader):  # one partition a batch, as a slot's source
    def initialOffset(self):
        return {"b": 0}
    def read(self, start):
        b = start["b"]
        if b >= available():
            return iter(()), start
        return iter([(u,) for u in BATCHES[b]]), {"b": b + 1}
    def readBetweenOffsets(self, start, end):
        return iter([(u,) for b in range(start["b"], end["b"]) for u in BATCHES[b]])

class Half(InputPartition):
    def __init__(self, batch, half):
        self.batch, self.half = batch, half

class TwoPartitions(DataSourceStreamReader):
    def initialOffset(self):
        return {"b": 0}
    def latestOffset(self):
        return {"b": available()}
    def partitions(self, start, end):
        return [Half(b, h) for b in range(start["b"], end["b"]) for h in (0, 1)]
    def read(self, partition):
        users = BATCHES[partition.batch]
        return iter([(u,) for u in users[partition.half::2]])

class Source(DataSource):
    @classmethod
    def name(cls):
        return "test-users"
    def schema(self):
        return "user_id string"
    def simpleStreamReader(self, schema):
        return DriverRead()
    def streamReader(self, schema):
        if self.options.get("partitions") != "2":  # Spark then asks for the simple reader
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})
        return TwoPartitions()

def run(checkpoint, upto, extra, options=None, collected=False):
    (root / "available").write_text(str(upto))
    spark = session("baton-single-partition-test", load_app("click_counts"), extra)
    spark.dataSource.register(Source)
    counts = (spark.readStream.format("test-users").options(**(options or {})).load()
              # avg: an aggregate of two buffer columns beside count's one
              .groupBy("user_id").agg(F.count(F.lit(1)).alias("count"), F.avg(F.length("user_id")).alias("length"),
                                      *([F.collect_set("user_id").alias("ids")] if collected else [])))
    seen = {}  # user -> the last [count, length] a batch emitted

    def keep(batch, batch_id):
        seen.update({r["user_id"]: [r["count"], r["length"]] for r in batch.collect()})

    q = (counts.writeStream.outputMode("update").foreachBatch(keep)
         .option("checkpointLocation", str(root / checkpoint)).start())
    q.processAllAvailable()
    plan = q._jsq.explainInternal(False)
    q.stop()
    spark.stop()
    # ObjectHashAggregate (collect_set's) counts too
    return {"exchange": "Exchange" in plan, "aggregations": plan.count("HashAggregate("), "counts": seen, "plan": plan}

out = {
    # A checkpoint started without the rule, then run on with it: its state carries on.
    "before": run("one", 2, {"spark.sql.extensions": ""}),
    "after": run("one", 4, {}),
    "two_reads": run("two_reads", 4, {}, {"partitions": "2"}),
    "two_states": run("two_states", 4, {"spark.sql.shuffle.partitions": "2"}),
    "collected": run("collected", 4, {}, collected=True),
}
print("RESULT " + json.dumps(out))
"""

BATCHES = [
    [f"u{i}" for i in range(50)],
    [f"u{i}" for i in range(0, 50, 2)] + ["v1"],
    [f"u{i}" for i in range(0, 50, 5)] + ["v1", "v2"],
    [f"u{i}" for i in range(10)],
]


def expected(batches):
    counts = {}
    for user in (u for batch in batches for u in batch):
        counts[user] = [counts.get(user, [0])[0] + 1, float(len(user))]
    return counts


def test_a_one_partition_read_into_a_one_partition_state_runs_without_its_shuffle_and_counts_the_same(tmp_path):
    (tmp_path / "batches.json").write_text(json.dumps(BATCHES))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
    before, after = out["before"], out["after"]
    # Spark's plan: partial aggregation, shuffle, merge, restore, merge with the state, save, final.
    assert before["exchange"] and before["aggregations"] == 4 and before["counts"] == expected(BATCHES[:2]), before[
        "plan"
    ]
    # The same checkpoint with the rule: no shuffle, no merge in front of the restore, and the counts go on
    # from the state the first session left.
    assert not after["exchange"] and after["aggregations"] == 3, after["plan"]
    assert after["counts"] == {u: n for u, n in expected(BATCHES).items() if u in set(BATCHES[2] + BATCHES[3])}
    # Two partitions read, or two state partitions: the shuffle and the merge stay, the counts are the same.
    for case in ("two_reads", "two_states"):
        assert out[case]["exchange"] and out[case]["aggregations"] == 4, out[case]["plan"]
        assert out[case]["counts"] == expected(BATCHES), case
    # Spark's object hash aggregation (collect_set): its merge goes too.
    collected = out["collected"]
    assert not collected["exchange"] and collected["plan"].count("ObjectHashAggregate(") == 3, collected["plan"]
    assert collected["counts"] == expected(BATCHES)
