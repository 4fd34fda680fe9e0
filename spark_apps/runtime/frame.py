"""The streaming frame a slot's query runs: the Baton source reading the app's input, the app's
stateful transform, and the dead letters (spark_apps.runtime.harness runs it)."""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from types import ModuleType
from typing import cast

from baton.apps import AppDefinition
from spark_apps.runtime.source.decode import INVALID_PREFIX, NOT_AN_OBJECT, supported
from spark_apps.runtime.source.packed_rows import unpack
from spark_apps.runtime.source.source_plan import TRIGGER_TICK_MS

log = logging.getLogger(__name__)

KIND_OUTPUT, KIND_DEAD = "o", "d"
CORRUPT = "_baton_corrupt"  # from_json's corrupt-record column (the path where Spark parses events)
# Inside the checkpoint (a copy of it carries it): the id of the input topic its positions belong to.
IDENTITY_FILE = "baton-input.json"


def app_transform(mod: ModuleType, app: AppDefinition, events):
    """The app module's transform; an app with a state TTL gets it (transform(events, ttl))."""
    return mod.transform(events) if app.state.ttl is None else mod.transform(events, ttl=app.state.ttl)


def build_frame(
    spark,
    app: AppDefinition,
    bootstrap: str,
    starting_offsets: str,
    cap_file: Path,
    spool: Path,
    min_batch_interval_ms: int = 0,
    identity_file: Path | None = None,
    batch_times_file: Path | None = None,
):
    """The streaming frame the sink sees. `cap_file` bounds how far the source reads
    (spark_apps.runtime.coordination.follower); `min_batch_interval_ms`, when above the tick, paces the batches in
    the source (the query then runs on TRIGGER_TICK_MS). The app's on_data_loss says what a restart does
    when its checkpoint's positions are not in the input any more (input_check.py); `identity_file`
    (inside the checkpoint) records which topic they belong to.

    When every field of the app's VALUE_SCHEMA is of a type the source decodes (decode.TYPES), the
    source decodes the events and the frame is the app's output, (key, value); the dead letters go
    to `spool` (dead_letters.py). Otherwise Spark parses them (from_json) and the frame is the output
    unioned with the dead letters, by `kind` (the input is then scanned twice: once a branch)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType, StructType

    from spark_apps.runtime.source.kafka_source import KafkaSource

    # Imported here, inside run()'s error handling: an app module that fails to import is reported
    # as FAILED with the error in the status topic like any other bad app code.
    mod: ModuleType = importlib.import_module(app.module)
    spark.dataSource.register(KafkaSource)
    reader = (
        spark.readStream.format("baton-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("topic", app.input.topic)
        .option("startingOffsets", starting_offsets)
        .option("maxRecordsPerTrigger", str(app.max_records_per_trigger))
        .option("capFile", str(cap_file))
        .option("onDataLoss", app.on_data_loss)
        .option("readOn", "driver")
    )
    if identity_file is not None:
        reader = reader.option("identityFile", str(identity_file))
    if batch_times_file is not None:
        reader = reader.option("batchTimesFile", str(batch_times_file))
    if min_batch_interval_ms > TRIGGER_TICK_MS:
        reader = reader.option("minBatchIntervalMs", str(min_batch_interval_ms))
    if not uses_event_time(spark, mod, app):
        reader = reader.option("alignPartitions", "false")
    fields = decodable_fields(mod.VALUE_SCHEMA)
    if fields is not None:
        # Packed many to a row (packed_rows.py): Spark stores a driver-side source's rows by Java
        # serialization, an object graph a row; the batch's numInputRows then counts packed rows
        # (progress.with_event_count counts events for the status).
        packed = (
            reader.option("valueFields", json.dumps(fields))
            .option("requiredFields", json.dumps(list(mod.REQUIRED)))
            .option("packRows", "true")
            .option("deadLetterDir", str(spool))
            .load()
        )
        events = unpack(packed, fields, list(mod.REQUIRED))
        return app_transform(mod, app, events).select(
            F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value")
        )
    raw = reader.load()
    # A value that is not JSON parses to a row of nulls; Spark's corrupt-record column tells it apart.
    names = [f.name for f in cast(StructType, DataType.fromDDL(mod.VALUE_SCHEMA)).fields]  # a struct's DDL
    parsed = raw.select(
        "key",
        "value",
        "partition",
        "offset",
        F.from_json(
            F.col("value").cast("string"),
            f"{mod.VALUE_SCHEMA}, {CORRUPT} STRING",
            {"columnNameOfCorruptRecord": CORRUPT},
        ).alias("e"),
    )
    missing = [F.when(F.col(f"e.{f}").isNull(), F.lit(f)) for f in mod.REQUIRED]
    reason = F.when(F.col("e").isNull() | F.col(f"e.{CORRUPT}").isNotNull(), F.lit(NOT_AN_OBJECT)).otherwise(
        F.concat_ws(", ", *missing)
    )
    parsed = parsed.withColumn("reason", reason)
    # Parse each event once per branch. Without a barrier the optimizer pushes the `reason` filter
    # below this projection and inlines from_json into it: 4 parses per event per branch (measured
    # in the physical plan; JSON parsing was 58% of the JVM's CPU). A nondeterministic column that
    # both filters reference keeps the filters above the parse.
    parsed = parsed.withColumn("_barrier", F.spark_partition_id())
    good = parsed.where((F.col("reason") == "") & (F.col("_barrier") >= 0)).select(*[F.col(f"e.{n}") for n in names])
    out = app_transform(mod, app, good).select(
        F.lit(KIND_OUTPUT).alias("kind"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("int").alias("src_partition"),
        F.lit(None).cast("long").alias("src_offset"),
    )
    dead = parsed.where((F.col("reason") != "") & (F.col("_barrier") >= 0)).select(
        F.lit(KIND_DEAD).alias("kind"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.when(F.col("reason") == NOT_AN_OBJECT, F.col("reason"))
        .otherwise(F.concat(F.lit(INVALID_PREFIX), F.col("reason")))
        .alias("reason"),
        F.col("partition").cast("int").alias("src_partition"),
        F.col("offset").cast("long").alias("src_offset"),
    )
    return out.unionByName(dead)


def uses_event_time(spark, mod: ModuleType, app: AppDefinition) -> bool:
    """Whether the app's transform sets an event-time watermark: its plan over a stream of the events'
    schema holds one (Spark's built-in rate source, all nulls: nothing runs, no Python worker starts;
    a static frame would not do, its analysis drops a watermark). The source then keeps the partitions
    abreast in time while it reads a backlog (prefetch.py); without a watermark that only holds records
    back. A transform that cannot be planned that way counts as using event time (the safe side)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType, StructType

    try:
        schema = cast(StructType, DataType.fromDDL(mod.VALUE_SCHEMA))  # a struct's DDL
        events = (
            spark.readStream.format("rate")
            .load()
            .select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
        )
        plan = app_transform(mod, app, events)._jdf.queryExecution().analyzed().toString()
    except Exception as exc:
        log.info(
            "%s: keeping the input's partitions abreast (its transform could not be planned on a test stream: %s)",
            app.name,
            exc,
        )
        return True
    return "EventTimeWatermark" in plan


def packs_rows(app: AppDefinition) -> bool:
    """Whether build_frame's source hands Spark the app's events packed (its fields decode in the source)."""
    return decodable_fields(importlib.import_module(app.module).VALUE_SCHEMA) is not None


def decodable_fields(ddl: str) -> list[tuple[str, str]] | None:
    """[(name, type)] of a VALUE_SCHEMA the source can decode itself, else None (Spark's DDL parser
    says what the types are, so both paths read the schema alike)."""
    from pyspark.sql.types import DataType, StructType

    schema = DataType.fromDDL(ddl)
    if not isinstance(schema, StructType):
        return None
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return fields if supported(fields) else None
