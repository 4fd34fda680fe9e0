"""The rows Baton's Kafka source returns, as Arrow record batches built column-wise (no per-row Python
call beyond librdkafka's accessors).

Schema, raw (no valueFields): key binary, value binary, topic string, partition int, offset long,
timestamp timestamp. Key and value are binary (like Spark's own Kafka source): no decoding and no
crash on bytes that are not UTF-8; the app parses (from_json) and routes what does not parse to its
dead-letter topic. The timestamp is the record's timestamp in UTC (null when the record carries none).
Schema, decoded (valueFields): the fields, in order; events that do not decode are not rows. With
packRows, many events to a row (packed_rows.py: the frame's reader unpacks them in the JVM).

Offsets are {"<partition>": next offset to read} with partitions in numeric order (Spark compares
offsets by their JSON text). One Spark input partition per Kafka partition with data in
[start, end); empty ranges are skipped. Spark's checkpoint is the only record of positions: nothing
is committed to Kafka (`commit` is a no-op, the fixed group.id exists only because librdkafka
wants one; there is no group subscription).
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any, cast

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from spark_apps.runtime.source.decode import spark_type
from spark_apps.runtime.source.source_options import SourceOptions

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)


def output_schema(opts: SourceOptions) -> StructType:
    if opts.value_fields is None:
        return SCHEMA
    if opts.packed:
        from spark_apps.runtime.source.packed_rows import packed_schema

        return packed_schema(opts.value_fields, opts.required)
    return decoded_schema(opts.value_fields)


def decoded_schema(fields: list[tuple[str, str]]) -> StructType:
    """One column per declared field, of its type."""
    return StructType([StructField(n, spark_type(t)) for n, t in fields])


def raw_columns(msgs: list) -> list[list]:
    """key, value, offset, timestamp (ms, None when the record has none) of raw records."""
    from confluent_kafka import Message

    stamps = list(map(itemgetter(1), map(Message.timestamp, msgs)))
    if stamps and min(stamps) < 0:  # TIMESTAMP_NOT_AVAILABLE
        stamps = [t if t >= 0 else None for t in stamps]
    return [list(map(Message.key, msgs)), list(map(Message.value, msgs)), list(map(Message.offset, msgs)), stamps]


def raw_record_batch(topic: str, p: int, columns: list[list]):
    """An Arrow record batch of SCHEMA from raw_columns."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    keys, values, offsets, stamps = columns
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([p] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.timestamp("ms", tz="UTC")).cast(schema.field("timestamp").type),
        ],
        schema=schema,
    )


def decode_records(decoder, msgs: list) -> tuple[list[int], list[list], list[tuple]]:
    """(offsets of the events that decode, their columns, dead letters (offset, key, value, reason))."""
    from confluent_kafka import Message

    values = list(map(Message.value, msgs))
    columns, dead = decoder.decode(values)
    offsets = cast("list[int]", list(map(Message.offset, msgs)))  # consumed: each has its offset
    if not dead:
        return offsets, columns, []
    bad = {i for i, _ in dead}
    good = [o for i, o in enumerate(offsets) if i not in bad]
    return good, columns, [(offsets[i], msgs[i].key(), values[i], reason) for i, reason in dead]


def decoded_record_batch(opts: SourceOptions, columns: list[list]):
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = opts.value_fields
    assert fields is not None  # decoded batches: the value fields are declared
    schema = to_arrow_schema(decoded_schema(fields), timezone="UTC")
    arrays = [pa.array(c, f.type) for c, f in zip(columns, schema)]
    if opts.packed:
        from spark_apps.runtime.source.packed_rows import pack

        return pack(fields, opts.required, arrays)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def raw_batches(chunks, topic: str, p: int) -> Iterator[Any]:
    """Raw records as Arrow record batches built column-wise (SCHEMA)."""
    for msgs, _offs in chunks:
        yield raw_record_batch(topic, p, raw_columns(msgs))


def decoded_batches(chunks, opts: SourceOptions, p: int, start: int, end: int) -> Iterator[Any]:
    """Decoded events as Arrow record batches of the declared fields; the events that do not decode
    go to the dead-letter spool file of [start, end), written (even empty) once the range is read."""
    from spark_apps.runtime.sink.dead_letters import write_spool
    from spark_apps.runtime.source.decode import EventDecoder

    fields, spool = opts.value_fields, opts.dead_letter_dir
    assert fields is not None and spool is not None  # declared together (source_options)
    decoder = EventDecoder(fields, opts.required)
    dead_all: list[tuple] = []
    for msgs, _offs in chunks:
        _good, columns, dead = decode_records(decoder, msgs)
        if columns[0]:
            yield decoded_record_batch(opts, columns)
        dead_all.extend(dead)
    write_spool(spool, p, start, end, *dead_columns(dead_all))


def dead_columns(dead: list[tuple]) -> tuple[list, list, list, list]:
    """(keys, values, reasons, offsets) of (offset, key, value, reason) dead letters."""
    return [d[1] for d in dead], [d[2] for d in dead], [d[3] for d in dead], [d[0] for d in dead]
