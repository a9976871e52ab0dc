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

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

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
        self.running = 0  # handlers running now
        self.active = 0  # pulled batches a worker has started and not finished
        #: running handlers' cancel scopes and start times: the consume timeout is their deadline
        self.scopes: dict[anyio.CancelScope, float] = {}
        self.timeout = consumer.timing.consume_timeout
        self._tver = 0  # bumped by set_timeout
        self._idle: anyio.Event | None = None  # made only while someone waits for idleness

    def set_timeout(self, timeout: float) -> None:
        """Apply a new consume timeout to the handlers already running."""
        self.timeout = timeout
        self._tver += 1
        for scope, start in self.scopes.items():
            scope.deadline = start + timeout

    async def wait_idle(self) -> None:
        """Wait until no worker is inside a pulled batch."""
        while self.active > 0:
            if self._idle is None:
                self._idle = anyio.Event()
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
        with recv:
            async for pq, msgs in recv:
                if pq.dropped or self.c.stopping:
                    continue  # not started: at shutdown only work already begun is finished
                if pq.mq.topic == self.c.retry_topic:  # only retry queues hold retry copies
                    reset_retry_topic(msgs, self.c.retry_topic)
                # a started pulled batch is finished even during a graceful stop (bounded by the
                # shutdown timeout): stopping in its middle would leave a gap below batches other
                # workers finished, and the committed offset would stay at the gap
                self.active += 1
                try:
                    i = 0
                    while i < len(msgs) and not pq.dropped:
                        i = await self._consume_from(pq, msgs, i)
                finally:
                    self.active -= 1
                    if self.active == 0 and self._idle is not None:
                        self._idle.set()
                        self._idle = None

    # -- consume batches ------------------------------------------------------------------------------

    async def _consume_from(self, pq: ProcessQueue, msgs: list[MessageExt], i: int) -> int:
        """Consume ``msgs[i:]`` batch by batch under ONE cancel scope whose deadline is moved to each
        batch's consume deadline (a scope per message costs more than the rest of the path). Returns
        the index to continue from: past the end, or past a batch that timed out.

        Plain successes are acknowledged in small groups (whatever finished within about a
        millisecond), so the process queue and the offset store are touched once per group, not once
        per message; anything else is settled at once."""
        ok: list[MessageExt] = []
        try:
            return await self._consume_loop(pq, msgs, i, ok)
        finally:
            if ok:
                self._ack(pq, ok)

    def _ack(self, pq: ProcessQueue, ok: list[MessageExt]) -> None:
        c = self.c
        c.stats.consumed(pq.mq.topic, len(ok), 0.0, ok=True)
        if not pq.dropped:
            offset = pq.remove(ok)
            if offset >= 0:
                c.offset_store.update(pq.mq, offset, increase_only=True)
        ok.clear()

    async def _consume_loop(
        self, pq: ProcessQueue, msgs: list[MessageExt], i: int, ok: list[MessageExt]
    ) -> int:
        assert self.handler is not None
        c = self.c
        handler = self.handler
        n = c.config.consume_batch_max_size
        loop_time = asyncio.get_running_loop().time
        hooks = bool(c.before_hooks or c.after_hooks)
        done: tuple[list[MessageExt], ConsumeResult, ConsumeContext] | None = None
        batch: list[MessageExt] = []
        ok_since = 0.0
        scopes = self.scopes
        dl = math.inf  # the scope's deadline as last set here (read back after a set_timeout)
        tver = self._tver
        with anyio.CancelScope() as scope:
            while i < len(msgs):
                if pq.dropped:
                    return len(msgs)
                batch = msgs[i : i + n]
                ctx = ConsumeContext(pq.mq)
                start = loop_time()
                scopes[scope] = start
                if tver != self._tver:  # set_timeout moved the deadlines of running handlers
                    tver, dl = self._tver, scope.deadline
                # the deadline moves only when it would fall short of this batch's own deadline, and
                # then a little further (slack): at most one timer re-arm per slack window, not two per
                # message; a batch is never cancelled early, at most ``slack`` late
                need = start + self.timeout
                if dl < need or dl == math.inf:
                    dl = scope.deadline = need + min(0.05, self.timeout / 100)
                self.running += 1
                try:
                    if hooks:
                        await c.hooks_before(batch, ctx)
                    result = await handler(batch, ctx)
                    if result is None:
                        result = ConsumeResult.SUCCESS
                    elif not isinstance(result, ConsumeResult):
                        log.error("handler of group %s returned %r, not a ConsumeResult", c.group, result)
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
                    del scopes[scope]
                    self.running -= 1
                i += n
                if scope.cancel_called:
                    # the deadline fired just as the handler returned: its result stands, but nothing
                    # may be awaited inside a cancelled scope: finish it outside
                    done = (batch, result, ctx)
                    break
                now = loop_time()
                if result is ConsumeResult.SUCCESS and ctx.ack_index is None and not c.after_hooks:
                    # the common case finishes without a suspension point: the deadline cannot fire
                    if not ok:
                        ok_since = now
                    ok += batch
                    if now - ok_since > 0.001:
                        self._ack(pq, ok)
                    continue
                if ok:
                    self._ack(pq, ok)
                dl = scope.deadline = math.inf  # send-backs and hooks must not be cut by the deadline
                await self._finish(pq, batch, result, ctx, now - start)
        if ok:
            self._ack(pq, ok)
        if done is not None:
            await self._finish(pq, *done, 0.0)
            return i
        if scope.cancelled_caught:
            log.warning(
                "handler of group %s ran past the consume timeout (%.1fs) on %s: sent back %s",
                c.group,
                self.timeout,
                pq.mq,
                [m.msg_id for m in batch],
            )
            await self._finish(
                pq, batch, ConsumeResult.RECONSUME_LATER, ConsumeContext(pq.mq), self.timeout, True
            )
            return i + n
        return i

    async def _finish(
        self,
        pq: ProcessQueue,
        batch: list[MessageExt],
        result: ConsumeResult,
        ctx: ConsumeContext,
        rt: float,
        timed_out: bool = False,
    ) -> None:
        c = self.c
        c.stats.consumed(pq.mq.topic, len(batch), rt, ok=result is ConsumeResult.SUCCESS)
        if c.after_hooks:
            await c.hooks_after(batch, ctx, result)
        if pq.dropped and not timed_out:
            # the queue moved to another member while we consumed: it will redeliver; don't ack
            return
        await self.process_result(pq, batch, result, ctx)

    async def consume(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        """Consume one batch now (local retries and tests)."""
        reset_retry_topic(batch, self.c.retry_topic)
        i = 0
        while i < len(batch) and not pq.dropped:
            i = await self._consume_from(pq, batch, i)

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
