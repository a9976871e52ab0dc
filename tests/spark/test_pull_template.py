"""The Spark reader's pull requests (``pipe.PullTemplate``): byte for byte the frames
``MQClientAPI.pull`` writes, whatever the field order, and the generic encoding once something (an
ACL signature) changed the fields. No Spark or broker needed."""

from __future__ import annotations

import pytest

from rmq_async.client.api import MQClientAPI, PullStatus
from rmq_async.errors import BrokerError, ProtocolError
from rmq_async.protocol import headers as H
from rmq_async.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType
from rmq_async.protocol.command import FrameDecoder, RemotingCommand
from rmq_async.spark.pipe import PullTemplate as _PullTemplate
from rmq_async.spark.pipe import _answer, _PullCommand, pull_status


def header(offset: int, count: int, **kw: str) -> H.PullMessageRequestHeader:
    return H.PullMessageRequestHeader(
        consumer_group=kw.get("group", "spark-g"), topic=kw.get("topic", "T"), queue_id=3,
        queue_offset=offset, max_msg_nums=count,
        sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
        commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=kw.get("sub", "*"),
        expression_type="TAG", bname="broker-a",
    )  # fmt: skip


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("topic", ["T", 'odd "topic" 7919191919191919191', "é"])
def test_frames_match_the_generic_encoding(stream: bool, topic: str) -> None:
    api = MQClientAPI(None, stream=stream)  # type: ignore[arg-type]
    t = _PullTemplate(api._cmd(RequestCode.PULL_MESSAGE, header(0, 1, topic=topic).to_ext_fields()))
    for offset, count, opaque in [
        (0, 32, 0),
        (12345678901, 7, 99),
        (2**62, 1, 2**31 - 1),
    ]:
        got = t.command(offset, count)
        want = api._cmd(RequestCode.PULL_MESSAGE, header(offset, count, topic=topic).to_ext_fields())
        got.opaque = want.opaque = opaque
        assert got.ext_fields == want.ext_fields
        assert got.encode() == want.encode()
        assert t.frame(offset, count, opaque) == want.encode()
    assert t.parts is not None and isinstance(t.command(1, 1), _PullCommand)


def test_a_signed_request_is_encoded_the_generic_way() -> None:
    api = MQClientAPI(None, stream=True)  # type: ignore[arg-type]
    t = _PullTemplate(api._cmd(RequestCode.PULL_MESSAGE, header(0, 1).to_ext_fields()))
    cmd = t.command(5, 32)
    cmd.ext_fields["AccessKey"] = "ak"
    cmd.ext_fields["Signature"] = "sig"
    assert cmd.encode() == RemotingCommand.encode(cmd)
    assert b'"Signature":"sig"' in cmd.encode()


def test_the_binary_header_takes_no_template() -> None:
    api = MQClientAPI(None, serialize_type=SerializeType.ROCKETMQ)  # type: ignore[arg-type]
    t = _PullTemplate(api._cmd(RequestCode.PULL_MESSAGE, header(0, 1).to_ext_fields()))
    assert t.parts is None
    cmd = t.command(9, 4)
    want = api._cmd(RequestCode.PULL_MESSAGE, header(9, 4).to_ext_fields())
    assert cmd.encode() == want.encode()


def test_answers() -> None:
    t = _PullTemplate(
        RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueOffset": "1", "maxMsgNums": "1"})
    )
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": "33", "minOffset": "0", "maxOffset": "90"}
    assert pull_status((0, 1, ext, None, b"xy"), t, 1, 32, "a:1") == (PullStatus.FOUND, 33, 0, 90)
    moved = pull_status((ResponseCode.PULL_OFFSET_MOVED, 1, ext, None, b""), t, 1, 32, "a:1")
    assert moved[0] is PullStatus.OFFSET_ILLEGAL
    with pytest.raises(BrokerError):
        pull_status((ResponseCode.SYSTEM_ERROR, 1, {}, "no", b""), t, 1, 32, "a:1")
    with pytest.raises(ProtocolError):
        pull_status((0, 1, {"minOffset": "x"}, None, b""), t, 1, 32, "a:1")


def frames_of(cmd: RemotingCommand) -> list[tuple[int, bytes, bytes]]:
    data = cmd.encode()
    dec = FrameDecoder()
    room = dec.get_buffer()
    room[: len(data)] = data
    return dec.frames_updated(len(data))


@pytest.mark.parametrize(
    "cmd",
    [
        RemotingCommand(
            0, ext_fields={"nextBeginOffset": "33", "minOffset": "0"}, body=b"xy", flag=1, opaque=7
        ),
        RemotingCommand(19, remark="FOUND? no", flag=1, opaque=2**31 - 1),
        RemotingCommand(0, flag=1, opaque=3, version=399, language="CPP"),
        RemotingCommand(0, ext_fields={"k": '\u00e9 "q"'}, flag=1, serialize_type=SerializeType.ROCKETMQ),
    ],
)
def test_an_answer_reads_as_the_generic_decoding_does(cmd: RemotingCommand) -> None:
    (frame,) = frames_of(cmd)
    (dec_cmd,) = FrameDecoder().feed(cmd.encode())
    assert _answer(frame) == (dec_cmd.code, dec_cmd.opaque, dec_cmd.ext_fields, dec_cmd.remark, dec_cmd.body)


def test_a_request_is_no_answer_and_a_bad_header_is_a_protocol_error() -> None:
    (frame,) = frames_of(RemotingCommand.request(RequestCode.PULL_MESSAGE, {"a": "b"}))
    assert _answer(frame) is None
    with pytest.raises(ProtocolError):
        _answer((0, b'{"code": "x", "flag": 1}', b""))
    with pytest.raises(ProtocolError):
        _answer((0, b"not json", b""))
    # a value that is not a string (a peer bug) keeps its text, as the generic decoding keeps it
    assert _answer((0, b'{"code":0,"flag":1,"opaque":4,"extFields":{"maxOffset":90}}', b"")) == (
        0, 4, {"maxOffset": "90"}, None, b""
    )  # fmt: skip
