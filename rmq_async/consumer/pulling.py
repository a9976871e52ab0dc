"""The pull loop of one process queue (Java ``DefaultMQPushConsumerImpl.pullMessage`` +
``PullAPIWrapper``, and ``DefaultLitePullConsumerImpl.PullTaskImpl``), as one task per owned queue,
cancelled through the queue's cancel scope when it is dropped. Push and lite pull consumers share it;
their differences are the :class:`PullSettings` and the :class:`PullSink` the pulled batches go to.

Flow control awaits the process queue (count, size, span) and resumes the moment consumption frees
room; a sink may hold pulls back further (``gates_pulls``: an orderly lock lease, a paused queue, the
lite consumer's total buffer). A long-poll pull (suspend flag) is sent with a request timeout above
the suspend time plus the broker's hold check; a push consumer's local committed offset rides along
(commit-offset flag).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from ..client.api import PullStatus
from ..client.instance import MASTER_ID
from ..config import ConsumerConfig, Timing
from ..errors import AuthError, BrokerError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import SubscriptionData
from ..protocol.codes import PullSysFlag, ResponseCode
from ..protocol.stored import MessageExt
from .context import ConsumerContext
from .process_queue import ProcessQueue
from .queues import QueueTable

__all__ = ["PullLoop", "PullSettings", "PullSink", "filter_tags"]

log = logging.getLogger("rmq_async.consumer")

#: seconds: the longest wait between two pulls of a queue refused by ACL
AUTH_MAX_BACKOFF = 30.0


class PullSink(Protocol):
    """Where pulled batches go (a consume service, a poll buffer)."""

    #: whether :meth:`before_pull` must be awaited before every pull
    gates_pulls: bool

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may pull now (waits as needed); False once it is dropped."""

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Pulled messages (already put in ``pq`` when :attr:`PullSettings.cache` is set)."""


@dataclass(frozen=True, slots=True)
class PullSettings:
    """How a consumer pulls."""

    batch_size: int
    #: long-poll time the broker may hold a pull (seconds)
    suspend_timeout: float
    #: lite pull's request: the lite-pull sys flag bit with the subscription, subVersion 0, a
    #: subscription-less queue (assign mode) pulled with ``*``
    lite_pull: bool = False
    #: send the subscription with every pull (``postSubscriptionWhenPull``)
    post_subscription: bool = False
    #: the local committed offset rides along (clustering push consumers)
    commit_offset: bool = False
    #: an empty answer moves the committed offset of an empty queue (``correctTagsOffset``)
    correct_tags_offset: bool = False
    #: OFFSET_ILLEGAL drops the queue with the corrected offset and rebalances (push); else the
    #: loop goes on from the offset the broker proposes (lite pull)
    illegal_offset_drops: bool = False
    #: pulled messages are held in the process queue until consumed (push); a lite pull consumer's
    #: sink buffers them itself
    cache: bool = True

    @classmethod
    def for_push(cls, config: ConsumerConfig, timing: Timing) -> PullSettings:
        return cls(
            batch_size=config.pull_batch_size,
            suspend_timeout=timing.suspend_timeout,
            post_subscription=config.post_subscription_when_pull,
            commit_offset=config.clustering,
            correct_tags_offset=True,
            illegal_offset_drops=True,
        )

    @classmethod
    def for_lite_pull(cls, batch_size: int, timing: Timing) -> PullSettings:
        # the Java lite consumer long-polls 20 s; never more than the pull timeout allows
        t = timing
        suspend = max(0.05, min(20.0, t.pull_timeout - t.held_pull_check_interval - t.pull_timeout_margin))
        return cls(batch_size=batch_size, suspend_timeout=suspend, lite_pull=True, cache=False)


def filter_tags(sub: SubscriptionData, msgs: Sequence[MessageExt]) -> list[MessageExt]:
    """Re-filter by tag string: the broker filters by hash code only (``processPullResult``, with
    the subscription the pull was made with)."""
    if not sub.tags_set:
        return msgs if isinstance(msgs, list) else list(msgs)
    tags = set(sub.tags_set)
    return [m for m in msgs if m.tags in tags]


class PullLoop:
    def __init__(
        self,
        ctx: ConsumerContext,
        table: QueueTable,
        sink: PullSink,
        settings: PullSettings,
        *,
        on_illegal_offset: Callable[[], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.sink = sink
        self.settings = settings
        self._on_illegal_offset = on_illegal_offset  # push: rebalance now (the queue starts again)
        self._sub_heartbeat_at = -math.inf  # the last heartbeat sent because a pull was refused 24/25

    async def _subscription_heartbeat(self, pulled_at: float) -> bool:
        """A pull sent at ``pulled_at`` was refused for its subscription: True when a heartbeat has
        gone out since (this call sends one unless one did within the heartbeat interval)."""
        if self._sub_heartbeat_at >= pulled_at:
            return True
        now = time.monotonic()
        if now - self._sub_heartbeat_at < self.ctx.timing.heartbeat_interval:
            return False
        self._sub_heartbeat_at = now
        return await self.ctx.client.send_heartbeat_to_all_brokers()

    async def run(self, pq: ProcessQueue) -> None:
        with anyio.CancelScope() as scope:
            pq.scope = scope
            if pq.dropped:
                return
            try:
                await self._loop(pq)
            finally:
                if pq.scope is scope:  # a seek may have started the next loop already
                    pq.scope = None

    async def _loop(self, pq: ProcessQueue) -> None:
        c = self.ctx
        s = self.settings
        mq = pq.mq
        client = c.client
        timing = c.timing
        committed = pq.offset  # the committed offset's cell (set before the loop starts)
        subscriptions = c.subscriptions
        sink = self.sink
        gate = sink.before_pull if sink.gates_pulls else None
        stats = c.stats
        monotonic = time.monotonic
        broker_id = pq.broker_id  # a local copy: the queue's is written only on a change
        lite = s.lite_pull
        post_sub = s.post_subscription or lite
        flags = (  # the sys flag without and with a committed offset riding along
            PullSysFlag.build(commit_offset=False, suspend=True, subscription=post_sub, lite_pull=lite),
            PullSysFlag.build(commit_offset=True, suspend=True, subscription=post_sub, lite_pull=lite),
        )
        commit = s.commit_offset
        cache = s.cache
        # one header for this queue's pulls, its per-pull fields set before each one (the request
        # is encoded when the pull starts, before it awaits anything)
        header = H.PullMessageRequestHeader(
            consumer_group=c.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=-1,
            max_msg_nums=s.batch_size,
            sys_flag=flags[0],
            commit_offset=0,
            suspend_timeout_millis=int(s.suspend_timeout * 1000),
            sub_version=0,
            subscription="*" if lite else None,
            expression_type="TAG",
            bname=mq.broker_name,
        )
        denied = 0  # consecutive pulls refused by ACL
        denied_resource: str | None = None
        while not pq.dropped:
            if pq.over_threshold() is not None:
                await pq.wait_for_room()
                if pq.dropped:
                    return
            if gate is not None and not await gate(pq):
                continue
            sub = subscriptions.get(mq.topic)
            if sub is None and not lite:
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
            commit_offset = committed.value if commit else -1
            header.queue_offset = pq.next_offset
            # a slave must not take the commit (PullAPIWrapper clears the flag for one): 5.x slaves
            # would store it until the master's next sync
            if commit_offset > 0 and addr == client.broker_addrs[mq.broker_name].get(MASTER_ID):
                header.sys_flag, header.commit_offset = flags[1], commit_offset
            else:
                header.sys_flag, header.commit_offset = flags[0], 0
            if sub is not None:
                if not lite:  # lite pull: subVersion 0, as Java's
                    header.sub_version = sub.sub_version
                if post_sub:
                    header.subscription = sub.sub_string
            t0 = monotonic()
            try:
                res = await client.api.pull(addr, header, timing.pull_timeout, broker_name=mq.broker_name)
            except AuthError as exc:
                # refused by ACL: this queue backs off (doubling up to AUTH_MAX_BACKOFF), the others go
                # on; logged once per resource per interval (client.auth_errors, shown by health())
                denied += 1
                denied_resource = exc.resource
                if client.auth_errors.note(exc):
                    log.error("pull of %s denied (backing off, other queues go on): %s", mq, exc)
                await anyio.sleep(min(AUTH_MAX_BACKOFF, timing.pull_error_delay * 2 ** min(denied, 8)))
                continue
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
            if denied:  # allowed again
                denied = 0
                client.auth_errors.clear(denied_resource)
            if res.suggest_which_broker_id != broker_id:
                broker_id = pq.broker_id = res.suggest_which_broker_id
            pq.max_offset = res.max_offset
            if pq.dropped:
                return
            if res.status is PullStatus.FOUND:
                stats.pulled(mq.topic, len(res.messages), now - t0)
                # the tags are filtered with the subscription the pull was made with, as Java's
                # processPullResult does with its request's SubscriptionData
                msgs = filter_tags(sub, res.messages) if sub is not None and sub.tags_set else res.messages
                pq.next_offset = res.next_begin_offset
                if msgs:
                    if cache:
                        pq.put(msgs)
                    sink.submit(pq, msgs)
                # drop this loop's references now: the batch is freed by whoever finishes with it
                # last, right after its consumption while it is still in the caches, not when the
                # next pull answers (a batch gone cold in the caches costs more to free)
                res = msgs = None  # type: ignore[assignment]
            elif res.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                pq.next_offset = res.next_begin_offset
                if s.correct_tags_offset and pq.count == 0:  # correctTagsOffset
                    committed.advance(res.next_begin_offset)
            else:  # OFFSET_ILLEGAL
                log.warning(
                    "pull of %s at %d: offset illegal (%s), moving to %d",
                    mq,
                    pq.next_offset,
                    res.remark,
                    res.next_begin_offset,
                )
                if not s.illegal_offset_drops:
                    pq.next_offset = res.next_begin_offset
                    continue
                # drop the queue (persisting the corrected offset; orderly: unlock); the next
                # rebalance, now, starts it again from there. Shielded: dropping cancels this loop.
                with anyio.CancelScope(shield=True):
                    await self.table.drop(mq, offset=res.next_begin_offset)
                if self._on_illegal_offset is not None:
                    self._on_illegal_offset()
                return
