"""An async handler's pulled batch consumed in an eagerly started task (``eager_start`` on Python
3.12+, :mod:`rmq_async.consumer.eager` by hand on 3.11; :meth:`ConcurrentConsumeService.take_now`):
the service runs its workers in a task group, and the test plays the pull loop (it offers each pulled
batch, as ``PullLoop`` does, before holding it). What is checked: a handler that does not suspend is
done within the offer, without a worker and without holding anything; one that suspends runs on as
its own task, its rest held in the process queue and finished by the workers; task-bound code before
the first suspension (cancel scopes, timeouts) is the new task's; ``concurrency`` bounds the handlers
running at once; the consume deadline, failures and a stop keep at-least-once."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from support.consumer_context import StubApi, make_context, owned

from rmq_async.config import ConsumerConfig
from rmq_async.consumer.concurrently import ConcurrentConsumeService
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.eager import EAGER
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.types import EXPIRED_DELAY_LEVEL, ConsumeContext, ConsumeResult
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt

pytestmark = pytest.mark.skipif(not EAGER, reason="no eager task start on this Python")

Handler = Callable[[list[MessageExt], ConsumeContext], Awaitable["ConsumeResult | None"]]


def _msgs(queue: int, count: int = 32) -> list[MessageExt]:
    return [
        MessageExt("T", b"x", queue_id=queue, queue_offset=100 + k, commit_log_offset=100 + k)
        for k in range(count)
    ]


class _Run:
    def __init__(self, c: ConsumerContext, svc: ConcurrentConsumeService, api: StubApi) -> None:
        self.c, self.svc, self.api = c, svc, api

    def pq(self, queue: int = 0) -> ProcessQueue:
        return owned(self.c, ProcessQueue(MessageQueue("T", "b", queue)))

    def committed(self, pq: ProcessQueue) -> int:
        return self.c.offset_store.read_memory(pq.mq)

    async def idle(self) -> None:
        with anyio.fail_after(10):
            await self.svc.wait_idle()
            # the rest of a suspended batch may still sit in the hand-off, not yet taken
            while len(self.svc._inbox) or self.svc.active:
                await self.svc.wait_idle()
                await asyncio.sleep(0)


@asynccontextmanager
async def _service(handler: Handler, concurrency: int = 4, batch: int = 1) -> AsyncIterator[_Run]:
    api = StubApi()
    config = ConsumerConfig(group="g", concurrency=concurrency, consume_batch_max_size=batch)
    c = make_context(api=api, config=config)
    svc = ConcurrentConsumeService(c, handler)
    async with anyio.create_task_group() as tg:
        await svc.run(tg)
        try:
            yield _Run(c, svc, api)
        finally:
            svc.close()
            tg.cancel_scope.cancel()


async def test_a_handler_that_does_not_suspend_is_done_within_the_offer_as_its_own_task() -> None:
    tasks: set[asyncio.Task[object] | None] = set()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        tasks.add(asyncio.current_task())

    async with _service(handler) as run:
        pq, me = run.pq(), asyncio.current_task()
        assert run.svc.take_now(pq, _msgs(0))
        # consumed in full inside the call: nothing held, committed past the batch, no worker busy
        assert pq.count == 0 and run.committed(pq) == 132 and run.svc.active == 0
        assert run.svc.take_now(pq, [MessageExt("T", b"x", queue_offset=132)])
        assert run.committed(pq) == 133
    # never the offering (pulling) task; one task per pulled batch (Python 3.11: batches done within
    # the offer run as one parked host task, one after the other, see rmq_async.consumer.eager)
    assert len(tasks) == (2 if sys.version_info >= (3, 12) else 1) and me not in tasks


async def test_a_suspending_handler_goes_on_as_its_own_task_and_the_workers_finish_the_rest() -> None:
    release = asyncio.Event()
    seen: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        off = msgs[0].queue_offset
        if off == 105:
            await release.wait()
        seen.append(off)

    async with _service(handler) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0))
        # 100-104 consumed and committed; 105 on (its handler suspended) and everything after held
        assert seen == [100, 101, 102, 103, 104]
        assert run.committed(pq) == 105 and pq.count == 27 and run.svc.active == 1
        release.set()
        await run.idle()
        assert sorted(seen) == list(range(100, 132))
        assert pq.count == 0 and run.committed(pq) == 132


async def test_task_bound_code_before_the_first_suspension_belongs_to_the_handlers_task() -> None:
    # a cancel scope or a timeout entered before the handler's first await and left after it: bound
    # to the task that runs the handler, which must be the one that resumes it
    done: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        with anyio.CancelScope():
            async with asyncio.timeout(5):
                await asyncio.sleep(0)
        done.append(msgs[0].queue_offset)

    async with _service(handler) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 4))
        await run.idle()
        assert done == [100, 101, 102, 103] and run.committed(pq) == 104
        assert run.api.sent_back == []  # none failed


async def test_concurrency_bounds_the_handlers_running_at_once() -> None:
    release = asyncio.Event()
    running = peak = 0

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await release.wait()
        finally:
            running -= 1

    async with _service(handler, concurrency=2) as run:
        pqs = [run.pq(q) for q in range(4)]
        assert run.svc.take_now(pqs[0], _msgs(0, 4))
        assert run.svc.take_now(pqs[1], _msgs(1, 4))
        # both slots taken by suspended handlers: the next batches are not taken but held and
        # submitted (as the pull loop does), for the workers, which wait for a free slot
        for q in (2, 3):
            msgs = _msgs(q, 4)
            assert not run.svc.take_now(pqs[q], msgs)
            pqs[q].put(msgs)
            run.svc.submit(pqs[q], msgs)
        for _ in range(20):
            await asyncio.sleep(0)
        assert peak == 2
        release.set()
        await run.idle()
        assert peak == 2
        assert [run.committed(pq) for pq in pqs] == [104] * 4


async def test_a_handler_past_the_consume_deadline_is_cancelled_and_its_batch_sent_back() -> None:
    cancelled: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if msgs[0].queue_offset == 101:
            try:
                await asyncio.Event().wait()  # hangs
            except asyncio.CancelledError:
                cancelled.append(101)
                raise

    async with _service(handler) as run:
        run.svc.set_timeout(0.2)
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 4))
        await run.idle()
        assert cancelled == [101]
        assert run.api.sent_back == [101] and run.api.sent_back_levels == [EXPIRED_DELAY_LEVEL]
        assert pq.count == 0 and run.committed(pq) == 104


async def test_failures_with_and_without_a_suspension_are_sent_back_and_the_rest_consumed() -> None:
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        off = msgs[0].queue_offset
        if off == 102:
            raise RuntimeError("boom")  # before any suspension: settled by a worker
        if off == 105:
            await asyncio.sleep(0)
            return ConsumeResult.RECONSUME_LATER  # after one: settled by its own task
        return None

    async with _service(handler) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 8))
        await run.idle()
        assert run.api.sent_back == [102, 105]
        assert pq.count == 0 and run.committed(pq) == 108


async def test_consume_batches_of_several_messages_are_cut_from_the_pulled_batch_in_order() -> None:
    batches: list[list[int]] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        offs = [m.queue_offset for m in msgs]
        batches.append(offs)
        if 106 in offs:
            return ConsumeResult.RECONSUME_LATER  # before any suspension: settled by a worker
        if 109 in offs:
            await asyncio.sleep(0)  # the rest goes on in the handler's own task
        return None

    async with _service(handler, batch=3) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 11))
        # consumed within the offer until the batch that is not a plain success
        assert batches[:3] == [[100, 101, 102], [103, 104, 105], [106, 107, 108]]
        await run.idle()
        assert batches == [[100, 101, 102], [103, 104, 105], [106, 107, 108], [109, 110]]
        assert run.api.sent_back == [106, 107, 108]
        assert pq.count == 0 and run.committed(pq) == 111


async def test_a_stop_cancels_a_suspended_handler_and_commits_nothing_past_it() -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if msgs[0].queue_offset == 102:
            entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

    async with _service(handler) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 8))
        await entered.wait()
        for _ in range(3):
            await asyncio.sleep(0)  # the task group's watcher is running
    # the task group's end cancelled the watcher, and with it the handler's task
    assert cancelled.is_set()
    assert run.committed(pq) == 102 and pq.count == 6


async def test_a_changed_timeout_applies_to_a_handler_already_suspended() -> None:
    entered = asyncio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if msgs[0].queue_offset == 100:
            entered.set()
            await asyncio.Event().wait()  # hangs

    async with _service(handler) as run:
        pq = run.pq()
        assert run.svc.take_now(pq, _msgs(0, 2))
        await entered.wait()
        # armed with the default (15 minutes) when it suspended; shortened now, it is cut soon
        run.svc.set_timeout(0.1)
        await run.idle()
        assert run.api.sent_back == [100] and run.api.sent_back_levels == [EXPIRED_DELAY_LEVEL]
        assert run.committed(pq) == 102
