"""Packed rows cross from a driver-side Python source into Spark (Arrow, the block manager's Java
serialization, the scan) and unpack to the events they hold, in order, every type and null intact.
Real Spark: the copy of an Arrow list into a Spark array and the unpacking expressions are Spark's."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from spark_apps.runtime.source.decode import spark_type
from spark_apps.runtime.source.packed_rows import pack, packed_schema, unpack

pytestmark = pytest.mark.integration

FIELDS = [
    ("user_id", "string"),
    ("ts", "bigint"),
    ("n8", "tinyint"),
    ("n16", "smallint"),
    ("n32", "int"),
    ("f", "float"),
    ("d", "double"),
    ("ok", "boolean"),
    ("note", "string"),
]
REQUIRED = ["user_id", "ts"]
ARROW = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
}


def events(n: int) -> list[tuple]:
    """n events with empty and non-ASCII strings, extremes, and a null in every optional field now and then."""
    out = []
    for i in range(n):
        null = i % 5 == 3
        out.append(
            (
                ["", "ü-ß", f"user-{i}", "\u0000x"][i % 4],
                (1 << 62) + i if i % 2 else -i,
                None if null else [-128, 127, i % 100][i % 3],
                None if null else -32768 + i,
                None if null else i * 1000,
                None if null else i / 4,
                None if null else math.pi * i,
                None if null else i % 2 == 0,
                None if i % 3 else f"n{i}",
            )
        )
    return out


def packed_batches(rows: list[tuple], per_row: int) -> list[pa.RecordBatch]:
    """Two Arrow batches (as the source hands one per partition), each packed `per_row` events to a row."""
    half = len(rows) // 2
    out = []
    for part in (rows[:half], rows[half:]):
        arrays = [pa.array([r[j] for r in part], ARROW[t]) for j, (_, t) in enumerate(FIELDS)]
        out.append(pack(FIELDS, REQUIRED, arrays, rows=per_row))
    return out


def test_packed_rows_from_a_driver_side_source_unpack_to_the_events_in_order(spark, tmp_path):
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

    rows = events(1001)
    batches = packed_batches(rows, per_row=64)
    schema = packed_schema(FIELDS, REQUIRED)

    class Reader(SimpleDataSourceStreamReader):
        def initialOffset(self):
            return {"batch": 0}

        def read(self, start):
            if start["batch"] >= 1:
                return iter(()), start
            return iter(batches), {"batch": 1}

        def readBetweenOffsets(self, start, end):
            return iter(batches)

        def commit(self, end):
            pass

    class Packed(DataSource):
        @classmethod
        def name(cls):
            return "baton-test-packed"

        def schema(self):
            return schema

        def simpleStreamReader(self, schema):
            return Reader()

    spark.dataSource.register(Packed)
    seen: list = []
    frame = unpack(spark.readStream.format("baton-test-packed").load(), FIELDS, REQUIRED)
    assert [(f.name, f.dataType) for f in frame.schema.fields] == [(n, spark_type(t)) for n, t in FIELDS]
    query = (
        frame.writeStream.foreachBatch(lambda df, _id: seen.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the query did not end in 180 s"
    assert query.exception() is None
    got = [tuple(r) for r in seen]
    assert len(got) == len(rows)
    for g, want in zip(got, rows):
        assert g[:5] + g[7:] == want[:5] + want[7:]
        assert g[5] == pytest.approx(want[5]) if want[5] is not None else g[5] is None  # float32
        assert g[6] == want[6]
