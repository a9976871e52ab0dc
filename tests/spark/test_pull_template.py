"""The Spark reader's pull requests (``pipe.PullTemplate``): byte for byte the frames
``MQClientAPI.pull`` writes, whatever the field order, and the generic encoding once something (an
ACL signature) changed the fields. No Spark or broker needed."""

from __future__ import annotations

import pytest

from rmq_async.client.api import MQClientAPI, PullStatus
from rmq_async.errors import BrokerError, ProtocolError
from rmq_async.protocol import headers as H
from rmq_async.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType
from rmq_async.protocol.command import RemotingCommand
from rmq_async.spark.pipe import PullTemplate as _PullTemplate
from rmq_async.spark.pipe import _PullCommand
from rmq_async.spark.pipe import pull_result as _pull_result


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
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueOffset": "1"})
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": "33", "minOffset": "0", "maxOffset": "90"}
    res = _pull_result(RemotingCommand(0, ext_fields=ext, body=b"xy", flag=1), req, "a:1")
    assert (res.status, res.next_begin_offset, res.max_offset, res.body) == (PullStatus.FOUND, 33, 90, b"xy")
    moved = _pull_result(RemotingCommand(ResponseCode.PULL_OFFSET_MOVED, ext_fields=ext, flag=1), req, "a:1")
    assert moved.status is PullStatus.OFFSET_ILLEGAL
    with pytest.raises(BrokerError):
        _pull_result(RemotingCommand(ResponseCode.SYSTEM_ERROR, remark="no", flag=1), req, "a:1")
    with pytest.raises(ProtocolError):
        _pull_result(RemotingCommand(0, ext_fields={"minOffset": "x"}, flag=1), req, "a:1")
