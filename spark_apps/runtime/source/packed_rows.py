"""Decoded events handed to Spark packed, many to a row, and unpacked in the JVM (option packRows).

Why: a driver-side Python source (readOn=driver) hands its rows to the JVM, which stores each batch's
rows in the block manager by Java serialization (Spark's PythonMicroBatchStream) and reads them back
in the batch's scan task. That is per row: an object graph (the row, its array of values, a string
object per string, a boxed number per number) written and read through ObjectOutputStream. A JFR of
the click-count slot at 20,085 events/s put it at 29 % of the active JVM's samples and 40 % of the
standby's. Packed, a row carries up to PACKED_ROW_RECORDS events as a few flat values that Java
serialization copies in bulk, and the scan's first operator turns them back into one row per event.

A packed row, for the declared fields (name, type) in order, field j:
- a string field: `_p{j}_bytes` binary, the field's UTF-8 bytes of the row's events one after the
  other, and `_p{j}_ends` array<int>, where each event's bytes end in them (an event's start is the
  previous event's end, 0 for the first);
- any other field: `_p{j}_values` array<type>;
- a field the app does not require (it may be null): `_p{j}_valid` array<boolean>, false where the
  event's value is null (the value arrays then hold a placeholder: 0, false or no bytes).
No array holds a null: Spark copies an Arrow list without nulls into a flat array (UnsafeArrayData),
with nulls into an array of objects, one each.

Unpacked (`unpack`), the frame has the declared fields, in order, with their types, one row per event
in the order the source read them: the frame a source without packing gives.
"""

from __future__ import annotations

from collections.abc import Sequence

# Events per packed row: a row is a unit of the block manager's storage and of the scan's memory (an
# event of the click-count app is ~20 bytes packed, so a row is ~40 KB).
PACKED_ROW_RECORDS = 2048
INDEX = "_baton_i"  # the event's place in its packed row, while unpacking

_ZERO = {"boolean": False, "double": 0.0, "float": 0.0}  # a null's placeholder (numbers: 0; strings: no bytes)


def packed_schema(fields: Sequence[tuple[str, str]], required: Sequence[str]):
    """The StructType of packed rows of these fields (see the module's docstring)."""
    from pyspark.sql.types import ArrayType, BinaryType, BooleanType, IntegerType, StructField, StructType

    from spark_apps.runtime.source.decode import spark_type

    out = []
    for j, (name, typ) in enumerate(fields):
        if typ == "string":
            out += [StructField(f"_p{j}_bytes", BinaryType()), StructField(f"_p{j}_ends", ArrayType(IntegerType()))]
        else:
            out.append(StructField(f"_p{j}_values", ArrayType(spark_type(typ))))
        if name not in required:
            out.append(StructField(f"_p{j}_valid", ArrayType(BooleanType())))
    return StructType(out)


def pack(fields: Sequence[tuple[str, str]], required: Sequence[str], arrays: list, rows: int = PACKED_ROW_RECORDS):
    """An Arrow record batch of packed rows (packed_schema) from one Arrow array per field, all of one length."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(arrays[0])
    bounds = list(range(0, n, rows)) + [n]
    row_offsets = pa.array(bounds, pa.int32())
    columns, names = [], []
    for j, ((name, typ), arr) in enumerate(zip(fields, arrays)):
        filled = pc.fill_null(arr, _ZERO.get(typ, 0)) if arr.null_count and typ != "string" else arr
        if typ == "string":
            data, ends = _string_chunks(filled, bounds)
            columns += [data, pa.ListArray.from_arrays(row_offsets, ends)]
            names += [f"_p{j}_bytes", f"_p{j}_ends"]
        else:
            columns.append(pa.ListArray.from_arrays(row_offsets, filled))
            names.append(f"_p{j}_values")
        if name not in required:
            columns.append(pa.ListArray.from_arrays(row_offsets, pc.is_valid(arr)))
            names.append(f"_p{j}_valid")
    return pa.RecordBatch.from_arrays(columns, names=names)


def _string_chunks(arr, bounds: list[int]):
    """(binary array: each packed row's bytes, int32 array: each event's end within its row's bytes) of a
    string array (its nulls count as no bytes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    _validity, offset_buf, data = arr.buffers()
    # n + 1: where each event's bytes start in the data buffer (a sliced array's too)
    offsets = pa.Array.from_buffers(pa.int32(), len(arr) + 1, [None, offset_buf], offset=arr.offset)
    data = data or pa.py_buffer(b"")
    row_starts = pc.take(offsets, pa.array(bounds, pa.int32()))  # where each packed row's bytes start
    packed = pa.Array.from_buffers(
        pa.binary(), len(bounds) - 1, [None, row_starts.buffers()[1], data], offset=row_starts.offset
    )
    ends = [
        pc.subtract(offsets.slice(lo + 1, hi - lo), row_starts[k]) for k, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
    ]
    return packed, (pa.concat_arrays(ends) if ends else pa.array([], pa.int32()))


def unpack(packed, fields: Sequence[tuple[str, str]], required: Sequence[str]):
    """The events of a frame of packed rows: the declared fields, in order, one row per event."""
    from pyspark.sql import functions as F

    first = "_p0_ends" if fields[0][1] == "string" else "_p0_values"
    rows = packed.select("*", F.posexplode(first).alias(INDEX, "_baton_first"))
    i = F.col(INDEX)
    out = []
    for j, (name, typ) in enumerate(fields):
        if typ == "string":
            ends = F.col(f"_p{j}_ends")
            start = F.when(i == 0, F.lit(0)).otherwise(ends[i - 1])
            value = F.substring(F.col(f"_p{j}_bytes"), start + 1, ends[i] - start).cast("string")
        else:
            value = F.col(f"_p{j}_values")[i]
        if name not in required:
            value = F.when(F.col(f"_p{j}_valid")[i], value)
        out.append(value.alias(name))
    return rows.select(*out)
