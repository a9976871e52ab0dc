"""The offsets side of a :class:`~rmq_async.consumer.lite_pull.LitePullConsumer`: asking brokers for a
queue's min, max and by-time offsets (one queue or many at once, as aiokafka's ``beginning_offsets`` /
``end_offsets`` / ``offsets_for_times``), seeking, and committing consume offsets into the offset
store (Java ``DefaultLitePullConsumerImpl``: ``seek``, ``commit``, ``committed``). One is made per
run of the facade, given the run's queue table, poll buffer, client instance and offset store; the
facade's methods of the same names delegate to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

import anyio

from ..config import Timing
from ..errors import ClientError, ConfigError
from ..protocol.mq import MessageQueue
from .broker_offsets import BrokerOffsets
from .offset_store import RemoteOffsetStore
from .poll_buffer import PollBuffer
from .process_queue import PollState, ProcessQueue
from .queues import QueueTable
from .remote import Remote

__all__ = ["LiteOffsets"]

log = logging.getLogger("rmq_async.consumer.lite")


class LiteOffsets:
    """``name_in``: a queue as the user names it -> as the broker does (the namespace);
    ``start_pull``: start a pull loop for a queue (after a seek cancelled the previous one);
    ``start_offset``: where a queue without a committed offset starts (the rebalancer's rule)."""

    def __init__(
        self,
        *,
        table: QueueTable,
        buffer: PollBuffer,
        client: Remote,
        store: RemoteOffsetStore,
        timing: Timing,
        name_in: Callable[[MessageQueue], MessageQueue],
        start_pull: Callable[[ProcessQueue], None],
        start_offset: Callable[[MessageQueue], Awaitable[int]],
    ) -> None:
        self.table = table
        self.buffer = buffer
        self.broker = BrokerOffsets(client, timing.request_timeout)
        self._offset_store = store
        self.timing = timing
        self._in = name_in
        self._start_pull = start_pull
        self._start_offset = start_offset
        #: when the consume offsets were last copied into the offset store (auto commit)
        self.last_commit = time.monotonic()

    def queues(self) -> dict[MessageQueue, PollState]:
        return {mq: self.buffer.state(pq) for mq, pq in self.table.pqs.items()}

    # -- seeking ----------------------------------------------------------------------------------------

    def owned(self, mq: MessageQueue) -> ProcessQueue:
        """The process queue of ``mq`` (as the user names it); ClientError when not owned."""
        pq = self.table.pqs.get(self._in(mq))
        if pq is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        return pq

    async def beginning_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The min offset of each queue (as aiokafka's ``beginning_offsets``), asked concurrently."""
        return await self.broker.per_queue(queues, self.min_offset)

    async def end_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The max offset of each queue: the offset the next message will get (``end_offsets``)."""
        return await self.broker.per_queue(queues, self.max_offset)

    async def offsets_for_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """For each queue, :meth:`offset_for_timestamp` at its timestamp (milliseconds since the epoch),
        asked concurrently (as aiokafka's ``offsets_for_times``, which answers offsets only here)."""
        return await self.broker.per_queue(
            timestamps, lambda mq: self.offset_for_timestamp(mq, timestamps[mq])
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first offset still stored (the broker's min offset)."""
        return await self.broker.min_offset(self._in(mq))

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the queue's next message will get (the broker's max offset)."""
        return await self.broker.max_offset(self._in(mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The broker's answer to SEARCH_OFFSET_BY_TIMESTAMP for ``mq`` at ``timestamp_ms``, as Java's
        ``offsetForTimestamp``: a 5.x broker answers the first offset stored at or after it, a 4.9.8
        broker the offset whose store time is nearest (it may be an older message)."""
        return await self.broker.offset_for_timestamp(self._in(mq), timestamp_ms)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next; buffered messages of it are discarded. The offset must lie
        in [min offset, max offset] (checked with the broker, as Java does)."""
        self.owned(mq)
        lo = await self.min_offset(mq)
        hi = await self.max_offset(mq)
        if not lo <= offset <= hi:
            raise ConfigError(f"seek offset {offset} of {mq} is outside the queue's range [{lo}, {hi}]")
        self.reset_to(self.owned(mq), offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`min_offset` next."""
        self.owned(mq)
        self.reset_to(self.owned(mq), await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`max_offset` next: only messages sent from now on."""
        self.owned(mq)
        self.reset_to(self.owned(mq), await self.max_offset(mq))

    def reset_to(self, pq: ProcessQueue, offset: int) -> None:
        """Read ``pq`` from ``offset`` next (no range check): its buffered batches are discarded and a
        new pull loop started."""
        self.buffer.discard(pq)
        pq.next_offset = self.buffer.state(pq).consume_offset = offset
        if pq.scope is not None:
            pq.scope.cancel()  # the running pull (maybe long-polling) is stale
        self._start_pull(pq)

    async def seek_to_committed(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`committed` offset next, or where a queue without one starts
        (``consume_from_where``)."""
        pq = self.owned(mq)
        offset = await self.committed(mq)
        if offset is None:
            offset = await self._start_offset(pq.mq)
        self.reset_to(pq, offset)

    def position(self, mq: MessageQueue) -> int:
        """The consume offset of ``mq``: the offset after the last message poll() returned."""
        return self.buffer.state(self.owned(mq)).consume_offset

    def highwater(self, mq: MessageQueue) -> int | None:
        """The broker's max offset of ``mq`` as its last pull answer said (aiokafka's ``highwater``: no
        I/O), None before one answered."""
        off = self.owned(mq).max_offset
        return off if off >= 0 else None

    # -- committing -------------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None, *, sync: bool = False) -> None:
        """Commit the consume offsets of every owned queue (or ``offsets``) to the offset store's
        memory; the persist timer writes them to the brokers. ``sync=True`` writes them now."""
        mqs = self.commit_memory(offsets)
        if sync:
            await self._offset_store.persist_all(mqs, sync=True)

    def commit_memory(self, offsets: Mapping[MessageQueue, int] | None) -> list[MessageQueue]:
        """The consume offsets of every owned queue (or ``offsets``) into the store's memory."""
        self.last_commit = time.monotonic()
        store = self._offset_store
        if offsets is None:
            items = {mq: st.consume_offset for mq, st in self.queues().items()}
        else:
            # as Java's commit(Map): only queues this consumer owns (another member's, or one just
            # rebalanced away, must not be overwritten), and no negative offset
            items = {}
            for m, off in offsets.items():
                mq = self._in(m)
                if mq not in self.table.pqs or off < 0:
                    log.warning("commit of %s at %d ignored: not an owned queue or a negative offset", m, off)
                    continue
                items[mq] = off
        for mq, off in items.items():
            store.update(mq, off, increase_only=False)
        return list(items)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The committed offset of ``mq``: the one committed in this consumer's memory (not yet written by
        the persist timer), else the broker's (None: never committed). As Java's ``committed``
        (``MEMORY_FIRST_THEN_STORE``), and without overwriting a pending commit with the broker's value."""
        mq = self._in(mq)
        local = self._offset_store.read_memory(mq)
        if local >= 0:
            return local
        return await self._offset_store.query_store(mq)

    async def persist_loop(self) -> None:
        """The persist timer (``persistConsumerOffsetInterval``)."""
        while True:
            await anyio.sleep(self.timing.persist_interval)
            await self._offset_store.persist_all(list(self.table.pqs))
