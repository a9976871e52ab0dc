"""Answers to the requests a broker sends to a consumer for admin tools (``ClientRemotingProcessor``):
GET_CONSUMER_RUNNING_INFO (307), RESET_CONSUMER_CLIENT_OFFSET (220), GET_CONSUMER_STATUS_FROM_CLIENT
(221) and CONSUME_MESSAGE_DIRECTLY (309), in the Java body shapes so ``mqadmin`` can read them.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from ..errors import ProtocolError
from ..protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    GetConsumerStatusBody,
    ProcessQueueInfo,
    ResetOffsetBody,
)
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.mq import MessageQueue
from ..protocol.stored import decode_messages
from .concurrently import ConsumeContext, ConsumeResult, reset_retry_topic

if TYPE_CHECKING:
    from .push import PushConsumer

__all__ = ["handle", "running_info"]

log = logging.getLogger("rmq_async.consumer")


def running_info(c: PushConsumer) -> ConsumerRunningInfo:
    props = {
        "PROP_CONSUMER_START_TIMESTAMP": str(
            int(time.time() * 1000 - (time.monotonic() - c.stats.started) * 1000)
        ),
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMEORDERLY": "true" if getattr(c, "orderly", False) else "false",
        "PROP_THREADPOOL_CORE_SIZE": str(c.config.concurrency),
        "PROP_NAMESERVER_ADDR": ";".join(c.client_config.namesrv_list()),
        "PROP_CLIENT_VERSION": "V4_9_8",
        "messageModel": c.config.message_model,
        "consumeFromWhere": c.config.consume_from_where,
        "consumerGroup": c.group,
        "pullBatchSize": str(c.config.pull_batch_size),
        "consumeMessageBatchMaxSize": str(c.config.consume_batch_max_size),
        "pullThresholdForQueue": str(c.config.pull_threshold_for_queue),
        "consumeConcurrentlyMaxSpan": str(c.config.consume_concurrently_max_span),
        "consumeTimeout": str(int(c.deadlines.timeout / 60)),
        "maxReconsumeTimes": str(c.max_reconsume_times),
        "allocateMessageQueueStrategy": c.strategy.name,
        "language": "PYTHON",
        "pid": str(os.getpid()),
    }
    mq_table = {}
    for mq, pq in c.pqs.items():
        info = pq.info()
        mq_table[mq] = ProcessQueueInfo(commit_offset=c.offset_store.read_memory(mq), **_snake(info))
    status = {}
    for topic, s in c.stats.snapshot().items():
        status[topic] = ConsumeStatus(
            pull_rt=s["pullRT"],
            pull_tps=s["pullTPS"],
            consume_rt=s["consumeRT"],
            consume_ok_tps=s["consumeOKTPS"],
            consume_failed_tps=s["consumeFailedTPS"],
            consume_failed_msgs=int(s["consumeFailedMsgs"]),
        )
    subs = [sub for t in sorted(c.subscribed_topics()) if (sub := c.subscription(t)) is not None]
    return ConsumerRunningInfo(
        properties=props, subscription_set=subs, mq_table=mq_table, status_table=status
    )


_SNAKE = {
    "cachedMsgMinOffset": "cached_msg_min_offset",
    "cachedMsgMaxOffset": "cached_msg_max_offset",
    "cachedMsgCount": "cached_msg_count",
    "cachedMsgSizeInMiB": "cached_msg_size_in_mib",
    "transactionMsgMinOffset": "transaction_msg_min_offset",
    "transactionMsgMaxOffset": "transaction_msg_max_offset",
    "transactionMsgCount": "transaction_msg_count",
    "locked": "locked",
    "tryUnlockTimes": "try_unlock_times",
    "lastLockTimestamp": "last_lock_timestamp",
    "droped": "droped",
    "lastPullTimestamp": "last_pull_timestamp",
    "lastConsumeTimestamp": "last_consume_timestamp",
}


def _snake(info: dict[str, object]) -> dict[str, object]:
    return {_SNAKE[k]: v for k, v in info.items() if k in _SNAKE}


async def reset_offset(c: PushConsumer, topic: str, table: dict[MessageQueue, int]) -> None:
    """``resetOffset``: drop the topic's owned queues with their new offsets stored on the broker
    (orderly: unlocked too), then rebalance so they restart from there."""
    for mq, offset in table.items():
        if mq.topic == topic and mq in c.pqs:
            await c.drop_queue(mq, offset=int(offset))
    c.rebalance_now()


async def handle(c: PushConsumer, cmd: RemotingCommand) -> RemotingCommand | None:
    code = cmd.code
    if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
        body = running_info(c).encode()
        return cmd.make_response(ResponseCode.SUCCESS, None, body=body, language=c.client_config.language)
    if code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        topic = cmd.ext_fields.get("topic", "")
        try:
            table = ResetOffsetBody.decode(cmd.body).offset_table if cmd.body else {}
        except ProtocolError as exc:
            log.error("bad RESET_CONSUMER_CLIENT_OFFSET body: %s", exc)
            return None if cmd.is_oneway else cmd.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        log.info("broker asked to reset the offsets of %s for group %s: %s", topic, c.group, table)
        await reset_offset(c, topic, dict(table))
        return None if cmd.is_oneway else cmd.make_response(ResponseCode.SUCCESS, None)
    if code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
        topic = cmd.ext_fields.get("topic", "")
        table = {mq: c.offset_store.read_memory(mq) for mq in c.pqs if mq.topic == topic}
        body = GetConsumerStatusBody(message_queue_table=table).encode()
        return cmd.make_response(ResponseCode.SUCCESS, None, body=body, language=c.client_config.language)
    if code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        return await _consume_directly(c, cmd)
    return None


async def _consume_directly(c: PushConsumer, cmd: RemotingCommand) -> RemotingCommand:
    try:
        msgs = decode_messages(cmd.body)
    except ProtocolError as exc:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad message: {exc}")
    if not msgs or c.handler is None:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "no message or no handler to consume it")
    m = msgs[0]
    m.broker_name = cmd.ext_fields.get("brokerName", "")
    mq = MessageQueue(m.topic, m.broker_name, m.queue_id)
    reset_retry_topic(msgs, c.retry_topic, c.namespace)  # consumeMessageDirectly: the original topic
    orderly = bool(getattr(c, "orderly", False))
    t0 = time.perf_counter()
    auto_commit = True
    try:
        res: Any
        if orderly:  # [orderly] ConsumeMessageOrderlyService.consumeMessageDirectly
            from .orderly import OrderlyContext

            octx = OrderlyContext(mq)
            res = await c.handler([m], octx)  # type: ignore[arg-type]
            auto_commit = octx.auto_commit  # as Java: the context's, after the handler
            name = getattr(res, "name", "SUCCESS" if res is None else "")
            outcome = {"SUCCESS": "CR_SUCCESS", "COMMIT": "CR_COMMIT", "ROLLBACK": "CR_ROLLBACK"}.get(
                name, "CR_LATER"
            )
        else:
            res = await c.handler([m], ConsumeContext(mq))  # type: ignore[arg-type]
            outcome = "CR_SUCCESS" if res in (None, ConsumeResult.SUCCESS) else "CR_LATER"
        remark = None
    except Exception as exc:
        outcome, remark = "CR_THROW_EXCEPTION", repr(exc)
    result = ConsumeMessageDirectlyResult(
        order=orderly,
        auto_commit=bool(auto_commit),
        consume_result=outcome,
        remark=remark,
        spent_time_mills=int((time.perf_counter() - t0) * 1000),
    )
    return cmd.make_response(
        ResponseCode.SUCCESS, None, body=result.encode(), language=c.client_config.language
    )
