"""The pull loop of one process queue (Java ``DefaultMQPushConsumerImpl.pullMessage`` +
``PullAPIWrapper``, and ``DefaultLitePullConsumerImpl.PullTaskImpl``), as one task per owned queue,
cancelled through the queue's cancel scope when it is dropped. Push and lite pull consumers share it;
their differences are the :class:`PullSettings` and the :class:`PullSink` the pulled batches go to.

Flow control awaits the process queue (count, size, span) and resumes the moment consumption frees
room; a sink may hold pulls back further (``gates_pulls``: an orderly lock lease, a paused queue, the
lite consumer's total buffer). A long-poll pull (suspend flag) is sent with a request timeout above
the suspend time plus the broker's hold check; a push consumer's local committed offset rides along
(commit-offset flag).

A message the decoder isolates (#19) goes to :mod:`.poison` as the settings' ``undecodable`` mode
says; the rest of its batch goes on at once. A body refused as a whole (broken framing) closes the
connection and is pulled again with a doubling back-off; the third failure at one offset narrows the
pull to the good messages before the broken one, if any, and then to the broken one alone. That
one-message body names it: the decoder's record, or its fixed fields (:func:`salvage_ids`) when their
queue id and offset are the ones pulled; it then goes the same path. When nothing in it can be
trusted, a lite pull consumer fails or skips at once (its ``on_undecodable``); a push consumer pulls
it again with back-off up to :data:`BROKEN_BODY_SKIP_AT` failures (about a minute on the Java timing)
and then skips it (:func:`.poison.skip`: ERROR record, ``undecodable_skipped``, the committed offset
moves past it). Other protocol errors (not the body's) are only retried.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import anyio

from ..client.api import PullStatus
from ..client.instance import MASTER_ID
from ..config import ConsumerConfig, Timing
from ..errors import AuthError, BrokerError, ProtocolError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import SubscriptionData
from ..protocol.codes import PullSysFlag, ResponseCode
from ..protocol.stored import BrokenBodyError, MessageExt, PulledMessages, Undecodable, salvage_ids
from .context import ConsumerContext
from .poison import UndecodableMode, for_queue, hold, log_undecodable, move_until_done, skip
from .process_queue import ProcessQueue
from .queues import QueueTable

__all__ = ["PullLoop", "PullSettings", "PullSink", "filter_tags"]

log = logging.getLogger("rmq_async.consumer")

#: pull refusals that mean "the broker has not seen our latest heartbeat yet": the group's
#: subscription (24, 25) or, for a SQL92 one, its filter data (27, 28: ``ConsumerFilterManager``)
_SUBSCRIPTION_BEHIND = frozenset(
    {
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.FILTER_DATA_NOT_EXIST,
        ResponseCode.FILTER_DATA_NOT_LATEST,
    }
)
#: seconds: the longest wait between two pulls of a queue refused by ACL
AUTH_MAX_BACKOFF = 30.0
#: a body refused as a whole this many times at one offset: the pull is narrowed to its failing
#: message, which is then handled as an undecodable one
BROKEN_BODY_LIMIT = 3
#: a push consumer skips a broken message that nothing names (no trusted commit-log offset, so the
#: broker cannot move it) at this many failures at its offset (the back-off, doubling from twice the
#: pull error delay, reaches its cap of 10 pull error delays on the way: 72 s on the Java timing)
BROKEN_BODY_SKIP_AT = 6

# what the pull loop does after a refused body's failure (_broken_body)
_BACK_OFF, _AGAIN, _GOOD_ONES_FIRST = range(3)


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
    #: what an undecodable message does (:data:`.poison.UndecodableMode`); ``dlq`` is done in order
    #: by an orderly consumer
    undecodable: UndecodableMode = "dlq"

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
    def for_lite_pull(
        cls, batch_size: int, timing: Timing, undecodable: UndecodableMode = "fail"
    ) -> PullSettings:
        # the Java lite consumer long-polls 20 s; never more than the pull timeout allows
        t = timing
        suspend = max(0.05, min(20.0, t.pull_timeout - t.held_pull_check_interval - t.pull_timeout_margin))
        return cls(
            batch_size=batch_size,
            suspend_timeout=suspend,
            lite_pull=True,
            cache=False,
            undecodable=undecodable,
        )


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
        on_undecodable_fail: Callable[[ProcessQueue, Undecodable], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.sink = sink
        self.settings = settings
        self._on_illegal_offset = on_illegal_offset  # push: rebalance now (the queue starts again)
        self._on_fail = on_undecodable_fail  # lite pull, "fail": poll() raises the record
        mode = settings.undecodable
        if mode == "dlq" and not ctx.clustering:
            # broadcasting: every member would dead-letter its own copy, and Java drops what a
            # broadcasting member fails to consume: logged at ERROR and passed over
            mode = "skip"
        self._undecodable_mode: UndecodableMode = "dlq_in_order" if mode == "dlq" and ctx.orderly else mode
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
                await self._loop(pq, scope)
            finally:
                if pq.scope is scope:  # a seek may have started the next loop already
                    pq.scope = None

    async def _loop(self, pq: ProcessQueue, scope: anyio.CancelScope) -> None:
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
        observer = c.observer  # OpenTelemetry (None unless a provider is set): one test per pull
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
        batch_size = s.batch_size
        submit = sink.submit
        # one header for this queue's pulls, its per-pull fields set before each one (the request
        # is encoded when the pull starts, before it awaits anything)
        header = H.PullMessageRequestHeader(
            consumer_group=c.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=-1,
            max_msg_nums=batch_size,
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
        broken = 0  # consecutive bodies refused as a whole at offset broken_at
        broken_at = -1
        alone_next = False  # the pull is narrowed to the good messages before a broken one
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
                etype = header.expression_type = sub.expression_type
                if not lite:
                    header.sub_version = sub.sub_version
                else:  # lite pull: subVersion 0 for a tag subscription, the SQL92 one's own, as Java's
                    header.sub_version = 0 if etype == "TAG" else sub.sub_version
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
                if exc.code in _SUBSCRIPTION_BEHIND:
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
            except ProtocolError as exc:
                # a body (or frame) refused as a whole: the connection is suspect (closed, so the
                # next pull gets a fresh one), the pull is retried with a doubling back-off
                at = header.queue_offset
                broken = broken + 1 if at == broken_at else 1
                broken_at = at
                alone_next = False
                stats.broken_bodies += 1
                log.warning(
                    "pull of %s at %d: the answer is refused (%s): closing the connection, pulling again "
                    "(failure %d at this offset)",
                    mq,
                    at,
                    exc,
                    broken,
                )
                await client.api.pool.close_address(addr)
                if broken >= BROKEN_BODY_LIMIT and isinstance(exc, BrokenBodyError):
                    step = await self._broken_body(pq, header, exc, at, broken)
                    if step != _BACK_OFF:
                        alone_next = step == _GOOD_ONES_FIRST
                        continue
                d = timing.pull_error_delay
                await anyio.sleep(min(AUTH_MAX_BACKOFF, 10 * d, d * 2 ** min(broken, 8)))
                continue
            except RocketMQError as exc:
                log.warning("pull of %s failed: %s", mq, exc)
                await anyio.sleep(timing.pull_error_delay)
                continue
            if scope.cancel_called:
                # a seek cancelled this loop after the answer had arrived (the task resumes with it
                # before the cancellation reaches an await): it is for the old position, and the
                # seek's loop pulls the new one. Applying it would put the old position's messages
                # in the buffer the seek emptied and move the queue's next offset past the seek.
                return
            if header.max_msg_nums != batch_size:  # a narrowed pull (#19) answered
                if alone_next:  # the good messages before a broken one: now that one alone
                    alone_next = False
                    header.max_msg_nums = 1
                    broken, broken_at = BROKEN_BODY_LIMIT, res.next_begin_offset
                else:
                    header.max_msg_nums = batch_size
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
                found = res.messages
                stats.pulled(mq.topic, len(found), now - t0)
                # the tags are filtered with the subscription the pull was made with, as Java's
                # processPullResult does with its request's SubscriptionData
                msgs = filter_tags(sub, found) if sub is not None and sub.tags_set else found
                if observer is not None:  # (the messages that will be consumed)
                    observer.pulled(pq, msgs, now - t0)
                pq.next_offset = res.next_begin_offset
                # one test per batch: a decoder's batch carries its undecodable records (a plain list,
                # from a stub or a test, has none)
                if type(found) is PulledMessages and found.undecodable:
                    await self._undecodable(pq, msgs, found.undecodable)
                elif msgs:
                    if cache:
                        pq.put(msgs)
                    submit(pq, msgs)
                # drop this loop's references now: the batch is freed by whoever finishes with it
                # last, right after its consumption while it is still in the caches, not when the
                # next pull answers (a batch gone cold in the caches costs more to free)
                res = msgs = found = None  # type: ignore[assignment]
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

    # -- messages that cannot be decoded (#19) -----------------------------------------------------

    def _hand_over(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if msgs:
            if self.settings.cache:
                pq.put(msgs)
            self.sink.submit(pq, msgs)

    async def _undecodable(
        self,
        pq: ProcessQueue,
        msgs: list[MessageExt],
        records: Sequence[Undecodable],
        *,
        bounded: bool = False,
    ) -> None:
        """Hand over a batch with undecodable messages in it, as the mode says (see :mod:`.poison`;
        ``bounded``: broken framing, skipped if the broker keeps refusing to move it)."""
        c = self.ctx
        mode = self._undecodable_mode
        recs = [for_queue(r, pq.mq) for r in records]
        if mode == "skip":
            for r in recs:
                log_undecodable(c, r, "passed over (lite pull on_undecodable='skip', or broadcasting)")
            self._hand_over(pq, msgs)
        elif mode == "fail":
            first = recs[0]
            log_undecodable(c, first, "the queue stops there; poll() raises it (on_undecodable='fail')")
            self._hand_over(pq, [m for m in msgs if m.queue_offset < first.queue_offset])
            pq.next_offset = first.queue_offset
            if self._on_fail is not None:
                self._on_fail(pq, first)
        elif mode == "dlq":
            # held in the process queue while it moves: the committed offset waits, the rest goes on
            held: list[MessageExt] = []
            for r in recs:
                log_undecodable(c, r, "moving it to the DLQ")
                held.append(hold(c, pq, r, bounded=bounded))
            if self.settings.cache:
                pq.put(sorted([*msgs, *held], key=_queue_offset))
            if msgs:
                self.sink.submit(pq, msgs)
        else:  # dlq_in_order: nothing after it is handed over before the broker has it
            rest = msgs
            for r in recs:
                log_undecodable(c, r, "moving it to the DLQ before the queue goes on")
                self._hand_over(pq, [m for m in rest if m.queue_offset < r.queue_offset])
                rest = [m for m in rest if m.queue_offset > r.queue_offset]
                if not await move_until_done(c, pq, r, bounded=bounded):
                    pq.next_offset = r.queue_offset  # dropped or stopping: pulled again from it
                    return
                if pq.count == 0 and not pq.consuming:
                    pq.offset.advance(r.queue_offset + 1)
            self._hand_over(pq, rest)

    async def _broken_body(
        self,
        pq: ProcessQueue,
        header: H.PullMessageRequestHeader,
        exc: BrokenBodyError,
        at: int,
        failures: int,
    ) -> int:
        """The body pulled at ``at`` was refused as a whole for the ``failures``-th time (at least
        :data:`BROKEN_BODY_LIMIT`). The pull is narrowed: to the good messages before the broken one
        (:data:`_GOOD_ONES_FIRST`), else to the broken one alone (:data:`_AGAIN`). A one-message body
        names the message (the decoder's record, else :func:`salvage_ids`), handled as an undecodable
        one; when nothing names it, lite pull fails or skips at once and a push consumer backs off
        (:data:`_BACK_OFF`) until :data:`BROKEN_BODY_SKIP_AT`, then skips it."""
        mq = pq.mq
        if header.max_msg_nums > 1:
            n = exc.index
            header.max_msg_nums = n if 0 < n < header.max_msg_nums else 1
            return _GOOD_ONES_FIRST if header.max_msg_nums == n else _AGAIN
        # one message: the broker served the one at next_begin_offset - 1 (>= at: a tag filter may
        # pass over some), or at ``at`` when the answer did not say
        nbo = exc.next_begin_offset
        offset = nbo - 1 if nbo > at else at
        rec = exc.record
        if (
            rec is None
            or rec.queue_id != mq.queue_id
            or rec.queue_offset != offset
            or rec.commit_log_offset < 0
        ):
            rec = salvage_ids(exc.body, mq.queue_id, offset, str(exc))
        if rec is None:
            why = "its fixed part does not read" if len(exc.body) < 36 else "its ids are not the pulled ones"
            rec = Undecodable(
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=offset,
                commit_log_offset=-1,  # none we can trust
                store_size=len(exc.body),
                sys_flag=0,
                reconsume_times=0,
                offset_msg_id="",
                msg_id=None,
                reason=f"broken framing: {exc} ({why}: no commit-log offset can be trusted)",
                broker_name=mq.broker_name,
            )
            if self._undecodable_mode in ("dlq", "dlq_in_order"):
                if failures < BROKEN_BODY_SKIP_AT:
                    log.error(
                        "group %s: %s: it cannot be moved to the DLQ; pulling it again with back-off "
                        "(failure %d, skipped at %d)",
                        self.ctx.group,
                        rec.describe(),
                        failures,
                        BROKEN_BODY_SKIP_AT,
                    )
                    return _BACK_OFF
                skip(self.ctx, rec, f"its pull was refused {failures} times", counted=False)
                self._pass_over(pq, offset, max(offset + 1, nbo))
                header.max_msg_nums = self.settings.batch_size
                return _AGAIN
        else:
            rec = replace(
                for_queue(rec, mq), topic=rec.topic or mq.topic, reason=f"broken framing: {rec.reason}"
            )
        pq.next_offset = max(offset + 1, nbo)
        header.max_msg_nums = self.settings.batch_size  # past it: full pulls again
        await self._undecodable(pq, [], [rec], bounded=True)
        return _AGAIN

    def _pass_over(self, pq: ProcessQueue, offset: int, next_offset: int) -> None:
        """A skipped message at ``offset``: pulled from ``next_offset`` on, and committed as done (once
        the messages before it are)."""
        pq.next_offset = next_offset
        if pq.queue_offset_max < offset:
            pq.queue_offset_max = offset
        if pq.count == 0:
            pq.offset.advance(next_offset)


def _queue_offset(m: MessageExt) -> int:
    return m.queue_offset
