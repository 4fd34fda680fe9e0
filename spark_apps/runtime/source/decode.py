"""JSON event values decoded in Baton's Kafka source, once, in the Python worker that read them.

The app declares its events as a Spark DDL (VALUE_SCHEMA) and the fields they must have (REQUIRED).
When every field has a primitive type (`TYPES`), the source decodes each value itself and hands
Spark typed columns, and the events that do not decode never reach Spark: they are dead letters
(spark_apps.runtime.sink.dead_letters). That is one JSON parse per event and one scan of the input per
batch; parsing in Spark instead (from_json) needs a second scan of the input for the dead-letter
branch, and the two scans, the parse and the binary values crossing into the JVM were most of a
slot's CPU. Other schemas (nested types, decimals, timestamps) keep Spark's from_json
(spark_apps.runtime.harness.build_frame).

Semantics, those of Spark's from_json (PERMISSIVE, partial results), so both paths agree:
- a value that is not a JSON object (not JSON, an array, a number, a tombstone) is dead:
  "not a JSON object";
- a field that is absent, null or does not fit its type is null: STRING takes any JSON value
  (a string as it is, anything else as its JSON text); integer types take JSON integers within
  their range; DOUBLE and FLOAT any JSON number; BOOLEAN true or false; unknown fields are ignored;
- an event with a REQUIRED field null is dead: "missing or invalid field(s): a, b" (REQUIRED order).

Speed: a strictly typed msgspec Struct decodes a well-formed event in C (about 0.5 us); only an
event it refuses takes the per-field path that says why (or, for a STRING given a number, accepts it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import msgspec

NOT_AN_OBJECT = "not a JSON object"
INVALID_PREFIX = "missing or invalid field(s): "

_INT_RANGES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}

# Spark simple type name -> (Python type for the strict decoder, Arrow type name).
TYPES: dict[str, tuple[Any, str]] = {
    "string": (str, "string"),
    **{
        name: (Annotated[int, msgspec.Meta(ge=-(1 << (bits - 1)), le=(1 << (bits - 1)) - 1)], f"int{bits}")
        for name, bits in _INT_RANGES.items()
    },
    "double": (float, "float64"),
    "float": (float, "float32"),
    "boolean": (bool, "bool"),
}


def spark_type(type_name: str):
    """The Spark type of a field of one of the TYPES."""
    from pyspark.sql import types as T

    return {
        "string": T.StringType,
        "bigint": T.LongType,
        "int": T.IntegerType,
        "smallint": T.ShortType,
        "tinyint": T.ByteType,
        "double": T.DoubleType,
        "float": T.FloatType,
        "boolean": T.BooleanType,
    }[type_name]()


class DecodeSpecError(ValueError):
    """The declared fields cannot be decoded by the source (the harness then uses from_json)."""


def supported(fields: Sequence[tuple[str, str]]) -> bool:
    return bool(fields) and all(t in TYPES for _, t in fields) and len({n for n, _ in fields}) == len(fields)


def _lenient(type_name: str) -> Callable[[Any], Any]:
    """The per-field conversion of the slow path: the value as the type takes it, or None."""
    if type_name == "string":
        encode = msgspec.json.encode
        return lambda x: x if type(x) is str or x is None else encode(x).decode()
    if type_name in _INT_RANGES:
        bits = _INT_RANGES[type_name]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return lambda x: x if type(x) is int and lo <= x <= hi else None
    if type_name in ("double", "float"):
        return lambda x: float(x) if type(x) in (int, float) else None
    if type_name == "boolean":
        return lambda x: x if type(x) is bool else None
    raise DecodeSpecError(f"type {type_name!r} is not decoded by the source")


class EventDecoder:
    """Decodes a list of JSON values into columns, one per declared field, and says which did not."""

    def __init__(self, fields: Sequence[tuple[str, str]], required: Sequence[str]):
        if not supported(fields):
            raise DecodeSpecError(f"fields {list(fields)} are not all of the types {sorted(TYPES)} (or repeat a name)")
        names = [n for n, _ in fields]
        unknown = [r for r in required if r not in names]
        if unknown:
            raise DecodeSpecError(f"required field(s) {unknown} are not in the schema {names}")
        self.fields = [(n, t) for n, t in fields]
        self.required = [n for n in required]
        required_set = set(self.required)
        # Strict: required fields typed and mandatory, the others typed or absent/null. Attributes
        # are f0, f1, ... renamed to the JSON names, which need not be Python identifiers.
        struct = msgspec.defstruct(
            "Event",
            [
                (f"f{i}", TYPES[t][0]) if n in required_set else (f"f{i}", TYPES[t][0] | None, None)
                for i, (n, t) in enumerate(fields)
            ],
            rename={f"f{i}": n for i, (n, _) in enumerate(fields)},
        )
        self._strict = msgspec.json.Decoder(struct)
        self._any = msgspec.json.Decoder()
        self._lenient = [(n, _lenient(t), n in required_set) for n, t in fields]
        self._astuple = msgspec.structs.astuple

    def decode(self, values: Sequence[bytes | None]) -> tuple[list[list], list[tuple[int, str]]]:
        """(columns, dead): a list per field of the events that decode, in order, and (index into
        `values`, reason) of those that do not."""
        rows: list[tuple] = []
        dead: list[tuple[int, str]] = []
        append, strict, astuple = rows.append, self._strict.decode, self._astuple
        for i, v in enumerate(values):
            try:
                append(astuple(strict(v)))  # type: ignore[arg-type]  # None: TypeError, explained below
            except (msgspec.DecodeError, TypeError):
                row, reason = self.explain(v)
                if row is None:
                    dead.append((i, reason))
                else:
                    append(row)
        columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in self.fields]
        return columns, dead

    def explain(self, value: bytes | None) -> tuple[tuple | None, str]:
        """The slow path for one value: (row, "") when it decodes after all, else (None, reason)."""
        try:
            obj = self._any.decode(value) if value is not None else None
        except (msgspec.DecodeError, TypeError):
            obj = None
        if type(obj) is not dict:
            return None, NOT_AN_OBJECT
        row, missing = [], []
        for name, convert, needed in self._lenient:
            x = convert(obj.get(name))
            row.append(x)
            if x is None and needed:
                missing.append(name)
        if missing:
            return None, INVALID_PREFIX + ", ".join(missing)
        return tuple(row), ""
