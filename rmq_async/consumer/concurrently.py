"""Concurrent consumption (Java ``ConsumeMessageConcurrentlyService``), asyncio-style.

Pulled messages are cut into batches of ``consume_batch_max_size`` and put on one unbounded memory
stream (the process queues' thresholds bound it); ``concurrency`` worker tasks take batches and await
the ``async def`` handler. No task per message, no thread pool.

Results: SUCCESS acks up to ``ctx.ack_index`` (default: the whole batch); RECONSUME_LATER retries
from ``ctx.ack_index + 1`` when the handler set it (only the failed tail), else the whole batch, as in
Java. A handler that raises counts as RECONSUME_LATER; one that runs past the consume timeout is
cancelled and its batch sent back. Failed messages are sent back to the broker (CONSUMER_SEND_MSG_BACK
with the context's delay level); if that fails, they are sent to ``%RETRY%group`` by the client's inner
producer; if that fails too, they stay in the process queue and are consumed again locally after a delay.
Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import RocketMQError
from ..protocol import headers as H
from ..protocol.codes import Prop
from ..protocol.message import Message, MessageExt
from ..protocol.mq import MessageQueue
from .process_queue import ProcessQueue

if TYPE_CHECKING:
    from .push import PushConsumer

__all__ = ["ConcurrentConsumeService", "ConsumeContext", "ConsumeResult", "Handler"]

log = logging.getLogger("rmq_async.consumer")


class ConsumeResult(Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(slots=True)
class ConsumeContext:
    """``ConsumeConcurrentlyContext``: set ``ack_index`` and ``delay_level`` to steer the result."""

    mq: MessageQueue
    ack_index: int | None = None
    #: 0: the broker picks (3 + reconsume times); -1: straight to the DLQ; N: delay level N
    delay_level: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[list[MessageExt], ConsumeContext], Awaitable["ConsumeResult | None"]]


def reset_retry_topic(msgs: Sequence[MessageExt], retry_topic: str) -> None:
    """``resetRetryAndNamespace``: a message from ``%RETRY%group`` is shown under its original topic."""
    for m in msgs:
        if m.topic == retry_topic:
            original = m.get_property(Prop.RETRY_TOPIC)
            if original:
                m.topic = original


class ConcurrentConsumeService:
    def __init__(self, consumer: PushConsumer, handler: Handler | None) -> None:
        self.c = consumer
        self.handler = handler
        self._send: MemoryObjectSendStream[tuple[ProcessQueue, list[MessageExt]]] | None = None
        self.running = 0
        #: running handlers' cancel scopes and start times: the consume timeout is their deadline
        self.scopes: dict[anyio.CancelScope, float] = {}
        self._idle = anyio.Event()
        self._idle.set()

    def set_timeout(self, timeout: float) -> None:
        """Apply a new consume timeout to the handlers already running."""
        for scope, start in self.scopes.items():
            scope.deadline = start + timeout

    async def wait_idle(self) -> None:
        """Wait until no handler is running."""
        while self.running > 0:
            await self._idle.wait()

    # -- intake -------------------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        # one stream item per pulled batch: the worker cuts it into consume batches, which keeps the
        # per-message cost (stream hand-offs, wake-ups) off the hot path
        if self._send is not None:
            self._send.send_nowait((pq, msgs))

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the workers; each owns a clone of the receive side, so closing the send side ends them."""
        send, recv = anyio.create_memory_object_stream[tuple[ProcessQueue, list[MessageExt]]](float("inf"))
        self._send = send
        with recv:
            for _ in range(self.c.config.concurrency):
                tg.start_soon(self._worker, recv.clone())

    def close(self) -> None:
        if self._send is not None:
            self._send.close()

    async def _worker(self, recv: MemoryObjectReceiveStream[tuple[ProcessQueue, list[MessageExt]]]) -> None:
        n = self.c.config.consume_batch_max_size
        with recv:
            async for pq, msgs in recv:
                for i in range(0, len(msgs), n):
                    if pq.dropped or self.c.stopping:
                        break
                    await self.consume(pq, msgs[i : i + n])

    # -- one batch ----------------------------------------------------------------------------------

    async def consume(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        assert self.handler is not None
        c = self.c
        reset_retry_topic(batch, c.retry_topic)
        now_ms = str(int(time.time() * 1000))
        for m in batch:
            m.set_property(Prop.CONSUME_START_TIMESTAMP, now_ms)
        ctx = ConsumeContext(pq.mq)
        result: ConsumeResult | None
        timed_out = False
        self.running += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        t0 = time.perf_counter()
        start = anyio.current_time()
        with anyio.CancelScope(deadline=start + c.deadlines.timeout) as scope:
            self.scopes[scope] = start
            try:
                await c.hooks_before(batch, ctx)
                result = await self.handler(batch, ctx)
                if result is None:
                    result = ConsumeResult.SUCCESS
                elif not isinstance(result, ConsumeResult):
                    log.error(
                        "handler of group %s returned %r, not a ConsumeResult: reconsume later",
                        c.group,
                        result,
                    )
                    result = ConsumeResult.RECONSUME_LATER
            except Exception:
                log.exception(
                    "handler of group %s raised on %s (msg ids %s): reconsume later",
                    c.group,
                    pq.mq,
                    [m.msg_id for m in batch],
                )
                result = ConsumeResult.RECONSUME_LATER
            finally:
                del self.scopes[scope]
                self.running -= 1
                if self.running == 0:
                    self._idle.set()
        if scope.cancelled_caught:
            timed_out = True
            log.warning(
                "handler of group %s ran past the consume timeout (%.1fs) on %s: sent back %s",
                c.group,
                c.deadlines.timeout,
                pq.mq,
                [m.msg_id for m in batch],
            )
            result = ConsumeResult.RECONSUME_LATER
            ctx.ack_index = None
        assert result is not None
        c.stats.consumed(
            pq.mq.topic, len(batch), time.perf_counter() - t0, ok=result is ConsumeResult.SUCCESS
        )
        await c.hooks_after(batch, ctx, result)
        if pq.dropped and not timed_out:
            # the queue moved to another member while we consumed: it will redeliver; don't ack
            return
        await self.process_result(pq, batch, result, ctx)

    async def process_result(
        self, pq: ProcessQueue, batch: list[MessageExt], result: ConsumeResult, ctx: ConsumeContext
    ) -> None:
        n = len(batch)
        if result is ConsumeResult.SUCCESS:
            ack = n - 1 if ctx.ack_index is None else max(-1, min(ctx.ack_index, n - 1))
        else:
            ack = -1 if ctx.ack_index is None else max(-1, min(ctx.ack_index, n - 1))
        failed = batch[ack + 1 :]
        keep: list[MessageExt] = []
        if failed:
            if self.c.config.clustering:
                for m in failed:
                    if not await self.c.send_back(m, ctx.delay_level):
                        m.reconsume_times += 1
                        keep.append(m)
            else:
                for m in failed:
                    log.warning("broadcasting: message %s failed and is dropped (as in Java)", m.msg_id)
        done = [m for m in batch if m not in keep] if keep else batch
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            self.c.offset_store.update(pq.mq, offset, increase_only=True)
        if keep:
            self.c.retry_locally(pq, keep)


async def send_back(c: PushConsumer, m: MessageExt, delay_level: int) -> bool:
    """Send a failed message back for a later retry; False if every path failed."""
    client = c.client
    try:
        addr = await client.master_addr(m.broker_name, m.topic)
        h = H.ConsumerSendMsgBackRequestHeader(
            offset=m.commit_log_offset,
            group=c.group,
            delay_level=delay_level,
            origin_msg_id=m.msg_id,
            origin_topic=m.topic,
            unit_mode=False,
            max_reconsume_times=c.max_reconsume_times,
            bname=m.broker_name,
        )
        await client.api.consumer_send_msg_back(addr, h, client.timing.request_timeout)
        c.stats.sent_back += 1
        return True
    except RocketMQError as exc:
        log.warning("send-back of %s failed (%s): falling back to a send to %s", m.msg_id, exc, c.retry_topic)
    try:
        props = dict(m.properties)
        origin = props.get(Prop.ORIGIN_MESSAGE_ID) or m.msg_id
        props[Prop.ORIGIN_MESSAGE_ID] = origin
        props[Prop.RETRY_TOPIC] = m.topic
        props[Prop.RECONSUME_TIME] = str(m.reconsume_times + 1)
        props[Prop.MAX_RECONSUME_TIMES] = str(c.max_reconsume_times)
        props.pop("TRAN_MSG", None)
        props.pop(Prop.DELAY_TIME_LEVEL, None)
        msg = Message(c.retry_topic, m.body, properties=props, flag=m.flag, delay_level=3 + m.reconsume_times)
        await c.inner_producer.send(msg)
        c.stats.sent_back += 1
        return True
    except (RocketMQError, ValueError) as exc:
        log.error("fallback send of %s to %s failed (%s): retrying locally", m.msg_id, c.retry_topic, exc)
        return False
