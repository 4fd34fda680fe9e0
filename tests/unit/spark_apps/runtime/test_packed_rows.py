"""Packing decoded events many to a row (the JVM side, unpacking, runs on real Spark in
tests/integration/spark_apps/runtime/test_packed_rows.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_apps.runtime.source.packed_rows import PACKED_ROW_RECORDS, pack, packed_schema

FIELDS = [("user_id", "string"), ("ts", "bigint"), ("score", "double"), ("note", "string")]
REQUIRED = ["user_id", "ts"]


def arrays(n: int = 6):
    users = ["a", "bb", "", "ccc", "é", "dd"][:n]
    return [
        pa.array(users, pa.string()),
        pa.array(range(n), pa.int64()),
        pa.array([1.5, None, 2.0, None, 0.0, 1.0][:n], pa.float64()),
        pa.array([None, "x", None, "", "yz", None][:n], pa.string()),
    ]


def test_each_packed_row_holds_up_to_the_given_number_of_events_in_order():
    b = pack(FIELDS, REQUIRED, arrays(), rows=4).to_pydict()
    assert b["_p0_bytes"] == [b"abbccc", "édd".encode()]
    assert b["_p0_ends"] == [[1, 3, 3, 6], [2, 4]]
    assert b["_p1_values"] == [[0, 1, 2, 3], [4, 5]]
    assert "_p0_valid" not in b and "_p1_valid" not in b  # required fields are never null


def test_a_null_is_a_placeholder_marked_not_valid_and_no_list_holds_a_null():
    batch = pack(FIELDS, REQUIRED, arrays(), rows=4)
    b = batch.to_pydict()
    assert b["_p2_values"] == [[1.5, 0.0, 2.0, 0.0], [0.0, 1.0]]
    assert b["_p2_valid"] == [[True, False, True, False], [True, True]]
    assert b["_p3_bytes"] == [b"x", b"yz"] and b["_p3_ends"] == [[0, 1, 1, 1], [2, 2]]
    assert b["_p3_valid"] == [[False, True, False, True], [True, False]]
    for column in batch.columns:
        assert column.null_count == 0
        if isinstance(column, pa.ListArray):
            assert column.values.null_count == 0


def test_a_sliced_array_packs_its_own_events():
    b = pack(FIELDS, REQUIRED, [a.slice(2, 3) for a in arrays()], rows=2).to_pydict()
    assert b["_p0_bytes"] == [b"ccc", "é".encode()]
    assert b["_p0_ends"] == [[0, 3], [2]]
    assert b["_p1_values"] == [[2, 3], [4]]


def test_no_events_is_no_rows():
    assert pack(FIELDS, REQUIRED, [a.slice(0, 0) for a in arrays()]).num_rows == 0


def test_the_default_row_size_and_the_last_row_holds_the_rest():
    n = PACKED_ROW_RECORDS * 2 + 5
    b = pack([("n", "int")], ["n"], [pa.array(range(n), pa.int32())])
    assert [len(v) for v in b.column(0).to_pylist()] == [PACKED_ROW_RECORDS, PACKED_ROW_RECORDS, 5]


@pytest.mark.parametrize(
    "typ, arrow",
    [
        ("tinyint", pa.int8()),
        ("smallint", pa.int16()),
        ("int", pa.int32()),
        ("bigint", pa.int64()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("boolean", pa.bool_()),
        ("string", pa.string()),
    ],
)
def test_the_batch_has_the_schema_spark_is_told(typ, arrow):
    from pyspark.sql.pandas.types import to_arrow_schema

    batch = pack([("f", typ)], [], [pa.array([None], arrow)])
    told = to_arrow_schema(packed_schema([("f", typ)], []))
    assert [f.name for f in batch.schema] == told.names
    assert [f.type.value_type if pa.types.is_list(f.type) else f.type for f in batch.schema] == [
        f.type.value_type if pa.types.is_list(f.type) else f.type for f in told
    ]
