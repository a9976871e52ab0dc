"""The trace dispatcher (Java ``AsyncTraceDispatcher``): trace contexts queued without waiting, sent
in batches by one task through an inner producer to the trace topic.

Strategy: :meth:`TraceDispatcher.append` is synchronous and never waits: the queue is bounded
(``TraceConfig.queue_size``), a context that does not fit is dropped and counted (``dropped``), so
consumption and sends never slow down for tracing. :meth:`TraceDispatcher.run` (a task in the client's
or the consumer's task group) wakes when a batch is full or after ``flush_interval``, encodes up to
``batch_size`` contexts, groups them by (traced topic, trace topic) as Java does, joins their records
into messages of at most ``max_message_size`` characters whose keys are the traced msg ids and keys,
and sends each to a queue of a broker that hosts the trace topic (any queue when the route names none).
When cancelled it flushes what is queued, bounded by ``flush_timeout`` and shielded. While records
keep coming faster than they can be sent, it rests after each round so that it takes at most
``loop_share`` of the event loop's time (measured as wall time, the send's wait included): on one
thread every microsecond it spends is taken from consumption, so an overloaded trace drops more records
rather than slowing the consumer (Java's dispatcher runs on threads of its own).

The producer comes from a factory (``TraceSender``), so this module does not import the producer
(which imports it).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio

from ...config import TraceConfig
from ...protocol.message import Message
from ...protocol.mq import MessageQueue
from .encoder import RMQ_SYS_TRACE_TOPIC, TraceContext, encode, trace_producer_group

__all__ = ["LazyRecord", "TraceDispatcher", "TraceSender", "next_trace_group"]

log = logging.getLogger("rmq_async.trace")

_counter = itertools.count(1)


def next_trace_group(group: str, kind: str) -> str:
    """The next inner trace producer's group (``genGroupNameForTrace``; a per-process counter)."""
    return trace_producer_group(group, kind, next(_counter))


class LazyRecord(Protocol):
    """A queued record whose context is built when it is sent (a consumed batch's SubBefore/After)."""

    def context(self) -> TraceContext | None: ...


class TraceSender(Protocol):
    """What the dispatcher needs of its inner producer (a :class:`~rmq_async.producer.Producer`)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def queues(self, topic: str) -> list[MessageQueue]: ...

    async def send(self, msg: Message, *, queue: MessageQueue | None = None) -> Any: ...


class TraceDispatcher:
    __slots__ = (
        "_batch",
        "_closed",
        "_closing",
        "_counter",
        "_done",
        "_max_size",
        "_queue",
        "_size",
        "_wake",
        "config",
        "dropped",
        "failed",
        "group",
        "kind",
        "sent",
        "topic",
    )

    def __init__(self, group: str, kind: str, config: TraceConfig) -> None:
        self.config = config
        self.group = group
        self.kind = kind  # PRODUCE or CONSUME
        self.topic = config.topic or RMQ_SYS_TRACE_TOPIC
        self._queue: deque[TraceContext | LazyRecord] = deque()
        self._size = config.queue_size
        self._batch = min(config.batch_size, 20)  # Java caps batchNum at 20
        self._max_size = config.max_message_size
        self._wake = anyio.Event()
        self._counter = itertools.count()
        self._closed = False
        self._closing = False
        self._done: anyio.Event | None = None
        #: contexts dropped because the queue was full
        self.dropped = 0
        #: trace messages sent, and sends that failed (logged, not retried)
        self.sent = 0
        self.failed = 0

    def __len__(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        return len(self._queue) >= self._size or self._closed

    def append(self, ctx: TraceContext) -> bool:
        """Queue ``ctx``; False (dropped, counted) when the queue is full or the dispatcher closed."""
        return self.append_record(ctx)

    def append_record(self, record: TraceContext | LazyRecord) -> bool:
        """Queue a context or a record made into one when sent (``context()``: None to skip it)."""
        q = self._queue
        if len(q) >= self._size or self._closed:
            self.dropped += 1
            return False
        q.append(record)
        if len(q) >= self._batch:
            self._wake.set()
        return True

    async def run(self, make_sender: Callable[[str], TraceSender]) -> None:
        """Send until cancelled, then flush (bounded, shielded)."""
        self._closed = self._closing = False  # a consumer started again
        sender = make_sender(next_trace_group(self.group, self.kind))
        started = False
        done = self._done = anyio.Event()
        share = self.config.loop_share
        pause = 0.0 if share >= 1 else 1 / share - 1
        try:
            await sender.start()
            started = True
            while not self._closing:
                with anyio.move_on_after(self.config.flush_interval):
                    await self._wake.wait()
                self._wake = anyio.Event()
                while self._queue and not self._closing:
                    t0 = time.perf_counter()
                    await self._send_batch(sender)
                    if pause:  # the loop's share: a round that took t is followed by a rest
                        await anyio.sleep((time.perf_counter() - t0) * pause)
        finally:
            self._closed = True
            with anyio.move_on_after(self.config.flush_timeout, shield=True):
                if started:
                    while self._queue:
                        await self._send_batch(sender)
                    await sender.stop()
            if self._queue:
                self.dropped += len(self._queue)
                log.warning("trace: %d contexts not sent at shutdown", len(self._queue))
                self._queue.clear()
            done.set()

    async def close(self) -> None:
        """Stop taking contexts and wait until :meth:`run` has flushed and returned (bounded)."""
        self._closing = True
        self._wake.set()
        done = self._done
        if done is not None:
            with anyio.move_on_after(self.config.flush_timeout + 1.0, shield=True):
                await done.wait()

    async def _send_batch(self, sender: TraceSender) -> None:
        q = self._queue
        batch = [q.popleft() for _ in range(min(self._batch, len(q)))]
        grouped: dict[str, list[tuple[str, list[str]]]] = {}
        for entry in batch:
            ctx = entry if isinstance(entry, TraceContext) else entry.context()
            if ctx is None:
                continue
            # a context without a region (a message from a 4.x broker, which stores no MSG_REGION) is
            # sent with "null" there, as the 4.9.8 dispatcher does; the newest Java one skips it, which
            # would lose every consume record of a 4.x cluster
            if not ctx.beans:
                continue
            grouped.setdefault(ctx.beans[0].topic or "", []).append(encode(ctx))
        for encoded in grouped.values():
            await self._flush(sender, encoded)

    async def _flush(self, sender: TraceSender, encoded: Sequence[tuple[str, list[str]]]) -> None:
        buf: list[str] = []
        n = 0
        keys: dict[str, None] = {}
        for data, ks in encoded:
            buf.append(data)
            n += len(data)
            keys.update(dict.fromkeys(ks))
            if n >= self._max_size:
                await self._send(sender, "".join(buf), list(keys))
                buf, n, keys = [], 0, {}
        if buf:
            await self._send(sender, "".join(buf), list(keys))

    async def _send(self, sender: TraceSender, data: str, keys: list[str]) -> None:
        try:
            msg = Message(self.topic, data.encode("utf-8"), keys=[k for k in keys if k] or None)
            queue: MessageQueue | None = None
            try:
                queues = await sender.queues(self.topic)
            except Exception:  # no route yet: let the send look it up (the broker may create it)
                queues = []
            if queues:
                queue = queues[next(self._counter) % len(queues)]
            await sender.send(msg, queue=queue)
            self.sent += 1
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            self.failed += 1
            log.error("trace: sending trace data to %s failed: %s", self.topic, exc)
