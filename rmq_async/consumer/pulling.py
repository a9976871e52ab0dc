"""The pull loop of one process queue (Java ``DefaultMQPushConsumerImpl.pullMessage`` +
``PullAPIWrapper``), as one task per owned queue, cancelled through the queue's cancel scope when it is
dropped.

Flow control awaits the process queue (count, size, span) and resumes the moment consumption frees
room. A long-poll pull (suspend flag, 15 s by default) is sent with a request timeout above the
suspend time plus the broker's hold check; the local committed offset rides along (commit-offset flag).
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import anyio

from ..client.api import PullStatus
from ..client.instance import MASTER_ID
from ..errors import BrokerError, RocketMQError
from ..protocol import headers as H
from ..protocol.codes import PullSysFlag, ResponseCode
from .process_queue import ProcessQueue

if TYPE_CHECKING:
    from .push import PushConsumer

__all__ = ["PullLoop"]

log = logging.getLogger("rmq_async.consumer")


class PullLoop:
    def __init__(self, consumer: PushConsumer) -> None:
        self.c = consumer
        #: suggestWhichBrokerId per queue (``PullAPIWrapper.pullFromWhichNodeTable``)
        self.suggested: dict[object, int] = {}
        self._sub_heartbeat_at = -math.inf  # the last heartbeat sent because a pull was refused 24/25

    async def _subscription_heartbeat(self, pulled_at: float) -> bool:
        """A pull sent at ``pulled_at`` was refused for its subscription: True when a heartbeat has
        gone out since (this call sends one unless one did within the heartbeat interval)."""
        if self._sub_heartbeat_at >= pulled_at:
            return True
        now = time.monotonic()
        if now - self._sub_heartbeat_at < self.c.timing.heartbeat_interval:
            return False
        self._sub_heartbeat_at = now
        return await self.c.client.send_heartbeat_to_all_brokers()

    async def run(self, pq: ProcessQueue) -> None:
        with anyio.CancelScope() as scope:
            pq.scope = scope
            if pq.dropped:
                return
            try:
                await self._loop(pq)
            finally:
                pq.scope = None

    async def _loop(self, pq: ProcessQueue) -> None:
        c = self.c
        mq = pq.mq
        client = c.client
        timing = c.timing
        cfg = c.config
        orderly = c.orderly
        monotonic = time.monotonic
        broker_id = self.suggested.get(mq, 0)  # a local copy: the dict is written only on a change
        post_sub = cfg.post_subscription_when_pull
        flags = (  # the sys flag without and with a committed offset riding along
            PullSysFlag.build(commit_offset=False, suspend=True, subscription=post_sub),
            PullSysFlag.build(commit_offset=True, suspend=True, subscription=post_sub),
        )
        # one header for this queue's pulls, its per-pull fields set before each one (the request
        # is encoded when the pull starts, before it awaits anything)
        header = H.PullMessageRequestHeader(
            consumer_group=c.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=-1,
            max_msg_nums=cfg.pull_batch_size,
            sys_flag=flags[0],
            commit_offset=0,
            suspend_timeout_millis=int(timing.suspend_timeout * 1000),
            sub_version=0,
            expression_type="TAG",
            bname=mq.broker_name,
        )
        while not pq.dropped:
            if pq.over_threshold() is not None:
                await pq.wait_for_room()
                if pq.dropped:
                    return
            if orderly and not await c.before_pull(pq):
                continue
            sub = c.subscription(mq.topic)
            if sub is None:
                # unsubscribed: the next rebalance drops the queue; if the topic is subscribed
                # again first, this loop must still be here to pull it (Java pulls later too)
                log.debug("no subscription for %s: pulling again later", mq.topic)
                await anyio.sleep(timing.pull_error_delay)
                continue
            addr = client.broker_addr(mq.broker_name, broker_id)
            if addr is None:
                await client.update_route_quietly([mq.topic])
                addr = client.broker_addr(mq.broker_name)
                if addr is None:
                    await anyio.sleep(timing.pull_error_delay)
                    continue
            commit_offset = c.offset_store.read_memory(mq) if cfg.clustering else -1
            header.queue_offset = pq.next_offset
            # a slave must not take the commit (PullAPIWrapper clears the flag for one): 5.x slaves
            # would store it until the master's next sync
            if commit_offset > 0 and addr == client.broker_addrs[mq.broker_name].get(MASTER_ID):
                header.sys_flag, header.commit_offset = flags[1], commit_offset
            else:
                header.sys_flag, header.commit_offset = flags[0], 0
            header.sub_version = sub.sub_version
            header.subscription = sub.sub_string if post_sub else None
            t0 = monotonic()
            try:
                res = await client.api.pull(addr, header, timing.pull_timeout, broker_name=mq.broker_name)
            except BrokerError as exc:
                if exc.code in (ResponseCode.SUBSCRIPTION_NOT_LATEST, ResponseCode.SUBSCRIPTION_NOT_EXIST):
                    log.debug("pull of %s: %s", mq, exc)
                    # the broker may not have seen our latest heartbeat yet: pull again soon once one
                    # went out after this pull did. At most one such heartbeat per heartbeat interval:
                    # when members subscribe differently every heartbeat replaces the group's
                    # subscription on a real broker (and notifies every member), and the refusals go on
                    if await self._subscription_heartbeat(t0):
                        await anyio.sleep(min(0.05, timing.pull_error_delay))
                        continue
                else:
                    log.warning("pull of %s failed: %s", mq, exc)
                await anyio.sleep(timing.pull_error_delay)
                continue
            except RocketMQError as exc:
                log.warning("pull of %s failed: %s", mq, exc)
                await anyio.sleep(timing.pull_error_delay)
                continue
            pq.last_pull_time = now = monotonic()
            if res.suggest_which_broker_id != broker_id:
                broker_id = self.suggested[mq] = res.suggest_which_broker_id
            pq.max_offset = res.max_offset
            if pq.dropped:
                return
            if res.status is PullStatus.FOUND:
                c.stats.pulled(mq.topic, len(res.messages), now - t0)
                # the tags are filtered with the subscription the pull was made with, as Java's
                # processPullResult does with its request's SubscriptionData
                msgs = c.filter_tags(sub, res.messages) if sub.tags_set else res.messages
                pq.next_offset = res.next_begin_offset
                if msgs:
                    pq.put(msgs)
                    c.dispatch(pq, msgs)
                # drop this loop's references now: the batch is freed by whoever finishes with it
                # last, right after its consumption while it is still in the caches, not when the
                # next pull answers (a cold batch costs about three times as much to free)
                res = msgs = None  # type: ignore[assignment]
            elif res.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                pq.next_offset = res.next_begin_offset
                if pq.count == 0:  # correctTagsOffset
                    c.offset_store.update(mq, res.next_begin_offset, increase_only=True)
            else:  # OFFSET_ILLEGAL
                log.warning(
                    "pull of %s at %d: offset illegal (%s), moving to %d",
                    mq,
                    pq.next_offset,
                    res.remark,
                    res.next_begin_offset,
                )
                # drop the queue (persisting the corrected offset; orderly: unlock); the next
                # rebalance, now, starts it again from there. Shielded: dropping cancels this loop.
                with anyio.CancelScope(shield=True):
                    await c.drop_queue(mq, offset=res.next_begin_offset)
                c.rebalance_now()
                return
