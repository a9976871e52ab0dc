"""protocol/pop.py against the v5-pop captures, byte for byte (tests/fixtures/pop)."""

from __future__ import annotations

import pytest
from support.wire import Frame, frames, pairs

from rmq_async.errors import ProtocolError
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.headers import Header
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.pop import (
    AckMessageRequestHeader,
    Assignment,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ExtraInfo,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    build_offset_info,
    decode_assignments,
    decode_batch_ack,
    decode_query_assignment,
    decode_set_mode,
    encode_assignments,
    encode_batch_ack,
    encode_query_assignment,
    encode_set_mode,
    parse_offset_info,
    pop_retry_topic,
)

FILES = [f"pop/v5-pop-{n}.jsonl" for n in ("consume", "retry", "two-consumers", "lite", "admin")]
REQ: dict[int, type[Header]] = {
    200050: PopMessageRequestHeader,
    200051: AckMessageRequestHeader,
    200053: ChangeInvisibleTimeRequestHeader,
}
RESP: dict[int, type[Header]] = {200050: PopMessageResponseHeader, 200053: ChangeInvisibleTimeResponseHeader}


def _all_pairs() -> list[tuple[Frame, Frame | None]]:
    return [p for f in FILES for p in pairs(f) if p[0].dir == "c2s"]


def test_headers_re_encode_in_java_order() -> None:
    seen = 0
    for req, resp in _all_pairs():
        ext = req.header.get("extFields") or {}
        if req.code in REQ:
            assert list(REQ[req.code].from_ext_fields(ext).to_ext_fields().items()) == list(ext.items())
            seen += 1
        if resp is not None and req.code in RESP and resp.header.get("extFields"):
            rext = resp.header["extFields"]
            assert list(RESP[req.code].from_ext_fields(rext).to_ext_fields().items()) == list(rext.items())
    assert seen > 60


def test_whole_request_frames_byte_for_byte() -> None:
    """A POP request built from the typed header is the Java client's frame."""
    req = next(q for q, _ in pairs("pop/v5-pop-consume.jsonl") if q.code == 200050)
    h = PopMessageRequestHeader.from_ext_fields(req.header["extFields"])
    cmd = RemotingCommand.request(200050, h.to_ext_fields(), language="JAVA", version=479)
    cmd.opaque = req.opaque
    assert cmd.encode() == req.raw


@pytest.mark.parametrize("code", [400, 401, 200151])
def test_bodies_byte_for_byte(code: int) -> None:
    n = 0
    for req, resp in _all_pairs():
        if req.code != code:
            continue
        n += 1
        if code == 400:
            b = decode_query_assignment(req.body)
            assert encode_query_assignment(b["topic"], b["consumerGroup"], b["clientId"]) == req.body
            assert resp is not None
            assert encode_assignments(decode_assignments(resp.body)) == resp.body
        elif code == 401:
            assert encode_set_mode(*decode_set_mode(req.body)) == req.body
        else:
            broker, acks = decode_batch_ack(req.body)
            assert encode_batch_ack(broker, acks) == req.body
    assert n


def test_assignment_body() -> None:
    body = encode_assignments([Assignment(MessageQueue("PopT", "broker-b", -1), "POP")])
    assert body == (
        b'{"messageQueueAssignments":[{"messageQueue":{"brokerName":"broker-b","queueId":-1,'
        b'"topic":"PopT"},"mode":"POP"}]}'
    )
    assert decode_assignments(b'{"messageQueueAssignments":[]}') == []


def test_batch_ack_bitsets() -> None:
    _, acks = decode_batch_ack(
        b'{"acks":[{"b":"BQ==","c":"g","it":30000,"pt":1,"q":1,"r":"0","rq":6,"so":0,"t":"T"}],"brokerName":"b"}'
    )
    assert acks[0].offsets == (0, 2)


def test_extra_info_round_trip_and_change() -> None:
    text = "0 1795641216816 60000 0 0 broker-b 7 1"
    info = ExtraInfo.parse(text)
    assert str(info) == text and info.queue_id == 7 and info.offset == 1
    new = ExtraInfo.parse("0 1795641613141 30000 6 0 broker-b 1 1").changed(1795641613147, 20000, 6)
    assert str(new) == "1 1795641613147 20000 6 0 broker-b 1 1"  # the lite capture, seq 17-19
    retry = ExtraInfo.parse("0 1795641299301 60000 6 1 broker-b 0 0")
    assert retry.topic("PopRetry", "pop_retry_g") == "%RETRY%pop_retry_g_PopRetry"
    assert pop_retry_topic("T", "g", True) == "%RETRY%g+T"
    with pytest.raises(ProtocolError):
        ExtraInfo.parse("1 2 3")


def test_offset_infos() -> None:
    start, msg = build_offset_info([(False, 6, [0, 1]), (False, 1, [0, 1, 2]), (True, 0, [0, 1])])
    assert start == "0 6 0;0 1 0;1 0 0"
    assert msg == "0 6 0,1;0 1 0,1,2;1 0 0,1"
    table = parse_offset_info(start, msg)
    assert table[("0", 1, 2)] == 0 and table[("1", 0, 1)] == 0
    assert parse_offset_info("", "") == {}
    assert parse_offset_info("0 0 2", "0 0 2")[("0", 0, 2)] == 2


def test_every_pop_capture_has_frames() -> None:
    assert all(frames(f) for f in FILES)
