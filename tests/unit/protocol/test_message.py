"""rmq_async.protocol.message: the frames a producer sends, against the captures and Java's rules."""

from __future__ import annotations

import struct
import time
from collections import Counter

import pytest
from support.wire import CAPTURE_FILES, Frame, frames

from rmq_async.errors import InvalidMessageError
from rmq_async.protocol.codes import MessageSysFlag, Prop
from rmq_async.protocol.message import (
    COMPRESS_THRESHOLD,
    MAX_MESSAGE_SIZE,
    Message,
    batch_member_properties,
    compress_body,
    encode_batch_body,
    encode_batch_members,
)
from rmq_async.protocol.properties import encode_properties, parse_properties


def _expected_send(topic: str, i: int, file: str) -> Message:
    """The message the wire README says the producer sent as ``wire-<topic>-<i>``."""
    body = f"wire-{topic}-{i}".encode()
    if file == "compressed-unicode.jsonl":
        if i == 0:
            return Message(topic, (b"wire-WireZipUtf8-0 " * 600)[:10240], tags="TagZip", keys="k-0")
        if i == 1:
            return Message(topic, body, tags="标签中文", keys="键-1", properties={"city": "上海"})
        return Message(topic, body, tags="TagKeys", keys=["k-2", "k-2b"])
    if topic == "WireHB":
        return Message(topic, body, tags="TagHB", keys="k-hb")
    special = {10000: ("TagOneway", "k-oneway"), 10001: ("TagAsync", "k-async")}
    tags, keys = special.get(i, ("TagA" if i % 2 == 0 else "TagB", f"k-{i}"))
    user = {("userProp" if file != "v5-send.jsonl" else "wireUserProp"): "v0"} if i == 0 else None
    return Message(topic, body, tags=tags, keys=keys, properties=user, delay_level=1 if i == 1 else 0)


SENDS = [(f, fr) for f in CAPTURE_FILES for fr in frames(f) if fr.code == 310 and fr.kind != "response"]


def test_send_inventory() -> None:
    assert Counter(f for f, _ in SENDS) == {
        "send.jsonl": 102, "v5-send.jsonl": 20, "binary-send.jsonl": 7, "compressed-unicode.jsonl": 3,
        "admin-running-info.jsonl": 1, "route-and-heartbeat.jsonl": 1,
    }  # fmt: skip


@pytest.mark.parametrize(("file", "frame"), SENDS, ids=[f"{f}:{fr.seq}" for f, fr in SENDS])
def test_send_properties_match_java(file: str, frame: Frame) -> None:
    ext = frame.header["extFields"]
    wire_props = ext["i"]
    sent = parse_properties(wire_props)
    zipped = ext["f"] == "769"
    i = 0 if zipped else int(frame.body.decode().rsplit("-", 1)[1])
    msg = _expected_send(ext["b"], i, file)
    assert msg.ensure_uniq_id(sent["UNIQ_KEY"]) == sent["UNIQ_KEY"] == msg.uniq_id
    assert msg.properties == sent  # order-independent
    if file.startswith("v5-"):  # 5.x: HashMap order, trailing separator
        v5_form = encode_properties(msg.properties, trailing_separator=True)
        assert sorted(v5_form.split("\x02")) == sorted(wire_props.split("\x02"))
    else:  # 4.9.8 wrote them in the order Message builds them
        assert encode_properties(msg.properties) == wire_props
    if zipped:
        assert len(msg.body) >= COMPRESS_THRESHOLD
        assert compress_body(msg.body) == frame.body  # byte-identical to Java's Deflater(5)
        assert int(ext["f"]) == MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB_TYPE
    else:
        assert msg.body == frame.body and len(msg.body) < COMPRESS_THRESHOLD
    assert int(ext["h"]) == msg.flag and msg.wait_store_msg_ok
    assert msg.delay_level == int(sent.get("DELAY", "0"))


def _decode_batch(body: bytes) -> list[tuple[int, bytes, str]]:
    """Independent reader of the SEND_BATCH_MESSAGE body: (flag, body, property string)."""
    out, pos = [], 0
    while pos < len(body):
        total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
        assert magic == 0 and crc == 0
        (plen,) = struct.unpack_from(">h", body, pos + 20 + blen)
        assert total == 20 + blen + 2 + plen
        out.append((flag, body[pos + 20 : pos + 20 + blen], body[pos + 22 + blen : pos + total].decode()))
        pos += total
    return out


BATCHES = [(f, fr) for f in CAPTURE_FILES for fr in frames(f) if fr.code == 320 and fr.kind == "request"]


@pytest.mark.parametrize(("file", "frame"), BATCHES, ids=[f for f, _ in BATCHES])
def test_batch_body_reencodes(file: str, frame: Frame) -> None:
    v5 = file.startswith("v5-")
    topic = frame.header["extFields"]["b"]
    msgs = []
    for flag, body, props in _decode_batch(frame.body):
        msgs.append(Message.resent(topic, body, parse_properties(props), flag=flag))
    assert len(msgs) == 3
    assert encode_batch_body(msgs, trailing_separator=v5) == frame.body
    first = int(msgs[0].body.decode().rsplit("-", 1)[1])
    for n, m in enumerate(msgs):  # what the producer built: keys, tags, a UNIQ_KEY each
        i = first + n
        expected = Message(topic, m.body, tags="TagBatch", keys=f"k-batch-{i - 20000}")
        if v5:
            expected = Message(topic, m.body, tags="TagA" if i % 2 == 0 else "TagB", keys=f"k-{i}")
        expected.ensure_uniq_id(m.uniq_id)
        assert expected.properties == m.properties
    assert len(BATCHES) == 3


@pytest.mark.parametrize(("file", "frame"), BATCHES, ids=[f for f, _ in BATCHES])
def test_batch_members_from_columns_rebuild_java_batches(file: str, frame: Frame) -> None:
    """The Spark sink's way (the members' fields as columns, no Message each) writes the 4.9.8
    client's batch bytes; the 5.x one differs only by its trailing separators."""
    flags, bodies, props = [], [], []
    for flag, body, wire in _decode_batch(frame.body):
        sent = parse_properties(wire)
        flags.append(flag)
        bodies.append(body)
        props.append(batch_member_properties(sent["UNIQ_KEY"], sent["KEYS"], sent["TAGS"]))
    rebuilt = encode_batch_members(bodies, props, flags)
    if file.startswith("v5-"):
        rebuilt = encode_batch_members(bodies, [p + b"\x02" for p in props], flags)
    assert rebuilt == frame.body


def test_batch_members_match_messages_with_user_properties() -> None:
    """With user properties and a given UNIQ_KEY (the sink's uniqKeyColumn): the bytes of
    encode_batch_body of the Messages the sink made before, in their order."""
    rows = [(b"a", "k-1", "TagA", [("order", "1"), ("city", "上海")]), (b"bb", None, None, None)]
    msgs, props = [], []
    for n, (body, keys, tags, user) in enumerate(rows):
        m = Message("T", body, tags=tags, keys=keys, properties=dict(user) if user else None)
        m.ensure_uniq_id(f"{n:032X}")
        msgs.append(m)
        props.append(batch_member_properties(f"{n:032X}", keys, tags, user))
    assert encode_batch_members([m.body for m in msgs], props) == encode_batch_body(msgs)
    assert props[1] == f"UNIQ_KEY\x01{1:032X}\x02WAIT\x01true".encode()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("U", "a\x02b"), "keys"),
        (("U", None, "t\x01"), "tags"),
        (("U", None, None, [("KEYS", "x")]), "properties"),
        (("U", None, None, [("p", None)]), "properties"),
        (("U", None, None, [("p", "\ud800")]), "properties"),
        (("U", None, None, [("p", "v" * 40000)]), "properties"),
        (("U\x02",), "uniq_id"),
        (("U", 7), "keys"),
    ],
)
def test_batch_member_properties_refuse_what_message_refuses(args: tuple[object, ...], field: str) -> None:
    with pytest.raises(InvalidMessageError) as ei:
        batch_member_properties(*args)  # type: ignore[arg-type]
    assert ei.value.field == field


def test_batch_members_need_one_each() -> None:
    with pytest.raises(ValueError, match="at least one"):
        encode_batch_members([], [])
    with pytest.raises(ValueError, match="a body and properties for each"):
        encode_batch_members([b"x"], [b"a", b"b"])


def test_batch_rejects_mixed_topics_and_empty() -> None:
    with pytest.raises(ValueError, match="one topic"):
        encode_batch_body([Message("A", b"x"), Message("B", b"x")])
    with pytest.raises(ValueError):
        encode_batch_body([])


# -- Message --------------------------------------------------------------------------------------


def test_message_builds_properties_in_java_order() -> None:
    m = Message(
        "T", b"b", tags="t", keys=["a", "b"], properties={"u": "1"}, delay_level=3, wait_store_msg_ok=False
    )
    assert list(m.properties.items()) == [
        ("u", "1"),
        ("KEYS", "a b"),
        ("WAIT", "false"),
        ("DELAY", "3"),
        ("TAGS", "t"),
    ]
    uid = m.ensure_uniq_id()
    assert list(m.properties)[2] == "UNIQ_KEY" and m.ensure_uniq_id() == uid == m.uniq_id
    assert (m.tags, m.keys, m.delay_level, m.wait_store_msg_ok) == ("t", "a b", 3, False)
    bare = Message("T", bytearray(b"x"), keys="", tags="")  # type: ignore[arg-type]
    assert bare.properties == {"WAIT": "true"} and isinstance(bare.body, bytes) and bare.tags is None
    bare.put_property("x", "y")
    assert bare.properties["x"] == "y"
    assert MAX_MESSAGE_SIZE == 4 << 20 and "body=1B" in repr(m)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topic": ""},
        {"topic": "   "},
        {"topic": "a" * 128},
        {"topic": "bad topic"},
        {"topic": "主题"},
        {"topic": "T\n"},
        {"body": b""},
        {"tags": "a\x01b"},
        {"keys": ["a\x02"]},
        {"properties": {"n\x01": "v"}},
        {"properties": {"": "v"}},
        {"properties": {"n": "v\x02"}},
        {"delay_level": -1},
        {"flag": 1 << 31},
    ],
)
def test_message_validation(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"topic": "T", "body": b"x"} | kwargs
    with pytest.raises(ValueError):
        Message(**args)  # type: ignore[arg-type]


def test_message_accepts_java_topic_charset() -> None:
    assert Message("%RETRY%g|a-Z_09" + "x" * 112, b"x").topic.endswith("x")


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"keys": 123}, "keys", "must be a str or a sequence of str"),
        ({"keys": ["a", 2]}, "keys", "must be a str or a sequence of str"),
        ({"body": "text"}, "body", "must be bytes, got str"),
        ({"body": None}, "body", "must be bytes, got NoneType"),
        ({"body": b""}, "body", "is empty"),
        ({"tags": "\ud800"}, "tags", "a lone surrogate"),
        ({"keys": "k\udfff"}, "keys", "a lone surrogate"),
        ({"properties": {"city": "\ud83d"}}, "properties", "'city' holds a lone surrogate"),
        ({"properties": {"n": 1}}, "properties", "must be str"),
        ({"properties": [("a", "b")]}, "properties", "must be a dict"),
        ({"tags": 5}, "tags", "must be a str, got int"),
        ({"topic": "bad.topic"}, "topic", "illegal characters"),
        ({"topic": ""}, "topic", "blank"),
        ({"topic": 7}, "topic", "blank"),
        ({"flag": 2**40}, "flag", "does not fit in a Java int"),
        ({"delay_level": "3"}, "delay_level", "must be an int, got str"),
        ({"delay_level": -1}, "delay_level", "must be >= 0"),
    ],
)
def test_a_message_fails_when_it_is_made_naming_the_field(
    kwargs: dict[str, object], field: str, words: str
) -> None:
    # before: a raw TypeError (a str body, a non-str key) or nothing until send() (a lone surrogate)
    from rmq_async import ConfigError, RocketMQError
    from rmq_async.errors import InvalidMessageError

    args: dict[str, object] = {"topic": "T", "body": b"x", **kwargs}
    with pytest.raises(InvalidMessageError) as exc:
        Message(**args)  # type: ignore[arg-type]
    assert exc.value.field == field and words in str(exc.value) and f"Message {field}: " in str(exc.value)
    assert isinstance(exc.value, ConfigError) and isinstance(exc.value, ValueError)
    assert isinstance(exc.value, RocketMQError)


def test_a_bytearray_or_memoryview_body_is_taken_as_bytes() -> None:
    assert Message("T", bytearray(b"ab")).body == b"ab"  # type: ignore[arg-type]
    assert Message("T", memoryview(b"cd")).body == b"cd"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["UNIQ_KEY", "DELAY", "KEYS", "TAGS", "WAIT", "TRAN_MSG", "__CRC32#", "1ST_POP_TIME"]
)
def test_a_user_property_with_a_system_name_is_refused(name: str) -> None:
    # Java's Message.putUserProperty: names in MessageConst.STRING_HASH_SET are the system's
    with pytest.raises(InvalidMessageError, match="used by the system"):
        Message("T", b"x", properties={name: "v"})
    with pytest.raises(InvalidMessageError, match="used by the system"):
        Message("T", b"x").put_property(name, "v")


def test_the_typed_arguments_still_set_the_system_properties() -> None:
    m = Message("T", b"x", keys=["a", "b"], tags="t", delay_level=3, properties={"mine": "1"})
    assert m.properties == {"mine": "1", "KEYS": "a b", "WAIT": "true", "DELAY": "3", "TAGS": "t"}
    assert m.ensure_uniq_id("U1") == "U1"


def test_a_stored_message_sent_again_keeps_its_system_properties() -> None:
    stored = {"UNIQ_KEY": "U", "KEYS": "k", "WAIT": "false", "RETRY_TOPIC": "T", "mine": "1"}
    m = Message.resent("%RETRY%g", b"x", stored, delay_level=4)
    assert m.properties == {**stored, "WAIT": "true", "DELAY": "4"}
    assert list(m.properties) == [*stored, "DELAY"]  # the stored order kept, as before
    with pytest.raises(InvalidMessageError):
        Message.resent("T", b"x", {"a\x01": "v"})


def test_bad_timer_arguments_are_refused_when_the_message_is_made() -> None:
    with pytest.raises(InvalidMessageError, match="not both"):
        Message("T", b"x", delay=1, deliver_at=time.time() + 1)
    with pytest.raises(InvalidMessageError, match="exclude"):
        Message("T", b"x", delay=1, delay_level=2)
    for bad in (0, -1, float("nan"), "5"):
        with pytest.raises(InvalidMessageError):
            Message("T", b"x", delay=bad)  # type: ignore[arg-type]
    m = Message("T", b"x", delay=0.25, keys="k", tags="t")
    assert m.delay == 0.25 and m.deliver_at is None and m.properties[Prop.TIMER_DELAY_MS] == "250"
    assert Message("T", b"x", deliver_at=1796151735.725).deliver_at == 1796151735.725
    # the 5.x client's HashMap order (v5-timer.jsonl), UNIQ_KEY added by the producer before WAIT
    assert list(Message("T", b"x", keys="k", tags="t", deliver_at=1.5).properties) == [
        "KEYS", "TIMER_DELIVER_MS", "WAIT", "TAGS",
    ]  # fmt: skip
    assert next(iter(Message("T", b"x", keys="k", tags="t", delay=3).properties)) == "TIMER_DELAY_SEC"
