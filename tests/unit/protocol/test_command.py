"""RemotingCommand and FrameDecoder against the captured frames, round trips and bad input."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, all_frames, frames

from rmq_async.errors import FrameError, ProtocolError
from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import FrameDecoder, RemotingCommand, decode_frame


@pytest.mark.parametrize("file", CAPTURE_FILES)
def test_every_captured_frame_decodes_and_reencodes_identically(file: str) -> None:
    for fr in frames(file):
        cmd = decode_frame(fr.raw)
        h = fr.header
        assert cmd.code == h["code"]
        assert cmd.opaque == h["opaque"]
        assert cmd.flag == h["flag"]
        assert cmd.version == h["version"]
        assert cmd.language == h["language"]
        assert cmd.remark == h.get("remark")
        assert cmd.ext_fields == h.get("extFields", {})
        assert cmd.serialize_type.name == fr.serialize
        assert cmd.is_response == (fr.kind == "response")
        assert cmd.is_oneway == (fr.kind == "oneway")
        assert len(cmd.body) == fr.body_len
        if fr.body_json is not None:
            assert json.loads(cmd.body) == fr.body_json
        # JSON headers: fastjson's alphabetical key order, raw UTF-8, \u00XX escapes: same bytes.
        assert cmd.encode() == fr.raw, (file, fr.seq)


def test_present_but_empty_ext_fields_are_kept_apart_from_absent() -> None:
    seen = {True: 0, False: 0}
    for fr in all_frames():
        if fr.serialize != "JSON":
            continue
        cmd = decode_frame(fr.raw)
        assert cmd.ext_fields_present == ("extFields" in fr.header)
        seen[cmd.ext_fields_present and not cmd.ext_fields] += 1
    assert seen[True] > 0  # the captures have {} responses (35, 38, sync 15)


def test_binary_push_mixes_serialize_types_on_one_connection() -> None:
    types = {(fr.conn, fr.serialize) for fr in frames("binary-push.jsonl") if fr.peer == "broker"}
    conns_with_both = {c for c, _ in types if (c, "JSON") in types and (c, "ROCKETMQ") in types}
    assert conns_with_both, "the capture shows JSON frames on a ROCKETMQ connection"
    dec = FrameDecoder()
    stream = b"".join(
        fr.raw for fr in frames("binary-push.jsonl") if fr.dir == "s2c" and fr.conn in conns_with_both
    )
    got = dec.feed(stream)
    assert {c.serialize_type for c in got} == {SerializeType.JSON, SerializeType.ROCKETMQ}


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_decoder_accepts_any_chunking(data: st.DataObject) -> None:
    src = [fr for fr in frames("push-concurrently.jsonl")][:60]
    stream = b"".join(fr.raw for fr in src)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=40)))
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    prev = 0
    for c in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:c])
        prev = c
    assert [c.encode() for c in out] == [fr.raw for fr in src]
    assert dec.buffered == 0


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_buffer_interface_accepts_any_read_sizes(data: st.DataObject) -> None:
    # what asyncio.BufferedProtocol does: read at most len(view) bytes into get_buffer()'s view;
    # ten passes over the capture (370 KB) make the buffer compact and grow
    src = [fr for fr in frames("push-concurrently.jsonl")][:60] * 10
    stream = b"".join(fr.raw for fr in src)
    reads = data.draw(
        st.lists(st.integers(1, 100) | st.integers(1, 3 * FrameDecoder.MIN_READ), min_size=1, max_size=30)
    )
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    pos = i = 0
    while pos < len(stream):
        view = dec.get_buffer(-1)
        assert len(view) >= FrameDecoder.MIN_READ
        k = min(len(view), len(stream) - pos, reads[i % len(reads)])
        i += 1
        view[:k] = stream[pos : pos + k]
        view.release()
        out += dec.buffer_updated(k)
        pos += k
    assert [c.encode() for c in out] == [fr.raw for fr in src]
    assert dec.buffered == 0


def test_buffer_grows_for_a_large_frame_and_shrinks_after_it() -> None:
    big = RemotingCommand(11, body=b"b" * (6 << 20), opaque=1).encode()
    small = RemotingCommand(11, body=b"s" * 10, opaque=2).encode()
    stream = small + big + small
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    pos = 0
    sizes = []
    while pos < len(stream):
        view = dec.get_buffer(-1)
        sizes.append(len(view))
        k = min(len(view), len(stream) - pos)
        view[:k] = stream[pos : pos + k]
        view.release()
        out += dec.buffer_updated(k)
        pos += k
    assert [c.opaque for c in out] == [2, 1, 2]
    assert out[1].body == b"b" * (6 << 20)
    assert max(sizes) >= len(big) - 4 * FrameDecoder.MIN_READ  # room for the whole frame at once
    assert len(dec.get_buffer(-1)) <= 4 * FrameDecoder.MIN_READ  # not kept at 6 MiB once it is parsed


def test_buffer_interface_refuses_input_after_an_error() -> None:
    dec = FrameDecoder(max_frame=1000)
    view = dec.get_buffer(-1)
    view[:4] = struct.pack(">i", 5000)
    view.release()
    with pytest.raises(FrameError):
        dec.buffer_updated(4)
    with pytest.raises(FrameError):
        dec.get_buffer(-1)
    with pytest.raises(FrameError):
        dec.feed(b"x")


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    version=st.integers(0, 2**15 - 1),
    remark=st.one_of(st.none(), _text.filter(bool)),
    ext=st.dictionaries(_text.filter(bool), _text.filter(bool), max_size=6),
    body=st.binary(max_size=200),
    stype=st.sampled_from(list(SerializeType)),
    language=st.sampled_from(["JAVA", "PYTHON", "GO", "CPP"]),
)
def test_round_trip(
    code: int,
    opaque: int,
    flag: int,
    version: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
    stype: SerializeType,
    language: str,
) -> None:
    cmd = RemotingCommand(
        code,
        ext_fields=ext,
        body=body,
        remark=remark,
        opaque=opaque,
        flag=flag,
        version=version,
        serialize_type=stype,
        language=language,
    )
    back = FrameDecoder().feed(cmd.encode())
    assert len(back) == 1
    got = back[0]
    assert (got.code, got.opaque, got.flag, got.version, got.remark, got.ext_fields, got.body) == (
        code,
        opaque,
        flag,
        version,
        remark,
        ext,
        body,
    )
    assert got.language == language


def _frame(total: int, mark: int, rest: bytes = b"") -> bytes:
    return struct.pack(">iI", total, mark) + rest


@pytest.mark.parametrize(
    "raw, message",
    [
        (_frame(-5, 0), "bad frame length -5"),
        (_frame(2, 0), "bad frame length 2"),
        (_frame((16 << 20) + 1, 0), "bad frame length"),
        (_frame(4 + 3, 10, b"abc"), "header length 10 exceeds"),
        (_frame(4 + 3, (7 << 24) | 3, b"abc"), "unknown serialize type 7"),
        (_frame(4 + 5, 5, b"{bad}"), "not valid JSON"),
        (_frame(4 + 2, 2, b"[]"), "not an object"),
        (_frame(4 + 2, 2, b"{}"), "has no code"),
        (_frame(4 + 4, 4, b"\xff\xfe{}"), "not valid JSON"),
        (_frame(4 + 5, (1 << 24) | 5, b"\x00\x01\x00\x00\x00"), "shorter than the fixed part"),
        (
            _frame(
                4 + 21,
                (1 << 24) | 21,
                struct.pack(">hbhii", 1, 0, 1, 1, 0) + struct.pack(">i", 99) + b"\0" * 4,
            ),
            "remark length 99",
        ),
        (
            _frame(
                4 + 28,
                (1 << 24) | 28,
                struct.pack(">hbhii", 1, 0, 1, 1, 0)
                + struct.pack(">ii", 0, 7)
                + struct.pack(">h", 1)
                + b"a"
                + struct.pack(">i", 9),
            ),
            "overruns extFields",
        ),
    ],
)
def test_bad_frames_raise_protocol_error(raw: bytes, message: str) -> None:
    dec = FrameDecoder()
    with pytest.raises(ProtocolError, match=message):
        dec.feed(raw)
    # framing is lost: the decoder refuses more input instead of guessing
    with pytest.raises(FrameError, match="already failed"):
        dec.feed(b"")


def test_truncated_frame_waits_for_more_data() -> None:
    raw = frames("send.jsonl")[0].raw
    dec = FrameDecoder()
    for i in range(len(raw) - 1):
        assert dec.feed(raw[i : i + 1]) == []
    assert len(dec.feed(raw[-1:])) == 1


def test_decode_frame_checks_length() -> None:
    raw = frames("send.jsonl")[0].raw
    with pytest.raises(FrameError):
        decode_frame(raw[:-1])
    with pytest.raises(FrameError):
        decode_frame(raw[:5])


def test_make_response_keeps_opaque_and_serialize_type() -> None:
    req = RemotingCommand.request(11, {"topic": "T"}, serialize_type=SerializeType.ROCKETMQ)
    req.opaque = 77
    resp = req.make_response(19, "OFFSET_OVERFLOW_ONE", {"nextBeginOffset": "6"})
    assert resp.is_response and not resp.is_oneway
    assert resp.opaque == 77 and resp.serialize_type is SerializeType.ROCKETMQ
    assert decode_frame(resp.encode()) == resp


@pytest.mark.parametrize(
    "header",
    [
        b'{"code":0,"remark":"\\ud800 lone","flag":1}',  # a lone surrogate escape (pydantic-core refuses)
        b'\xef\xbb\xbf{"code":0,"flag":1}',  # a byte order mark
        b'{"code":0,"extFields":{"b":"1","a":"2"},"flag":1,"opaque":5}',  # key order is kept
        b'{"code":0,"extFields":{"n":12345678901234567890123},"flag":1}',  # a big number, kept as text
    ],
)
def test_json_header_decodes_as_json_loads_does(header: bytes) -> None:
    cmd = decode_frame(_frame(4 + len(header), len(header), header))
    want = json.loads(header)
    assert cmd.code == want["code"] and cmd.remark == want.get("remark")
    assert list(cmd.ext_fields) == list(want.get("extFields", {}))
    assert cmd.ext_fields == {k: str(v) for k, v in want.get("extFields", {}).items()}


@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=6),
    st.one_of(st.none(), st.text(max_size=20)),
)
@settings(max_examples=200, deadline=None)
def test_json_header_fields_survive_the_fast_parser(ext: dict[str, str], remark: str | None) -> None:
    cmd = RemotingCommand(7, ext_fields=ext, remark=remark)
    cmd.flag = 1
    back = decode_frame(cmd.encode())
    assert (back.code, back.ext_fields, back.remark) == (7, ext, remark)
    assert list(back.ext_fields) == list(ext)


@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=6),
    st.one_of(st.none(), st.text(max_size=20)),
    st.integers(-(2**31), 2**31 - 1),
)
@settings(max_examples=200, deadline=None)
def test_json_headers_are_written_as_the_json_module_writes_them(
    ext: dict[str, str], remark: str | None, opaque: int
) -> None:
    # the fast serializer writes the bytes json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    # writes, for any text (control characters, quotes, non-ASCII, line separators)
    cmd = RemotingCommand(10, ext_fields=ext, remark=remark, opaque=opaque)
    obj = json.loads(cmd.encode_header())
    assert cmd.encode_header() == json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_header_with_a_lone_surrogate_fails_as_json_fails() -> None:
    cmd = RemotingCommand(10, ext_fields={"k": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        cmd.encode_header()
