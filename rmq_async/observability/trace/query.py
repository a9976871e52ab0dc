"""Reading traces back as RocketMQ's tools do (``mqadmin queryMsgTraceById``): QUERY_MESSAGE by the
traced msg id on every broker of the trace topic, then the records of the answers that name it
(``TraceView.decodeFromTraceTransData``)."""

from __future__ import annotations

import anyio

from ...client.instance import ClientInstance
from ...protocol.stored import MessageExt
from .encoder import RMQ_SYS_TRACE_TOPIC, TraceContext, decode

__all__ = ["query_messages_by_key", "query_trace"]

_LONG_MAX = (1 << 63) - 1


async def query_messages_by_key(
    client: ClientInstance,
    topic: str,
    key: str,
    *,
    max_num: int = 64,
    begin_ms: int = 0,
    end_ms: int = _LONG_MAX,
    timeout: float = 5.0,
) -> list[MessageExt]:
    """``MQAdminImpl.queryMessage`` (not by unique key): every master of ``topic`` asked at once, the
    answers kept when ``key`` is one of a message's keys."""
    route = await client.update_route(topic)
    found: list[MessageExt] = []

    async def one(addr: str) -> None:
        msgs = await client.api.query_message(addr, topic, key, max_num, begin_ms, end_ms, timeout)
        found.extend(m for m in msgs if key in (m.keys or "").split(" "))

    async with anyio.create_task_group() as tg:
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(0)
            if addr is not None:
                tg.start_soon(one, addr)
    return found


async def query_trace(
    client: ClientInstance, msg_id: str, trace_topic: str = RMQ_SYS_TRACE_TOPIC, *, timeout: float = 5.0
) -> list[TraceContext]:
    """The trace records of ``msg_id`` (``Pub``, ``SubBefore``, ``SubAfter``), oldest trace message
    first."""
    msgs = await query_messages_by_key(client, trace_topic, msg_id, timeout=timeout)
    msgs.sort(key=lambda m: (m.store_timestamp, m.queue_offset))
    out: list[TraceContext] = []
    for m in msgs:
        for ctx in decode(m.body.decode("utf-8")):
            if ctx.beans and ctx.beans[0].msg_id == msg_id:
                out.append(ctx)
    return out
