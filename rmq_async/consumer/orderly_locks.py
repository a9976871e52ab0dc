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
import time
from collections.abc import Callable, Iterable, Mapping

from ..errors import RocketMQError
from ..protocol.mq import MessageQueue
from .context import ConsumerContext
from .process_queue import ProcessQueue

__all__ = ["LockKeeper"]

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
