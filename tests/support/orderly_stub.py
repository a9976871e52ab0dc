"""An OrderlyConsumeService on its own, for tests that drive it: a real consumer context whose client
grants every broker lock (clustering mode), an offset table that records each commit, and the queue
table's dict of owned queues."""

from __future__ import annotations

from rmq_async.config import Timing
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.orderly import OrderlyConsumeService
from rmq_async.consumer.orderly_locks import OrderlyLocks
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.types import Hook, OrderlyHandler
from rmq_async.protocol.mq import MessageQueue

from .consumer_context import RecordingStore, make_context

__all__ = ["OrderlyRig", "RecordingStore", "stub_consumer"]


class OrderlyRig:
    """What an orderly service runs on: ``ctx``, its recording ``offset_store``, the owned ``pqs``."""

    def __init__(self, timing: Timing) -> None:
        self.offset_store = RecordingStore()
        self.ctx: ConsumerContext = make_context(timing, store=self.offset_store, orderly=True)
        self.pqs: dict[MessageQueue, ProcessQueue] = {}

    @property
    def after_hooks(self) -> list[Hook]:
        return self.ctx.after_hooks

    def service(self, handler: OrderlyHandler | None) -> OrderlyConsumeService:
        """A service on new broker locks of :attr:`pqs` (``service.locks``)."""
        return OrderlyConsumeService(self.ctx, handler, OrderlyLocks(self.ctx, self.pqs))


def stub_consumer(timing: Timing) -> OrderlyRig:
    return OrderlyRig(timing)
