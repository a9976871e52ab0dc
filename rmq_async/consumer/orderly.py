"""Orderly consumption (Java ``ConsumeMessageOrderlyService``), asyncio-style.

Strategy: one *drive* task per process queue at most (``OrderlyState.active``), started when a pull hands
messages over and ending when the queue is empty. It takes ``consume_batch_max_size`` messages in
offset order (``ProcessQueue.take``), runs the handler while holding the queue's ``consume_lock`` (what
a rebalance waits for before dropping the queue), settles the result under the same lock, and goes on.
Queues progress concurrently (one task each, bounded by ``concurrency``); a task gives way after
``Timing.orderly_time_slice``.

Clustering mode consumes a queue only while its broker lock lease is valid (:mod:`.orderly_locks`):
a handler runs in a cancel scope whose deadline is the lease end (moved on every renewal), so a
handler still running when the lease ends is cancelled and its batch is put back, never committed;
the queue then waits to be locked again, and its start offset is re-read from the broker at the first
pull after (re)locking. Broadcasting mode keeps per-queue ordering without broker locks.

Results: SUCCESS commits up to the batch end (auto-commit; COMMIT/ROLLBACK are for manual-commit
mode); SUSPEND_CURRENT_QUEUE_A_MOMENT puts the batch back and retries it after the suspend time,
unless a message reached ``max_reconsume_times``: that one goes to the DLQ through a send to
``%RETRY%group`` (the broker redirects it) and the queue moves on. Without a handler, the ``async
for`` delivery API gets one message at a time per queue and the next is handed out only once the
previous one is settled (``ack`` = SUCCESS, ``retry`` = SUSPEND).
"""

from __future__ import annotations

import logging
import time

import anyio
import anyio.abc
import anyio.lowlevel

from ..protocol.stored import MessageExt
from .context import ConsumerContext
from .deadlines import loop_clock
from .delivery import DeliveryStream
from .invoke import Invoker
from .orderly_locks import OrderlyLocks, orderly_state
from .outcome import suspend_seconds
from .process_queue import OrderlyState, Pending, ProcessQueue
from .sendback import reset_retry_topic, send_to_dlq
from .types import ConsumeContext, ConsumeResult, OrderlyContext, OrderlyHandler, OrderlyResult

__all__ = ["OrderlyConsumeService"]

log = logging.getLogger("rmq_async.consumer")

_SUSPEND = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT


class OrderlyConsumeService:
    """The orderly :class:`~rmq_async.consumer.service.ConsumeService` (``orderly=True``): the
    consumption side. ``locks`` is the broker-lock side (:class:`~.orderly_locks.OrderlyLocks`), which
    it asks whether a queue's lease is valid, to wait for one, and for a handler's deadline."""

    sync_drop = True

    def __init__(self, ctx: ConsumerContext, handler: OrderlyHandler | None, locks: OrderlyLocks) -> None:
        self.c = ctx
        self.handler = handler
        self.invoker = Invoker(ctx, handler)  # runs the handler: hooks, observers, failures, results
        self.deliveries: DeliveryStream | None = None  # made by open_deliveries()
        self.clustering = ctx.config.clustering
        self.gates_pulls = self.clustering  # pulls wait for a valid lock lease
        self.locks = locks
        self.timeout = ctx.deadlines.timeout
        self.running = 0
        #: the states of queues whose handler is running (shutdown cancels them)
        self._consuming: set[OrderlyState] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._limiter = anyio.CapacityLimiter(ctx.config.concurrency)
        self._closed = False
        self._idle: anyio.Event | None = None  # made only while someone waits for idleness

    def open_deliveries(self) -> DeliveryStream:
        """The ``async for`` stream of a consumer without a handler (made on first use)."""
        if self.deliveries is None:
            self.deliveries = DeliveryStream(self.c, self.process_result)
        return self.deliveries

    # -- lifecycle (the ConsumeService contract) ---------------------------------------------------

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._loop_time = loop_clock()
        await self.locks.run(tg)

    def close(self) -> None:
        """Stop starting batches (running handlers finish; see :meth:`wait_idle`); no more relocking."""
        self._closed = True
        self.locks.close()

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Pull only under a valid lease (the lock side's decision)."""
        return await self.locks.before_pull(pq)

    async def wait_idle(self) -> None:
        while self.running > 0:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def set_timeout(self, timeout: float) -> None:
        """The consume timeout: an orderly handler running longer is logged, never cancelled (Java's
        ConsumeMessageOrderlyService has no consume timeout; cancelling would cut its side effects and
        retry, or dead-letter, a batch Java would commit)."""
        self.timeout = timeout

    # -- intake -------------------------------------------------------------------------------------

    _state = staticmethod(orderly_state)

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Pulled messages are in ``pq``: make sure a drive task consumes them."""
        if self._closed or pq.dropped or self._tg is None:
            return
        st = self._state(pq)
        if not st.active:
            st.active = True
            if not self.c.start_handler(self._drive, pq, st, 0.0):
                self._tg.start_soon(self._drive, pq, st, 0.0)

    # -- rebalance and shutdown -------------------------------------------------------------------------

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        """Stop taking batches from ``pq``, wait up to ``wait`` s for its running handler, drop it.

        True when no handler was running at the end (the queue can be unlocked at once)."""
        st = pq.orderly
        if st is not None:
            st.revoking = True
        idle = False
        with anyio.move_on_after(wait):
            await pq.consume_lock.acquire()
            idle = True
        pq.drop()
        if idle:
            pq.consume_lock.release()
        elif st is not None and st.scope is not None and not self.clustering:
            st.scope.cancel()  # broadcasting: nobody else owns the queue; no need to let it run on
        return idle

    async def shutdown(self) -> None:
        """At shutdown, after offsets were persisted: cancel stragglers, then release every broker
        lock (a sync 42 of all queues)."""
        self._closed = True
        for st in self._consuming:
            if st.scope is not None:
                st.scope.cancel()
        with anyio.move_on_after(self.c.timing.request_timeout):
            await self.wait_idle()
        await self.locks.release_all()

    # -- consumption --------------------------------------------------------------------------------------

    async def _drive(self, pq: ProcessQueue, st: OrderlyState, delay: float) -> None:
        try:
            while True:
                if delay > 0:
                    await anyio.sleep(delay)
                else:
                    await anyio.lowlevel.checkpoint()
                nxt = await self._round(pq, st)
                if nxt is None:
                    return
                delay = nxt
        finally:
            st.active = False

    async def _round(self, pq: ProcessQueue, st: OrderlyState) -> float | None:
        """Consume batches until the queue is empty (None) or must wait (the delay before the next round).

        A round holds one slot of the concurrency limit for its whole run (at most the time slice), as
        a Java ConsumeRequest holds its thread: taking the slot once per batch costs more than the batch."""
        try:
            self._limiter.acquire_nowait()
        except anyio.WouldBlock:
            await self._limiter.acquire()
        try:
            return await self._round_locked(pq, st)
        finally:
            self._limiter.release()

    async def _round_locked(self, pq: ProcessQueue, st: OrderlyState) -> float | None:
        n = self.c.config.consume_batch_max_size if self.handler is not None else 1
        began = time.monotonic()
        while True:
            if pq.dropped or st.revoking or self._closed or self.c.stopping:
                return None
            if not self.locks.lease_valid(pq):
                log.debug("%s: lease not valid: consuming after it is locked again", pq.mq)
                if not await self.locks.ensure_locked(pq):
                    return None
                continue
            if time.monotonic() - began > self.c.timing.orderly_time_slice:
                return 0.0  # give way; the next round starts at once
            batch = pq.take(n)
            if not batch:
                return None
            delay = await self._consume(pq, st, batch)
            if delay is not None:
                return delay

    def _busy(self, delta: int) -> None:
        self.running += delta
        if self.running == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _consume(self, pq: ProcessQueue, st: OrderlyState, batch: list[MessageExt]) -> float | None:
        """One batch; returns a suspend delay, or None to go on with the next batch."""
        c = self.c
        reset_retry_topic(batch, c.retry_topic, c.namespace)
        ctx = OrderlyContext(pq.mq)
        # fast path: no checkpoint when the lock is free (a checkpoint per batch sends the task to the
        # back of the ready queue, behind every other queue's work)
        try:
            pq.consume_lock.acquire_nowait()
        except anyio.WouldBlock:
            await pq.consume_lock.acquire()
        try:
            return await self._consume_locked(pq, st, batch, ctx)
        finally:
            pq.consume_lock.release()

    async def _consume_locked(
        self, pq: ProcessQueue, st: OrderlyState, batch: list[MessageExt], ctx: OrderlyContext
    ) -> float | None:
        c = self.c
        if pq.dropped or st.revoking:
            pq.put_back(batch)
            return None
        result: OrderlyResult | None = None
        self._busy(1)
        st.start = self._loop_time()
        try:
            with anyio.CancelScope(deadline=self.locks.deadline(pq)) as scope, c.guard():
                st.scope = scope
                self._consuming.add(st)
                # the hooks and the handler get their own list: what they do to it must not change
                # which messages are put back or committed. A failure suspends the queue; the lease's
                # end, the deadline or shutdown propagate (then result stays None)
                given = list(batch)
                deliver = None if self.handler is not None else (lambda: self._deliver(pq, st, given[0]))
                result = await self.invoker.call_orderly(given, ctx, deliver)
        except BaseException:
            pq.put_back(batch)  # shutdown: nothing committed
            raise
        finally:
            st.scope = None
            self._consuming.discard(st)
            self._busy(-1)
        if not self.locks.lease_valid(pq):
            # the lease ended while the handler ran: the batch must not be committed, the next owner
            # (or we, once locked again) consumes it again
            log.warning(
                "%s: the lock lease ended while consuming offsets %d..%d: not committed",
                pq.mq,
                batch[0].queue_offset,
                batch[-1].queue_offset,
            )
            pq.put_back(batch)
            return None
        if scope.cancelled_caught or result is None:
            # cancelled by us (shutdown, a lock lost to another member): not the handler failing, so
            # no reconsume counted; the batch is consumed again by whoever holds the queue next
            log.info(
                "orderly handler of group %s on %s was cancelled: its batch is not committed", c.group, pq.mq
            )
            pq.put_back(batch)
            return None
        took = self._loop_time() - st.start
        if took > self.timeout:
            log.warning(
                "orderly handler of group %s ran %.1fs on %s, longer than the consume timeout (%.1fs); "
                "orderly handlers are not cancelled for it (as in Java)",
                c.group,
                took,
                pq.mq,
                self.timeout,
            )
        if self.handler is not None:
            ok = result in (OrderlyResult.SUCCESS, OrderlyResult.COMMIT)
            c.stats.consumed(pq.mq.topic, len(batch), took, ok=ok)
        if c.after_hooks:
            await self.invoker.after(batch, ctx, result)  # their own list, as the handler's
        if pq.dropped:
            pq.put_back(batch)
            return None
        return await self._settle(pq, batch, result, ctx)

    async def _deliver(self, pq: ProcessQueue, st: OrderlyState, m: MessageExt) -> OrderlyResult:
        stream = self.deliveries
        if stream is None:
            return _SUSPEND
        pending = st.pending = Pending(m)
        try:
            stream.submit(pq, [m])
            await pending.done.wait()
        finally:
            st.pending = None
        return pending.result

    async def process_result(
        self, pq: ProcessQueue, batch: list[MessageExt], result: ConsumeResult, ctx: ConsumeContext
    ) -> None:
        """A delivery was settled (``ack``: SUCCESS, ``retry``: SUSPEND): wake its queue's drive task."""
        st = pq.orderly
        pending = st.pending if st is not None else None
        if pending is None or not batch or pending.message is not batch[0]:
            return  # settled after its lease ended or its queue was dropped: it will be delivered again
        pending.result = OrderlyResult.SUCCESS if result is ConsumeResult.SUCCESS else _SUSPEND
        pending.done.set()

    async def _settle(
        self, pq: ProcessQueue, batch: list[MessageExt], result: OrderlyResult, ctx: OrderlyContext
    ) -> float | None:
        """``processConsumeResult``; returns the suspend delay when the queue must wait."""
        commit = -1
        delay: float | None = None
        if ctx.auto_commit:
            if result is _SUSPEND:
                retry = await self._reconsume_or_dlq(batch)
                if retry:
                    pq.put_back(retry)
                    delay = self._suspend_time(ctx)
                else:
                    commit = pq.commit()
            else:
                if result is not OrderlyResult.SUCCESS:
                    log.warning("%s: %s is for manual-commit mode: taken as SUCCESS", pq.mq, result.name)
                commit = pq.commit()
        elif result is OrderlyResult.COMMIT:
            commit = pq.commit()
        elif result is OrderlyResult.ROLLBACK:
            pq.put_back(pq.consuming_messages())
            delay = self._suspend_time(ctx)
        elif result is _SUSPEND:
            retry = await self._reconsume_or_dlq(batch)
            if retry:
                pq.put_back(retry)
                delay = self._suspend_time(ctx)
        if not pq.dropped:
            pq.offset.set(commit)  # -1 (nothing was consuming): left alone
        return delay

    def _suspend_time(self, ctx: OrderlyContext) -> float:
        return suspend_seconds(ctx, self.c.timing.suspend_current_queue, self.c.group)

    async def _reconsume_or_dlq(self, batch: list[MessageExt]) -> list[MessageExt]:
        """``checkReconsumeTimes``: the messages to consume again; those past the maximum go to the DLQ."""
        retry: list[MessageExt] = []
        limit = self.c.max_reconsume_times
        for m in batch:
            if m.reconsume_times >= limit and await self._send_to_dlq(m, limit):
                continue
            m.reconsume_times += 1
            retry.append(m)
        return retry

    async def _send_to_dlq(self, m: MessageExt, limit: int) -> bool:
        return await send_to_dlq(self.c, m, limit)
