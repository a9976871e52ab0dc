"""QueueTable: the process queues a consumer owns, by MessageQueue. It is their only writer: it makes
them (with their flow-control limits), registers them when they start and drops them
(``removeUnnecessaryMessageQueue``). Everything else reads :attr:`QueueTable.pqs`.

What dropping a queue means beyond the table is asked of its :class:`QueueOwner` (the consume
service of a push consumer, the poll buffer of a lite pull consumer): stop consuming it (orderly:
wait for its running handler), and once its offset is persisted, let the next owner have it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from ..errors import RocketMQError
from ..protocol.mq import MessageQueue
from .context import ConsumerContext
from .process_queue import ProcessQueue

__all__ = ["QueueLocks", "QueueOwner", "QueueTable"]

log = logging.getLogger("rmq_async.consumer")


class QueueOwner(Protocol):
    """What consumes a table's queues (the queue side of a consume service)."""

    #: persist a dropped queue's offset synchronously (its next owner reads it at once)
    sync_drop: bool

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        """Stop consuming ``pq`` and mark it dropped; True when nothing runs on it any more."""


class QueueLocks(Protocol):
    """The broker locks a consumer takes on its queues before consuming them (orderly, clustering):
    a new queue is locked before its first pull, and released once dropped and persisted."""

    async def lock_new(self, pq: ProcessQueue) -> bool:
        """Take a newly assigned queue before its first pull; False: not ours yet."""

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        """A queue given up (dropped, its offset persisted, or never started): let the next owner
        have it."""


class QueueTable:
    """``owner``: what consumes the queues; ``locks``: the broker locks to release once a dropped
    queue's offset is persisted (orderly; None otherwise); ``make_queue``: makes a new process
    queue (default: the push consumer's thresholds); ``on_start``: called when a queue starts (its
    ``next_offset`` set), before its first pull; ``pqs``: the (empty) mapping to fill, when another
    part of the run reads it too (the orderly locks)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        owner: QueueOwner,
        *,
        locks: QueueLocks | None = None,
        make_queue: Callable[[MessageQueue], ProcessQueue] | None = None,
        on_start: Callable[[ProcessQueue], None] | None = None,
        pqs: dict[MessageQueue, ProcessQueue] | None = None,
    ) -> None:
        self.ctx = ctx
        self.pqs: dict[MessageQueue, ProcessQueue] = pqs if pqs is not None else {}
        self._owner = owner
        self._locks = locks
        self.make_queue: Callable[[MessageQueue], ProcessQueue] = make_queue or self._push_queue
        self._on_start = on_start

    # -- reading ------------------------------------------------------------------------------------

    def assignment(self) -> set[MessageQueue]:
        return {mq for mq, pq in self.pqs.items() if not pq.dropped}

    def count(self, topic: str) -> int:
        return len([m for m in self.pqs if m.topic == topic])

    # -- changes ------------------------------------------------------------------------------------

    def _push_queue(self, mq: MessageQueue) -> ProcessQueue:
        """The push consumer's limits: per queue, or a topic's limits shared by its queues."""
        cfg = self.ctx.config
        max_count = cfg.pull_threshold_for_queue
        max_mib = cfg.pull_threshold_size_for_queue
        n = max(1, self.count(mq.topic) + 1)
        if cfg.pull_threshold_for_topic > 0:
            max_count = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic > 0:
            max_mib = max(1, cfg.pull_threshold_size_for_topic // n)
        span = None if self.ctx.orderly else cfg.consume_concurrently_max_span  # [orderly] no span limit
        return ProcessQueue(mq, max_count=max_count, max_bytes=max_mib << 20, max_span=span)

    def start(self, pq: ProcessQueue) -> None:
        """Own ``pq`` (its ``next_offset`` set), before its first pull; its committed offset is the
        offset store's cell of the queue from now on. A queue the user paused starts paused."""
        pq.offset = self.ctx.offset_store.cell(pq.mq)
        pq.paused = self.ctx.pauses.covers(pq.mq)
        self.pqs[pq.mq] = pq
        if self._on_start is not None:
            self._on_start(pq)

    async def drop(self, mq: MessageQueue, *, offset: int | None = None) -> None:
        """``removeUnnecessaryMessageQueue``: stop the queue, persist its offset, forget it (and let
        its owner release it). ``offset`` replaces the committed offset first (an illegal pull
        offset, a reset from an admin tool) and is then persisted synchronously."""
        pq = self.pqs.pop(mq, None)
        if pq is None:
            return
        owner = self._owner
        idle = await owner.drop(pq, self.ctx.config.orderly_drop_wait)
        store = self.ctx.offset_store
        if offset is not None:
            # after the drop, as Java's resetOffset: a handler finishing during the wait must not
            # commit over the new offset
            store.update(mq, offset, increase_only=False)
        if offset is None and not self.ctx.config.auto_commit:
            # manual commit: what was consumed since the last commit() is not committed (the next
            # owner gets it again), nor kept for this member's return
            store.forget(mq)
        else:
            try:
                await store.persist(mq, sync=owner.sync_drop or offset is not None)
            except RocketMQError as exc:
                log.warning("persisting the offset of dropped %s failed: %s", mq, exc)
            store.remove(mq)
        if self._locks is not None:
            await self._locks.unlock_dropped(pq, idle)

    async def restart(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        """A seek: ``mq`` goes on from ``offset`` on a fresh process queue, owned at once (no
        rebalance in between, the broker lock kept); the caller starts its pull loop. The old one's
        pull loop is cancelled first (a pull carries the committed offset along) and it is dropped
        (orderly: a running handler waited for, as at a rebalance); its offset cell is forgotten, so
        the late results of its handlers commit nowhere. ``KeyError`` when ``mq`` is not owned."""
        old = self.pqs[mq]
        if old.scope is not None:
            old.scope.cancel()
        store = self.ctx.offset_store
        store.forget(mq)
        pq = self.make_queue(mq)
        pq.next_offset = offset
        pq.consume_lock = old.consume_lock  # [orderly] one consume lock per message queue
        self.start(pq)
        pq.offset.set(offset)
        await self._owner.drop(old, self.ctx.config.orderly_drop_wait)
        return pq

    def stop_pulling(self) -> None:
        """Cancel every pull loop; the process queues stay (for their offsets)."""
        for pq in self.pqs.values():
            if pq.scope is not None:
                pq.scope.cancel()

    def drop_all(self) -> None:
        """The end of a run: mark every queue dropped (nothing consumes them any more)."""
        for pq in self.pqs.values():
            pq.drop()
