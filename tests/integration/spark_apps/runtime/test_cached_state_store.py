"""Baton's state store (jvm/src/baton/state/CachedRocksDBStateStoreProvider.java) on real Spark, in a slot's
own session (its jar is on a slot's classpath): a streaming count gives exactly the counts Spark's RocksDB
store gives, through tasks that fail after their stores' commits and are retried, a restart on the
checkpoint and keys that leave the state; and its lookups of keys it committed do not reach RocksDB.
Its versions, an abort's changes and a retry at an older version, store call by store call: the second
test."""

import json
import subprocess
import sys

from baton.settings import REPO_ROOT

SCRIPT = r"""
import json, sys
from pathlib import Path
from pyspark import TaskContext
from pyspark.sql import functions as F
from baton.apps import load_app
from spark_apps.runtime.spark import session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CACHED = "baton.state.CachedRocksDBStateStoreProvider"
root = Path(sys.argv[1])
# local[2,3]: a failed task is retried (three attempts), as on a cluster
spark = session("baton-cached-state-test", load_app("click_counts"), {"spark.master": "local[2,3]"})
spark.conf.set("spark.sql.shuffle.partitions", "2")

BATCHES = json.loads((root / "batches.json").read_text())  # each a file and a batch: [user, event time in s]

@F.udf("string")
def fail_once_in_batch_2(user, batch):
    # Runs in the task that updates the state, on its output rows: after the store's commit, since the
    # aggregation's final hash map takes every row of the stateful operator before it passes one on.
    if batch == 2 and TaskContext.get().attemptNumber() == 0:
        raise RuntimeError("injected failure after the state store's commit")
    return user

def run(provider, name, batches, restarts_at):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    src, ckpt = root / name / "in", root / name / "checkpoint"
    src.mkdir(parents=True)
    out, gets = {}, []

    def sink(df, batch_id):
        for r in df.collect():
            out[(r["user"], r["window"])] = r["n"]

    def start():
        events = (spark.readStream.schema("user STRING, t LONG").option("maxFilesPerTrigger", 1).json(str(src))
                  .withColumn("ts", F.col("t").cast("timestamp")).withWatermark("ts", "300 seconds"))
        counts = events.groupBy("user", F.window("ts", "300 seconds")).agg(F.count(F.lit(1)).alias("n"))
        return (counts.select(F.col("user"), F.col("window.start").cast("long").alias("window"), "n")
                .writeStream.outputMode("update").option("checkpointLocation", str(ckpt))
                .foreachBatch(lambda df, b: sink(df.withColumn("user", fail_once_in_batch_2("user", F.lit(b))), b))
                .start())

    query = start()
    for i, rows in enumerate(batches):
        if i == restarts_at:
            query.stop()
            query = start()
        (src / f"{i:03d}.json").write_text("".join(json.dumps({"user": u, "t": t}) + "\n" for u, t in rows))
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0][-1]
        op = progress["stateOperators"][0]
        gets.append({"batch": progress["batchId"], "gets": op["customMetrics"].get("rocksdbGetCount"),
                     "updated": op["numRowsUpdated"], "removed": op["numRowsRemoved"]})
    query.stop()
    state = spark.read.format("statestore").load(str(ckpt))
    held = sorted((r["key"]["user"], int(r["key"]["window"]["start"].timestamp()), r["value"][0]) for r in state.collect())
    return {"out": sorted([u, w, n] for (u, w), n in out.items()), "batches": gets, "state": held}

print("RESULT " + json.dumps({"cached": run(CACHED, "cached", BATCHES, 3), "rocksdb": run(ROCKSDB, "rocksdb", BATCHES, 3)}))
spark.stop()
"""


CALLS_SCRIPT = r"""
import json, sys, uuid
from pathlib import Path
from baton.apps import load_app
from spark_apps.runtime.spark import session

root = Path(sys.argv[1])
spark = session("baton-cached-store-calls", load_app("click_counts"), {"spark.master": "local[1]"})
jvm, gw = spark._jvm, spark.sparkContext._gateway
state, expr = jvm.org.apache.spark.sql.execution.streaming.state, jvm.org.apache.spark.sql.catalyst.expressions
key_schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("user STRING")
value_schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("n BIGINT")
key_projection = expr.UnsafeProjection.create(key_schema)
none = jvm.scala.Option.empty()

def key(user):
    values = gw.new_array(jvm.java.lang.Object, 1)
    values[0] = jvm.org.apache.spark.unsafe.types.UTF8String.fromString(user)
    return key_projection.apply(expr.GenericInternalRow(values)).copy()

def value(n):
    row = expr.UnsafeRow(1)
    row.pointTo(gw.new_array(jvm.byte, 16), 16)
    row.setLong(0, n)
    return row

def gets(store, *users):
    rows = [store.get(key(u), "default") for u in users]
    return [None if r is None else r.getLong(0) for r in rows]

def rocksdb_gets(store):
    it = store.metrics().customMetrics().iterator()
    while it.hasNext():
        metric = it.next()
        if metric._1().name() == "rocksdbGetCount":
            return metric._2()

provider = jvm.baton.state.CachedRocksDBStateStoreProvider()
store_id = state.StateStoreId((root / "state").as_uri(), 0, 0, "default")
conf = state.StateStoreConf(spark._jsparkSession.sessionState().conf(),
                            getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty())
hadoop = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
hadoop.set("sql.streaming.runId", str(uuid.uuid4()))  # what a streaming query's tasks carry (StreamExecution.RUN_ID_KEY)
provider.init(store_id, key_schema, value_schema, state.NoPrefixKeyStateEncoderSpec(key_schema), False, conf, hadoop,
              False, none)
out = {}
s = provider.getStore(0, none, False, False)
s.put(key("a"), value(1), "default"); s.put(key("b"), value(1), "default")
out["commit_0"] = s.commit()
s = provider.getStore(1, none, False, False)
out["v1"] = gets(s, "a", "b")
s.put(key("a"), value(5), "default"); s.remove(key("b"), "default")
out["v1_own_writes"] = gets(s, "a", "b")
s.abort()
s = provider.getStore(1, none, False, False)
out["v1_after_abort"] = gets(s, "a", "b")
s.put(key("a"), value(2), "default"); s.remove(key("b"), "default"); s.put(key("c"), value(1), "default")
out["commit_1"] = s.commit()
out["commit_1_rocksdb_gets"] = rocksdb_gets(s)
s = provider.getStore(2, none, False, False)
out["v2"] = gets(s, "a", "b", "c")
s.abort()
s = provider.getStore(1, none, False, False)  # a retry of the batch that made version 2, on version 1
out["v1_retried"] = gets(s, "a", "b", "c")
s.put(key("a"), value(7), "default")
out["commit_1_again"] = s.commit()
out["commit_1_again_rocksdb_gets"] = rocksdb_gets(s)
s = provider.getStore(2, none, False, False)
out["v2_again"] = gets(s, "a", "b", "c")
out["commit_2"] = s.commit()
out["commit_2_rocksdb_gets"] = rocksdb_gets(s)
r = provider.getReadStore(3, none)
out["read_v3"] = gets(r, "a", "b", "c")
r.abort()
provider.close()
print("RESULT " + json.dumps(out))
spark.stop()
"""


MANY = 1000  # users in batches 1 and 2
BATCHES = [
    [(f"u{i}", 100) for i in range(10)],  # 0: ten new users
    [(f"u{i}", 101) for i in range(MANY)],  # 1: the ten again and many new ones
    # 2: all of them again and one new; its tasks' first attempts fail after their stores' commits, so
    # their retries run the batch again on the version before
    [*[(f"u{i}", 102) for i in range(MANY)], ("u99999", 103)],
    [(f"u{i}", 104) for i in range(13)],  # 3: after a restart
    [("u0", 700), ("u5", 701)],  # 4: a new window; the watermark moves to 400 s
    [("u0", 702), ("u1", 703)],  # 5: drops the first window (its end, 300 s, is behind)
]


def test_counts_equal_rocksdb_s_through_a_retried_task_a_restart_and_evictions_and_lookups_skip_it(tmp_path):
    (tmp_path / "batches.json").write_text(json.dumps(BATCHES))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr.count("injected failure") >= 4  # both tasks of batch 2, in both runs
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    cached, rocksdb = result["cached"], result["rocksdb"]

    # The counts per user and window, as the sink saw them last: what the events say, in both stores.
    expected = {}
    for u, t in (event for batch in BATCHES for event in batch):
        key = (u, t // 300 * 300)
        expected[key] = expected.get(key, 0) + 1
    assert cached["out"] == sorted([u, w, n] for (u, w), n in expected.items())
    assert cached["out"] == rocksdb["out"]
    # What each batch updated and dropped (the watermark evicts the first window's users in batch 5) and
    # what the checkpoint holds at the end: the same.
    assert [(b["updated"], b["removed"]) for b in cached["batches"]] == [
        (b["updated"], b["removed"]) for b in rocksdb["batches"]
    ]
    assert cached["batches"][5]["removed"] == MANY + 1
    assert cached["state"] == rocksdb["state"] == [["u0", 600, 2], ["u1", 600, 1], ["u5", 600, 1]]

    # RocksDB's own get count per batch: the stock store looks every updated key up; the cache answers
    # for keys its store committed; a retry on the version before drops it, as a restarted query's store
    # starts without one.
    stock, mine = [b["gets"] for b in rocksdb["batches"]], [b["gets"] for b in cached["batches"]]
    assert stock[1] == MANY and mine[1] == MANY - 10  # the ten of batch 0 come from the cache
    assert stock[2] == mine[2] == MANY + 1  # the failed attempts had moved the cache a version on
    assert mine[3] == stock[3] == 13  # a new query's provider: an empty cache
    assert stock[5] == 2 and mine[5] == 1  # u0 was committed by batch 4; u1 is new to this window


def test_its_cache_follows_the_store_s_versions_through_an_abort_and_a_retry_on_the_version_before(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CALLS_SCRIPT, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
    assert out["commit_0"] == 1 and out["v1"] == [1, 1]
    assert out["v1_own_writes"] == [5, None]  # a store reads its own writes
    assert out["v1_after_abort"] == [1, 1]  # an aborted store's writes never reach the cache
    assert out["commit_1"] == 2 and out["commit_1_rocksdb_gets"] == 0  # a and b from the cache the abort left
    assert out["v2"] == [2, None, 1]
    # The batch of version 2 again, on version 1 (a retry): RocksDB's version 1, not the cache's version 2
    assert out["v1_retried"] == [1, 1, None] and out["commit_1_again_rocksdb_gets"] == 3
    assert out["commit_1_again"] == 2 and out["v2_again"] == [7, 1, None]
    assert out["commit_2_rocksdb_gets"] == 1  # c, never written: only a row RocksDB has is cached
    assert out["read_v3"] == [7, 1, None]  # a read store of the version
