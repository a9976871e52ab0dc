"""The ``async for`` way to consume: code that drives its own loop settles each delivery.

    async with consumer.deliveries() as stream:
        async for d in stream:
            await handle(d.message)
            await d.ack()            # or: await d.retry(delay_level=0)

An unsettled delivery holds back its queue's committed offset (it stays in the process queue), is
sent back when the consume timeout passes (the expired-message cleaner), and is retried if the
``async with`` block is left while it is still unsettled. Same machinery as the handler path; the
message trace and OpenTelemetry see a delivery as a handler call of one message, from its hand-out to
its settling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import ClientError
from ..protocol.codes import Prop
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .context import ConsumerContext
from .observe import HandlerObserver
from .process_queue import ProcessQueue
from .sendback import reset_retry_topic
from .types import EXPIRED_DELAY_LEVEL, ConsumeContext, ConsumeResult

__all__ = ["Delivery", "DeliveryStream", "Settle"]

#: how a consume service settles a delivery: (queue, [message], result, context)
Settle = Callable[[ProcessQueue, list[MessageExt], ConsumeResult, ConsumeContext], Awaitable[None]]

log = logging.getLogger("rmq_async.consumer")


class Delivery:
    """One message handed to ``async for`` code. Settle it with :meth:`ack` or :meth:`retry`."""

    __slots__ = {
        "_key": None,
        "_obs": None,
        "_pq": None,
        "_stream": None,
        "message": "The message (MessageExt: body, keys, tags, properties, queue offset, reconsume times).",
        "settled": "True once ack() or retry() settled it (or the consume timeout did).",
    }

    def __init__(self, stream: DeliveryStream, pq: ProcessQueue, message: MessageExt) -> None:
        self._stream = stream
        self._pq = pq
        self.message: MessageExt = message
        self.settled = False
        self._key: int | None = None
        # what the trace and OpenTelemetry saw of its hand-out (None: nothing observes)
        self._obs: tuple[tuple[HandlerObserver, object], ...] | None = None

    @property
    def queue(self) -> MessageQueue:
        """The queue the message came from (as the broker names it)."""
        return self._pq.mq

    def __repr__(self) -> str:
        m = self.message
        return f"Delivery({m.msg_id} {self._pq.mq} offset={m.queue_offset} settled={self.settled})"

    async def ack(self) -> None:
        """The message was processed: let the queue's offset move past it."""
        await self._stream.settle(self, ConsumeResult.SUCCESS, 0)

    async def retry(self, delay_level: int = 0) -> None:
        """Consume the message again later (sent back with ``delay_level``; 0 lets the broker choose)."""
        if not isinstance(delay_level, int) or isinstance(delay_level, bool):
            raise TypeError(f"delay_level must be an int, not {delay_level!r}")
        await self._stream.settle(self, ConsumeResult.RECONSUME_LATER, delay_level)


class DeliveryStream:
    """The deliveries of one run: its consume service submits pulled messages and settles what the
    loop's code (or the consume timeout) decided."""

    def __init__(self, ctx: ConsumerContext, settle: Settle) -> None:
        self.c = ctx
        self._settle = settle
        send, recv = anyio.create_memory_object_stream[Delivery](float("inf"))
        self._send: MemoryObjectSendStream[Delivery] = send
        self._recv: MemoryObjectReceiveStream[Delivery] = recv
        self.unsettled: set[Delivery] = set()

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self._send.send_nowait(Delivery(self, pq, m))

    def close(self) -> None:
        self._send.close()
        self._recv.close()

    def __aiter__(self) -> DeliveryStream:
        return self

    async def __anext__(self) -> Delivery:
        while True:
            try:
                d = await self._recv.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
            if d._pq.dropped:
                continue
            reset_retry_topic([d.message], self.c.retry_topic, self.c.namespace)
            d.message.set_property(Prop.CONSUME_START_TIMESTAMP, str(int(time.time() * 1000)))
            d._key = self.c.deadlines.add(lambda d=d: self._expire(d))  # type: ignore[misc]
            self.unsettled.add(d)
            # traced as a handler call of one message, from hand-out to settling
            if self.c.observation.observers:
                d._obs = self.c.observation.before([d.message])
            return d

    def _expire(self, d: Delivery) -> None:
        if not d.settled:
            self.c.start_soon(self._send_back_expired, d)

    async def _send_back_expired(self, d: Delivery) -> None:
        # the loop's code may have settled it between the timeout and this task's start: then it
        # is settled already, and raising here would take the consumer's task group down
        if d.settled:
            return
        log.warning("delivery %s was not settled within the consume timeout: sending it back", d)
        await self.settle(d, ConsumeResult.RECONSUME_LATER, EXPIRED_DELAY_LEVEL)

    async def settle(self, d: Delivery, result: ConsumeResult, delay_level: int) -> None:
        if d.settled:
            raise ClientError(f"{d} is already settled")
        d.settled = True
        self.unsettled.discard(d)
        if d._key is not None:
            self.c.deadlines.discard(d._key)
        self.c.stats.consumed(d._pq.mq.topic, 1, 0.0, ok=result is ConsumeResult.SUCCESS)
        if d._obs is not None:
            self.c.observation.after(d._obs, [d.message], result)
            d._obs = None
        if d._pq.dropped:
            return
        ctx = ConsumeContext(d._pq.mq, delay_level=delay_level)
        await self._settle(d._pq, [d.message], result, ctx)

    async def release_unsettled(self) -> None:
        """Leaving the loop: every unsettled delivery is retried, so none is lost."""
        for d in list(self.unsettled):
            with anyio.CancelScope(shield=True):
                await self.settle(d, ConsumeResult.RECONSUME_LATER, 0)
