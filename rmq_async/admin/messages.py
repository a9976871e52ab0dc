"""Finding messages as mqadmin does: by id (``queryMsgById``), by key (``queryMsgByKey``), at a queue
offset (``queryMsgByOffset``), their trace (``queryMsgTraceById``), and handing one to a member
(``consumeMessageDirectly``).

An id of 32 (or 56) hex digits reads as an offset message id (store host, port, commit-log offset)
or as a producer's UNIQ_KEY, which has the same length. Java tries VIEW_MESSAGE_BY_ID (33) at the
address decoded from it and falls back to a query by unique key when that fails; here the decoded
address is used only when it is one of the cluster's brokers (asked with 106), so a UNIQ_KEY never
sends a request to whatever host its first bytes spell.
"""

from __future__ import annotations

import anyio

from ..errors import ConfigError, MQClientError, ProtocolError
from ..observability.trace.encoder import decode
from ..protocol import headers as H
from ..protocol.bodies import ConsumeMessageDirectlyResult
from ..protocol.codes import PullSysFlag
from ..protocol.mq import MessageQueue
from ..protocol.msgid import parse_offset_msg_id
from ..protocol.pull import PullStatus
from ..protocol.stored import MessageExt
from .models import TraceRecord
from .session import Session

__all__ = ["consume_directly", "message_at", "message_by_id", "message_trace", "query_by_key"]

LONG_MAX = (1 << 63) - 1
#: ``MixAll.TOOLS_CONSUMER_GROUP``: the group of queryMsgByOffset's pull consumer
TOOLS_CONSUMER = "TOOLS_CONSUMER"


async def _broker_addrs(s: Session) -> set[str]:
    info = await s.cluster_info()
    return {addr for bd in info.broker_addr_table.values() for addr in bd.broker_addrs.values()}


async def message_by_id(s: Session, msg_id: str, topic: str | None) -> MessageExt:
    """The message: 33 to the broker in an offset id, else 12 by unique key on ``topic``'s brokers."""
    try:
        addr, phys = parse_offset_msg_id(msg_id)
    except ProtocolError:
        addr = ""
    if addr and addr in await _broker_addrs(s):
        return await s.api.view_message(addr, phys, s.timeout)
    if topic is None:
        raise ConfigError(
            f"{msg_id!r} is no broker's offset message id: a query by unique key needs the topic"
        )
    found = await _query(s, topic, msg_id, 32, 0, LONG_MAX, unique=True)
    if not found:
        raise MQClientError(f"no message {msg_id} in topic {topic}")
    return min(found, key=lambda m: m.store_timestamp)


async def query_by_key(
    s: Session, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
) -> list[MessageExt]:
    """QUERY_MESSAGE (12) as captured, on every broker of the topic; the answers whose KEYS hold ``key``."""
    msgs = await _query(s, topic, key, max_num, begin_ms, end_ms, unique=False)
    return sorted(msgs, key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))


async def _query(
    s: Session, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, *, unique: bool
) -> list[MessageExt]:
    """``MQAdminImpl.queryMessage``: each broker of the route (master, else a slave) asked at once, the
    messages kept whose keys (or, by unique key, msg id) match, as Java filters them."""
    route = await s.route(topic)
    found: list[MessageExt] = []

    async def one(addr: str) -> None:
        msgs = await s.api.query_message(
            addr, topic, key, max_num, begin_ms, end_ms, s.timeout, unique_key=unique
        )
        for m in msgs:
            if (m.msg_id == key) if unique else key in (m.keys or "").split(" "):
                found.append(m)

    async with anyio.create_task_group() as tg:
        for _, addr in s.selected(route):
            tg.start_soon(one, addr)
    return found


async def message_at(s: Session, mq: MessageQueue, offset: int) -> MessageExt | None:
    """One message pulled as ``queryMsgByOffset``'s ``DefaultMQPullConsumer`` (group TOOLS_CONSUMER, a
    stream client: ``ReqT`` 0) sends it: ``maxMsgNums`` 1, ``sysFlag`` 4 (subscription only: no commit),
    ``subscription`` ``*``, ``suspendTimeoutMillis`` 20000. None when the queue has nothing there."""
    addr = await s.client.any_broker_addr(mq.broker_name, mq.topic)
    h = H.PullMessageRequestHeader(
        consumer_group=TOOLS_CONSUMER,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=1,
        sys_flag=PullSysFlag.SUBSCRIPTION,
        commit_offset=0,
        suspend_timeout_millis=20000,
        sub_version=0,
        subscription="*",
        expression_type="TAG",
        bname=mq.broker_name,
    )
    got = await type(s.api).sharing(s.api, stream=True).pull(addr, h, s.timeout, broker_name=mq.broker_name)
    if got.status is not PullStatus.FOUND or not got.messages:
        return None
    return got.messages[0]


async def message_trace(s: Session, msg_id: str, trace_topic: str) -> list[TraceRecord]:
    """The trace messages keyed by ``msg_id`` in the trace topic, decoded (``TraceDataEncoder``), the
    records of ``msg_id`` in trace-message order."""
    msgs = await query_by_key(s, trace_topic, msg_id, 64, 0, LONG_MAX)
    out: list[TraceRecord] = []
    for m in msgs:
        for ctx in decode(m.body.decode("utf-8", "replace")):
            for b in ctx.beans:
                if b.msg_id != msg_id:
                    continue
                out.append(
                    TraceRecord(
                        trace_type=ctx.trace_type,
                        timestamp=ctx.timestamp,
                        group=ctx.group_name,
                        topic=b.topic or "",
                        msg_id=b.msg_id or "",
                        offset_msg_id=b.offset_msg_id or "",
                        tags=b.tags or "",
                        keys=b.keys or "",
                        store_host=b.store_host or "",
                        cost_time=ctx.cost_time,
                        success=ctx.success,
                        retry_times=b.retry_times,
                        request_id=ctx.request_id,
                    )
                )
    return out


async def consume_directly(
    s: Session, group: str, client_id: str, msg_id: str, topic: str | None
) -> ConsumeMessageDirectlyResult:
    """``DefaultMQAdminExtImpl.consumeMessageDirectly``: the message found by id, then 309 to the
    broker that stores it, with its offset message id."""
    msg = await message_by_id(s, msg_id, topic)
    return await s.api.consume_message_directly(
        msg.store_host, group, client_id, msg.offset_msg_id, s.timeout
    )
