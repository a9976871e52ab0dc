"""Answers to the requests a broker sends to a consumer for admin tools (``ClientRemotingProcessor``):
GET_CONSUMER_RUNNING_INFO (307), RESET_CONSUMER_CLIENT_OFFSET (220), GET_CONSUMER_STATUS_FROM_CLIENT
(221) and CONSUME_MESSAGE_DIRECTLY (309), in the Java body shapes so ``mqadmin`` can read them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

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
from .context import ConsumerContext
from .invoke import Call, Invoker
from .queues import QueueTable
from .sendback import reset_retry_topic
from .types import ConsumeContext, ConsumeResult, Handler, OrderlyContext, OrderlyHandler, OrderlyResult

__all__ = ["ConsumerAdmin"]

log = logging.getLogger("rmq_async.consumer")

#: a consume-directly answer's result by the handler's (Java's CMResult names)
_DIRECT_OUTCOME = {
    "SUCCESS": "CR_SUCCESS",
    "COMMIT": "CR_COMMIT",
    "ROLLBACK": "CR_ROLLBACK",
    "RECONSUME_LATER": "CR_LATER",
    "SUSPEND_CURRENT_QUEUE_A_MOMENT": "CR_LATER",
}


@dataclass
class ConsumerAdmin:
    """The admin answers of one push consumer run."""

    ctx: ConsumerContext
    table: QueueTable
    rebalance_now: Callable[[], None]
    strategy_name: str
    handler: Handler | None = None
    orderly_handler: OrderlyHandler | None = None
    #: [pop] the POP settings and counters for the running info (``client_rebalance=False``)
    pop_props: Callable[[], dict[str, str]] | None = None

    def running_info(self) -> ConsumerRunningInfo:
        c = self.ctx
        cfg = c.config
        props = {
            "PROP_CONSUMER_START_TIMESTAMP": str(
                int(time.time() * 1000 - (time.monotonic() - c.stats.started) * 1000)
            ),
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMEORDERLY": "true" if c.orderly else "false",
            "PROP_THREADPOOL_CORE_SIZE": str(cfg.concurrency),
            "PROP_NAMESERVER_ADDR": ";".join(c.client_config.namesrv_list()),
            "PROP_CLIENT_VERSION": "V4_9_8",
            "messageModel": cfg.message_model,
            "consumeFromWhere": cfg.consume_from_where,
            "consumerGroup": c.group,
            "pullBatchSize": str(cfg.pull_batch_size),
            "consumeMessageBatchMaxSize": str(cfg.consume_batch_max_size),
            "pullThresholdForQueue": str(cfg.pull_threshold_for_queue),
            "consumeConcurrentlyMaxSpan": str(cfg.consume_concurrently_max_span),
            "consumeTimeout": str(int(c.deadlines.timeout / 60)),
            "maxReconsumeTimes": str(c.max_reconsume_times),
            "allocateMessageQueueStrategy": self.strategy_name,
            "language": "PYTHON",
            "pid": str(os.getpid()),
        }
        if self.pop_props is not None:
            props.update(self.pop_props())
        mq_table = {}
        for mq, pq in self.table.pqs.items():
            info = pq.info()
            mq_table[mq] = ProcessQueueInfo.model_validate(
                {"commit_offset": c.offset_store.read_memory(mq), **_snake(info)}
            )
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
        subs = [sub for t in sorted(c.subscriptions.topics()) if (sub := c.subscriptions.get(t)) is not None]
        return ConsumerRunningInfo(
            properties=props, subscription_set=subs, mq_table=mq_table, status_table=status
        )

    async def reset_offset(self, topic: str, table: dict[MessageQueue, int]) -> None:
        """``resetOffset``: drop the topic's owned queues with their new offsets stored on the broker
        (orderly: unlocked too), then rebalance so they restart from there."""
        for mq, offset in table.items():
            if mq.topic == topic and mq in self.table.pqs:
                await self.table.drop(mq, offset=int(offset))
        self.rebalance_now()

    async def handle(self, cmd: RemotingCommand) -> RemotingCommand | None:
        c = self.ctx
        code = cmd.code
        if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            body = self.running_info().encode()
            return cmd.make_response(ResponseCode.SUCCESS, None, body=body, language=c.client_config.language)
        if code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            topic = cmd.ext_fields.get("topic", "")
            try:
                table = ResetOffsetBody.decode(cmd.body).offset_table if cmd.body else {}
            except ProtocolError as exc:
                log.error("bad RESET_CONSUMER_CLIENT_OFFSET body: %s", exc)
                return None if cmd.is_oneway else cmd.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
            log.info("broker asked to reset the offsets of %s for group %s: %s", topic, c.group, table)
            await self.reset_offset(topic, dict(table))
            return None if cmd.is_oneway else cmd.make_response(ResponseCode.SUCCESS, None)
        if code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            topic = cmd.ext_fields.get("topic", "")
            offsets = {mq: c.offset_store.read_memory(mq) for mq in self.table.pqs if mq.topic == topic}
            body = GetConsumerStatusBody(message_queue_table=offsets).encode()
            return cmd.make_response(ResponseCode.SUCCESS, None, body=body, language=c.client_config.language)
        if code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return await self._consume_directly(cmd)
        return None

    async def _consume_directly(self, cmd: RemotingCommand) -> RemotingCommand:
        c = self.ctx
        try:
            msgs = decode_messages(cmd.body)
        except ProtocolError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad message: {exc}")
        if msgs.undecodable and not msgs:  # say why it cannot be consumed, not "no message"
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, f"bad message: {msgs.undecodable[0].describe()}"
            )
        if not msgs or (self.handler is None and self.orderly_handler is None):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "no message or no handler to consume it")
        m = msgs[0]
        m.broker_name = cmd.ext_fields.get("brokerName", "")
        mq = MessageQueue(m.topic, m.broker_name, m.queue_id)
        reset_retry_topic(msgs, c.retry_topic, c.namespace)  # consumeMessageDirectly: the original topic
        orderly = self.orderly_handler is not None
        t0 = time.perf_counter()
        auto_commit = True
        remark: str | None = None
        # bounded by the consume timeout (Java's consumeMessageDirectly is not: a hung handler would
        # hold this answer, and the broker's caller, for ever); not traced, as Java
        timeout = c.timing.consume_timeout
        call: Call[ConsumeResult] | Call[OrderlyResult]
        if self.orderly_handler is not None:  # [orderly] ConsumeMessageOrderlyService
            octx = OrderlyContext(mq)
            call = await Invoker(c, self.orderly_handler).call_orderly_timed(
                [m], octx, timeout=timeout, observe=False
            )
            auto_commit = octx.auto_commit  # as Java: the context's, after the handler
        else:
            call = await Invoker(c, self.handler).call(
                [m], ConsumeContext(mq), timeout=timeout, observe=False
            )
        if call.error is not None:
            outcome, remark = "CR_THROW_EXCEPTION", call.error
        elif call.timed_out:
            outcome, remark = "CR_LATER", f"the handler ran past the consume timeout ({timeout}s)"
        else:
            outcome = _DIRECT_OUTCOME.get(call.result.name, "CR_LATER")
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
