"""Trace records against the Java client's format (apache/rocketmq ``client/.../trace/``).

Every expected string is built here field by field from ``TraceDataEncoder.encoderFromContextBean``,
each field named after the Java getter it comes from, with ``\\x01`` (``TraceConstants.CONTENT_SPLITOR``)
between fields and ``\\x02`` (``FIELD_SPLITOR``) after each record; what ``StringBuilder.append`` writes
for a null String (``null``) and a boolean (``true``/``false``) included. The 5.x flavour: the encoder
is the same in 4.9.8 and 5.3.3 (``Pub`` ends with offsetMsgId and success since 4.x; ``SubAfter``
carries contextCode, timestamp and group unless the access channel is CLOUD).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum

import pytest
from support.helpers_stored import encode_stored

from rmq_async.config import ClientConfig, TraceConfig
from rmq_async.consumer.types import ConsumeResult, OrderlyResult
from rmq_async.observability.trace import (
    ConsumeTracer,
    SendTracer,
    TraceBean,
    TraceContext,
    TraceDispatcher,
    decode,
    encode,
)
from rmq_async.observability.trace.dispatcher import next_trace_group
from rmq_async.observability.trace.encoder import ConsumeReturnType, MessageType
from rmq_async.observability.trace.hooks import without_namespace
from rmq_async.protocol.message import Message
from rmq_async.protocol.stored import MessageExt, decode_messages

C, F = "\x01", "\x02"


def rec(*fields: object) -> str:
    return C.join(str(f) for f in fields) + F


# -- the encoder ---------------------------------------------------------------------------------------


def test_pub_record_fields_in_java_order() -> None:
    ctx = TraceContext(
        "Pub", 1795300158805, "DefaultRegion", "pg", cost_time=3, success=True,
        beans=[TraceBean(topic="T", msg_id="UNIQ1", offset_msg_id="OFF1", tags="TagA", keys="k-1 k-2",
                         store_host="127.0.0.1:10911", body_length=16, msg_type=MessageType.NORMAL)],
    )  # fmt: skip
    data, keys = encode(ctx)
    expected = rec(
        "Pub",  # ctx.getTraceType()
        1795300158805,  # ctx.getTimeStamp()
        "DefaultRegion",  # ctx.getRegionId()
        "pg",  # ctx.getGroupName()
        "T",  # bean.getTopic()
        "UNIQ1",  # bean.getMsgId()
        "TagA",  # bean.getTags()
        "k-1 k-2",  # bean.getKeys()
        "127.0.0.1:10911",  # bean.getStoreHost()
        16,  # bean.getBodyLength()
        3,  # ctx.getCostTime()
        0,  # bean.getMsgType().ordinal(): Normal_Msg
        "OFF1",  # bean.getOffsetMsgId()
        "true",  # ctx.isSuccess()
    )
    assert data == expected
    # transKey: the msg id, then the keys split on KEY_SEPARATOR (" ")
    assert keys == ["UNIQ1", "k-1", "k-2"]


def test_pub_of_a_message_without_tags_or_keys_writes_null_as_java() -> None:
    ctx = TraceContext("Pub", 1, "R", "g", beans=[TraceBean(topic="T", msg_id="M", tags=None, keys=None)])
    data, keys = encode(ctx)
    assert data.split(C)[6:8] == ["null", "null"]
    assert keys == ["M"]  # a null or empty keys string adds no key


def test_sub_before_one_record_per_message() -> None:
    beans = [
        TraceBean(msg_id="M1", retry_times=0, keys="k-1"),
        TraceBean(msg_id="M2", retry_times=2, keys=None),
    ]
    ctx = TraceContext("SubBefore", 1795300158900, "DefaultRegion", "cg", request_id="REQ", beans=beans)
    data, keys = encode(ctx)
    expected = "".join(
        rec(
            "SubBefore",  # ctx.getTraceType()
            1795300158900,  # ctx.getTimeStamp()
            "DefaultRegion",  # ctx.getRegionId()
            "cg",  # ctx.getGroupName()
            "REQ",  # ctx.getRequestId()
            msg_id,  # bean.getMsgId()
            retry,  # bean.getRetryTimes()
            keys_,  # bean.getKeys()
        )
        for msg_id, retry, keys_ in (("M1", 0, "k-1"), ("M2", 2, "null"))
    )
    assert data == expected
    assert keys == ["M1", "k-1", "M2"]


def test_sub_before_region_null_when_the_message_has_none() -> None:
    ctx = TraceContext("SubBefore", 5, None, "cg", request_id="R", beans=[TraceBean(msg_id="M", keys="k")])
    assert encode(ctx)[0].split(C)[2] == "null"


def test_sub_after_with_context_code_timestamp_and_group() -> None:
    beans = [TraceBean(msg_id="M1", keys="k-1"), TraceBean(msg_id="M2", keys="k-2")]
    ctx = TraceContext(
        "SubAfter", 1795300159000, "DefaultRegion", "cg", cost_time=7, success=False, request_id="REQ",
        context_code=int(ConsumeReturnType.FAILED), beans=beans,
    )  # fmt: skip
    data, _ = encode(ctx)
    expected = "".join(
        C.join(
            [
                "SubAfter",  # ctx.getTraceType()
                "REQ",  # ctx.getRequestId()
                msg_id,  # bean.getMsgId()
                "7",  # ctx.getCostTime()
                "false",  # ctx.isSuccess()
                keys_,  # bean.getKeys()
                "4",  # ctx.getContextCode(): ConsumeReturnType.FAILED.ordinal()
                "",  # CONTENT_SPLITOR after contextCode
            ]
        )
        + "1795300159000"  # ctx.getTimeStamp() (not CLOUD)
        + C
        + "cg"  # ctx.getGroupName()
        + F
        for msg_id, keys_ in (("M1", "k-1"), ("M2", "k-2"))
    )
    assert data == expected


def test_sub_after_cloud_channel_leaves_timestamp_and_group_out() -> None:
    ctx = TraceContext(
        "SubAfter", 9, "R", "cg", request_id="Q", cloud=True, beans=[TraceBean(msg_id="M", keys="")]
    )
    assert encode(ctx)[0] == C.join(["SubAfter", "Q", "M", "0", "true", "", "0", ""]) + F


def test_decode_round_trip_as_decoder_from_trace_data_string() -> None:
    pub = TraceContext(
        "Pub", 11, "R", "pg", cost_time=2,
        beans=[TraceBean(topic="T", msg_id="M", offset_msg_id="O", tags="t", keys="k", store_host="h:1",
                         body_length=4, msg_type=MessageType.DELAY)],
    )  # fmt: skip
    before = TraceContext(
        "SubBefore", 12, "R", "cg", request_id="Q", beans=[TraceBean(msg_id="M", retry_times=1, keys="k")]
    )
    after = TraceContext(
        "SubAfter", 13, "R", "cg", cost_time=5, request_id="Q", beans=[TraceBean(msg_id="M", keys="k")]
    )
    data = "".join(encode(c)[0] for c in (pub, before, after))
    p, b, a = decode(data)
    assert (p.trace_type, p.timestamp, p.group_name, p.cost_time, p.success) == ("Pub", 11, "pg", 2, True)
    assert (p.beans[0].msg_id, p.beans[0].offset_msg_id, p.beans[0].msg_type) == ("M", "O", MessageType.DELAY)
    assert (b.trace_type, b.request_id, b.beans[0].retry_times) == ("SubBefore", "Q", 1)
    assert (a.trace_type, a.request_id, a.cost_time, a.timestamp, a.group_name) == (
        "SubAfter",
        "Q",
        5,
        13,
        "cg",
    )


def test_decode_reads_the_old_13_field_pub() -> None:
    old = C.join(["Pub", "1", "R", "g", "T", "M", "t", "k", "h", "3", "4", "0", "false"])
    [p] = decode(old)
    assert p.success is False and p.beans[0].offset_msg_id == ""


def test_trace_producer_group_named_as_java() -> None:
    name = next_trace_group("pg", "PRODUCE")
    prefix, group, kind, n = name.split("-")
    assert (prefix, group, kind) == ("_INNER_TRACE_PRODUCER", "pg", "PRODUCE") and int(n) >= 1


def test_without_namespace() -> None:
    assert without_namespace("ns%T") == "T"
    assert without_namespace("%RETRY%ns%g") == "%RETRY%g"
    assert without_namespace("T") == "T"


def test_trace_config_shorthand() -> None:
    assert ClientConfig(trace=True).trace.enabled
    assert not ClientConfig().trace.enabled


# -- the hooks -----------------------------------------------------------------------------------------


class _Status(Enum):
    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1


@dataclass
class _Result:
    status: _Status
    msg_id: str
    offset_msg_id: str
    region_id: str | None
    trace_on: bool = True


def _dispatcher(size: int = 2048) -> TraceDispatcher:
    return TraceDispatcher("g", "PRODUCE", TraceConfig(enabled=True, queue_size=size))


def _queued(d: TraceDispatcher) -> list[TraceContext]:
    """The queued records as the dispatcher sends them (consume records are built then)."""
    out = []
    for e in d._queue:
        ctx = e if isinstance(e, TraceContext) else e.context()
        if ctx is not None:
            out.append(ctx)
    return out


def test_send_hook_writes_pub_after_an_answered_send() -> None:
    d = _dispatcher()
    t = SendTracer(d, "ns%pg")
    msg = Message("T", b"body", tags="TagA", keys=["k-1", "k-2"], delay_level=2)
    tc = t.before(msg, "ns%T", 4, "127.0.0.1:10911")
    t.after(tc, _Result(_Status.SEND_OK, "UNIQ", "OFF", "DefaultRegion"))
    [ctx] = _queued(d)
    fields = encode(ctx)[0].rstrip(F).split(C)
    assert fields[0] == "Pub" and fields[2:10] == [
        "DefaultRegion",
        "pg",
        "T",
        "UNIQ",
        "TagA",
        "k-1 k-2",
        "127.0.0.1:10911",
        "4",
    ]
    assert fields[11:] == [str(int(MessageType.DELAY)), "OFF", "true"]


def test_send_hook_skips_trace_off_failed_sends_and_the_trace_topic() -> None:
    d = _dispatcher()
    t = SendTracer(d, "pg")
    msg = Message("T", b"x")
    t.after(t.before(msg, "T", 1, "a"), _Result(_Status.SEND_OK, "U", "O", "R", trace_on=False))
    t.after(t.before(msg, "T", 1, "a"), None)  # the send raised or was oneway: no result
    assert t.before(Message("RMQ_SYS_TRACE_TOPIC", b"x"), "RMQ_SYS_TRACE_TOPIC", 1, "a") is None
    t.after(t.before(msg, "T", 1, "a"), _Result(_Status.FLUSH_DISK_TIMEOUT, "U", "O", "R"))
    [ctx] = _queued(d)
    assert ctx.success is False  # SendStatus other than SEND_OK


def _msgs(n: int, **props: str) -> list[MessageExt]:
    body = b"".join(
        encode_stored(
            topic="T",
            body=b"b",
            queue_offset=i,
            commit_log_offset=100 * i,
            properties={"UNIQ_KEY": f"U{i}", "KEYS": f"k-{i}", **props},
            reconsume_times=i,
        )
        for i in range(n)
    )
    return list(decode_messages(body))


@pytest.mark.parametrize(
    ("result", "success", "code"),
    [
        (ConsumeResult.SUCCESS, True, ConsumeReturnType.SUCCESS),
        (None, True, ConsumeReturnType.SUCCESS),
        (ConsumeResult.RECONSUME_LATER, False, ConsumeReturnType.FAILED),
        (OrderlyResult.SUCCESS, True, ConsumeReturnType.SUCCESS),
        (OrderlyResult.COMMIT, True, ConsumeReturnType.SUCCESS),
        (OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, False, ConsumeReturnType.FAILED),
        (OrderlyResult.ROLLBACK, False, ConsumeReturnType.SUCCESS),  # Java leaves returnType SUCCESS
    ],
)
def test_consume_hooks_before_and_after(result: object, success: bool, code: ConsumeReturnType) -> None:
    d = _dispatcher()
    t = ConsumeTracer(d, "ns%cg", 60.0)
    batch = _msgs(2, MSG_REGION="DefaultRegion")
    tok = t.before(batch)
    t.after(tok, list(batch), result, None)
    before, after = _queued(d)
    assert before.trace_type == "SubBefore" and after.trace_type == "SubAfter"
    assert after.request_id == before.request_id and before.group_name == "cg"
    assert [b.msg_id for b in before.beans] == ["U0", "U1"] and [b.retry_times for b in before.beans] == [
        0,
        1,
    ]
    assert (after.success, after.context_code, after.region_id) == (success, int(code), "DefaultRegion")
    recs = encode(after)[0].split(F)[:-1]
    assert [r.split(C)[2] for r in recs] == ["U0", "U1"]


def test_consume_hook_timeout_and_trace_off() -> None:
    d = _dispatcher()
    t = ConsumeTracer(d, "cg", 0.0)  # every call is at or past a 0 s consume timeout
    off = _msgs(1, TRACE_ON="false")
    t.after(t.before(off), off, None, None)
    assert _queued(d) == []  # TRACE_ON=false: neither record
    batch = _msgs(1)
    t.after(t.before(batch), batch, ConsumeResult.SUCCESS, None)
    before, after = _queued(d)[-2:]
    assert before.region_id is None  # no MSG_REGION (a 4.x broker): written as null, as 4.9.8 does
    assert after.context_code == ConsumeReturnType.TIME_OUT


def test_full_queue_drops_and_counts() -> None:
    d = _dispatcher(size=3)
    for i in range(5):
        d.append(TraceContext("Pub", i, "R", beans=[TraceBean(msg_id=str(i))]))
    assert len(d) == 3 and d.dropped == 2


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ValueError("boom"), ConsumeReturnType.EXCEPTION),
        (asyncio.CancelledError(), ConsumeReturnType.TIME_OUT),
    ],
)
def test_consume_hook_handler_raised_or_cancelled(error: BaseException, code: ConsumeReturnType) -> None:
    d = _dispatcher()
    t = ConsumeTracer(d, "cg", 60.0)
    batch = _msgs(1, MSG_REGION="R")
    t.after(t.before(batch), batch, None, error)
    _, after = _queued(d)
    assert after.success is False and after.context_code == int(code)


def test_dropped_calls_build_nothing() -> None:
    d = _dispatcher(size=1)
    t = ConsumeTracer(d, "cg", 60.0)
    batch = _msgs(1)
    t.after(t.before(batch), batch, None, None)  # SubBefore queued, SubAfter dropped
    t.after(t.before(batch), batch, None, None)  # both dropped
    assert len(d) == 1 and d.dropped == 3


def test_end_transaction_record_in_java_order_and_decoded_back() -> None:
    # TraceDataEncoder case EndTransaction: type, timeStamp, regionId, groupName, topic, msgId, tags,
    # keys, storeHost, msgType ordinal, transactionId, transactionState.name(), fromTransactionCheck
    bean = TraceBean(
        topic="WireTx", msg_id="FD01", tags="TagTx", keys="tx-c", store_host="127.0.0.1:10911",
        msg_type=MessageType.TRANS_COMMIT, transaction_id="FD01", transaction_state="COMMIT_MESSAGE",
        from_transaction_check=True,
    )  # fmt: skip
    ctx = TraceContext("EndTransaction", 1796151725933, "DefaultRegion", "wire_tx_pg", beans=[bean])
    text, keys = encode(ctx)
    assert text == rec(
        "EndTransaction", 1796151725933, "DefaultRegion", "wire_tx_pg", "WireTx", "FD01", "TagTx", "tx-c",
        "127.0.0.1:10911", 2, "FD01", "COMMIT_MESSAGE", "true",
    )  # fmt: skip
    assert keys == ["FD01", "tx-c"]
    (back,) = decode(text)
    assert back.trace_type == "EndTransaction" and back.group_name == "wire_tx_pg"
    assert back.beans[0] == bean


async def test_send_tracer_end_transaction_record() -> None:
    dispatcher = TraceDispatcher("g", "PRODUCE", TraceConfig(enabled=True))
    tracer = SendTracer(dispatcher, "ns%g")
    msg = Message("ns%T", b"x", tags="TagTx", keys="k")
    tracer.end_transaction(msg, "ns%T", "U1", "U1", "ROLLBACK_MESSAGE", "b:1", from_check=False)
    (ctx,) = _queued(dispatcher)
    assert ctx.trace_type == "EndTransaction"
    assert ctx.group_name == "g" and ctx.region_id == "DefaultRegion"
    b = ctx.beans[0]
    assert (b.topic, b.tags, b.keys, b.msg_type) == ("T", "TagTx", "k", MessageType.TRANS_COMMIT)
    assert (b.transaction_state, b.from_transaction_check) == ("ROLLBACK_MESSAGE", False)
