"""Messages a consumer cannot decode (issue #19): logged, counted, and moved to the group's DLQ by the
broker, without the queue ever stalling behind them.

Strategy. The decoder isolates such a message (:class:`~rmq_async.protocol.stored.Undecodable`); the
pull loop hands the records here. A push consumer sends each one back with CONSUMER_SEND_MSG_BACK,
its commit-log offset and ``delayLevel`` -1: both 4.9.8 (``asyncConsumerSendMsgBack``) and 5.x
(``consumerSendMsgBack``) put a send-back with a negative delay level straight into
``%DLQ%<group>``, reading the stored message by its offset, so its body is never decoded on either
side. Until the broker has it, the queue's committed offset must not pass it, the rule of a failed
message: concurrently, a stand-in (:class:`HeldMessage`, no body) sits in the process queue at its
offset while a task retries the send-back with a doubling back-off and the other messages go on;
orderly, the pull loop awaits the move before it hands over anything after it. A broadcasting
member logs it and passes it over (every member would dead-letter its own copy, and Java drops what
a broadcasting member fails to consume). A lite pull
consumer either fails (``poll`` raises :class:`~rmq_async.protocol.stored.UndecodableMessageError`
naming the offset, the queue is not pulled past it until a seek) or skips with a logged record.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

import anyio

from ..errors import RocketMQError
from ..protocol import headers as H
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt, Undecodable
from .context import ConsumerContext
from .process_queue import ProcessQueue

__all__ = ["MAX_BACKOFF", "HeldMessage", "UndecodableMode", "hold", "log_undecodable", "move_to_dlq"]

log = logging.getLogger("rmq_async.consumer")

#: seconds: the longest wait between two send-backs of an undecodable message
MAX_BACKOFF = 30.0
#: CONSUMER_SEND_MSG_BACK's delay level for "straight to the DLQ" (any negative one)
DLQ_DELAY_LEVEL = -1

#: what the pull loop does with an undecodable message: ``dlq`` (push, concurrently: held in the
#: process queue while it is moved), ``dlq_in_order`` (push, orderly: the queue waits for the move),
#: ``fail`` / ``skip`` (lite pull's ``on_undecodable``)
UndecodableMode = Literal["dlq", "dlq_in_order", "fail", "skip"]


class HeldMessage(MessageExt):
    """The stand-in of an undecodable message in a process queue: it keeps the committed offset
    from passing the message until the broker has moved it. Never handed to a handler."""

    __slots__ = ("record",)

    def __init__(self, record: Undecodable) -> None:
        super().__init__(
            record.topic or "",
            b"",
            broker_name=record.broker_name,
            queue_id=record.queue_id,
            queue_offset=record.queue_offset,
            commit_log_offset=record.commit_log_offset,
            sys_flag=record.sys_flag,
            reconsume_times=record.reconsume_times,
        )
        self.record = record


def for_queue(rec: Undecodable, mq: MessageQueue) -> Undecodable:
    """The record with the queue's broker name (the decoder may not know it)."""
    return rec if rec.broker_name == mq.broker_name else replace(rec, broker_name=mq.broker_name)


def log_undecodable(ctx: ConsumerContext, rec: Undecodable, what: str) -> None:
    """The ERROR line of one undecodable message (topic, queue, offset, ids, reason) and its count."""
    ctx.stats.undecodable += 1
    log.error("group %s: %s: %s", ctx.group, rec.describe(), what)


async def move_to_dlq(ctx: ConsumerContext, rec: Undecodable, mq: MessageQueue) -> bool:
    """One CONSUMER_SEND_MSG_BACK that puts the stored message at ``rec.commit_log_offset`` into
    ``%DLQ%<group>``; False (logged) if it failed."""
    client = ctx.client
    try:
        addr = await client.master_addr(mq.broker_name, mq.topic)
        h = H.ConsumerSendMsgBackRequestHeader(
            offset=rec.commit_log_offset,
            group=ctx.group,
            delay_level=DLQ_DELAY_LEVEL,
            origin_msg_id=rec.msg_id or rec.offset_msg_id,
            origin_topic=rec.topic or mq.topic,
            unit_mode=False,
            max_reconsume_times=ctx.max_reconsume_times,
            bname=mq.broker_name,
        )
        await client.api.consumer_send_msg_back(addr, h, client.timing.request_timeout)
    except RocketMQError as exc:
        log.warning(
            "group %s: moving the undecodable message at %s offset %d to the DLQ failed (%s): retrying",
            ctx.group,
            mq,
            rec.queue_offset,
            exc,
        )
        return False
    ctx.stats.undecodable_to_dlq += 1
    ctx.stats.sent_back += 1
    log.warning(
        "group %s: the undecodable message at %s offset %d (%s) is in %%DLQ%%%s",
        ctx.group,
        mq,
        rec.queue_offset,
        rec.msg_id or rec.offset_msg_id,
        ctx.group,
    )
    return True


async def move_until_done(ctx: ConsumerContext, pq: ProcessQueue, rec: Undecodable) -> bool:
    """Send ``rec`` to the DLQ until the broker takes it, backing off (the pull error delay, doubled
    after each failure, at most :data:`MAX_BACKOFF`); False if the queue was dropped or the consumer
    stops first (the queue's next owner, or the next run, pulls it again: its offset was held)."""
    failures = 0
    while not pq.dropped and not ctx.stopping:
        if await move_to_dlq(ctx, rec, pq.mq):
            return True
        failures += 1
        ctx.stats.undecodable_retries += 1
        await anyio.sleep(min(MAX_BACKOFF, ctx.timing.pull_error_delay * 2 ** min(failures - 1, 16)))
    return False


def hold(ctx: ConsumerContext, pq: ProcessQueue, rec: Undecodable) -> HeldMessage:
    """Concurrently: a stand-in for ``rec`` to put in ``pq`` with its batch, and a task that moves the
    message to the DLQ and then removes the stand-in (the committed offset moves past it then)."""
    held = HeldMessage(rec)
    if not ctx.start_soon(_move_held, ctx, pq, held):
        log.warning("group %s: not running: %s stays held", ctx.group, rec.describe())
    return held


async def _move_held(ctx: ConsumerContext, pq: ProcessQueue, held: HeldMessage) -> None:
    if await move_until_done(ctx, pq, held.record) and not pq.dropped:
        offset = pq.remove([held])
        if not pq.dropped and offset >= 0:
            pq.offset.advance(offset)
