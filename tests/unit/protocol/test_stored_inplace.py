"""The broker's side of rmq_async.protocol.stored: the ``stored_*`` readers, ``patch_stored``,
``StoredMessage`` and its re-encode, against ``decode_messages``, ``encode_stored_into``, the
independent test encoder and every stored message in the captures (pull, view, consume-directly and
POP bodies of 4.9.8 and 5.3.3 brokers)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers_stored import MAGIC_V1, MAGIC_V2, encode_stored, host_bytes
from support.wire import CAPTURE_FILES, pairs

from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.stored import (
    MIN_STORED_SIZE,
    MessageExt,
    StoredMessage,
    body_crc,
    decode_messages,
    encode_stored_into,
    patch_stored,
    stored_body_span,
    stored_head,
    stored_phys_offset,
    stored_properties,
    stored_queue_offsets,
    stored_size,
    stored_store_timestamp,
    stored_sys_flag,
)

POP_FILES = [f"pop/v5-pop-{n}.jsonl" for n in ("consume", "retry", "two-consumers", "lite")]


def captured_bodies() -> list[tuple[str, bytes]]:
    """(file, body) of every captured frame whose body is stored messages: pull and POP FOUND
    answers, VIEW_MESSAGE_BY_ID answers, CONSUME_MESSAGE_DIRECTLY requests."""
    out = []
    for f in [*CAPTURE_FILES, *POP_FILES]:
        for req, resp in pairs(f):
            if req.code in (11, 33, 200050) and resp is not None and resp.code == 0 and resp.body_len:
                out.append((f, resp.body))
            if req.code == 309 and req.kind == "request" and req.body_len:
                out.append((f, req.body))
    return out


BODIES = captured_bodies()


def _messages(body: bytes) -> list[tuple[int, MessageExt]]:
    """(position in the body, message as decoded, compressed bodies kept) of each stored message."""
    out, pos = [], 0
    for m in decode_messages(body, decompress=False):
        out.append((pos, m))
        pos += m.store_size
    assert pos == len(body)
    return out


def _assert_reads(buf: bytes | bytearray | memoryview, pos: int, m: MessageExt, v2: bool) -> None:
    """Every in-place reader at ``pos`` of ``buf`` gives what the decoder gave for ``m``."""
    assert stored_head(buf, pos) == (m.store_size, MAGIC_V2 if v2 else MAGIC_V1)
    assert stored_phys_offset(buf, pos) == m.commit_log_offset
    assert stored_sys_flag(buf, pos) == m.sys_flag
    assert stored_store_timestamp(buf, pos) == m.store_timestamp
    assert stored_properties(buf, pos) == m.raw_properties
    start, length = stored_body_span(buf, pos)
    assert bytes(buf[start : start + length]) == m.body and start + length < pos + m.store_size


def _assert_same(sm: StoredMessage, m: MessageExt) -> None:
    """A StoredMessage and the decoder's MessageExt of the same bytes agree field by field."""
    assert (sm.topic, sm.body, sm.props) == (m.topic, m.body, m.raw_properties)
    assert (sm.queue_id, sm.flag, sm.queue_offset, sm.phys_offset) == (
        m.queue_id, m.flag, m.queue_offset, m.commit_log_offset,
    )  # fmt: skip
    assert (sm.sys_flag, sm.born_ts, sm.store_ts, sm.reconsume_times, sm.prepared_offset) == (
        m.sys_flag, m.born_timestamp, m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset,
    )  # fmt: skip
    assert sm.body_crc == m.body_crc
    # createMessageId: the store host's bytes as stored, then the commit-log offset's 8 bytes
    assert sm.msg_id == (sm.store_host + struct.pack(">q", m.commit_log_offset)).hex().upper()
    if len(sm.store_host) == 8:  # IPv4 (the client writes a v4-mapped IPv6 address as IPv4)
        assert sm.msg_id == m.offset_msg_id


# -- the captures ----------------------------------------------------------------------------------


def test_the_captures_hold_pull_view_direct_and_pop_bodies() -> None:
    files = {f for f, _ in BODIES}
    assert set(POP_FILES) <= files and "admin-tools.jsonl" in files
    assert sum(len(_messages(b)) for _, b in BODIES) > 627  # the pull/view/direct ones and the POPs


@pytest.mark.parametrize(("file", "body"), BODIES, ids=[f"{f}:{i}" for i, (f, _) in enumerate(BODIES)])
def test_captured_messages_read_in_place(file: str, body: bytes) -> None:
    """Each captured message, read where it lies in its frame's body (bytes and a memoryview, as the
    store reads its segments), and decoded alone: the decoder's fields; re-encoded with its own topic
    and properties: the captured bytes."""
    msgs = _messages(body)
    view = memoryview(body)
    assert stored_queue_offsets(view[p : p + m.store_size] for p, m in msgs) == [
        m.queue_offset for _, m in msgs
    ]
    for pos, m in msgs:
        v2 = len(m.topic.encode()) > 127
        _assert_reads(body, pos, m, v2)
        _assert_reads(view, pos, m, v2)
        raw = body[pos : pos + m.store_size]
        sm = StoredMessage(raw)
        _assert_same(sm, m)
        assert body_crc(sm.body) == sm.body_crc  # UtilAll.crc32 of the body as stored
        assert sm.reencode(sm.topic, sm.props) == raw


def test_a_captured_pop_retry_message_moves_to_another_topic() -> None:
    """The 5.3.3 broker answered a pop of the retry topic with the original topic and a POP_CK (what
    ``StoredMessage.reencode`` does for the embedded broker); re-encoded with the retry topic and
    other properties, only those two and the size change."""
    [(raw, m)] = [
        (b[p : p + m.store_size], m)
        for f, b in BODIES
        if f == "pop/v5-pop-retry.jsonl"
        for p, m in _messages(b)
        if m.reconsume_times == 1 and m.keys == "k-3"
    ]
    assert m.topic == "PopRetry" and "POP_CK" in m.properties
    topic, props = "%RETRY%pop_retry_g_PopRetry", "KEYS\x01k-3\x02"
    out = StoredMessage(raw).reencode(topic, props)
    [again] = decode_messages(out, decompress=False)
    assert (again.topic, again.raw_properties) == (topic, props)
    assert (
        len(out)
        == again.store_size
        == len(raw) - len(m.topic) - len(m.raw_properties) + len(topic) + len(props)
    )
    _assert_same(StoredMessage(out), again)
    for name in ("queue_id", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp", "born_host",
                 "store_timestamp", "store_host", "reconsume_times", "body", "body_crc"):  # fmt: skip
        assert getattr(again, name) == getattr(m, name), name


# -- generated messages ----------------------------------------------------------------------------

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), max_size=12)
PROPS = st.dictionaries(TEXT.filter(bool), TEXT.filter(bool), max_size=5)
HOSTS = st.tuples(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), st.integers(0, 65535))
V1_TOPICS = st.text(max_size=30).filter(lambda t: len(t.encode()) <= 127)


@st.composite
def fields(draw: st.DrawFn, v2_topics: bool = True) -> dict[str, Any]:
    """Keyword arguments of the test encoder (``encode_stored``): any magic, host kind, compression."""
    topic = draw(st.text(min_size=128, max_size=150) if v2_topics and draw(st.booleans()) else V1_TOPICS)
    return {
        "topic": topic,
        "v2": len(topic.encode()) > 127 or (v2_topics and draw(st.booleans())),
        "body": draw(st.binary(max_size=200)),
        "properties": draw(PROPS),
        "compress": v2_topics and draw(st.booleans()),
        "queue_id": draw(I32),
        "flag": draw(I32),
        "queue_offset": draw(I64),
        "commit_log_offset": draw(I64),
        "sys_flag": draw(st.integers(0, 0xFF)) & ~0x31,  # the host and compression bits follow the data
        "born_timestamp": draw(I64),
        "born_host": draw(HOSTS),
        "store_timestamp": draw(I64),
        "store_host": draw(HOSTS),
        "reconsume_times": draw(I32),
        "prepared_transaction_offset": draw(I64),
    }


def _packed(host: tuple[str, int]) -> bytes:
    return host_bytes(host[0]) + struct.pack(">i", host[1])


def _encode_into(buf: bytearray, pos: int, f: dict[str, Any], topic: str, props: str) -> int:
    """``encode_stored_into`` of the generated fields at ``pos``; its size."""
    born, store = _packed(f["born_host"]), _packed(f["store_host"])
    sys_flag = f["sys_flag"]
    if len(born) == 20:
        sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if len(store) == 20:
        sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    topic_b, props_b = topic.encode(), props.encode()
    total = stored_size(len(born), len(store), len(f["body"]), len(topic_b), len(props_b))
    encode_stored_into(
        buf, pos, total, f["queue_id"], f["flag"], f["queue_offset"], f["commit_log_offset"], sys_flag,
        f["born_timestamp"], born, f["store_timestamp"], store, f["reconsume_times"],
        f["prepared_transaction_offset"], f["body"], topic_b, props_b,
    )  # fmt: skip
    return total


def _props_string(props: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items())


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fields(), min_size=1, max_size=3), st.binary(max_size=9))
def test_generated_messages_read_in_place(specs: list[dict[str, Any]], junk: bytes) -> None:
    """V1 and V2 magic codes, IPv4 and IPv6 hosts, compressed bodies, at any position of a buffer."""
    encoded = [encode_stored(**s) for s in specs]
    buf = bytearray(junk + b"".join(encoded) + junk)
    pos = len(junk)
    decoded = decode_messages(b"".join(encoded), decompress=False)
    for raw, m, s in zip(encoded, decoded, specs, strict=True):
        _assert_reads(buf, pos, m, s["v2"])
        _assert_reads(memoryview(buf), pos, m, s["v2"])
        sm = StoredMessage(raw)
        _assert_same(sm, m)
        assert body_crc(sm.body) == sm.body_crc == zlib.crc32(sm.body) & 0x7FFFFFFF
        pos += len(raw)
    assert stored_queue_offsets(encoded) == [s["queue_offset"] for s in specs]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(fields(v2_topics=False), V1_TOPICS, PROPS, st.integers(0, 64))
def test_encode_into_and_reencode_agree_with_the_test_encoder(
    f: dict[str, Any], topic: str, props: dict[str, str], pos: int
) -> None:
    """``encode_stored_into`` writes what the independent encoder writes (V1), at its position and
    nowhere else; ``StoredMessage.reencode`` with another topic and properties is that message
    encoded with them, every other field kept."""
    expected = encode_stored(**f)
    buf = bytearray(b"\xee" * (pos + len(expected) + 7))
    total = _encode_into(buf, pos, f, f["topic"], _props_string(f["properties"]))
    assert total == len(expected) and bytes(buf[pos : pos + total]) == expected
    assert buf[:pos] == b"\xee" * pos and buf[pos + total :] == b"\xee" * 7
    again = StoredMessage(expected).reencode(topic, _props_string(props))
    assert again == encode_stored(**{**f, "topic": topic, "properties": props})


def test_min_stored_size_is_the_smallest_message() -> None:
    smallest = encode_stored(topic="", body=b"")
    assert len(smallest) == MIN_STORED_SIZE == 91
    [m] = decode_messages(smallest)
    sm = StoredMessage(smallest)
    assert (m.topic, sm.topic, sm.body, sm.props) == ("", "", b"", "")


# -- patching --------------------------------------------------------------------------------------

_FIELDS = {  # patch_stored's keyword: (byte position, struct format) of its field
    "total": (0, ">i"), "magic": (4, ">i"), "crc": (8, ">i"), "queue_id": (12, ">i"), "flag": (16, ">i"),
    "queue_offset": (20, ">q"), "phys_offset": (28, ">q"), "sys_flag": (36, ">i"),
}  # fmt: skip


@given(st.sampled_from(sorted(_FIELDS)), I32, st.integers(0, 16))
def test_patch_stored_writes_one_field_and_nothing_else(name: str, value: int, pos: int) -> None:
    raw = encode_stored(topic="T", body=b"body", properties={"KEYS": "k"}, born_host=("::1", 9))
    buf = bytearray(b"\x00" * pos + raw)
    patch_stored(buf, pos, **{name: value})
    at, fmt = _FIELDS[name]
    size = struct.calcsize(fmt)
    assert struct.unpack_from(fmt, buf, pos + at) == (value,)
    assert buf[: pos + at] == b"\x00" * pos + raw[:at] and buf[pos + at + size :] == raw[at + size :]


def test_patch_stored_as_the_store_spoils_a_message() -> None:
    """The fault injections of the embedded store: -1 in every id field is 0xFF bytes 4..36, as a
    damaged log reads; a sys flag and CRC patched together keep the framing sound for the decoder."""
    raw = encode_stored(topic="T", body=b"abcdef", queue_offset=7, commit_log_offset=900)
    buf = bytearray(raw)
    patch_stored(buf, magic=-1, crc=-1, queue_id=-1, flag=-1, queue_offset=-1, phys_offset=-1)
    assert buf[4:36] == b"\xff" * 32 and buf[:4] == raw[:4] and buf[36:] == raw[36:]
    buf = bytearray(raw)
    start, length = stored_body_span(buf)
    buf[start : start + 2] = b"\xff\xfe"
    patch_stored(buf, sys_flag=stored_sys_flag(buf) | 0x301, crc=body_crc(buf[start : start + length]))
    decoded = decode_messages(bytes(buf))  # the body does not decompress: isolated, framing sound
    assert len(decoded) == 0 and len(decoded.undecodable) == 1
    bad = decoded.undecodable[0]
    assert (bad.queue_offset, bad.commit_log_offset, bad.sys_flag) == (7, 900, 0x301)
    assert StoredMessage(bytes(buf)).body_crc == body_crc(b"\xff\xfecdef")
