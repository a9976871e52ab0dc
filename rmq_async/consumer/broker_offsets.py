"""A queue's offsets as its broker tells them (GET_MIN_OFFSET, GET_MAX_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP, asked of the master), one queue or many at once (as aiokafka's
``beginning_offsets`` / ``end_offsets`` / ``offsets_for_times``). Shared by the lite pull consumer's
offsets side and the push consumer's control side; the names are the broker's (namespace included)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import anyio

from ..protocol.mq import MessageQueue
from .remote import Remote

__all__ = ["BrokerOffsets"]


class BrokerOffsets:
    def __init__(self, client: Remote, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    async def _addr(self, mq: MessageQueue) -> str:
        return await self._client.master_addr(mq.broker_name, mq.topic)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first offset still stored."""
        return await self._client.api.get_min_offset(await self._addr(mq), mq, self._timeout)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the queue's next message will get."""
        return await self._client.api.get_max_offset(await self._addr(mq), mq, self._timeout)

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (5.x: the first offset stored at or after it; 4.9.8: the
        nearest)."""
        return await self._client.api.search_offset(await self._addr(mq), mq, timestamp_ms, self._timeout)

    async def per_queue(
        self, queues: Iterable[MessageQueue], ask: Callable[[MessageQueue], Awaitable[int]]
    ) -> dict[MessageQueue, int]:
        """``ask`` of every queue, concurrently; the answers in the queues' order (duplicates once)."""
        mqs = list(dict.fromkeys(queues))
        out: dict[MessageQueue, int] = {}

        async def one(mq: MessageQueue) -> None:
            out[mq] = await ask(mq)

        async with anyio.create_task_group() as tg:
            for mq in mqs:
                tg.start_soon(one, mq)
        return {mq: out[mq] for mq in mqs}
