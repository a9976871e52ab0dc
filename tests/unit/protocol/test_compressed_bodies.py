"""Compressed bodies: LZ4 and ZSTD next to zlib, against bodies the Java libraries wrote, and
per-message isolation of what cannot be decoded.

``tests/fixtures/compression/java-bodies.json`` holds bodies written by lz4-java's
``LZ4FrameOutputStream``, zstd-jni's ``ZstdOutputStream`` and ``DeflaterOutputStream``, driven as
RocketMQ 5.x's ``Lz4Compressor``/``ZstdCompressor``/``ZlibCompressor`` drive them
(``RefBodies.java`` next to it writes the file).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers_stored import encode_stored

from rmq_async.config import ProducerConfig
from rmq_async.errors import ConfigError, ProtocolError
from rmq_async.producer.producer import Producer, TopicPublishInfo
from rmq_async.protocol.bodies import BrokerData, QueueData, TopicRouteData
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.message import (
    COMPRESSION_TYPES,
    CompressionType,
    Message,
    compress_body,
    compression_flag,
)
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import (
    Undecodable,
    UndecodableMessageError,
    decode_messages,
    decompress_body,
    undecodable_at,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "compression"
JAVA_BODIES = json.loads((FIXTURES / "java-bodies.json").read_text())


def _input(name: str) -> bytes:
    """The inputs of RefBodies.java, by the same recipes."""
    if name == "text-4k":
        unit = b"rocketmq-compression-#19 "
        return (unit * (4096 // len(unit) + 1))[:4096]
    if name == "lcg-8k":
        out = bytearray()
        x = 19
        for _ in range(8192):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            out.append((x >> 16) & 0x0F)
        return bytes(out)
    assert name == "ramp-5m"
    return bytes((i * 7) % 251 for i in range(5 << 20))


INPUTS = {name: _input(name) for name in {e["input"] for e in JAVA_BODIES}}
IDS = [f"{e['input']}-{e['type']}-{e['level']}" for e in JAVA_BODIES]


def test_inventory() -> None:
    assert {e["type"] for e in JAVA_BODIES} == {"LZ4", "ZSTD", "ZLIB"} and len(JAVA_BODIES) == 12
    lz4 = bytes.fromhex(next(e["body"] for e in JAVA_BODIES if e["type"] == "LZ4"))
    # LZ4 frame magic, FLG: version 01 + independent blocks, BD: 4 MiB blocks (no content size)
    assert lz4[:6] == bytes.fromhex("04224d186070")
    assert bytes.fromhex(next(e["body"] for e in JAVA_BODIES if e["type"] == "ZSTD"))[:4] == bytes.fromhex(
        "28b52ffd"
    )


@pytest.mark.parametrize("entry", JAVA_BODIES, ids=IDS)
def test_java_bodies_decode_to_the_original(entry: dict[str, Any]) -> None:
    body = bytes.fromhex(str(entry["body"]))
    flag = compression_flag(entry["type"])
    original = INPUTS[str(entry["input"])]
    assert decompress_body(body, flag) == original
    stored = encode_stored(topic="T", body=body, sys_flag=flag, properties={"KEYS": "k"})
    [m] = decode_messages(stored)
    assert m.body == original and m.keys == "k"
    assert m.sys_flag == flag & ~MessageSysFlag.COMPRESSED_FLAG  # the type bits stay, as in Java


@pytest.mark.parametrize("entry", JAVA_BODIES, ids=IDS)
def test_compress_body_writes_the_java_bytes(entry: dict[str, Any]) -> None:
    original = INPUTS[str(entry["input"])]
    body = compress_body(original, int(entry["level"]), entry["type"])
    assert body.hex() == entry["body"]


def test_sys_flag_bits_equal_javas() -> None:
    # COMPRESSED_FLAG | CompressionType.getCompressionFlag(): LZ4 1 << 8, ZSTD 2 << 8, ZLIB 3 << 8
    assert {t: compression_flag(t) for t in COMPRESSION_TYPES} == {"ZLIB": 769, "LZ4": 257, "ZSTD": 513}
    with pytest.raises(ValueError, match="SNAPPY"):
        compression_flag("SNAPPY")  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="unknown compression type 4"):
        decompress_body(b"x", MessageSysFlag.COMPRESSED_FLAG | (4 << 8))


def test_concatenated_frames_are_read_as_the_java_streams_do() -> None:
    kinds: tuple[CompressionType, ...] = ("LZ4", "ZSTD")
    for kind in kinds:
        two = compress_body(b"abc" * 100, 3, kind) + compress_body(b"xyz" * 100, 3, kind)
        assert decompress_body(two, compression_flag(kind)) == b"abc" * 100 + b"xyz" * 100
        cut = compress_body(b"abc" * 100, 3, kind)[:-3]
        with pytest.raises(ProtocolError, match=f"{kind} body does not decompress"):
            decompress_body(cut, compression_flag(kind))
        with pytest.raises(ProtocolError, match=f"{kind} body does not decompress"):
            decompress_body(compress_body(b"abc", 3, kind) + b"junk", compression_flag(kind))


# -- round trips --------------------------------------------------------------------------------

_PROPS = st.dictionaries(
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=8
    ),
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=20
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=20_000),
    kind=st.sampled_from(COMPRESSION_TYPES),
    level=st.integers(1, 9),
    props=_PROPS,
)
def test_round_trip(body: bytes, kind: CompressionType, level: int, props: dict[str, str]) -> None:
    flag = compression_flag(kind)
    stored = encode_stored(topic="T", body=compress_body(body, level, kind), sys_flag=flag, properties=props)
    [m] = decode_messages(stored)
    assert m.body == body and m.properties == props
    assert not decode_messages(stored).undecodable


# -- isolation --------------------------------------------------------------------------------


def _stored(i: int, body: bytes, sys_flag: int = 0) -> bytes:
    return encode_stored(
        topic="TopicC",
        body=body,
        sys_flag=sys_flag,
        queue_id=2,
        queue_offset=i,
        commit_log_offset=1000 + 100 * i,
        properties={"UNIQ_KEY": f"ID{i}", "KEYS": f"k-{i}"},
        reconsume_times=1,
    )


def test_a_bad_message_is_recorded_and_the_rest_decoded() -> None:
    good = [
        _stored(i, compress_body(f"m{i}".encode() * 50, 5, t), compression_flag(t))
        for i, t in enumerate(COMPRESSION_TYPES)
    ]
    bad = _stored(3, b"\x04\x22\x4d\x18 not lz4", compression_flag("LZ4"))
    body = b"".join(good) + bad + _stored(4, b"plain")
    msgs = decode_messages(body, broker_name="broker-a")
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 4]
    assert [m.body for m in msgs] == [f"m{i}".encode() * 50 for i in range(3)] + [b"plain"]
    [rec] = msgs.undecodable
    assert rec == undecodable_at(body, len(b"".join(good)), rec.reason, broker_name="broker-a")
    assert (
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.commit_log_offset,
        rec.msg_id,
        rec.broker_name,
    ) == (
        "TopicC",
        2,
        3,
        1300,
        "ID3",
        "broker-a",
    )
    assert rec.reconsume_times == 1 and rec.sys_flag == compression_flag("LZ4")
    assert rec.offset_msg_id.endswith(f"{1300:016X}")
    assert "LZ4 body does not decompress" in rec.reason
    text = rec.describe()
    for part in ("TopicC@broker-a:2", "offset 3", "ID3", "commit-log offset 1300", "LZ4"):
        assert part in text
    err = UndecodableMessageError(rec)
    assert isinstance(err, ProtocolError) and err.record is rec and "offset 3" in str(err)
    assert isinstance(rec, Undecodable)


def test_kept_as_stored_when_not_decompressed() -> None:
    bad = _stored(0, b"garbage", compression_flag("ZSTD"))
    [m] = decode_messages(bad, decompress=False)
    assert m.body == b"garbage"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_compressed_bodies_fail_per_message(data: st.DataObject) -> None:
    """A mutated compressed body (flipped bytes, cuts, junk, another type's bits) never fails the
    batch: that message decodes to something or is recorded (ProtocolError inside, nothing else
    escapes), its neighbours always decode."""
    kind = data.draw(st.sampled_from(COMPRESSION_TYPES))
    original = data.draw(st.binary(min_size=1, max_size=3000))
    comp = bytearray(compress_body(original, 3, kind))
    for _ in range(data.draw(st.integers(0, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "junk", "truncate"]))
        if op == "flip" and comp:
            i = data.draw(st.integers(0, len(comp) - 1))
            comp[i] ^= data.draw(st.integers(1, 255))
        elif op == "cut" and comp:
            i = data.draw(st.integers(0, len(comp) - 1))
            del comp[i : i + data.draw(st.integers(1, 16))]
        elif op == "junk":
            i = data.draw(st.integers(0, len(comp)))
            comp[i:i] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            comp = comp[: data.draw(st.integers(0, len(comp)))]
    flag = data.draw(st.sampled_from([compression_flag(kind), MessageSysFlag.COMPRESSED_FLAG | (7 << 8)]))
    body = _stored(0, b"before") + _stored(1, bytes(comp), flag) + _stored(2, b"after")
    msgs = decode_messages(body)
    assert msgs[0].body == b"before" and msgs[-1].body == b"after"
    assert len(msgs) + len(msgs.undecodable) == 3
    if msgs.undecodable:
        assert msgs.undecodable[0].queue_offset == 1
    try:
        decompress_body(bytes(comp), flag)
    except ProtocolError:
        assert len(msgs.undecodable) == 1
    else:
        assert not msgs.undecodable


# -- the producer's choice --------------------------------------------------------------------


def _route(v5: bool) -> TopicPublishInfo:
    route = TopicRouteData(
        queue_datas=[QueueData(broker_name="b", read_queue_nums=1, write_queue_nums=1, perm=6)],
        broker_datas=[
            BrokerData(
                cluster="c",
                broker_name="b",
                broker_addrs={0: "127.0.0.1:1"},
                enable_acting_master=False if v5 else None,
            )
        ],
    )
    return TopicPublishInfo([MessageQueue("T", "b", 0)], route)


@pytest.mark.parametrize("kind", COMPRESSION_TYPES)
def test_producer_sets_javas_sys_flag(kind: CompressionType) -> None:
    p = Producer("pg", config=ProducerConfig(group="pg", compress_type=kind.lower()))
    assert p.compress_type_for(_route(v5=True)) == kind
    assert p.compress_type_for(_route(v5=False)) == "ZLIB"  # a 4.x cluster: zlib, as 4.x Java
    msg = Message("T", b"a" * 4096)  # compressMsgBodyOverHowmuch: >= 4 KiB is compressed
    body, _, sys_flag, _ = p._prepare(msg, p.compress_type_for(_route(v5=True)))
    assert sys_flag == compression_flag(kind)
    assert decompress_body(body, sys_flag) == msg.body
    _, _, small_flag, _ = p._prepare(Message("T", b"a" * 4095), kind)
    assert small_flag == 0


def test_compress_level_range() -> None:
    assert ProducerConfig(compress_type="ZSTD", compress_level=19).compress_level == 19
    with pytest.raises(ConfigError, match="zlib"):
        ProducerConfig(compress_level=12)
    with pytest.raises(ConfigError):
        ProducerConfig(compress_type="SNAPPY")


def test_zlib_is_the_zlib_module() -> None:
    assert compress_body(b"x" * 5000) == zlib.compress(b"x" * 5000, 5)
