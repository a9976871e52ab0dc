"""The rebalance side of a consumer (Java ``RebalanceImpl`` with ``RebalancePushImpl`` /
``RebalanceLitePullImpl``): the timer, the member list, allocation, the start-offset rule, and turning
the decision into process queues and pull loops through the :class:`QueueTable`. The decisions
themselves are the pure functions of rebalance.py; this module does the I/O around them. Push and
lite pull consumers share it; what differs is a :class:`RebalanceSettings`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import RocketMQError
from ..protocol.mq import MessageQueue
from .allocate import AllocateStrategy
from .brokercheck import check_routed
from .context import ConsumerContext
from .process_queue import ProcessQueue
from .queues import QueueLocks, QueueTable
from .rebalance import StabilityWindow, allocate_topic, diff
from .types import RebalanceListener
from .usercode import call_user

__all__ = ["Assign", "RebalanceSettings", "RebalanceSignals", "Rebalancer", "StartOffsets"]

log = logging.getLogger("rmq_async.consumer")

#: seconds before a rebalance tries again to lock a new queue whose lock was refused (Java 5.x: 500 ms)
_RELOCK_RETRY = 0.5


class StartOffsets:
    """``computePullFromWhereWithException``, the same for push and lite pull consumers: the committed
    offset, else by ``consume_from_where``: FIRST -> 0 (the broker answers a pull below its min offset
    with the min offset), LAST -> the max offset (a retry topic: 0), TIMESTAMP -> the offset searched by
    the consume timestamp (a retry topic: its max offset). The default timestamp, half an hour before,
    is fixed once, when the consumer is made: every queue without a committed offset starts from that
    same instant, however late it is assigned."""

    __slots__ = ("_default_ms", "timestamp", "where")

    def __init__(self, where: str, timestamp: str | int | None) -> None:
        self.where = where
        self.timestamp = timestamp
        self._default_ms = int((time.time() - 1800) * 1000)

    def timestamp_ms(self) -> int:
        ts = self.timestamp
        if ts is None:
            return self._default_ms
        if isinstance(ts, int):
            return ts
        return int(time.mktime(time.strptime(ts, "%Y%m%d%H%M%S")) * 1000)

    async def compute(self, ctx: ConsumerContext, mq: MessageQueue) -> int:
        stored = await ctx.offset_store.read_store(mq)
        if stored is not None and stored >= 0:
            return stored
        where = self.where
        retry = mq.topic.startswith("%RETRY%")
        if where == "CONSUME_FROM_FIRST_OFFSET" or (retry and where == "CONSUME_FROM_LAST_OFFSET"):
            return 0
        client = ctx.client
        addr = await client.master_addr(mq.broker_name, mq.topic)
        t = ctx.timing.request_timeout
        if where == "CONSUME_FROM_LAST_OFFSET" or retry:  # TIMESTAMP on a retry topic: its end
            return await client.api.get_max_offset(addr, mq, t)
        return await client.api.search_offset(addr, mq, self.timestamp_ms(), t)


class RebalanceSignals:
    """What outlives a run of the rebalancer: the wake-up (NOTIFY_CONSUMER_IDS_CHANGED, a
    subscription change, an illegal pull offset), the rebalance-done event users await, and the
    member counts ``health()`` reports."""

    __slots__ = ("_rebalanced", "_wakeup", "members")

    def __init__(self) -> None:
        self._wakeup = anyio.Event()
        self._rebalanced = anyio.Event()
        #: the members of the group the last rebalance of each topic saw (clustering; for health())
        self.members: dict[str, int] = {}

    def wake(self) -> None:
        """Rebalance now."""
        self._wakeup.set()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance."""
        await self._rebalanced.wait()

    def rebalanced(self) -> None:
        done, self._rebalanced = self._rebalanced, anyio.Event()
        done.set()

    async def wait_woken(self, delay: float) -> None:
        """Return when woken, or after ``delay`` seconds; the next wake-up is a new one."""
        with anyio.move_on_after(delay):
            await self._wakeup.wait()
        self._wakeup = anyio.Event()


@dataclass
class RebalanceSettings:
    """The user's side of rebalancing, the same for every run of a consumer."""

    strategy: AllocateStrategy
    start_offsets: StartOffsets
    #: push (``RebalancePushImpl.messageQueueChanged``): a changed assignment bumps the subscription
    #: version and sends a heartbeat before the new queues pull
    announce_changes: bool = True
    on_assigned: RebalanceListener | None = None
    on_revoked: RebalanceListener | None = None
    #: called with (broker address, member ids) for members never seen before (the subscription check)
    on_new_members: Callable[[str, list[str]], Coroutine[Any, Any, None]] | None = None
    new_members: Callable[[list[str]], list[str]] | None = None


#: the broker assigns (``client_rebalance=False``, POP): the PULL-mode queues of a topic, or None to
#: allocate that topic here (``RebalanceImpl.tryQueryAssignment``)
Assign = Callable[[str], Coroutine[Any, Any, set[MessageQueue] | None]]


class Rebalancer:
    """One run's rebalancing: given the run's queue table, how to start a queue's pulls, the broker
    locks to take (orderly; None otherwise) and the broker's assignment (POP; None otherwise)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        table: QueueTable,
        settings: RebalanceSettings,
        signals: RebalanceSignals,
        stability: StabilityWindow,
        *,
        start_pull: Callable[[ProcessQueue], None],
        locks: QueueLocks | None = None,
        assign: Assign | None = None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.settings = settings
        self.signals = signals
        self.stability = stability
        self._start_pull = start_pull
        self._locks = locks
        self._assign = assign

    def wake(self) -> None:
        """Rebalance now (NOTIFY_CONSUMER_IDS_CHANGED, a subscription change)."""
        self.signals.wake()

    async def run(self) -> None:
        c = self.ctx
        stability = self.stability
        while True:
            try:
                await self.do_rebalance()
            except RocketMQError as exc:
                # while stopping, a failure is the stop's doing (the group left, the client closed)
                level = logging.DEBUG if c.stopping else logging.WARNING
                log.log(level, "rebalance of group %s failed: %s", c.group, exc)
            self.signals.rebalanced()
            delay = c.timing.rebalance_interval
            pending = stability.pending(time.monotonic())
            if pending is not None:
                delay = min(delay, pending + 0.01)
            await self.signals.wait_woken(delay)

    async def _consumer_ids(self, topic: str) -> list[str] | None:
        c = self.ctx
        client = c.client
        route = client.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        bd = random.choice(route.broker_datas)
        addr = bd.broker_addrs.get(0) or next(iter(bd.broker_addrs.values()))
        cids = await client.api.get_consumer_id_list(addr, c.group, c.timing.request_timeout)
        s = self.settings
        if s.on_new_members is not None and s.new_members is not None and s.new_members(cids):
            # once per new member, in the background: warn if it subscribes differently
            c.start_soon(s.on_new_members, addr, cids)
        return cids

    async def do_rebalance(self) -> None:
        """One rebalance of every subscribed topic (``RebalanceImpl.doRebalance``)."""
        c = self.ctx
        if c.stopping:
            return
        topics = sorted(c.subscriptions.topics())
        all_locked = True
        for topic in topics:
            await check_routed(c, topic)  # a SQL92 subscription not checked for want of a route
            if self._assign is not None and c.clustering:
                try:
                    assigned = await self._assign(topic)
                except RocketMQError as exc:
                    level = logging.DEBUG if c.stopping else logging.WARNING
                    log.log(level, "rebalance of %s for group %s: no assignment: %s", topic, c.group, exc)
                    continue
                if assigned is not None:
                    all_locked &= await self._apply(topic, assigned)
                    continue
            try:
                mq_all = await c.client.subscribe_queues(topic)
            except RocketMQError as exc:
                log.debug("rebalance: no route for %s: %s", topic, exc)
                continue
            if c.clustering:
                try:
                    cids = await self._consumer_ids(topic)
                except RocketMQError as exc:
                    # Java's findConsumerIdList: this topic waits for the next round, the others go on
                    # (a broker that has not seen our heartbeat yet answers code 1 "no consumer")
                    level = logging.DEBUG if c.stopping else logging.WARNING  # unregistered: "no consumer"
                    log.log(level, "rebalance of %s for group %s: no consumer list: %s", topic, c.group, exc)
                    continue
                self.signals.members[topic] = len(cids or ())
                if not cids:
                    log.debug("rebalance: no consumer ids for %s yet", c.group)
                    continue
                cids = self.stability.observe(cids, time.monotonic(), c.client.client_id)
                allocated = allocate_topic(self.settings.strategy, c.group, c.client.client_id, mq_all, cids)
            else:
                allocated = set(mq_all)
            all_locked &= await self._apply(topic, allocated)
        if not all_locked and not c.stopping:
            # [orderly] a new queue's lock was refused (its holder may let go at any moment): try again
            # soon, as Java 5.x's rebalanceLater(500), instead of a whole rebalance interval later
            c.start_soon(self._rebalance_later, _RELOCK_RETRY)
        # queues of topics no longer subscribed (truncateMessageQueueNotMyTopic)
        for mq in [mq for mq in self.table.pqs if mq.topic not in topics]:
            await self.table.drop(mq)

    async def _rebalance_later(self, delay: float) -> None:
        await anyio.sleep(delay)
        self.wake()

    async def revoke_all(self) -> None:
        """At stop: ``on_revoked`` with every queue still owned, per topic (the retry topic hidden), while
        they are still held: before their offsets are persisted and their locks released (Java's
        shutdown persists after the consume service stopped; aiokafka calls ``on_partitions_revoked``
        at close)."""
        on_revoked = self.settings.on_revoked
        if on_revoked is None:
            return
        c = self.ctx
        by_topic: dict[str, set[MessageQueue]] = {}
        for mq in self.table.pqs:
            if mq.topic != c.retry_topic:
                by_topic.setdefault(mq.topic, set()).add(mq)
        for topic, mqs in sorted(by_topic.items()):
            await call_user(f"on_revoked listener of group {c.group}", on_revoked, topic, mqs)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """``computePullFromWhere``: the committed offset, else by consume_from_where."""
        return await self.settings.start_offsets.compute(self.ctx, mq)

    async def _apply(self, topic: str, allocated: set[MessageQueue]) -> bool:
        """Make ``topic``'s process queues the ``allocated`` ones; False if a new queue's broker lock
        was refused (orderly)."""
        c = self.ctx
        table = self.table
        locks = self._locks
        settings = self.settings
        to_drop, to_add = diff(table.pqs.keys(), allocated, topic)
        for mq in sorted(to_drop):
            await table.drop(mq)
        added: list[ProcessQueue] = []
        all_locked = True
        for mq in sorted(to_add):
            if c.stopping:
                return all_locked
            pq = table.make_queue(mq)
            # [orderly] lock before the first pull; a refused queue waits for a rebalance
            if locks is not None and not await locks.lock_new(pq):
                all_locked = False
                continue
            try:
                offset = await self.compute_pull_from_where(mq)
            except RocketMQError as exc:
                log.warning("rebalance: cannot compute the start offset of %s: %s", mq, exc)
                if locks is not None:  # [orderly] not taken after all: let another member have it
                    await locks.unlock_dropped(pq, True)
                continue
            pq.next_offset = offset
            added.append(pq)
        if (to_drop or added) and settings.announce_changes:
            # messageQueueChanged: a new subscription version, registered by a heartbeat BEFORE the
            # new queues pull, so the broker does not answer their first pulls with 25 (not latest)
            sub = c.subscriptions.get(topic)
            if sub is not None:
                sub.sub_version = int(time.time() * 1000)
            await c.client.send_heartbeat_to_all_brokers()
        if added and topic not in c.subscriptions.topics():
            # unsubscribed while this rebalance awaited: its new queues are not started
            for pq in added:
                if locks is not None:
                    await locks.unlock_dropped(pq, True)
            added = []
        for pq in added:
            table.start(pq)
            self._start_pull(pq)
        if to_drop or added:
            log.info(
                "group %s (%s) rebalanced %s: +%d -%d, now %d queues",
                c.group,
                c.client.client_id,
                topic,
                len(added),
                len(to_drop),
                table.count(topic),
            )
            # a listener is user code: what it raises is logged, never the consumer's end. The retry
            # topic is ours, not the user's: never shown (Java's listeners never see it either)
            if topic == c.retry_topic:
                return all_locked
            if to_drop and settings.on_revoked:
                await call_user(
                    f"on_revoked listener of group {c.group}", settings.on_revoked, topic, set(to_drop)
                )
            if added and settings.on_assigned:
                await call_user(
                    f"on_assigned listener of group {c.group}",
                    settings.on_assigned,
                    topic,
                    {pq.mq for pq in added},
                )
        return all_locked
