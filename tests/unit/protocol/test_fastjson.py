"""fastjson dialect: strict JSON, unquoted int keys, object keys; writing as the Java side does."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, pairs

from rmq_async.errors import ProtocolError
from rmq_async.protocol import fastjson
from rmq_async.protocol.fastjson import MAX_DEPTH, ObjectKeyMap, dumps, java_double, loads
from rmq_async.protocol.mq import MessageQueue

# Request codes whose bodies (request or answer) are fastjson beans, not stored messages.
_JSON_BODY_CODES = {34, 38, 41, 42, 105, 220, 221, 307}


def _captured_json_bodies() -> list[tuple[str, int, int, bytes]]:
    out = []
    for f in CAPTURE_FILES:
        for req, resp in pairs(f):
            if req.code in _JSON_BODY_CODES and req.body_len:
                out.append((f, req.seq, req.code, req.body))
            if resp is not None and resp.body_len and (req.code in _JSON_BODY_CODES or req.code == 309):
                out.append((f, resp.seq, req.code, resp.body))
    return out


CAPTURED = _captured_json_bodies()


# -- reading --------------------------------------------------------------------------------------------


def test_strict_json_is_read_as_usual() -> None:
    assert loads(b'{"a":[1,2.5,"x",true,false,null],"b":{}}') == {
        "a": [1, 2.5, "x", True, False, None],
        "b": {},
    }
    assert loads('"\\u4e0a\\u6d77"') == "上海"
    assert loads(memoryview(b" [ ] ")) == []


def test_unquoted_integer_keys_become_ints() -> None:
    got = loads(b'{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921",-3:"x"}}')
    assert got == {"brokerAddrs": {0: "127.0.0.1:10911", 1: "127.0.0.1:10921", -3: "x"}}
    assert all(isinstance(k, int) for k in got["brokerAddrs"])


def test_object_keys_become_an_object_key_map_in_wire_order() -> None:
    text = (
        '{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:7,'
        '{"brokerName":"b","queueId":0,"topic":"T"} : 5},"other":{"x":1}}'
    )
    got = loads(text)
    table = got["offsetTable"]
    assert isinstance(table, ObjectKeyMap)
    assert list(table) == [
        ({"brokerName": "b", "queueId": 3, "topic": "T"}, 7),
        ({"brokerName": "b", "queueId": 0, "topic": "T"}, 5),
    ]
    assert got["other"] == {"x": 1}  # plain maps in the same document stay dicts
    assert "ObjectKeyMap" in repr(table)


def test_object_keys_nested_in_arrays_and_values() -> None:
    got = loads('[{{"a":1}:{{"b":2}:[{}]}}]')
    assert got == [ObjectKeyMap([({"a": 1}, ObjectKeyMap([({"b": 2}, [{}])]))])]


def test_fallback_reads_all_value_kinds() -> None:
    # One object key forces the dialect parser for the whole document.
    text = (
        '{{"k":0}:{"s":"a\\"b\\\\c\\n\\u00e9","i":-12,"f":1.5E3,"z":0,"t":true,"n":null,"l":[ -1 , 2e-2 ]}}'
    )
    ((key, value),) = loads(text)
    assert key == {"k": 0}
    assert value == {"s": 'a"b\\c\né', "i": -12, "f": 1500.0, "z": 0, "t": True, "n": None, "l": [-1, 0.02]}


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ('{"a":', 5),
        ('{0:"x",', 7),
        ('{0:"x" 1:2}', 7),
        ('{0 "x"}', 3),
        ("{0:[1,]}", 6),
        ("{0:[1 2]}", 6),
        ("{1.5:2}", 1),
        ("{true:1}", 1),
        ('{0:"x"} extra', 8),
        ("{0:NaN}", 3),
        ('{0:"\\x"}', 3),
        ('{0:"a\nb"}', 3),
        ("{0:01}", 4),
        ("", 0),
    ],
)
def test_bad_input_raises_protocol_error_with_position(text: str, position: int) -> None:
    with pytest.raises(ProtocolError, match=f"position {position}\\b"):
        loads(text)


def test_strict_json_errors_also_raise_protocol_error() -> None:
    for text in ('{"a":1,}', "[1,,2]", "NaN", "Infinity", '{"a":-Infinity}', "tru"):
        with pytest.raises(ProtocolError, match="position"):
            loads(text)


def test_invalid_utf8_raises() -> None:
    with pytest.raises(ProtocolError, match="UTF-8 at byte 5"):
        loads(b'{"a":\xff}')


def test_nesting_is_capped_without_recursion_error() -> None:
    ok = "{0:" * (MAX_DEPTH - 1) + "1" + "}" * (MAX_DEPTH - 1)
    assert loads(ok) is not None
    too_deep = "{0:" * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)
    with pytest.raises(ProtocolError, match=f"nesting deeper than {MAX_DEPTH}"):
        loads(too_deep)
    with pytest.raises(ProtocolError, match="nesting"):
        loads("{{" * 100_000)
    with pytest.raises(ProtocolError, match="nesting"):
        loads("[" * 100_000 + "]" * 100_000)  # strict JSON: the stdlib parser's own guard, mapped


# -- writing --------------------------------------------------------------------------------------------


def test_dumps_is_compact_utf8_and_keeps_key_order() -> None:
    assert (
        dumps({"z": 1, "a": [1, "上海", None, True, False], "m": {}})
        == '{"z":1,"a":[1,"上海",null,true,false],"m":{}}'
    )
    assert dumps("上海", ensure_ascii=True) == '"\\u4e0a\\u6d77"'
    assert dumps('q"\\\n\x01') == '"q\\"\\\\\\n\\u0001"'
    assert dumps((1, 2)) == "[1,2]"


def test_dumps_quotes_int_keys() -> None:
    assert dumps({"brokerAddrs": {0: "a", 1: "b"}}) == '{"brokerAddrs":{"0":"a","1":"b"}}'
    assert dumps({True: 1, None: 2, 1.5: 3}) == '{"true":1,"null":2,"1.5":3}'


def test_dumps_writes_message_queue_and_dict_keys_as_objects() -> None:
    mq = MessageQueue("WireTools", "broker-a", 3)
    assert dumps({"offsetTable": {mq: 0}}) == (
        '{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"WireTools"}:0}}'
    )
    assert dumps(ObjectKeyMap([({"a": 1}, 2), ("s", 3)])) == '{{"a":1}:2,"s":3}'
    assert dumps([mq]) == '[{"brokerName":"broker-a","queueId":3,"topic":"WireTools"}]'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.5, "1.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (9.99e-4, "9.99E-4"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (-2.5e-10, "-2.5E-10"),
        (1e300, "1.0E300"),
        (float("nan"), "null"),
        (float("inf"), "null"),
    ],
)
def test_floats_are_written_like_java(value: float, text: str) -> None:
    assert java_double(value) == text
    assert dumps([value]) == f"[{text}]"


def test_dumps_rejects_unknown_types() -> None:
    with pytest.raises(TypeError, match="set"):
        dumps({1, 2})
    with pytest.raises(TypeError, match="map key"):
        dumps({(1, 2): 3})


# -- captures -------------------------------------------------------------------------------------------


def test_captures_include_the_object_key_bodies() -> None:
    codes = {code for _, _, code, _ in CAPTURED}
    assert {220, 221, 307, 309, 105, 34, 41, 42, 38} <= codes


@pytest.mark.parametrize(("file", "seq", "code", "body"), CAPTURED, ids=[f"{c[0]}:{c[1]}" for c in CAPTURED])
def test_captured_bodies_reencode_byte_identically(file: str, seq: int, code: int, body: bytes) -> None:
    value = loads(body)
    assert dumps(value).encode("utf-8") == body


def test_captured_reset_offset_body_is_read() -> None:
    ((_, _, _, body),) = [c for c in CAPTURED if c[2] == 220]
    table = loads(body)["offsetTable"]
    assert isinstance(table, ObjectKeyMap)
    assert [(k["queueId"], v) for k, v in table] == [(3, 0), (0, 0), (1, 0), (2, 0)]


# -- properties -----------------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(_json)
def test_dumps_then_loads_round_trips(value: Any) -> None:
    text = dumps(value)
    assert loads(text) == value
    assert json.loads(text) == value  # it is standard JSON


@settings(max_examples=150, deadline=None)
@given(_json)
def test_dialect_parser_agrees_with_stdlib(value: Any) -> None:
    # Wrapping the value under an object key forces the dialect parser on every part of it.
    text = dumps(value)
    got = loads("{" + '{"k":1}' + ":" + text + "}")
    assert isinstance(got, ObjectKeyMap)
    assert list(got) == [({"k": 1}, json.loads(text))]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.builds(MessageQueue, st.text(max_size=6), st.text(max_size=6), st.integers(0, 1000)),
        st.integers(-(2**63), 2**63 - 1),
        max_size=5,
    )
)
def test_message_queue_keyed_maps_round_trip(table: dict[MessageQueue, int]) -> None:
    got = loads(dumps({"offsetTable": table}))["offsetTable"]
    pairs_back = list(got.items()) if isinstance(got, dict) else list(got)
    assert [(MessageQueue.from_json(k), v) for k, v in pairs_back] == list(table.items())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_escapes_the_error_tree(text: str) -> None:
    with contextlib.suppress(ProtocolError):
        fastjson.loads(text)
