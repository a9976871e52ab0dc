"""A stand-in for the PushConsumer around an OrderlyConsumeService, for tests that drive the service on
its own: a plain namespace with what the service reads, broker lock requests answered by a stub that
grants every lock (clustering mode), and an offset table that records each commit."""

from __future__ import annotations

import types
from typing import Any

import anyio

from rmq_async.config import ConsumerConfig, Timing
from rmq_async.consumer.deadlines import DeadlineTracker
from rmq_async.consumer.offset_store import _MemoryTable
from rmq_async.consumer.push import PushConsumer
from rmq_async.consumer.stats import ConsumerStats
from rmq_async.protocol.mq import MessageQueue

__all__ = ["RecordingStore", "stub_consumer"]


class RecordingStore(_MemoryTable):
    """The in-memory offset table; records every commit with how many handler calls preceded it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls_before: list[int] = []  # set by the test: the handler's call list, by reference
        self.commits: list[tuple[int, int]] = []  # (offset, handler calls made before it)
        self.committed = anyio.Event()

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        self.commits.append((offset, len(self.calls_before)))
        self.committed.set()
        super().update(mq, offset, increase_only=increase_only)


def stub_consumer(timing: Timing) -> Any:
    async def master_addr(broker_name: str, topic: str | None = None) -> str:
        return "127.0.0.1:10911"

    async def lock_batch_mq(
        addr: str, group: str, client_id: str, mqs: list[MessageQueue], timeout: float
    ) -> set[MessageQueue]:
        return set(mqs)  # this member holds every lock it asks for

    async def unlock_batch_mq(*args: Any, **kwargs: Any) -> None:
        return None

    async def send(msg: Any) -> None:
        return None

    client = types.SimpleNamespace(
        client_id="127.0.0.1@review",
        master_addr=master_addr,
        api=types.SimpleNamespace(lock_batch_mq=lock_batch_mq, unlock_batch_mq=unlock_batch_mq),
    )
    c = types.SimpleNamespace(
        config=ConsumerConfig(group="g"),
        timing=timing,
        retry_topic="%RETRY%g",
        namespace=None,
        stats=ConsumerStats(),
        offset_store=RecordingStore(),
        before_hooks=[],
        after_hooks=[],
        stopping=False,
        group="g",
        max_reconsume_times=2**31 - 1,
        inner_producer=types.SimpleNamespace(send=send),
        deadlines=DeadlineTracker(timing.consume_timeout),
        pqs={},
        client=client,
        _deliveries=None,
    )
    c.hooks_before = types.MethodType(PushConsumer.hooks_before, c)
    c.hooks_after = types.MethodType(PushConsumer.hooks_after, c)
    return c
