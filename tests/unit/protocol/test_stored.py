"""rmq_async.protocol.stored against the captured frames, a second encoder and hypothesis."""

from __future__ import annotations

import ipaddress
import re
import struct
import zlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers_stored import MAGIC_V1, MAGIC_V2, encode_stored
from support.wire import CAPTURE_FILES, Frame, frames, pairs

from rmq_async.errors import ProtocolError
from rmq_async.protocol import stored as stored_mod
from rmq_async.protocol.codes import MessageSysFlag, Prop
from rmq_async.protocol.msgid import create_offset_msg_id, parse_offset_msg_id
from rmq_async.protocol.properties import parse_properties
from rmq_async.protocol.stored import MessageExt, PulledMessages, decode_messages

# -- captured stored messages -----------------------------------------------------------------


def stored_bodies() -> list[tuple[str, int, Frame]]:
    """(file, request code, frame whose body is stored messages): pull FOUND and VIEW_MESSAGE_BY_ID
    responses, and CONSUME_MESSAGE_DIRECTLY requests."""
    out = []
    for f in CAPTURE_FILES:
        for req, resp in pairs(f):
            if req.code in (11, 33) and resp is not None and resp.code == 0 and resp.body_len:
                out.append((f, req.code, resp))
        out += [(f, 309, fr) for fr in frames(f) if fr.code == 309 and fr.kind == "request" and fr.body_len]
    return out


BODIES = stored_bodies()
BODY_RE = re.compile(r"wire-(?P<topic>\w+)-(?P<i>\d+)")


def expected_keys(file: str, topic: str, i: int) -> str:
    """The keys the capture producers used (wire README): ``k-<i>`` with a few named exceptions."""
    if topic == "WireHB":
        return "k-hb"
    if file == "orderly-lock.jsonl":
        return f"order-{i % 4}-{i}"  # orderId = i % 4
    if file == "compressed-unicode.jsonl":
        return ("k-0", "键-1", "k-2 k-2b")[i]
    return {10000: "k-oneway", 10001: "k-async"}.get(i, f"k-batch-{i - 20000}" if i >= 20000 else f"k-{i}")


def test_capture_inventory() -> None:
    kinds = Counter(code for _, code, _ in BODIES)
    assert kinds[33] == 1 and kinds[309] == 1 and kinds[11] == 85
    assert sum(len(decode_messages(fr.body)) for _, _, fr in BODIES) == 627


@pytest.mark.parametrize(("file", "code", "frame"), BODIES, ids=[f"{f}:{fr.seq}" for f, _, fr in BODIES])
def test_capture_decodes(file: str, code: int, frame: Frame) -> None:
    msgs = decode_messages(frame.body, broker_name="broker-a")
    assert msgs and sum(m.store_size for m in msgs) == len(frame.body)
    assert len(decode_messages(frame.body, check_properties=True)) == len(msgs)
    port = 10931 if file.startswith("v5-") else 10911
    for m in msgs:
        props = m.properties
        assert m.broker_name == "broker-a"
        assert m.store_host == f"127.0.0.1:{port}" and m.born_host.startswith("127.0.0.1:")
        assert m.offset_msg_id == create_offset_msg_id("127.0.0.1", port, m.commit_log_offset)
        assert parse_offset_msg_id(m.offset_msg_id) == (m.store_host, m.commit_log_offset)
        assert m.msg_id == props[Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] != m.offset_msg_id
        assert m.tags == props.get(Prop.TAGS)
        assert m.keys == props.get(Prop.KEYS)
        assert m.raw_properties.endswith("\x02") == file.startswith("v5-")
        assert m.store_timestamp >= m.born_timestamp > 1795300000000
        assert m.queue_id in range(4) and m.queue_offset >= 0 and m.prepared_transaction_offset == 0
        match = BODY_RE.match(m.body.decode())
        assert match is not None, m.body[:40]
        assert match.end() == len(m.body) or m.body == (f"{match[0]} ".encode() * 600)[:10240]
        original = props.get(Prop.RETRY_TOPIC, m.topic)
        assert match["topic"] == original
        if m.topic.startswith("%RETRY%") or m.topic.startswith("%DLQ%"):
            assert m.reconsume_times >= 1 and props["REAL_TOPIC"] == f"%RETRY%{m.topic.split('%')[2]}"
            assert props["WAIT"] == "false"
        else:
            assert m.topic == original and m.reconsume_times == 0
        assert m.keys == expected_keys(file, original, int(match["i"]))


def test_capture_reencodes_byte_identically() -> None:
    """The test encoder, fed the decoded fields, rebuilds every captured stored message."""
    for _, _, frame in BODIES:
        rebuilt = b""
        for m in decode_messages(frame.body, decompress=False):
            born_ip, born_port = m.born_host.rsplit(":", 1)
            store_ip, store_port = m.store_host.rsplit(":", 1)
            rebuilt += encode_stored(
                topic=m.topic,
                body=m.body,
                properties=m.raw_properties,
                queue_id=m.queue_id,
                flag=m.flag,
                queue_offset=m.queue_offset,
                commit_log_offset=m.commit_log_offset,
                sys_flag=m.sys_flag,
                born_timestamp=m.born_timestamp,
                born_host=(born_ip, int(born_port)),
                store_timestamp=m.store_timestamp,
                store_host=(store_ip, int(store_port)),
                reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset,
                body_crc=m.body_crc,
            )
        assert rebuilt == frame.body


def test_capture_body_crc_is_java_crc32() -> None:
    for _, _, frame in BODIES:
        for m in decode_messages(frame.body, decompress=False):
            assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF  # UtilAll.crc32


def _file_messages(file: str) -> list[MessageExt]:
    return [m for f, _, fr in BODIES if f == file for m in decode_messages(fr.body)]


def test_compressed_unicode() -> None:
    msgs = {m.keys: m for m in _file_messages("compressed-unicode.jsonl")}
    assert set(msgs) == {"k-0", "键-1", "k-2 k-2b"}
    zipped = msgs["k-0"]
    assert zipped.body == (b"wire-WireZipUtf8-0 " * 600)[:10240]
    assert zipped.tags == "TagZip" and zipped.sys_flag == 769 & ~MessageSysFlag.COMPRESSED_FLAG
    assert msgs["键-1"].tags == "标签中文" and msgs["键-1"].get_property("city") == "上海"
    assert msgs["k-2 k-2b"].tags == "TagKeys"
    pull = next(fr for f, _, fr in BODIES if f == "compressed-unicode.jsonl" and b"TagZip" in fr.body)
    [raw] = [m for m in decode_messages(pull.body, decompress=False) if m.tags == "TagZip"]
    assert raw.sys_flag == 769 and len(raw.body) == 73 and raw.body[:2] == b"\x78\x5e"


def test_tags_filter_offsets() -> None:
    """WireTags: message i has TagA/TagB/TagC for i % 3; the broker returned only TagA || TagC."""
    by_queue: dict[int, list[MessageExt]] = {}
    for m in _file_messages("tags-filter.jsonl"):
        i = int(BODY_RE.fullmatch(m.body.decode())["i"])  # type: ignore[index]
        assert m.tags == ("TagA", "TagB", "TagC")[i % 3] != "TagB"
        by_queue.setdefault(m.queue_id, []).append(m)
    assert sorted(by_queue) == [0, 1, 2, 3]
    for msgs in by_queue.values():
        first = int(BODY_RE.fullmatch(msgs[0].body.decode())["i"])  # type: ignore[index]
        base = first - 4 * msgs[0].queue_offset  # the queue holds messages base, base + 4, ...
        expected = [o for o in range(15) if (base + 4 * o) % 3 != 1]
        assert [m.queue_offset for m in msgs] == expected and len(expected) == 10
    q0 = [m.queue_offset for m in by_queue[0]]
    assert q0[:4] == [0, 2, 3, 5]


def test_dlq_and_retry_properties() -> None:
    msgs = _file_messages("dlq.jsonl")
    originals = {m.msg_id: m for m in msgs if m.topic == "WireDlq"}
    dlq = [m for m in msgs if m.topic == "%DLQ%wire_dlq_cg"]
    assert len(originals) == 4 and len(dlq) == 4
    for m in dlq:
        p = m.properties
        assert m.reconsume_times == 3
        assert p["REAL_TOPIC"] == "%RETRY%wire_dlq_cg" and p["RETRY_TOPIC"] == "WireDlq"
        assert (p["WAIT"], p["DELAY"], p["REAL_QID"]) == ("false", "0", "0")
        assert p["ORIGIN_MESSAGE_ID"] == originals[m.msg_id].offset_msg_id
    retried = sorted(m.reconsume_times for m in msgs if m.topic == "%RETRY%wire_dlq_cg")
    assert retried == [1] * 4 + [2] * 4
    v5 = [m for m in _file_messages("v5-retry.jsonl") if m.topic.startswith("%RETRY%")]
    assert len(v5) == 3 and all(m.reconsume_times == 1 and m.get_property("DELAY") == "1" for m in v5)
    assert {m.get_property("RETRY_TOPIC") for m in v5} == {"WireRetry"}


def test_send_back_ids_match_decoded_messages() -> None:
    """Every CONSUMER_SEND_MSG_BACK names the UNIQ_KEY as originMsgId and the commit-log offset of a
    message the consumer decoded; ORIGIN_MESSAGE_ID is the original's offset message id."""
    checked = 0
    for file in ("dlq.jsonl", "retry-sendback.jsonl", "v5-retry.jsonl"):
        msgs = _file_messages(file)
        by_offset = {m.commit_log_offset: m for m in msgs}
        for fr in frames(file):
            if fr.code == 36 and fr.kind == "request":
                ext = fr.header["extFields"]
                m = by_offset[int(ext["offset"])]
                assert m.msg_id == ext["originMsgId"]
                assert ext["originTopic"] == m.get_property("RETRY_TOPIC", m.topic)
                origin = m.get_property("ORIGIN_MESSAGE_ID")
                if origin is not None:
                    host, offset = parse_offset_msg_id(origin)
                    assert by_offset[offset].msg_id == m.msg_id and host == m.store_host
                checked += 1
    assert checked == 12 + 5 + 3


def test_view_message_and_consume_directly() -> None:
    [view] = [(fr, req) for req, fr in pairs("admin-tools.jsonl") if req.code == 33 and fr is not None]
    [direct] = [fr for fr in frames("admin-tools.jsonl") if fr.code == 309 and fr.kind == "request"]
    [viewed] = decode_messages(view[0].body)
    assert viewed.commit_log_offset == int(view[1].header["extFields"]["offset"]) == 24532281
    [consumed] = decode_messages(direct.body)
    msg_id = direct.header["extFields"]["msgId"]
    assert consumed.offset_msg_id == msg_id == "7F00000100002A9F0000000001765539"
    assert parse_offset_msg_id(msg_id) == ("127.0.0.1:10911", 24532281)
    assert viewed.offset_msg_id == msg_id and viewed.msg_id == consumed.msg_id


# -- property reads ------------------------------------------------------------------------------

ITEM_NAMES = st.sampled_from(
    ["TAGS", "UNIQ_KEY", "XTAGS", "TAGSX", "KEYS", "KEY", "EYS", "a", "", "TAGS\x02"]
)
ITEM_VALUES = st.sampled_from(["", "v", "TAGS\x01x", "UNIQ_KEY\x01y", "x\x01TAGS", "KEYS", "标签"])
PROBES = ["TAGS", "KEYS", "UNIQ_KEY", "XTAGS", "TAGSX", "KEY", "EYS", "AGS", "a", "v", "x", "", "TAGS\x01x"]


@given(st.lists(st.tuples(ITEM_NAMES, ITEM_VALUES), max_size=6), st.booleans())
def test_fast_lookups_agree_with_the_dict(items: list[tuple[str, str]], trailing: bool) -> None:
    """tags, keys, msg_id and get_property read from the raw string give what the (Java-rule) dict
    says, for any raw string, and build no dict."""
    raw = "\x02".join(f"{k}\x01{v}" for k, v in items) + ("\x02" if trailing and items else "")
    [m] = decode_messages(encode_stored(topic="T", body=b"x", properties=raw))
    [ref] = decode_messages(encode_stored(topic="T", body=b"x", properties=raw))
    expected = ref.properties  # builds the dict first
    _assert_lookups(m, expected)


def _assert_lookups(m: MessageExt, expected: dict[str, str]) -> None:
    assert m._props is None
    assert m.tags == expected.get("TAGS")
    assert m.keys == expected.get("KEYS")
    assert m.msg_id == expected.get("UNIQ_KEY", m.offset_msg_id)
    for name in (*PROBES, *expected):
        assert m.get_property(name) == expected.get(name), name
        assert m.get_property(name, "dflt") == expected.get(name, "dflt"), name
    assert m._props is None  # no dict was built for any of them
    assert m.properties == expected


@pytest.mark.parametrize(
    "raw",
    [
        # an empty value in the last item of each name, with or without a trailing separator
        "TAGS\x011\x02KEYS\x012\x02UNIQ_KEY\x013\x02TAGS\x01\x02KEYS\x01\x02UNIQ_KEY\x01",
        "TAGS\x011\x02KEYS\x012\x02UNIQ_KEY\x013\x02TAGS\x01\x02KEYS\x01\x02UNIQ_KEY\x01\x02",
        "a\x01b\x02TAGS\x011\x02TAGS\x01\x02KEYS\x012\x02KEYS\x01\x02UNIQ_KEY\x013\x02UNIQ_KEY\x01",
        "TAGS\x01\x02KEYS\x01\x02UNIQ_KEY\x01",  # only empty values
        "KEYS\x01k",  # the only item
        "XKEYS\x01x\x02KEYSX\x01y\x02a\x01KEYS\x01z\x02UNIQ_KEYS\x01u\x02XUNIQ_KEY\x01v\x02ATAGS\x01t",
        "KEYS\x02TAGS\x02UNIQ_KEY",  # items without \x01
    ],
)
def test_hot_lookups_edge_cases(raw: str) -> None:
    [m] = decode_messages(encode_stored(topic="T", body=b"x", properties=raw))
    _assert_lookups(m, parse_properties(raw, strict=False))


class _Text(str):
    """A str subclass: its methods return copies where an exact str may return itself."""


@pytest.mark.parametrize("raw", ["KEYS\x01k\x02a\x01b", "a\x01b\x02c\x01d", "KEYS\x01", "KEYSX\x01y", ""])
def test_hot_lookups_of_a_str_subclass(raw: str) -> None:
    """The reads do not rely on a method returning its own string unchanged (CPython, exact str)."""
    m = MessageExt("T", b"x")
    m.raw_properties = _Text(raw)
    expected = parse_properties(raw, strict=False)
    assert (m.keys, m.tags, m.get_property("a")) == (expected.get("KEYS"), None, expected.get("a"))


def test_capture_lookups_without_the_dict() -> None:
    """Every captured stored message (4.9.8, and 5.x with its trailing separator): the raw-string
    reads agree with the dict."""
    forms: Counter[tuple[bool, bool]] = Counter()
    for _, _, frame in BODIES:
        for m, ref in zip(decode_messages(frame.body), decode_messages(frame.body), strict=True):
            _assert_lookups(m, ref.properties)
            forms[m.raw_properties.endswith("\x02"), m.raw_properties.startswith("KEYS\x01")] += 1
    assert set(forms) == {(True, False), (False, True), (False, False)}


def test_set_property_is_seen_by_later_reads() -> None:
    raw = "KEYS\x01k\x02UNIQ_KEY\x01U\x02TAGS\x01t\x02city\x01x\x02"
    for name, value, attr in (
        ("TAGS", "t2", "tags"), ("KEYS", "k2", "keys"), ("UNIQ_KEY", "U2", "msg_id"), ("city", "y", None),
        ("new", "n", None), ("CONSUME_START_TIME", "1", None),
    ):  # fmt: skip
        [m] = decode_messages(encode_stored(topic="T", body=b"x", properties=raw))
        assert m.get_property(name) != value
        m.set_property(name, value)
        assert m.get_property(name) == value and m.properties[name] == value
        if attr is not None:
            assert getattr(m, attr) == value
        assert m.raw_properties == raw  # the decoded text is kept
    [m] = decode_messages(encode_stored(topic="T", body=b"x", properties=raw))
    m.properties.pop("TAGS")  # the dict is the truth once built, also when changed in place
    m.properties["UNIQ_KEY"] = ""
    assert m.tags is None and m.get_property("TAGS", "d") == "d" and m.msg_id == m.offset_msg_id


# -- stored messages round trip ------------------------------------------------------------------

NAME = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), min_size=1)
PROPS = st.dictionaries(NAME, NAME, max_size=8)
HOSTS = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str), st.sampled_from(["::ffff:10.0.0.1"])
)
TOPICS = st.one_of(st.text(min_size=0, max_size=20), st.text(min_size=128, max_size=200))
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def stored_messages(draw: st.DrawFn) -> dict[str, Any]:
    topic = draw(TOPICS)
    return {
        "topic": topic,
        "v2": draw(st.booleans()) or len(topic.encode()) > 255,
        "body": draw(st.binary(max_size=300)),
        "properties": draw(PROPS),
        "trailing_separator": draw(st.booleans()),
        "compress": draw(st.booleans()),
        "queue_id": draw(I32),
        "flag": draw(I32),
        "queue_offset": draw(I64),
        "commit_log_offset": draw(I64),
        "sys_flag": draw(st.integers(0, 0xFF) | st.just(MessageSysFlag.INNER_BATCH_FLAG)) & ~0x31,
        "born_timestamp": draw(I64),
        "born_host": (draw(HOSTS), draw(st.integers(0, 65535))),
        "store_timestamp": draw(I64),
        "store_host": (draw(HOSTS), draw(st.integers(0, 65535))),
        "reconsume_times": draw(I32),
        "prepared_transaction_offset": draw(I64),
    }


def _java_host(ip: str, port: int) -> str:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is None:
        return (
            ":".join(f"{int.from_bytes(addr.packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
            + f":{port}"
        )
    return f"{getattr(addr, 'ipv4_mapped', None) or addr}:{port}"


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(), min_size=1, max_size=4))
def test_stored_round_trip(specs: list[dict[str, Any]]) -> None:
    body = b"".join(encode_stored(**s) for s in specs)
    msgs = decode_messages(memoryview(body))
    assert len(msgs) == len(specs)
    for m, s in zip(msgs, specs, strict=True):
        assert m.topic == s["topic"] and m.body == s["body"] and m.properties == s["properties"]
        for name in ("queue_id", "flag", "queue_offset", "commit_log_offset", "born_timestamp",
                     "store_timestamp", "reconsume_times", "prepared_transaction_offset"):  # fmt: skip
            assert getattr(m, name) == s[name], name
        assert m.sys_flag & 0x1 == 0 and m.sys_flag & 0xFF & ~0x31 == s["sys_flag"]
        born, store = s["born_host"], s["store_host"]
        assert m.born_host == _java_host(*born)
        assert m.store_host == _java_host(*store)
        store_ip = m.store_host.rsplit(":", 1)[0]
        assert m.offset_msg_id == create_offset_msg_id(store_ip, store[1], m.commit_log_offset)
        assert parse_offset_msg_id(m.offset_msg_id) == (m.store_host, m.commit_log_offset)
        assert m.msg_id == s["properties"].get("UNIQ_KEY", m.offset_msg_id)
    if any(s["compress"] for s in specs):
        kept = decode_messages(body, decompress=False)
        assert any(k.sys_flag & 1 for k in kept)


def test_fixed_part_is_unpacked_on_first_use() -> None:
    body = b"".join(
        encode_stored(
            topic="T", body=b"abc", queue_offset=o, queue_id=3, reconsume_times=o, commit_log_offset=10 * o
        )
        for o in range(1, 4)
    )
    first, second, third = decode_messages(body)
    assert first._t is None and first.queue_offset == 1  # what the consumer reads is eager
    # a write before any read keeps every other field
    first.reconsume_times += 5
    assert (first.reconsume_times, first.queue_id, first.commit_log_offset) == (6, 3, 10)
    assert second._f == struct.unpack_from(">iiiiiqqiqIiqIiiqi", body, first.store_size)
    assert (second.store_size, second.queue_id, second.reconsume_times) == (first.store_size, 3, 2)
    assert third._t is None  # untouched by reads of its neighbours


def test_decode_reports_body_bytes_and_offset_order() -> None:
    import pickle

    plain, packed = b"x" * 300, b"y" * 5000
    body = b"".join(
        encode_stored(topic="T", body=b, queue_offset=o, compress=c)
        for o, b, c in ((7, plain, False), (8, packed, True), (9, b"", False))
    )
    msgs = decode_messages(body)
    assert isinstance(msgs, PulledMessages) and msgs.ascending
    assert msgs.nbytes == sum(len(m.body) for m in msgs) == 5300  # decompressed lengths
    assert decode_messages(body, decompress=False).nbytes < 5300  # as stored
    # offsets that do not rise strictly, anywhere in the body, are reported
    for offsets in ((3, 3), (5, 4), (1, 2, 9, 8)):
        out = decode_messages(b"".join(encode_stored(topic="T", body=b"a", queue_offset=o) for o in offsets))
        assert not out.ascending and out.nbytes == len(offsets)
    empty = decode_messages(b"")
    assert empty == [] and empty.ascending and empty.nbytes == 0
    # a copy is a plain list (the fields describe the decoded list only)
    assert type(pickle.loads(pickle.dumps(msgs))) is list and type(msgs[:]) is list


def test_v2_magic_and_long_topic() -> None:
    topic = "T" * 300
    [m] = decode_messages(encode_stored(topic=topic, body=b"x", v2=True))
    assert m.topic == topic
    assert struct.unpack_from(">i", encode_stored(topic="t", body=b"", v2=True), 4)[0] == MAGIC_V2
    assert MessageExt(topic, b"x")._f[1] == MAGIC_V2 and MessageExt("t")._f[1] == MAGIC_V1


def test_message_ext_constructor_and_setters() -> None:
    m = MessageExt(
        "T", b"body", properties={"TAGS": "t", "UNIQ_KEY": "U"}, queue_offset=7, store_host="[::1]:10911",
        born_host="10.0.0.1:5", commit_log_offset=99,
    )  # fmt: skip
    assert (m.tags, m.msg_id, m.queue_offset, m.born_host) == ("t", "U", 7, "10.0.0.1:5")
    assert m.store_host == "0:0:0:0:0:0:0:1:10911" and len(m.offset_msg_id) == 56
    m.reconsume_times += 1
    m.topic = "Orig"
    m.set_property("CONSUME_START_TIME", "1")
    assert (
        m.reconsume_times == 1 and m.get_property("CONSUME_START_TIME") == "1" and m.get_property("x") is None
    )
    assert isinstance(MessageExt.reconsume_times, stored_mod._Field)
    m.queue_offset = 8  # a plain attribute (read for every message by the consumer)
    assert m.queue_offset == 8
    assert "queue_offset=8" in repr(m)
    with pytest.raises(ValueError):
        MessageExt(born_host="nohost")
    with pytest.raises(TypeError, match="queue_offst"):
        MessageExt(queue_offst=1)
    every: dict[str, Any] = {name: i + 1 for i, name in enumerate(stored_mod._INT_FIELDS)}
    built = MessageExt("T", b"x", **every)
    assert all(getattr(built, name) == value for name, value in every.items())


# -- bad input ----------------------------------------------------------------------------------


def _real_body() -> bytes:
    return next(
        fr.body for f, _, fr in BODIES if f == "push-concurrently.jsonl" and fr.body.count(b"wire-") > 3
    )


def test_truncated_at_every_byte() -> None:
    body = _real_body() + next(fr.body for f, _, fr in BODIES if f == "compressed-unicode.jsonl")
    msgs = decode_messages(body)
    bounds = {0}
    for m in msgs:
        bounds.add(max(bounds) + m.store_size)
    for cut in range(1, len(body)):
        if cut in bounds:
            assert len(decode_messages(body[:cut])) == sorted(bounds).index(cut)
        else:
            with pytest.raises(ProtocolError, match="offset"):
                decode_messages(body[:cut])


def _one(**kw: object) -> bytearray:
    args: dict[str, object] = {"topic": "T", "body": b"hello", "properties": {"a": "1"}} | kw
    return bytearray(encode_stored(**args))  # type: ignore[arg-type]


def _oversized_second() -> bytearray:
    first = _one()
    second = _one(store_size=len(first) + 1)  # claims one byte more than its fields
    return first + second + b"\0"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_one(store_size=-1), "store size -1"),
        (_one(store_size=1 << 30), "out of range"),
        (_one(store_size=len(_one()) - 1), "does not match"),
        (_one() + b"\0" * 4, f"offset {len(_one())}: truncated"),
        (_oversized_second(), f"offset {len(_one())}: store size {len(_one()) + 1} does not match"),
        (bytearray(struct.pack(">ii", 200, 0x12345678)) + bytes(192), "bad magic"),
    ],
)
def test_malformed_raises(data: bytearray, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_messages(data)


def test_bad_lengths_inside_the_message() -> None:
    good = _one()
    pos_body_len = 88 - 4  # BODYLEN ends the fixed part
    big_body = bytearray(good)
    big_body[pos_body_len : pos_body_len + 4] = struct.pack(">i", 1000)
    neg_body = bytearray(good)
    neg_body[pos_body_len : pos_body_len + 4] = struct.pack(">i", -5)
    topic_len = bytearray(good)
    topic_len[88 + 5] = 200
    for data, match in ((big_body, "body length"), (neg_body, "body length"), (topic_len, "topic length")):
        with pytest.raises(ProtocolError, match=match):
            decode_messages(data)


def test_invalid_utf8() -> None:
    """Text that is not UTF-8 in a soundly framed message is that message's problem alone: it
    is recorded, the messages around it are decoded."""
    good = _one(topic="TopicX", properties="a\x01bc")
    bad_topic = good.replace(b"TopicX", b"Topic\xff")
    bad_props = good.replace(b"a\x01bc", b"a\x01\xc3\x28")
    for bad, reason in (
        (bad_topic, "topic is not valid UTF-8"),
        (bad_props, "properties are not valid UTF-8"),
    ):
        msgs = decode_messages(_one(queue_offset=1) + bad + _one(queue_offset=3))
        assert [m.queue_offset for m in msgs] == [1, 3]
        [rec] = msgs.undecodable
        assert reason in rec.reason and rec.queue_offset == 0
        assert (rec.topic is None) == (bad is bad_topic)
        assert msgs.nbytes == 10  # the two good bodies


def test_property_item_without_separator() -> None:
    data = _one(properties="a\x011\x02junk\x02TAGS\x01t")
    [m] = decode_messages(data)  # Java's reader ignores the item, and so does MessageExt
    assert m.properties == {"a": "1", "TAGS": "t"} and m.tags == "t"
    with pytest.raises(ProtocolError, match="separator"):
        decode_messages(data, check_properties=True)
    assert decode_messages(_one(properties="a\x011\x02\x02b\x012\x02"), check_properties=True)


def test_bad_compression() -> None:
    """A body that does not decompress, or an unknown compression type, is recorded per message."""
    zlib_bad = _one(sys_flag=MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB_TYPE)
    cases = [(zlib_bad, "zlib body does not decompress")]
    for kind, name in (
        (MessageSysFlag.COMPRESSION_LZ4_TYPE, "LZ4"),
        (MessageSysFlag.COMPRESSION_ZSTD_TYPE, "ZSTD"),
    ):
        cases.append(
            (_one(sys_flag=MessageSysFlag.COMPRESSED_FLAG | kind), f"{name} body does not decompress")
        )
    cases.append((_one(sys_flag=MessageSysFlag.COMPRESSED_FLAG | (5 << 8)), "unknown compression type 5"))
    for bad, reason in cases:
        msgs = decode_messages(bad)
        assert list(msgs) == [] and msgs.nbytes == 0
        [rec] = msgs.undecodable
        assert reason in rec.reason, rec.reason
    legacy = encode_stored(
        topic="T", body=zlib.compress(b"old client"), sys_flag=MessageSysFlag.COMPRESSED_FLAG
    )
    assert decode_messages(legacy)[0].body == b"old client"  # type 0 means zlib (CompressionType)
    assert decode_messages(zlib_bad, decompress=False)[0].body == b"hello"


def test_topic_cache_is_bounded() -> None:
    for i in range(stored_mod._TOPICS_MAX + 10):
        decode_messages(encode_stored(topic=f"t{i}", body=b""))
    assert len(stored_mod._TOPICS) <= stored_mod._TOPICS_MAX


# -- broken framing: what the body still says --------------------------------------------


def _bad_magic(**kw: object) -> bytearray:
    m = _one(**kw)
    m[4:8] = b"\0\0\0\0"
    return m


def test_a_broken_body_says_how_many_messages_came_before_it() -> None:
    """``index``: the messages framed soundly before the broken one (a pull of that many gets just
    those), the undecodable ones among them counted; ``body``: the refused bytes."""
    spoiled = _one(queue_offset=1, compress=True)
    spoiled[88 + 4 : 88 + 6] = b"\xff\xfe"  # the zlib header of its body: isolated, not fatal
    body = bytes(_one(queue_offset=0) + spoiled + _bad_magic(queue_offset=2) + _one(queue_offset=3))
    with pytest.raises(stored_mod.BrokenBodyError, match="bad magic") as err:
        decode_messages(body)
    assert err.value.index == 2 and err.value.body == body and err.value.next_begin_offset == -1
    with pytest.raises(stored_mod.BrokenBodyError) as first:
        decode_messages(bytes(_bad_magic()))
    assert first.value.index == 0 and first.value.record is None


def test_salvage_ids_trusts_the_fixed_fields_only_when_the_ids_are_the_pulled_ones() -> None:
    m = bytes(_bad_magic(queue_id=3, queue_offset=41, commit_log_offset=123456))
    rec = stored_mod.salvage_ids(m, 3, 41, "bad magic code 0x0")
    assert rec is not None
    assert (rec.queue_id, rec.queue_offset, rec.commit_log_offset, rec.store_size) == (3, 41, 123456, len(m))
    assert rec.reason == "bad magic code 0x0" and rec.topic is None and rec.msg_id is None
    text = rec.describe()
    assert "offset 41" in text and "commit-log offset 123456" in text and "offset msg id" not in text
    assert stored_mod.salvage_ids(m, 2, 41) is None  # another queue
    assert stored_mod.salvage_ids(m, 3, 40) is None  # another offset
    assert stored_mod.salvage_ids(m[:35], 3, 41) is None  # shorter than the fixed fields
    assert stored_mod.salvage_ids(m[:36], 3, 41) is not None  # exactly them
    neg = bytes(_bad_magic(queue_id=3, queue_offset=41, commit_log_offset=-2))
    assert stored_mod.salvage_ids(neg, 3, 41) is None  # no commit-log offset to trust
    # the fixed fields sit at the same bytes whatever the magic code and hosts
    v6 = bytes(_one(queue_id=1, queue_offset=7, commit_log_offset=99, store_host=("::1", 10911)))
    rec6 = stored_mod.salvage_ids(v6, 1, 7)
    assert rec6 is not None and rec6.commit_log_offset == 99
    unknown = stored_mod.Undecodable(None, 0, 5, -1, 0, 0, 0, "", None, "why")
    assert "commit-log offset unknown" in unknown.describe()


@given(st.binary(max_size=120), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_salvage_ids_never_raises(body: bytes, queue_id: int, offset: int) -> None:
    rec = stored_mod.salvage_ids(body, queue_id, offset)
    if rec is not None:
        assert (rec.queue_id, rec.queue_offset) == (queue_id, offset) and rec.commit_log_offset >= 0
        assert len(body) >= 36


@given(st.binary(min_size=36, max_size=36), st.integers(0, 2**31 - 1), st.integers(0, 2**62))
def test_salvage_ids_reads_any_head_with_the_right_ids(head: bytes, queue_id: int, offset: int) -> None:
    buf = bytearray(head)
    struct.pack_into(">i", buf, 12, queue_id)
    struct.pack_into(">q", buf, 20, offset)
    rec = stored_mod.salvage_ids(bytes(buf), queue_id, offset)
    (phys,) = struct.unpack_from(">q", buf, 28)
    assert (rec is None) == (phys < 0)
    if rec is not None:
        assert rec.commit_log_offset == phys
