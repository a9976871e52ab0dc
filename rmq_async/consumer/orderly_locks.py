"""Broker queue locks for orderly consumption (Java ``RebalanceImpl.lock / lockAll / unlock / unlockAll``).

Strategy: the broker arbitrates which member of a group owns a queue (LOCK_BATCH_MQ); the client keeps
a *lease* per process queue: it trusts a lock for ``Timing.lock_lease`` after the last successful lock
request, measured on the monotonic clock from the moment the request was SENT (the broker's own timer
starts later, so the lease always ends before the broker's ``broker_lock_expiry`` can hand the queue
to someone else). Newly assigned queues are locked one by one (a single-mq sync 41, as the Java client
does); every ``lock_renew_interval`` all owned queues are renewed with one 41 per broker; a queue
dropped at rebalance is released with a oneway 42; shutdown releases everything with a sync 42 per
broker. Lock state lives on the ProcessQueue (``locked``, ``last_lock_time``); callers are told about
lock changes through ``on_locked`` / ``on_lost`` callbacks so running handlers can be re-timed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping

import anyio
import anyio.abc

from ..errors import RocketMQError
from ..protocol.mq import MessageQueue
from .context import ConsumerContext
from .deadlines import loop_clock
from .process_queue import OrderlyState, ProcessQueue

__all__ = ["LockKeeper", "OrderlyLocks", "orderly_state"]

log = logging.getLogger("rmq_async.consumer")


class LockKeeper:
    """Takes, renews and releases the broker locks of one orderly consumer's queues (``owned``: the
    queue table's process queues, read only)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        owned: Mapping[MessageQueue, ProcessQueue],
        *,
        on_locked: Callable[[ProcessQueue], None],
        on_lost: Callable[[ProcessQueue], None],
    ) -> None:
        self.c = ctx
        self._owned = owned
        self._on_locked = on_locked
        self._on_lost = on_lost

    @property
    def lease(self) -> float:
        return self.c.timing.lock_lease

    def lease_valid(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may be pulled and consumed now: locked and the lease not expired."""
        return pq.locked and not pq.lock_expired(self.lease)

    def lease_remaining(self, pq: ProcessQueue) -> float:
        """Seconds left on ``pq``'s lease (<= 0 when it has expired or was never taken)."""
        if not pq.locked:
            return 0.0
        return pq.last_lock_time + self.lease - time.monotonic()

    def _mark(self, pq: ProcessQueue, sent_at: float) -> None:
        was = self.lease_valid(pq)
        pq.locked = True
        pq.last_lock_time = max(pq.last_lock_time, sent_at)
        if not was:
            log.info("group %s locked %s", self.c.group, pq.mq)
        self._on_locked(pq)

    def _lose(self, pq: ProcessQueue) -> None:
        if pq.locked:
            log.warning("group %s lost the broker lock of %s", self.c.group, pq.mq)
        pq.locked = False
        self._on_lost(pq)

    async def lock(self, pq: ProcessQueue) -> bool:
        """Lock one queue (a single-mq sync LOCK_BATCH_MQ); True when the broker granted it."""
        c = self.c
        mq = pq.mq
        client = c.client
        try:
            addr = await client.master_addr(mq.broker_name, mq.topic)
            sent_at = time.monotonic()
            granted = await client.api.lock_batch_mq(
                addr, c.group, client.client_id, [mq], c.timing.request_timeout
            )
        except RocketMQError as exc:
            log.warning("locking %s for group %s failed: %s", mq, c.group, exc)
            return False
        if mq in granted:
            if pq.dropped:
                await self._release_stale([pq])
                return False
            self._mark(pq, sent_at)
            return True
        log.info("lock of %s for group %s refused: another member holds it", mq, c.group)
        pq.locked = False
        return False

    async def lock_all(self, pqs: Iterable[ProcessQueue]) -> None:
        """Renew every queue's lock, one LOCK_BATCH_MQ per broker (``lockAll``)."""
        c = self.c
        client = c.client
        by_broker: dict[str, list[ProcessQueue]] = {}
        for pq in pqs:
            if not pq.dropped:
                by_broker.setdefault(pq.mq.broker_name, []).append(pq)
        for broker_name in sorted(by_broker):
            group = sorted(by_broker[broker_name], key=lambda p: p.mq)
            mqs = [pq.mq for pq in group]
            try:
                addr = await client.master_addr(broker_name, mqs[0].topic)
                sent_at = time.monotonic()
                granted = await client.api.lock_batch_mq(
                    addr, c.group, client.client_id, mqs, c.timing.request_timeout
                )
            except RocketMQError as exc:
                # leases run out on their own if this keeps failing: consumption stops before the broker
                # can give the queues to another member
                log.warning("renewing the locks of group %s on %s failed: %s", c.group, broker_name, exc)
                continue
            for pq in group:
                if pq.mq in granted:
                    if not pq.dropped:
                        self._mark(pq, sent_at)
                elif not pq.dropped:
                    self._lose(pq)
            await self._release_stale([pq for pq in group if pq.dropped and pq.mq in granted])

    async def _release_stale(self, dropped: list[ProcessQueue]) -> None:
        """A lock granted for a queue dropped while the request was in flight: its oneway unlock may
        have reached the broker before this lock did, and the broker would then keep the queue locked
        for us (``broker_lock_expiry``, 60 s) while its new owner cannot consume it. Release it again,
        unless the queue is ours again meanwhile (a new process queue holds it). An unlock of a lock
        that is no longer ours is a no-op on the broker (it checks the client id)."""
        owned = self._owned
        mqs = [pq.mq for pq in dropped if (cur := owned.get(pq.mq)) is None or cur.dropped]
        if mqs:
            log.info(
                "group %s: releasing locks granted after their queues were dropped: %s", self.c.group, mqs
            )
            await self.unlock(mqs, oneway=True)

    async def unlock(self, mqs: Iterable[MessageQueue], *, oneway: bool) -> None:
        """Release locks, one UNLOCK_BATCH_MQ per broker; errors are logged (the lock then expires)."""
        c = self.c
        client = c.client
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name in sorted(by_broker):
            batch = sorted(by_broker[broker_name])
            try:
                addr = await client.master_addr(broker_name, batch[0].topic)
                await client.api.unlock_batch_mq(
                    addr, c.group, client.client_id, batch, c.timing.request_timeout, oneway=oneway
                )
            except RocketMQError as exc:
                log.warning("unlocking %s for group %s failed: %s", batch, c.group, exc)
                continue
            log.info("group %s unlocked %s", c.group, ", ".join(str(mq) for mq in batch))


def orderly_state(pq: ProcessQueue) -> OrderlyState:
    """``pq``'s orderly state, made on first use."""
    st = pq.orderly
    if st is None:
        st = pq.orderly = OrderlyState()
    return st


class OrderlyLocks:
    """The broker-lock side of an orderly consumer, apart from its consumption: a new queue is locked
    before its first pull (:meth:`lock_new`), pulls and batches wait for a valid lease
    (:meth:`before_pull`, :meth:`ensure_locked`), the leases are renewed (:meth:`run`), a dropped
    queue is released once idle (:meth:`unlock_dropped`) and every lock at shutdown
    (:meth:`release_all`). It re-times or cancels a running handler when its lease moves or is lost
    (through the queue's :class:`OrderlyState`). Broadcasting locks nothing. ``owned``: the queue
    table's process queues (read only)."""

    def __init__(self, ctx: ConsumerContext, owned: Mapping[MessageQueue, ProcessQueue]) -> None:
        self.c = ctx
        self.clustering = ctx.config.clustering
        self._owned = owned
        self.keeper = LockKeeper(ctx, owned, on_locked=self._on_locked, on_lost=self._on_lost)
        self._closed = False
        self._loop_time: Callable[[], float] = time.monotonic  # the loop's clock once running
        #: one consume lock per message queue, shared by its process queues (Java's MessageQueueLock):
        #: the handler of a dropped one still running holds back a new one of the same queue
        self._mq_locks: dict[MessageQueue, anyio.Lock] = {}

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start renewing the leases in ``tg`` (clustering)."""
        self._loop_time = loop_clock()
        if self.clustering:
            tg.start_soon(self._renew_loop)

    def close(self) -> None:
        """No more relocking (the consumer is stopping)."""
        self._closed = True

    def deadline(self, pq: ProcessQueue) -> float:
        """When a running handler is cancelled: the end of the queue's lock lease (clustering), so it
        stops before the broker can give the queue to another member; never in broadcasting."""
        if self.clustering:
            return self._loop_time() + self.keeper.lease_remaining(pq)
        return math.inf

    def _on_locked(self, pq: ProcessQueue) -> None:
        st = pq.orderly
        if st is not None and st.scope is not None:
            st.scope.deadline = self.deadline(pq)

    def _on_lost(self, pq: ProcessQueue) -> None:
        st = pq.orderly
        if st is not None and st.scope is not None:
            st.scope.cancel()  # the broker gave the queue to another member: stop now

    def lease_valid(self, pq: ProcessQueue) -> bool:
        return not self.clustering or self.keeper.lease_valid(pq)

    async def lock_new(self, pq: ProcessQueue) -> bool:
        """Lock a newly assigned queue before its first pull (broadcasting: nothing to lock).

        ``pq`` takes its message queue's consume lock: when the queue was dropped from this consumer
        while a handler ran (a rebalance waits ``orderlyDropWait`` at most) and comes back before that
        handler ends, the broker lock is ours again at once (it is per client), and the new process
        queue must not consume the queue's messages beside the old handler. Java serializes a queue's
        consumption with one lock object per message queue for the same reason."""
        shared = self._mq_locks.get(pq.mq)
        if shared is None:
            self._mq_locks[pq.mq] = pq.consume_lock
        else:
            pq.consume_lock = shared
        if not self.clustering:
            return True
        return await self.keeper.lock(pq)

    def _forget_lock(self, mq: MessageQueue) -> None:
        """Drop ``mq``'s shared consume lock once no process queue of it is owned or consuming."""
        lock = self._mq_locks.get(mq)
        if lock is not None and mq not in self._owned and not lock.locked():
            del self._mq_locks[mq]

    async def ensure_locked(self, pq: ProcessQueue) -> bool:
        """Wait until ``pq``'s lease is valid, locking it again as needed; False once it is dropped."""
        if self.lease_valid(pq):
            return True
        st = orderly_state(pq)
        async with st.relock:  # one lock attempt at a time per queue (pull loop and drive share it)
            while not pq.dropped and not self._closed:
                if self.keeper.lease_valid(pq):
                    return True
                st.refresh_offset = True  # someone else may have consumed meanwhile
                if await self.keeper.lock(pq):
                    return True
                # the broker does not tell us when the holder lets go: try again after the pull delay
                await anyio.sleep(self.c.timing.pull_error_delay)
        return False

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Pull only under a valid lease; the first pull after (re)locking re-reads the start offset."""
        if not self.clustering:
            return True
        if not await self.ensure_locked(pq):
            return False
        st = orderly_state(pq)
        if st.refresh_offset:
            st.refresh_offset = False
            await self._refresh_offset(pq)
        return True

    async def _refresh_offset(self, pq: ProcessQueue) -> None:
        c = self.c
        try:
            # the broker's offset, ours left alone: a lease that lapsed and came back must not move
            # our committed offset back to what the broker last got (that would consume it again)
            stored = await c.offset_store.query_store(pq.mq)
        except RocketMQError as exc:
            log.warning(
                "re-reading the offset of %s failed (%s): pulling on from %d", pq.mq, exc, pq.next_offset
            )
            return
        if stored is None or stored < 0:
            return
        async with pq.consume_lock:
            local = pq.offset.value
            if stored <= max(local, pq.committable_offset() if pq.count else -1) or stored == pq.next_offset:
                return
            # another member consumed past what we hold: forget the cache and start from its offset
            log.info("%s: the broker's offset %d is ahead of ours: pulling from there", pq.mq, stored)
            pq.clear()
            pq.next_offset = stored
            pq.offset.set(stored)

    async def _renew_loop(self) -> None:
        while True:
            await anyio.sleep(self.c.timing.lock_renew_interval)
            if self._closed or self.c.stopping:
                return
            await self.keeper.lock_all(list(self._owned.values()))

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        """After a drop (offset persisted): release the broker lock with a oneway 42; a queue still
        consuming (``idle`` False) is released when its handler ends."""
        if idle:
            self._forget_lock(pq.mq)
        if not self.clustering:
            return
        if idle:
            cur = self._owned.get(pq.mq)
            if cur is None or cur.dropped:  # not ours again meanwhile (its new lock must stand)
                await self.keeper.unlock([pq.mq], oneway=True)
        else:
            log.warning("%s is still consuming after the rebalance wait: unlocking it when it ends", pq.mq)
            self.c.start_soon(self._unlock_when_idle, pq)

    async def _unlock_when_idle(self, pq: ProcessQueue) -> None:
        # the lease is no longer renewed, so the handler is cancelled at its end at the latest
        async with pq.consume_lock:
            pass
        self._forget_lock(pq.mq)
        if pq.mq not in self._owned:
            await self.keeper.unlock([pq.mq], oneway=True)

    async def release_all(self) -> None:
        """At shutdown, offsets persisted and handlers ended: a sync 42 of every idle queue."""
        self._closed = True
        if not self.clustering:
            return
        mqs = [mq for mq, pq in self._owned.items() if not pq.consume_lock.locked()]
        if mqs:
            with anyio.move_on_after(self.c.timing.request_timeout * 2):
                await self.keeper.unlock(mqs, oneway=False)
        for pq in self._owned.values():
            pq.locked = False
