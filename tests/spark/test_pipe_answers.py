"""How the Spark reader's pipe reads a pull's answer: straight from the frame's JSON header
(``pipe._answer``), as the generic decoding would, and classified by the shared
``protocol.pull.read_pull_answer`` into the errors the async client raises (``pipe.pull_status``). The
requests are ``tests/unit/protocol/test_pull.py``'s. No Spark or broker needed."""

from __future__ import annotations

import pytest

from rmq_async.errors import AuthError, BrokerError, ProtocolError
from rmq_async.protocol.codes import RequestCode, ResponseCode, SerializeType
from rmq_async.protocol.command import FrameDecoder, RemotingCommand
from rmq_async.protocol.pull import PullAnswer, PullStatus, PullTemplate
from rmq_async.spark.pipe import _answer, pull_status


def test_answers() -> None:
    ext = {"topic": "T", "consumerGroup": "g", "queueOffset": "1", "maxMsgNums": "1"}
    ext |= {"commitOffset": "0", "sysFlag": "0"}
    t = PullTemplate(RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": "33", "minOffset": "0", "maxOffset": "90"}
    assert pull_status((0, 1, ext, None, b"xy"), t, 1, 32, "a:1") == PullAnswer(
        PullStatus.FOUND, 33, 0, 90, 0
    )
    moved = pull_status((ResponseCode.PULL_OFFSET_MOVED, 1, ext, None, b""), t, 1, 32, "a:1")
    assert moved.status is PullStatus.OFFSET_ILLEGAL
    with pytest.raises(BrokerError) as refused:
        pull_status((ResponseCode.SYSTEM_ERROR, 1, {}, "no", b""), t, 1, 32, "a:1")
    assert (refused.value.code, refused.value.request_code, refused.value.addr) == (1, 11, "a:1")
    assert not isinstance(refused.value, AuthError)
    acl = "org.apache.rocketmq.acl.common.AclException: No default permission for topic:T, group:g"
    with pytest.raises(AuthError) as denied:  # as the async client raises it: client.auth.broker_error
        pull_status((ResponseCode.SYSTEM_ERROR, 1, {}, acl, b""), t, 1, 32, "a:1")
    assert denied.value.resource == "topic:T"
    with pytest.raises(ProtocolError, match="a:1"):
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
