"""Messages a consumer cannot decode (a corrupt or unknown body): logged, counted, and moved to the
group's DLQ by the broker, without the queue ever stalling behind them.

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

Broken framing (the pull planner's :data:`~.pull_plan.BROKEN_BODY_LIMIT`) is the one case the broker may
not be able to move: a message named only by :func:`~rmq_async.protocol.stored.salvage_ids` (its
fixed fields) goes the same way, but when the broker keeps refusing its send-back
(:data:`BROKEN_REFUSALS`: a 5.x broker cannot read a bad magic code back) it is skipped
(:func:`skip`), and so is one that names no message at all after the pull loop's bounded retries:
an ERROR record that says it stays in the commit log and was NOT moved to the DLQ, the
``undecodable_skipped`` count, and the committed offset moves past it. Never silently, and never a
queue stalled for good.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

import anyio

from ..errors import AuthError, BrokerError, RocketMQError
from ..protocol import headers as H
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt, Undecodable
from .context import ConsumerContext
from .process_queue import ProcessQueue

__all__ = [
    "BROKEN_REFUSALS",
    "MAX_BACKOFF",
    "HeldMessage",
    "UndecodableMode",
    "hold",
    "log_undecodable",
    "move_to_dlq",
    "skip",
]

log = logging.getLogger("rmq_async.consumer")

#: seconds: the longest wait between two send-backs of an undecodable message
MAX_BACKOFF = 30.0
#: a message with broken framing whose send-back the broker refused this many times is skipped (the
#: broker answers, so it is there, but cannot read it back: 5.x's lookMessageByOffset refuses a bad
#: magic code); about 45 s of back-off on the Java timing. Transport failures do not count.
BROKEN_REFUSALS = 5
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


def skip(ctx: ConsumerContext, rec: Undecodable, why: str, *, counted: bool = True) -> None:
    """The ERROR record of an undecodable message passed over without the DLQ (``counted``: already
    in ``stats.undecodable``)."""
    if not counted:
        ctx.stats.undecodable += 1
    ctx.stats.undecodable_skipped += 1
    log.error(
        "group %s: %s: SKIPPED (%s); the stored message stays in the commit log; it was NOT moved to the DLQ",
        ctx.group,
        rec.describe(),
        why,
    )


async def move_to_dlq(ctx: ConsumerContext, rec: Undecodable, mq: MessageQueue) -> bool:
    """One CONSUMER_SEND_MSG_BACK that puts the stored message at ``rec.commit_log_offset`` into
    ``%DLQ%<group>``; False (logged) if it failed."""
    return await _send_back(ctx, rec, mq) is None


async def _send_back(ctx: ConsumerContext, rec: Undecodable, mq: MessageQueue) -> RocketMQError | None:
    """:func:`move_to_dlq`, returning the error (None: moved)."""
    client = ctx.client
    try:
        addr = await client.master_addr(mq.broker_name, mq.topic)
        h = H.ConsumerSendMsgBackRequestHeader(
            offset=rec.commit_log_offset,
            group=ctx.group,
            delay_level=DLQ_DELAY_LEVEL,
            origin_msg_id=rec.msg_id or rec.offset_msg_id or None,  # None: the broker names it
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
        return exc
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
    return None


async def move_until_done(
    ctx: ConsumerContext, pq: ProcessQueue, rec: Undecodable, *, bounded: bool = False
) -> bool:
    """Send ``rec`` to the DLQ until the broker takes it, backing off (the pull error delay, doubled
    after each failure, at most :data:`MAX_BACKOFF`); False if the queue was dropped or the consumer
    stops first (the queue's next owner, or the next run, pulls it again: its offset was held).
    ``bounded`` (broken framing): after :data:`BROKEN_REFUSALS` refusals by the broker (not ACL
    denials) it is skipped (:func:`skip`) and True returned: the queue goes on past it."""
    failures = refusals = 0
    while not pq.dropped and not ctx.stopping:
        err = await _send_back(ctx, rec, pq.mq)
        if err is None:
            return True
        failures += 1
        if bounded and isinstance(err, BrokerError) and not isinstance(err, AuthError):
            refusals += 1
            if refusals >= BROKEN_REFUSALS:
                skip(ctx, rec, f"the broker refused to move it {refusals} times, last: {err}")
                return True
        ctx.stats.undecodable_retries += 1
        await anyio.sleep(min(MAX_BACKOFF, ctx.timing.pull_error_delay * 2 ** min(failures - 1, 16)))
    return False


def hold(ctx: ConsumerContext, pq: ProcessQueue, rec: Undecodable, *, bounded: bool = False) -> HeldMessage:
    """Concurrently: a stand-in for ``rec`` to put in ``pq`` with its batch, and a task that moves the
    message to the DLQ and then removes the stand-in (the committed offset moves past it then);
    ``bounded`` as :func:`move_until_done`'s."""
    held = HeldMessage(rec)
    if not ctx.start_soon(_move_held, ctx, pq, held, bounded):
        log.warning("group %s: not running: %s stays held", ctx.group, rec.describe())
    return held


async def _move_held(ctx: ConsumerContext, pq: ProcessQueue, held: HeldMessage, bounded: bool) -> None:
    if await move_until_done(ctx, pq, held.record, bounded=bounded) and not pq.dropped:
        offset = pq.remove([held])
        if not pq.dropped and offset >= 0:
            pq.offset.advance(offset)
