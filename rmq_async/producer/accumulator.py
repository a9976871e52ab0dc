"""Automatic batching of concurrent small sends (Java 5.x ``ProduceAccumulator``, ``autoBatch``).

Strategy: sends that may share a batch (same topic, queue if one was given, ``WAIT`` and tag:
Java's ``AggregateKey``) and are each under ``batch_max_bytes`` join the open batch of their key.
No background task: the first send of a batch leads it; it waits until the batch holds
``batch_max_bytes`` or ``batch_max_delay`` has passed, closes it and sends it as one
SEND_BATCH_MESSAGE; the others wait for that. Each send then returns its own result: its UNIQ_KEY,
its offset message id and its queue offset (the batch's first plus its index: a batch is stored
in one queue, in order), or raises the batch's error. A leader cancelled while it waits still
sends the batch (shielded, bounded by the send timeout), so no follower is left without an
answer; a follower cancelled while it waits leaves its message in the batch (sent all the same,
as in Java). Over ``total_batch_max_bytes`` held at once, a send goes out on its own (Java:
``tryAddMessage`` fails, ``sendDirect``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import anyio

from ..client.api import SendResult
from ..protocol.codes import Prop
from ..protocol.message import Message, is_timer
from ..protocol.mq import MessageQueue

__all__ = ["ProduceAccumulator"]

#: ``send_batch(messages, queue, timeout)``: the producer's batch send
BatchSend = Callable[[list[Message], MessageQueue | None, float], Awaitable[SendResult]]
_Key = tuple[str, MessageQueue | None, bool, str | None]


class _Batch:
    __slots__ = ("done", "error", "full", "messages", "nbytes", "result")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.nbytes = 0
        self.full = anyio.Event()
        self.done = anyio.Event()
        self.result: SendResult | None = None
        self.error: BaseException | None = None

    def share(self, index: int) -> SendResult:
        """The result of message ``index`` (the batch's error raised)."""
        if self.error is not None:
            raise self.error
        res = self.result
        assert res is not None
        ids = res.msg_id.split(",")
        offset_ids = res.offset_msg_id.split(",")
        return dataclasses.replace(
            res,
            msg_id=ids[index] if len(ids) == len(self.messages) else res.msg_id,
            offset_msg_id=offset_ids[index] if len(offset_ids) == len(self.messages) else res.offset_msg_id,
            queue_offset=res.queue_offset + index,
            transaction_id=None,
        )


class ProduceAccumulator:
    """The open batches of one producer (see the module doc)."""

    def __init__(
        self, send_batch: BatchSend, *, max_delay: float, max_bytes: int, total_max_bytes: int
    ) -> None:
        self._send_batch = send_batch
        self._max_delay = max_delay
        self._max_bytes = max_bytes
        self._total_max_bytes = total_max_bytes
        self._open: dict[_Key, _Batch] = {}
        #: body bytes of the messages in open or sending batches
        self.held = 0

    def takes(self, msg: Message, topic: str) -> bool:
        """``canBatch``: small enough, room left, and not a message a batch cannot carry (delay
        level, timer, retry topic, half message, reply)."""
        props = msg.properties
        return (
            len(msg.body) < self._max_bytes
            and self.held < self._total_max_bytes
            and Prop.DELAY_TIME_LEVEL not in props
            and Prop.TRANSACTION_PREPARED not in props
            and Prop.MESSAGE_TYPE not in props
            and not is_timer(props)
            and not topic.startswith("%RETRY%")
        )

    async def send(self, msg: Message, queue: MessageQueue | None, timeout: float) -> SendResult:
        """Send ``msg`` in a batch; its own result."""
        key: _Key = (msg.topic, queue, msg.wait_store_msg_ok, msg.tags)
        batch = self._open.get(key)
        leader = batch is None
        if batch is None:
            batch = self._open[key] = _Batch()
        index = len(batch.messages)
        batch.messages.append(msg)
        batch.nbytes += len(msg.body)
        self.held += len(msg.body)
        if batch.nbytes >= self._max_bytes:
            self._close(key, batch)
        if not leader:
            await batch.done.wait()
            return batch.share(index)
        try:
            with anyio.move_on_after(self._max_delay):
                await batch.full.wait()
        finally:
            self._close(key, batch)
            with anyio.CancelScope(shield=True):
                await self._flush(batch, queue, timeout)
        return batch.share(index)

    def _close(self, key: _Key, batch: _Batch) -> None:
        """Take no more messages into ``batch`` (its leader sends it now)."""
        if self._open.get(key) is batch:
            del self._open[key]
        batch.full.set()

    async def _flush(self, batch: _Batch, queue: MessageQueue | None, timeout: float) -> None:
        try:
            batch.result = await self._send_batch(batch.messages, queue, timeout)
        except Exception as exc:
            batch.error = exc
        finally:
            self.held -= batch.nbytes
            batch.done.set()
