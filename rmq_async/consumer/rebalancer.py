"""The rebalance side of the push consumer (Java ``RebalancePushImpl``): the timer, the member list,
allocation, and turning the decision into process queues and pull loops. The decisions themselves
are the pure functions of rebalance.py; this module does the I/O around them.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING

import anyio

from ..errors import RocketMQError
from ..protocol.mq import MessageQueue
from .process_queue import ProcessQueue
from .rebalance import allocate_topic, diff
from .usercode import call_user

if TYPE_CHECKING:
    from .push import PushConsumer

__all__ = ["PushRebalancer"]

log = logging.getLogger("rmq_async.consumer")

#: seconds before a rebalance tries again to lock a new queue whose lock was refused (Java 5.x: 500 ms)
_RELOCK_RETRY = 0.5


class PushRebalancer:
    def __init__(self, consumer: PushConsumer) -> None:
        self.c = consumer
        # Java's consumeTimestamp: fixed once, when the consumer is made, to half an hour before; every
        # queue without a committed offset starts from that same instant, however late it is assigned
        self._default_timestamp_ms = int((time.time() - 1800) * 1000)

    async def run(self) -> None:
        c = self.c
        while True:
            try:
                await self.do_rebalance()
            except RocketMQError as exc:
                log.warning("rebalance of group %s failed: %s", c.group, exc)
            done, c._rebalanced = c._rebalanced, anyio.Event()
            done.set()
            delay = c.timing.rebalance_interval
            pending = c.stability.pending(time.monotonic())
            if pending is not None:
                delay = min(delay, pending + 0.01)
            with anyio.move_on_after(delay):
                await c._rebalance_wakeup.wait()
            c._rebalance_wakeup = anyio.Event()

    async def _consumer_ids(self, topic: str) -> list[str] | None:
        c = self.c
        client = c.client
        route = client.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        bd = random.choice(route.broker_datas)
        addr = bd.broker_addrs.get(0) or next(iter(bd.broker_addrs.values()))
        cids = await client.api.get_consumer_id_list(addr, c.group, c.timing.request_timeout)
        if c._tg is not None and c.subcheck.new_members(cids):
            # once per new member, in the background: warn if it subscribes differently
            c._tg.start_soon(c.subcheck.check, addr, cids)
        return cids

    async def do_rebalance(self) -> None:
        """One rebalance of every subscribed topic (``RebalanceImpl.doRebalance``)."""
        c = self.c
        if c._stopping:
            return
        topics = sorted(c.subscribed_topics())
        all_locked = True
        for topic in topics:
            try:
                mq_all = await c.client.subscribe_queues(topic)
            except RocketMQError as exc:
                log.debug("rebalance: no route for %s: %s", topic, exc)
                continue
            if c.config.clustering:
                try:
                    cids = await self._consumer_ids(topic)
                except RocketMQError as exc:
                    # Java's findConsumerIdList: this topic waits for the next round, the others go on
                    # (a broker that has not seen our heartbeat yet answers code 1 "no consumer")
                    log.warning("rebalance of %s for group %s: no consumer list: %s", topic, c.group, exc)
                    continue
                if not cids:
                    log.debug("rebalance: no consumer ids for %s yet", c.group)
                    continue
                cids = c.stability.observe(cids, time.monotonic(), c.client.client_id)
                allocated = allocate_topic(c.strategy, c.group, c.client.client_id, mq_all, cids)
            else:
                allocated = set(mq_all)
            all_locked &= await self._apply(topic, allocated)
        if not all_locked and c._tg is not None and not c._stopping:
            # [orderly] a new queue's lock was refused (its holder may let go at any moment): try again
            # soon, as Java 5.x's rebalanceLater(500), instead of a whole rebalance interval later
            c._tg.start_soon(self._rebalance_later, _RELOCK_RETRY)
        # queues of topics no longer subscribed (truncateMessageQueueNotMyTopic)
        for mq in [mq for mq in c.pqs if mq.topic not in topics]:
            await c.drop_queue(mq)

    async def _rebalance_later(self, delay: float) -> None:
        await anyio.sleep(delay)
        self.c.rebalance_now()

    async def _apply(self, topic: str, allocated: set[MessageQueue]) -> bool:
        """Make ``topic``'s process queues the ``allocated`` ones; False if a new queue's broker lock
        was refused (orderly)."""
        c = self.c
        to_drop, to_add = diff(c.pqs.keys(), allocated, topic)
        for mq in sorted(to_drop):
            await c.drop_queue(mq)
        added: list[ProcessQueue] = []
        all_locked = True
        for mq in sorted(to_add):
            if c._stopping:
                return all_locked
            if c.orderly:  # [orderly] lock before the first pull; a refused queue waits for a rebalance
                locked_pq = self._new_process_queue(mq)
                if not await c.consume_service.lock_new(locked_pq):
                    all_locked = False
                    continue
            try:
                offset = await self.compute_pull_from_where(mq)
            except RocketMQError as exc:
                log.warning("rebalance: cannot compute the start offset of %s: %s", mq, exc)
                if c.orderly:  # [orderly] not taken after all: let another member have it
                    await c.consume_service.unlock_dropped(locked_pq, True)
                continue
            pq = locked_pq if c.orderly else self._new_process_queue(mq)
            pq.next_offset = offset
            added.append(pq)
        if to_drop or added:
            # messageQueueChanged: a new subscription version, registered by a heartbeat BEFORE the
            # new queues pull, so the broker does not answer their first pulls with 25 (not latest)
            sub = c.subscription(topic)
            if sub is not None:
                sub.sub_version = int(time.time() * 1000)
            await c.client.send_heartbeat_to_all_brokers()
        assert c._tg is not None
        for pq in added:
            c.pqs[pq.mq] = pq
            c._tg.start_soon(c.puller.run, pq)
        if to_drop or added:
            log.info(
                "group %s (%s) rebalanced %s: +%d -%d, now %d queues",
                c.group,
                c.client.client_id,
                topic,
                len(added),
                len(to_drop),
                len([m for m in c.pqs if m.topic == topic]),
            )
            # a listener is user code: what it raises is logged, never the consumer's end
            if to_drop and c.on_revoked:
                await call_user(f"on_revoked listener of group {c.group}", c.on_revoked, topic, set(to_drop))
            if added and c.on_assigned:
                await call_user(
                    f"on_assigned listener of group {c.group}", c.on_assigned, topic, {pq.mq for pq in added}
                )
        return all_locked

    def _new_process_queue(self, mq: MessageQueue) -> ProcessQueue:
        c = self.c
        cfg = c.config
        max_count = cfg.pull_threshold_for_queue
        max_mib = cfg.pull_threshold_size_for_queue
        n = max(1, len([m for m in c.pqs if m.topic == mq.topic]) + 1)
        if cfg.pull_threshold_for_topic > 0:
            max_count = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic > 0:
            max_mib = max(1, cfg.pull_threshold_size_for_topic // n)
        span = None if c.orderly else cfg.consume_concurrently_max_span  # [orderly] no span limit
        return ProcessQueue(mq, max_count=max_count, max_bytes=max_mib << 20, max_span=span)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """``computePullFromWhere``: the committed offset, else by consume_from_where."""
        c = self.c
        stored = await c.offset_store.read_store(mq)
        if stored is not None and stored >= 0:
            return stored
        where = c.config.consume_from_where
        client = c.client
        retry = mq.topic.startswith("%RETRY%")
        if where == "CONSUME_FROM_FIRST_OFFSET" or (retry and where == "CONSUME_FROM_LAST_OFFSET"):
            return 0
        addr = await client.master_addr(mq.broker_name, mq.topic)
        t = c.timing.request_timeout
        if where == "CONSUME_FROM_LAST_OFFSET" or retry:  # TIMESTAMP on a retry topic: its end
            return await client.api.get_max_offset(addr, mq, t)
        return await client.api.search_offset(addr, mq, self._consume_timestamp_ms(), t)

    def _consume_timestamp_ms(self) -> int:
        c = self.c
        ts = c.config.consume_timestamp
        if ts is None:
            return self._default_timestamp_ms
        if isinstance(ts, int):
            return ts
        return int(time.mktime(time.strptime(ts, "%Y%m%d%H%M%S")) * 1000)
