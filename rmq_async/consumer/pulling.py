"""The pull loop of one process queue (Java ``DefaultMQPushConsumerImpl.pullMessage`` +
``PullAPIWrapper``, and ``DefaultLitePullConsumerImpl.PullTaskImpl``), as one task per owned queue,
cancelled through the queue's cancel scope when it is dropped. Push and lite pull consumers share it;
their differences are the :class:`PullSettings` and the :class:`PullSink` the pulled batches go to.

The loop is the I/O shell of a :class:`~.pull_plan.PullPlanner`, which decides every step without
I/O (see :mod:`.pull_plan`): the loop awaits what it is told to (the process queue's room, the
sink's gate, a route refresh, a back-off, a heartbeat), sends the pull it is given and applies the
decision on its answer. Flow control awaits the process queue (count, size, span) and resumes the
moment consumption frees room; a sink may hold pulls back further (``gates_pulls``: an orderly lock
lease, a paused queue, the lite consumer's total buffer). A long-poll pull (suspend flag) is sent
with a request timeout above the suspend time plus the broker's hold check; a push consumer's local
committed offset rides along (commit-offset flag).

A message the decoder isolates (a corrupt or unknown body) goes to :mod:`.poison` as the settings'
``undecodable`` mode says; the rest of its batch goes on at once. A body refused as a whole (broken
framing) closes the connection and is pulled again with a doubling back-off; the third failure at
one offset narrows the pull to the good messages before the broken one, if any, and then to the
broken one alone. That one-message body names it: the decoder's record, or its fixed fields
(:func:`salvage_ids`) when their queue id and offset are the ones pulled; it then goes the same
path. When nothing in it can be trusted, a lite pull consumer fails or skips at once (its
``on_undecodable``); a push consumer pulls it again with back-off up to
:data:`~.pull_plan.BROKEN_BODY_SKIP_AT` failures (about a minute on the Java timing) and then skips
it (:func:`.poison.skip`: ERROR record, ``undecodable_skipped``, the committed offset moves past
it). Other protocol errors (not the body's) are only retried."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Protocol

import anyio

from ..client.api import stamp_reads
from ..config import ConsumerConfig, Timing
from ..errors import AuthError, RocketMQError
from ..protocol.stored import MessageExt, Undecodable
from .brokercheck import note_refused_pull
from .context import ConsumerContext
from .poison import UndecodableMode, for_queue, hold, log_undecodable, move_until_done, skip
from .process_queue import ProcessQueue
from .pull_plan import (
    Advance,
    Backoff,
    Deliver,
    Drop,
    FlowControl,
    Handle,
    PullPlanner,
    PullRequestPlan,
    Skip,
    Step,
)
from .queues import QueueTable
from .stages import StageSample

__all__ = ["PullLoop", "PullSettings", "PullSink"]

log = logging.getLogger("rmq_async.consumer")


class PullSink(Protocol):
    """Where pulled batches go (a consume service, a poll buffer)."""

    #: whether :meth:`before_pull` must be awaited before every pull
    gates_pulls: bool

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may pull now (waits as needed); False once it is dropped."""

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Pulled messages (already put in ``pq`` when :attr:`PullSettings.cache` is set).

        A sink may also have ``take_now(pq, msgs) -> bool``, offered each pulled batch before it is
        put in ``pq`` (with :attr:`PullSettings.cache`): True when it took the batch, holding
        itself what it did not finish (:meth:`.ConcurrentConsumeService.take_now`)."""


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
    #: the local committed offset rides along (clustering push consumers with auto commit)
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
            commit_offset=config.clustering and config.auto_commit,
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
            stamping = self.ctx.stages is not None
            if stamping:  # the stage recorder wants each answer's socket read time
                stamp_reads(True)
            try:
                await self._loop(pq, scope)
            finally:
                if stamping:
                    stamp_reads(False)
                if pq.scope is scope:  # a seek may have started the next loop already
                    pq.scope = None

    def _planner(self, pq: ProcessQueue) -> PullPlanner:
        c = self.ctx
        return PullPlanner(
            pq.mq,
            c.group,
            self.settings,
            FlowControl(c.timing.pull_error_delay),
            c.client,
            c.subscriptions,
            broker_id=pq.broker_id,
            gates=self.sink.gates_pulls,
            to_dlq=self._undecodable_mode in ("dlq", "dlq_in_order"),
        )

    async def _loop(self, pq: ProcessQueue, scope: anyio.CancelScope) -> None:
        """Do what the queue's :class:`~.pull_plan.PullPlanner` says: await, pull, apply the answer."""
        c = self.ctx
        mq = pq.mq
        client = c.client
        stats = c.stats
        refused = c.sql_checks.refused  # subscriptions refused (health): a pull answered clears its topic's
        observer = c.observation.observer  # OpenTelemetry (None unless a provider is set): one test per pull
        sink = self.sink
        submit = sink.submit
        cache = self.settings.cache
        take_now: Callable[[ProcessQueue, list[MessageExt]], bool] | None = (
            getattr(sink, "take_now", None) if cache else None
        )
        timeout = c.timing.pull_timeout
        monotonic = time.monotonic
        plan = self._planner(pq)
        stages = c.stages  # the stage recorder (ConsumerConfig.stage_sample), None: off
        sampled: StageSample | None = None  # a sampled batch of this queue, until the next pull is out
        decoded = received = 0
        while True:
            step = plan.next(monotonic(), pq)
            if type(step) is not PullRequestPlan:
                if type(step) is Backoff:
                    await anyio.sleep(step.seconds)
                elif step is Step.WAIT:
                    await pq.wait_for_room()
                elif step is Step.GATE:
                    plan.gated(await sink.before_pull(pq))
                elif step is Step.ROUTE:
                    await client.update_route_quietly([mq.topic])
                else:  # STOP
                    return
                continue
            if sampled is not None:
                sampled.next_pull = perf_counter_ns()
                sampled = None
            try:
                res = await client.api.pull(step.addr, step.header, timeout, broker_name=mq.broker_name)
            except RocketMQError as exc:
                await self._failed(pq, plan, step.addr, exc)
                continue
            if stages is not None:
                decoded, received = perf_counter_ns(), res.received_ns
            if scope.cancel_called:
                # a seek cancelled this loop after the answer had arrived (the task resumes with it
                # before the cancellation reaches an await): it is for the old position, and the
                # seek's loop pulls the new one. Applying it would put the old position's messages
                # in the buffer the seek emptied and move the queue's next offset past the seek.
                return
            if pq.paused:
                # paused while the pull was out: its answer is not applied (the same offset is
                # pulled again on resume), so nothing of a paused queue is delivered after pause()
                continue
            pq.last_pull_time = now = monotonic()
            if plan.denied:  # allowed again
                client.auth_errors.clear(plan.allowed())
            if refused:
                refused.pop(mq.topic, None)
            got = plan.on_result(res, now, pq)
            pq.broker_id, pq.max_offset = plan.broker_id, res.max_offset
            del res
            if type(got) is Deliver:
                msgs = got.msgs
                stats.pulled(mq.topic, len(got.found), got.latency)
                if observer is not None:  # (the messages that will be consumed)
                    observer.pulled(pq, msgs, got.latency)
                pq.next_offset = got.next_offset
                if got.undecodable:
                    await self._undecodable(pq, msgs, got.undecodable)
                elif msgs:
                    if cache and take_now is None:
                        pq.put(msgs)
                    if stages is not None:
                        sampled = stages.pulled(mq.queue_id, msgs, received, decoded)
                        if sampled is not None:  # (before: a plain handler runs inside)
                            sampled.queued = perf_counter_ns()
                    # a plain handler's consume service takes the batch before it is held (see
                    # take_now: only with cache); else it is held in the process queue and handed on
                    if take_now is None:
                        submit(pq, msgs)
                    elif not take_now(pq, msgs):
                        pq.put(msgs)
                        submit(pq, msgs)
                # drop the references now: the batch is freed by whoever finishes with it last,
                # right after its consumption while it is still in the caches, not when the next
                # pull answers (a batch gone cold in the caches costs more to free)
                got.clear()
                del msgs
            elif type(got) is Advance:
                pq.next_offset = got.next_offset
                if got.commit:
                    pq.offset.advance(got.next_offset)
            elif type(got) is Drop:
                # persisting the corrected offset (orderly: unlocking); the next rebalance, now,
                # starts the queue again from there. Shielded: dropping cancels this loop.
                with anyio.CancelScope(shield=True):
                    await self.table.drop(mq, offset=got.offset)
                if self._on_illegal_offset is not None:
                    self._on_illegal_offset()
                return
            else:  # STOP: dropped meanwhile
                return

    async def _failed(self, pq: ProcessQueue, plan: PullPlanner, addr: str, exc: RocketMQError) -> None:
        """A pull failed: what the planner says on the way to the back-off (an ACL refusal noted and
        logged once per resource per interval: ``client.auth_errors``, shown by ``health()``; a
        heartbeat; a refused answer's connection closed, so the next pull gets a fresh one), and no
        back-off past a narrowed, handled or skipped broken message."""
        client = self.ctx.client
        note_refused_pull(self.ctx, pq.mq, exc)  # kept for health() when it is the filter type
        step = plan.on_error(exc)
        if step is Step.HEARTBEAT:
            wait = plan.heartbeat(await self._subscription_heartbeat(plan.sent_at))
        elif step is Step.BROKEN:
            self.ctx.stats.broken_bodies += 1
            await client.api.pool.close_address(addr)
            then = plan.on_broken(exc)
            if isinstance(then, Handle):
                pq.next_offset = then.next_offset
                await self._undecodable(pq, [], [then.record], bounded=True)
                return
            if isinstance(then, Skip):
                skip(self.ctx, then.record, then.why, counted=False)
                self._pass_over(pq, then.offset, then.next_offset)
                return
            if then is Step.AGAIN:
                return
            wait = then
        else:
            if isinstance(exc, AuthError) and client.auth_errors.note(exc):
                log.error("pull of %s denied (backing off, other queues go on): %s", pq.mq, exc)
            wait = step
        await anyio.sleep(wait.seconds)

    # -- messages that cannot be decoded ---------------------------------------------------------

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
