"""The source's event decoding: the semantics of Spark's from_json (PERMISSIVE, partial results) that
the JVM path has, a reason for every event that does not decode, and the strict fast path agreeing
with the per-field slow path."""

import json

import pytest

from spark_apps.runtime.source.decode import INVALID_PREFIX, NOT_AN_OBJECT, DecodeSpecError, EventDecoder, supported

CLICKS = [("user_id", "string"), ("timestamp", "bigint")]


def decode(values, fields=CLICKS, required=("user_id", "timestamp")):
    return EventDecoder(fields, list(required)).decode(values)


def test_well_formed_events_become_columns_in_order():
    cols, dead = decode([b'{"user_id":"a","timestamp":1}', b'{"timestamp":2,"user_id":"b","extra":[1]}'])
    assert cols == [["a", "b"], [1, 2]] and dead == []


@pytest.mark.parametrize("value", [b"not json", b'{"user_id":"a"', b"[1,2]", b"42", b'"s"', None, b"\xff\xfe", b""])
def test_a_value_that_is_not_a_json_object_is_dead(value):
    cols, dead = decode([value])
    assert cols == [[], []] and dead == [(0, NOT_AN_OBJECT)]


@pytest.mark.parametrize(
    "event, missing",
    [
        ({"timestamp": 1}, "user_id"),
        ({"user_id": "a"}, "timestamp"),
        ({}, "user_id, timestamp"),
        ({"user_id": None, "timestamp": 1}, "user_id"),
        ({"user_id": "a", "timestamp": "1"}, "timestamp"),  # a string is not an integer
        ({"user_id": "a", "timestamp": 1.5}, "timestamp"),  # nor a fraction
        ({"user_id": "a", "timestamp": 2**63}, "timestamp"),  # out of BIGINT's range
        ({"user_id": "a", "timestamp": True}, "timestamp"),  # nor a boolean
    ],
)
def test_a_required_field_absent_or_invalid_is_dead_with_its_name(event, missing):
    cols, dead = decode([json.dumps(event).encode()])
    assert dead == [(0, INVALID_PREFIX + missing)] and cols == [[], []]


def test_a_string_field_takes_any_json_value_as_its_text_like_spark():
    cols, dead = decode(
        [b'{"user_id":5,"timestamp":1}', b'{"user_id":true,"timestamp":2}', b'{"user_id":{"a":1},"timestamp":3}']
    )
    assert dead == [] and cols == [["5", "true", '{"a":1}'], [1, 2, 3]]


def test_optional_fields_are_null_when_absent_or_invalid_and_the_event_lives():
    fields = [("user_id", "string"), ("n", "int"), ("x", "double"), ("ok", "boolean"), ("s", "smallint")]
    cols, dead = decode(
        [b'{"user_id":"a","n":2147483648,"x":"1","ok":1,"s":40000}', b'{"user_id":"b","n":-7,"x":3,"ok":false,"s":-2}'],
        fields,
        ["user_id"],
    )
    assert dead == []
    assert cols == [["a", "b"], [None, -7], [None, 3.0], [None, False], [None, -2]]


def test_dead_events_keep_their_index_among_good_ones():
    values = [b'{"user_id":"a","timestamp":1}', b"x", b'{"user_id":"b","timestamp":2}', b'{"timestamp":3}']
    cols, dead = decode(values)
    assert cols == [["a", "b"], [1, 2]]
    assert dead == [(1, NOT_AN_OBJECT), (3, INVALID_PREFIX + "user_id")]


def test_field_names_need_not_be_python_identifiers():
    cols, dead = decode(
        [b'{"user-id":"a","class":1}'], [("user-id", "string"), ("class", "bigint")], ["user-id", "class"]
    )
    assert dead == [] and cols == [["a"], [1]]


def test_only_flat_primitive_schemas_are_decoded():
    assert supported(CLICKS)
    assert not supported([("a", "string"), ("b", "struct<c:int>")])
    assert not supported([("a", "decimal(10,2)")])
    assert not supported([("a", "string"), ("a", "int")])  # a repeated name
    assert not supported([])
    with pytest.raises(DecodeSpecError, match="not all of the types"):
        EventDecoder([("a", "timestamp")], [])
    with pytest.raises(DecodeSpecError, match=r"required field\(s\) \['b'\]"):
        EventDecoder([("a", "string")], ["b"])
