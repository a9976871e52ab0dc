"""Concurrent consumption (Java ``ConsumeMessageConcurrentlyService``), asyncio-style.

The pulling task offers each pulled batch to :meth:`ConcurrentConsumeService.take_now` first: a plain
handler is called there, an ``async def`` one in a task started eagerly (:mod:`.eager`), and a batch
consumed in full that way is never held. What they leave, and every batch when hooks are set, goes to
one unbounded :class:`~rmq_async.consumer.handoff.Handoff` (the process queues' thresholds bound it);
``concurrency`` worker tasks take pulled batches, cut them into batches of
``consume_batch_max_size`` and await the handler. No task per message, no thread pool. Each worker
keeps one cancel scope whose deadline is moved to the running batch's consume deadline; plain
successes are acknowledged in ~1 ms groups.

Results (:mod:`.outcome`, Java's meaning): SUCCESS acks up to ``ctx.ack_index`` (default: the whole
batch) and sends the rest back; RECONSUME_LATER sends the whole batch back. A handler that raises
counts as RECONSUME_LATER; one that runs past the consume timeout is
cancelled and its batch sent back. Failed messages are sent back to the broker (CONSUMER_SEND_MSG_BACK
with the context's delay level); if that fails, they are sent to ``%RETRY%group`` by the client's inner
producer; if that fails too, they stay in the process queue and are consumed again locally after a delay.
Nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from ..protocol.stored import MessageExt
from .context import ConsumerContext
from .deadlines import loop_clock
from .delivery import DeliveryStream
from .eager import EAGER, EagerStarter
from .handoff import Handoff
from .invoke import Invoker
from .outcome import settle_plan
from .process_queue import ProcessQueue
from .sendback import reset_retry_topic
from .types import EXPIRED_DELAY_LEVEL, ConsumeContext, ConsumeResult, Handler

__all__ = ["ConcurrentConsumeService"]

log = logging.getLogger("rmq_async.consumer")

#: reference count (CPython); elsewhere every context counts as held, so none is reused
_refs: Callable[[object], int] = getattr(sys, "getrefcount", lambda obj: 1 << 30)

#: a task's first step can run in its creator, as that task (``eager_start``, see .eager)
_EAGER_TASKS = EAGER

#: a consume batch whose handler returned, to settle: (batch, result, context, seconds it took)
_Done = tuple[list[MessageExt], ConsumeResult, ConsumeContext, float]
#: what the pull loops hand to the workers: a pulled batch, the index its consumption resumes at, and
#: the consume batch before that index to settle first (a plain handler's non-success, see submit)
_Item = tuple[ProcessQueue, list[MessageExt], int, _Done | None]


class _Slot:
    """One worker's state, kept across its cancel scopes: the pulled batch in hand (``msgs`` from
    index ``i``), the consume batch that was running when the deadline fired (``batch``, or ``done``
    when its handler had returned), and the plain successes not acknowledged yet (``ok``)."""

    __slots__ = ("batch", "dl", "done", "i", "msgs", "ok", "pq", "scope", "tver")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.dl = math.inf
        self.tver = 0
        self.pq: ProcessQueue | None = None
        self.msgs: list[MessageExt] | None = None
        self.i = 0
        self.batch: list[MessageExt] = []
        self.done: tuple[list[MessageExt], ConsumeResult, ConsumeContext, float] | None = None
        self.ok: list[MessageExt] = []


async def _watch(task: asyncio.Task[Any]) -> None:
    """Await an eagerly started consume task in the task group of a service run on its own (without
    the run's HandlerTasks): its failure fails the group, and cancelling this cancels it."""
    await task


class _Taken:
    """A pulled batch an async handler consumes in its own eagerly started task (:meth:`take_now`):
    where it is (``i``: the consume batch running), whether the rest is held in the process queue
    (``held``: since a handler suspended or a batch was not a plain success) and the deadline armed
    when the handler suspended (``since``, ``timer``)."""

    __slots__ = ("counted", "expired", "held", "i", "msgs", "pq", "since", "task", "timer")

    def __init__(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self.pq = pq
        self.msgs = msgs
        self.i = 0
        self.held = False
        self.counted = False  # in ``active`` (it suspended: see _take_eagerly)
        self.expired = False
        self.since = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None


class ConcurrentConsumeService:
    """The concurrent :class:`~rmq_async.consumer.service.ConsumeService`. Without a handler, pulled
    messages go to :attr:`deliveries` (the ``async for`` stream), settled through :meth:`process_result`."""

    gates_pulls = False
    sync_drop = False

    def __init__(self, ctx: ConsumerContext, handler: Handler | None) -> None:
        self.c = ctx
        self.handler = handler
        self.invoker = Invoker(ctx, handler)  # runs the handler: hooks, observers, failures, results
        self.deliveries: DeliveryStream | None = None  # made by open_deliveries()
        self._inbox: Handoff[_Item] = Handoff()
        #: a plain (not async) handler: called inline by submit (see there)
        self._plain = self.invoker.plain_fn is not None
        self.active = 0  # pulled batches a worker has started and not finished
        #: the cancel scopes of workers inside a pulled batch: a finite deadline is the running
        #: consume batch's (set from its start, see _consume), what set_timeout moves
        self.scopes: set[anyio.CancelScope] = set()
        self.timeout = ctx.deadlines.timeout
        self._tver = 0  # bumped by set_timeout
        self._idle: anyio.Event | None = None  # made only while someone waits for idleness
        self._loop_time: Callable[[], float] = time.monotonic  # the running loop's clock, from run()
        self._stages = ctx.stages  # the stage recorder (ConsumerConfig.stage_sample), None: off
        self._loop: asyncio.AbstractEventLoop | None = None  # from run()
        #: an async handler's pulled batch is consumed in a task started eagerly by the pull loop
        #: (see take_now), not handed to a worker
        self._eager = _EAGER_TASKS and handler is not None and not self._plain
        self._concurrency = ctx.config.concurrency
        #: eagerly started batches whose handler suspended (each counted in ``active`` too)
        self._taken: set[_Taken] = set()
        self._room: list[asyncio.Future[None]] = []  # workers waiting for ``active`` below concurrency
        self._tg: anyio.abc.TaskGroup | None = None  # run()'s, when not run among HandlerTasks
        self._starter: EagerStarter | None = None  # from run(), with the eager path

    def open_deliveries(self) -> DeliveryStream:
        """The ``async for`` stream of a consumer without a handler (made on first use)."""
        if self.deliveries is None:
            self.deliveries = DeliveryStream(self.c, self.process_result)
        return self.deliveries

    def set_timeout(self, timeout: float) -> None:
        """Apply a new consume timeout to the handlers already running."""
        old, self.timeout = self.timeout, timeout
        self._tver += 1
        for scope in self.scopes:
            dl = scope.deadline
            if dl != math.inf:
                # _consume sets a deadline of start + timeout + slack and keeps it while the batches
                # after that one start within the slack: the running batch started at or before
                # dl - old, so dl - old + timeout is never early and at most the slack late
                scope.deadline = dl - old + timeout
        for w in self._taken:
            if w.timer is not None:
                w.timer.cancel()
                self._arm(w)

    async def wait_idle(self) -> None:
        """Wait until no worker is inside a pulled batch."""
        while self.active > 0:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    # -- intake -------------------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self.deliveries is not None:
            self.deliveries.submit(pq, msgs)
            return
        if self._plain and not self.c.stopping:
            fn = self.invoker.plain_handler()
            if fn is not None:
                self._consume_plain(pq, msgs, fn)
                return
        # one item per pulled batch: the worker cuts it into consume batches, which keeps the
        # per-message cost (hand-offs, wake-ups) off the hot path
        self._inbox.put((pq, msgs, 0, None))

    def take_now(self, pq: ProcessQueue, msgs: list[MessageExt]) -> bool:
        """The pull loop's offer of a pulled batch before it is held in ``pq`` (the optional part of
        the :class:`~.pulling.PullSink` seam): a plain handler consumes it at once, and only what it
        did not finish is put in ``pq`` (and handed to the workers), so a batch consumed in full
        costs the process queue nothing. An async handler consumes it in a task of its
        own started eagerly (:meth:`_take_eagerly`). False: not taken (hooks, the ``async for``
        stream, a stop, every consume slot busy, no eager task start, see .eager): the loop holds
        it and submits it."""
        if self._eager:
            c = self.c
            if (
                c.stopping
                or self.deliveries is not None
                or c.before_hooks
                or c.after_hooks
                or self.active >= self._concurrency
                or self._starter is None
            ):
                return False
            self._take_eagerly(pq, msgs)
            return True
        if not self._plain or self.c.stopping or self.deliveries is not None:
            return False
        fn = self.invoker.plain_handler()
        if fn is None:
            return False
        self._consume_plain(pq, msgs, fn, held=False)
        return True

    def _consume_plain(
        self,
        pq: ProcessQueue,
        msgs: list[MessageExt],
        fn: Callable[[list[MessageExt], ConsumeContext], Any],
        held: bool = True,
    ) -> None:
        """A plain handler's pulled batch, consumed here, in the pulling task, without a hand-off to
        a worker: a plain function cannot suspend, so nothing is gained by a worker and its wake-up
        costs more than most such handlers. Plain successes are acknowledged together at the end;
        the first consume batch that is not one (RECONSUME_LATER, ``ack_index``, a raise) goes to a
        worker with the rest, to be settled there (its send-backs await). A plain function that
        returns an awaitable (``lambda msgs, ctx: coro(msgs)``) sends the batch and all later ones to
        the workers, which call it again and await what it returns. ``held``: the batch is in
        ``pq`` already (else only what goes to the workers is put there, see :meth:`take_now`)."""
        c = self.c
        stages = self._stages
        if stages is not None:
            stages.picked(msgs)
        if pq.dropped:
            return  # (as a worker: not started)
        if pq.mq.topic == c.retry_topic or c.namespace:
            reset_retry_topic(msgs, c.retry_topic, c.namespace)
        mq = pq.mq
        n = c.config.consume_batch_max_size
        end = len(msgs)
        success = ConsumeResult.SUCCESS
        ctx = ConsumeContext(mq)
        i = 0
        stopped = False  # by a consume batch that is not a plain success (``result``)
        result: object = None
        if n == 1:
            # the default batch size: message by message, without the general loop's slicing
            for m in msgs:
                if pq.dropped:
                    break
                try:
                    result = fn([m], ctx)
                except BaseException as exc:
                    self.invoker.failed(exc, mq, [m])  # re-raises a cancellation of ours
                    result = ConsumeResult.RECONSUME_LATER
                if (result is None or result is success) and ctx.ack_index is None:
                    i += 1
                    if ctx.delay_level or _refs(ctx) > 2:
                        ctx = ConsumeContext(mq)  # touched or held by the handler: never reused
                    continue
                stopped = True
                break
        else:
            while i < end:
                if pq.dropped:
                    break
                try:
                    result = fn(msgs[i : i + n], ctx)
                except BaseException as exc:
                    self.invoker.failed(exc, mq, msgs[i : i + n])  # re-raises a cancellation of ours
                    result = ConsumeResult.RECONSUME_LATER
                if (result is None or result is success) and ctx.ack_index is None:
                    i += n
                    if ctx.delay_level or _refs(ctx) > 2:
                        ctx = ConsumeContext(mq)
                    continue
                stopped = True
                break
        i = min(i, end)  # (the last consume batch may be short)
        if not held and stopped and not pq.dropped:
            pq.put(msgs[i:])  # what the workers settle or consume: held from here on
        if i:
            if held:
                self._ack(pq, msgs[:i])
            else:
                self._passed(pq, msgs, i)
        if not stopped:
            # all consumed, or the queue was dropped (the rest is its next owner's): nothing left
            return
        done: _Done | None = None
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never started: none of its code ran
            self._plain = False
            log.warning(
                "handler %r of group %s is a plain function that returned an awaitable: its "
                "batches go to the consume workers from now on, which await it",
                getattr(self.handler, "__qualname__", self.handler),
                c.group,
            )
        else:
            done = (msgs[i : i + n], self.invoker.checked(result), ctx, 0.0)
            i += n
        if i < end or done is not None:
            self._inbox.put((pq, msgs, min(i, end), done))

    # -- an async handler's eager consumption ---------------------------------------------------------

    def _take_eagerly(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Consume ``msgs`` in a new task whose first step runs here, in the pulling task, as that
        task (``eager_start``: ``current_task()``, cancel scopes, timeouts and context variables are
        the new task's own). A handler that returns without suspending (the common case of a fast
        ``async def``) is done within that step: no worker's wake-up, no turn of the loop, nothing
        held in ``pq`` (as a plain handler's batch, see :meth:`_consume_plain`). Once the task
        suspends it goes on by itself as one of the ``concurrency`` consume slots (it counts in
        ``active``; workers wait for a free slot): what it has not consumed is held in ``pq`` from
        then on, a running handler's consume deadline is armed, the run's HandlerTasks take it in
        (a stop cancels it once, waits for it, gives up on it after the grace), and it consumes the
        rest of its pulled batch as a worker does (:meth:`_consume_taken`)."""
        assert self._loop is not None and self._starter is not None
        w = _Taken(pq, msgs)
        # (a failure of ours raises here: the pull loop, and so the run, ends with it)
        task = w.task = self._starter.start(self._consume_taken(w))
        if task is None:
            return  # consumed in this first step
        if not w.held:  # suspended in the handler of consume batch w.i: armed for its deadline
            self._hold(w)
            w.since = self._loop_time()
            self._arm(w)
        # else: suspended settling a consume batch (a send-back: never cut by the deadline)
        w.counted = True
        self.active += 1
        self._taken.add(w)
        if not self.c.adopt_handler_task(task):  # a stop cancels it with the other handlers
            assert self._tg is not None  # (a service run on its own: its task group watches it)
            self._tg.start_soon(_watch, task)

    def _hold(self, w: _Taken) -> None:
        """From consume batch ``w.i`` on, ``w``'s pulled batch is held in its process queue (before
        it, consumed: passed by, see :meth:`_passed`)."""
        pq, msgs, i = w.pq, w.msgs, w.i
        w.held = True
        if not pq.dropped:
            pq.put(msgs[i:])
            if i:
                self._passed(pq, msgs, i)

    def _arm(self, w: _Taken) -> None:
        assert self._loop is not None
        w.timer = self._loop.call_at(w.since + self.timeout, self._expire, w)

    def _expire(self, w: _Taken) -> None:
        w.timer = None  # (fired: set_timeout must not arm it again)
        if w.task is not None and not w.task.done():
            w.expired = True
            w.task.cancel()

    async def _consume_taken(self, w: _Taken) -> None:
        """The eagerly started task of :meth:`_take_eagerly`: consume the pulled batch as
        :meth:`_consume_plain` does (successes acknowledged together at the end) until a handler
        suspends or a consume batch is not a plain success; that batch is then settled here, and the
        rest consumed as a worker consumes a pulled batch (:meth:`_consume`)."""
        pq, msgs = w.pq, w.msgs
        c = self.c
        inv = self.invoker
        if self._stages is not None:
            self._stages.picked(msgs)
        if pq.dropped:
            return  # (as a worker: not started)
        if pq.mq.topic == c.retry_topic or c.namespace:
            reset_retry_topic(msgs, c.retry_topic, c.namespace)
        handler = inv.handler()
        mq = pq.mq
        n = c.config.consume_batch_max_size
        end = len(msgs)
        success = ConsumeResult.SUCCESS
        ctx = ConsumeContext(mq)
        i = 0
        result: object = None
        stopped = False  # by a consume batch that suspended or is not a plain success (``result``)
        try:
            if n == 1:
                # the default batch size: message by message, iterated (cheaper than indexing)
                for m in msgs:
                    if pq.dropped:
                        break
                    w.i = i
                    try:
                        result = await handler([m], ctx)
                    except BaseException as exc:
                        if not w.expired:
                            inv.failed(exc, mq, [m])  # re-raises a cancellation of ours
                        result = ConsumeResult.RECONSUME_LATER
                    if not w.held and (result is None or result is success) and ctx.ack_index is None:
                        i += 1
                        if ctx.delay_level or _refs(ctx) > 2:
                            ctx = ConsumeContext(mq)  # touched or held by the handler: never reused
                        continue
                    stopped = True
                    break
            else:
                while i < end:
                    if pq.dropped:
                        break
                    w.i = i
                    try:
                        result = await handler(msgs[i : i + n], ctx)
                    except BaseException as exc:
                        if not w.expired:
                            inv.failed(exc, mq, msgs[i : i + n])  # re-raises a cancellation of ours
                        result = ConsumeResult.RECONSUME_LATER
                    if not w.held and (result is None or result is success) and ctx.ack_index is None:
                        i += n
                        if ctx.delay_level or _refs(ctx) > 2:
                            ctx = ConsumeContext(mq)
                        continue
                    stopped = True
                    break
            if stopped:
                if not w.held:
                    self._hold(w)  # not a plain success, and nothing suspended yet
                await self._taken_returned(w, result, ctx)
                await self._consume_rest(w, i + n)
                return
            if i:
                self._passed(pq, msgs, min(i, end))
        finally:
            if w.counted:
                self._taken_ended(w)

    async def _taken_returned(self, w: _Taken, result: object, ctx: ConsumeContext) -> None:
        """Settle consume batch ``w.i`` (held in ``pq``) after its handler returned, raised, or ran
        past the consume deadline."""
        pq, msgs, i = w.pq, w.msgs, w.i
        batch = msgs[i : i + self.c.config.consume_batch_max_size]
        rt = self._loop_time() - w.since if w.since else 0.0
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w.expired:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # our deadline's cancellation, delivered and done with
            await self._send_back_timed_out(pq, batch)
        elif (result is None or result is ConsumeResult.SUCCESS) and ctx.ack_index is None:
            self.c.stats.consumed(pq.mq.topic, len(batch), rt, ok=True)
            if not pq.dropped:
                self._ack_held(pq, batch)
        else:
            await self._finish(pq, batch, self.invoker.checked(result), ctx, rt)

    async def _consume_rest(self, w: _Taken, start: int) -> None:
        """The rest of ``w``'s pulled batch, from ``start``, consumed as a worker consumes one: under a
        cancel scope whose deadline follows each consume batch (see :meth:`_worker`)."""
        pq, msgs = w.pq, w.msgs
        if start >= len(msgs) or pq.dropped:
            return
        slot = _Slot()
        slot.pq, slot.msgs, slot.i = pq, msgs, start
        try:
            while True:
                with anyio.CancelScope() as scope, self.c.guard():
                    slot.scope, slot.dl, slot.tver = scope, math.inf, self._tver
                    await self._consume(slot)
                    break
                # only our own deadline gets here
                self.scopes.discard(scope)
                await self._settle_timed_out(slot)
        finally:
            self.scopes.discard(slot.scope)
            if slot.ok:
                self._ack(pq, slot.ok)

    def _ack_held(self, pq: ProcessQueue, ok: list[MessageExt]) -> None:
        offset = pq.remove(ok)
        committed = pq.offset
        if offset > committed.value:
            committed.value = offset
        if self._stages is not None:
            self._stages.settled(ok)

    def _taken_ended(self, w: _Taken) -> None:
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        self._taken.discard(w)
        self.active -= 1
        self._wake_room()
        if self.active == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _wait_for_room(self) -> None:
        """A worker's wait while every consume slot is taken (eagerly started batches among them)."""
        assert self._loop is not None
        while self.active >= self._concurrency:
            fut = self._loop.create_future()
            self._room.append(fut)
            try:
                await fut
            except BaseException:
                if fut in self._room:
                    self._room.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._wake_room()  # woken and cancelled at once: the slot passes on
                raise

    def _wake_room(self) -> None:
        while self._room:
            fut = self._room.pop(0)
            if not fut.done():
                fut.set_result(None)
                return

    def retry_locally(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """``submitConsumeRequestLater``: consume ``msgs`` again after a delay (they stay in ``pq``)."""
        c = self.c
        c.stats.local_retries += len(msgs)

        async def later() -> None:
            await anyio.sleep(c.timing.local_retry_delay)
            if not pq.dropped and not c.stopping:
                self.submit(pq, msgs)

        c.start_soon(later)

    # -- the queue side of the service contract: nothing to hold -------------------------------------

    async def before_pull(self, pq: ProcessQueue) -> bool:
        return True  # (never awaited: gates_pulls is False)

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        pq.drop()
        return True

    async def shutdown(self) -> None:
        return None  # the handlers still running after the shutdown wait end with the task group

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the workers; closing the hand-off ends them once it is drained."""
        # looked up once: every asyncio.get_running_loop() costs a getpid() system call
        self._loop_time = loop_clock()
        self._loop = asyncio.get_running_loop()
        self._tg = tg
        if self._eager:
            self._starter = EagerStarter(self._loop)
        for _ in range(self.c.config.concurrency):
            if not self.c.start_handler(self._worker):  # (a run's HandlerTasks: a stop may abandon one)
                tg.start_soon(self._worker)

    def close(self) -> None:
        self._inbox.close()
        self._end_starter()

    def _end_starter(self) -> None:
        starter, self._starter = self._starter, None  # (take_now takes nothing more)
        if starter is not None:
            starter.close()  # (its parked host; the tasks it started go on)

    # -- workers --------------------------------------------------------------------------------------

    async def _worker(self) -> None:
        """Take pulled batches and consume them, under ONE cancel scope per worker whose deadline is
        moved to each consume batch's deadline (a scope per pulled batch or per message would arm a
        timer each time). A scope whose deadline fired is replaced after the timed-out batch was
        settled; an outer cancellation propagates."""
        w = _Slot()
        try:
            while True:
                with anyio.CancelScope() as scope, self.c.guard():
                    w.scope, w.dl, w.tver = scope, math.inf, self._tver
                    await self._take_and_consume(w)
                    return  # the hand-off was closed
                # only our own deadline gets here
                self.scopes.discard(scope)
                await self._settle_timed_out(w)
        finally:
            self.scopes.discard(w.scope)
            if w.msgs is not None:
                self._pulled_batch_done(w)
            self._end_starter()  # (a run that ends without close(): cancelled)

    async def _take_and_consume(self, w: _Slot) -> None:
        inbox = self._inbox
        c = self.c
        stages = self._stages
        while True:
            if w.msgs is None:
                self.scopes.discard(w.scope)  # idle: no deadline to move
                item = await inbox.get()
                if item is None:
                    return
                pq, msgs, start, done = item
                if self._taken and self.active >= self._concurrency:
                    await self._wait_for_room()  # eagerly started batches hold every slot
                if stages is not None and not start and done is None:
                    stages.picked(msgs)
                if pq.dropped or c.stopping:
                    continue  # not started: at shutdown only work already begun is finished
                if (pq.mq.topic == c.retry_topic or c.namespace) and not start and done is None:
                    # (only retry queues hold retry copies; a plain handler's rest was reset already)
                    reset_retry_topic(msgs, c.retry_topic, c.namespace)
                # a started pulled batch is finished even during a graceful stop (bounded by the
                # shutdown timeout): stopping in its middle would leave a gap below batches other
                # workers finished, and the committed offset would stay at the gap
                w.pq, w.msgs, w.i = pq, msgs, start
                self.active += 1
                if done is not None:  # a plain handler's (see submit): its send-backs are not cut
                    w.scope.deadline = w.dl = math.inf
                    await self._finish(pq, *done)
            await self._consume(w)
            self._pulled_batch_done(w)
            # the batch is freed here, while it is still in the caches (see PullLoop)
            item = msgs = done = None  # type: ignore[assignment]
            if inbox.available() > 0:
                # a pulled batch nobody was woken for (every worker was busy when it came): between
                # pulled batches, let I/O and the pull loops run even when no handler suspended
                # (taking the next batch does not). Batches reserved for woken workers are theirs.
                await asyncio.sleep(0)

    def _pulled_batch_done(self, w: _Slot) -> None:
        assert w.pq is not None
        if w.ok:
            self._ack(w.pq, w.ok)
        w.pq = w.msgs = None
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    def _passed(self, pq: ProcessQueue, msgs: list[MessageExt], i: int) -> None:
        """``_ack`` of ``msgs[:i]``, consumed before they were held (:meth:`take_now`): the rest, if
        any, was put in ``pq`` just before, and holds the committable offset back."""
        c = self.c
        c.stats.consumed(pq.mq.topic, i, 0.0, ok=True)
        if not pq.dropped:
            offset = pq.pass_by(msgs[i - 1].queue_offset)
            committed = pq.offset
            if offset > committed.value:
                committed.value = offset
            if self._stages is not None:
                self._stages.settled(msgs[:i])

    def _ack(self, pq: ProcessQueue, ok: list[MessageExt]) -> None:
        c = self.c
        c.stats.consumed(pq.mq.topic, len(ok), 0.0, ok=True)
        if not pq.dropped:
            offset = pq.remove(ok)
            committed = pq.offset
            if offset > committed.value:  # only forward (-1: the queue was empty)
                committed.value = offset
            if self._stages is not None:
                self._stages.settled(ok)
        ok.clear()

    async def _consume(self, w: _Slot) -> None:
        """Consume ``w.msgs[w.i:]`` batch by batch inside the worker's scope.

        Plain successes are acknowledged in small groups (whatever finished within about a
        millisecond), so the process queue and the offset store are touched once per group, not once
        per message; anything else is settled at once. The hot path keeps its state in locals and
        writes it back to ``w`` only when it leaves by an exception (the deadline)."""
        assert self.handler is not None and w.pq is not None and w.msgs is not None
        c = self.c
        inv = self.invoker
        handler = inv.handler()  # itself unless traced or observed (OpenTelemetry)
        pq, msgs, i, ok = w.pq, w.msgs, w.i, w.ok
        if type(msgs) is not list:
            # the decoder's list subclass (PulledMessages): indexed and sliced per message below, a
            # plain list's specialised subscript is the cheaper by far (the copy is per pulled batch)
            msgs = list(msgs)
        mq = pq.mq
        n = c.config.consume_batch_max_size
        end = len(msgs)
        loop_time = self._loop_time
        hooks = inv.has_hooks
        plain = not inv.has_after_hooks
        success = ConsumeResult.SUCCESS
        scope = w.scope
        self.scopes.add(scope)  # set_timeout moves its deadline while a handler runs
        dl, tver = w.dl, w.tver  # the scope's deadline as last set here (read back after set_timeout)
        if tver != self._tver:  # set_timeout ran since: it moved the deadline
            tver, dl = self._tver, scope.deadline
        timeout, inf = self.timeout, math.inf
        # precomputed bounds, so the per-message checks are single comparisons: a batch starting
        # after ``move_after`` needs the deadline moved; a clock past ``fired_after`` may mean it fired
        move_after = -inf if dl == inf else dl - timeout
        fired_after = dl - 0.001
        # what the running handler was given (None: no handler running); it may change that list, so
        # the bookkeeping uses msgs[i : i + n], never this
        batch: list[MessageExt] | None = None
        # reused while nothing else holds it and the handler leaves it untouched (checked after each
        # plain success): nobody can tell it from a new one, and it saves an allocation per message
        ctx = ConsumeContext(mq)
        now = start = loop_time()
        # plain successes not acknowledged yet: ok (carried in the slot) + msgs[ok_from:i], flushed
        # to the process queue once the clock passes ok_until (~1 ms groups) or anything else settles
        ok_from, ok_until = i, now + 0.001
        try:
            while i < end:
                if pq.dropped:
                    ok += msgs[ok_from:i]
                    i = ok_from = end
                    break
                # a new list each time (a one-item list comes from CPython's free list: cheaper
                # than checking that the last one is unshared and untouched)
                batch = msgs[i : i + n] if n > 1 else [msgs[i]]
                start = now
                # the deadline moves only when it would fall short of this batch's own deadline, and
                # then a little further (slack): at most one timer re-arm per slack window, not two
                # per message; a batch is never cancelled early, at most ``slack`` late
                if start > move_after:
                    dl = scope.deadline = start + timeout + min(0.05, timeout / 100)
                    move_after = dl - timeout
                    fired_after = dl - 0.001
                try:
                    if hooks:
                        await inv.before(batch, ctx)
                    result = await handler(batch, ctx)
                except BaseException as exc:
                    inv.failed(exc, mq, msgs[i : i + n])  # re-raises our deadline, or shutdown
                    result = ConsumeResult.RECONSUME_LATER
                now = loop_time()
                if now >= fired_after or tver != self._tver:
                    if scope.cancel_called:
                        # the deadline fired just as the handler returned: its result stands, but
                        # nothing may be awaited inside a cancelled scope: settle it outside. The
                        # successes before it are closed first: the batch is settled, never acked.
                        ok += msgs[ok_from:i]
                        w.done = (msgs[i : i + n], self.invoker.checked(result), ctx, now - start)
                        batch = None
                        i = ok_from = i + n
                        await anyio.sleep_forever()  # raises the scope's cancellation at once
                    if tver != self._tver:  # set_timeout moved the deadline while the handler ran
                        tver, dl, timeout = self._tver, scope.deadline, self.timeout
                        move_after = -inf if dl == inf else dl - timeout
                        fired_after = dl - 0.001
                if (result is None or result is success) and ctx.ack_index is None and plain:
                    # the common case finishes without a suspension point: the deadline cannot fire
                    i += n
                    if now > ok_until:
                        ok += msgs[ok_from:i]
                        ok_from, ok_until = i, now + 0.001
                        self._ack(pq, ok)
                    if ctx.delay_level or _refs(ctx) > 2:
                        ctx = ConsumeContext(mq)  # touched or held by the handler: never reused
                    continue
                ok += msgs[ok_from:i]
                done = msgs[i : i + n]
                batch = None  # settled below, whatever happens to that await
                i = ok_from = i + n
                if ok:
                    self._ack(pq, ok)
                # send-backs and hooks must not be cut by the deadline (set_timeout skips inf)
                dl = scope.deadline = math.inf
                move_after = fired_after = -inf
                await self._finish(pq, done, self.invoker.checked(result), ctx, now - start)
                ctx = ConsumeContext(mq)  # the settled one went to the result and the hooks
                now = loop_time()
                ok_until = now + 0.001
                if tver != self._tver:  # set_timeout ran meanwhile (the deadline is inf: nothing moved)
                    tver, timeout = self._tver, self.timeout
        except BaseException:
            # left by the deadline (or an outer cancellation) inside the handler or a hook: the
            # batch it was running (from i) is the timed-out one; the successes before it are kept
            ok += msgs[ok_from:i]
            if batch is None:
                w.i, w.batch = i, []
            else:
                w.i, w.batch = i + n, msgs[i : i + n]
            raise
        finally:
            w.dl, w.tver = dl, tver
        ok += msgs[ok_from:i]
        w.i = i

    async def _settle_timed_out(self, w: _Slot) -> None:
        """After the worker's deadline fired: settle the batch that ran past the consume timeout (or
        that returned just as it fired), then go on with the rest of its pulled batch."""
        pq = w.pq
        if pq is None:
            return  # fired while the worker was idle: nothing was running
        if w.ok:
            self._ack(pq, w.ok)
        done, w.done = w.done, None
        batch, w.batch = w.batch, []
        if done is not None:
            await self._finish(pq, *done)
        elif batch:
            await self._send_back_timed_out(pq, batch)

    async def _send_back_timed_out(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        """Settle a consume batch whose handler ran past the consume timeout: sent back (the delay
        level of an expired message, as Java's cleaner), logged with its message ids."""
        log.warning(
            "handler of group %s ran past the consume timeout (%.1fs) on %s: sent back %s",
            self.c.group,
            self.timeout,
            pq.mq,
            [m.msg_id for m in batch],
        )
        await self._finish(
            pq,
            batch,
            ConsumeResult.RECONSUME_LATER,
            ConsumeContext(pq.mq, delay_level=EXPIRED_DELAY_LEVEL),
            self.timeout,
            True,
        )

    async def _finish(
        self,
        pq: ProcessQueue,
        batch: list[MessageExt],
        result: ConsumeResult,
        ctx: ConsumeContext,
        rt: float,
        timed_out: bool = False,
    ) -> None:
        c = self.c
        c.stats.consumed(pq.mq.topic, len(batch), rt, ok=result is ConsumeResult.SUCCESS)
        if c.after_hooks:
            await self.invoker.after(batch, ctx, result)  # their own list, as the handler's
        if pq.dropped and not timed_out:
            # the queue moved to another member while we consumed: it will redeliver; don't ack
            return
        await self.process_result(pq, batch, result, ctx)

    async def process_result(
        self, pq: ProcessQueue, batch: list[MessageExt], result: ConsumeResult, ctx: ConsumeContext
    ) -> None:
        _, failed, delay_level = settle_plan(result, ctx, batch, self.c.group)
        keep: list[MessageExt] = []
        if failed:
            if self.c.config.clustering:
                for m in failed:
                    if not await self.c.send_back(m, delay_level):
                        m.reconsume_times += 1
                        keep.append(m)
            else:
                for m in failed:
                    log.warning("broadcasting: message %s failed and is dropped (as in Java)", m.msg_id)
        done = [m for m in batch if m not in keep] if keep else batch
        offset = pq.remove(done)
        if not pq.dropped:
            pq.offset.advance(offset)
        if keep:
            self.retry_locally(pq, keep)
