"""Review of the orderly consume path (OrderlyConsumeService) on its own, as
tests/unit/consumer/test_concurrently.py does for the concurrent one: the consumer is a plain namespace
with what the service reads, and the broker lock requests are answered by a stub that grants every lock
(clustering mode, the default).

Each test here states a guarantee of the orderly path that the code once broke:

* a handler that raises a stray ``CancelledError`` (it awaited a future or task that someone else
  cancelled) is a failed consume, not a reason to cancel the consumer's whole task group;
* what an after-consume hook does to the list it is given must not change which messages are put back
  or committed (the guarantee ``_consume_locked`` states for the handler and the before hooks).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from support.consumer_context import owned
from support.orderly_stub import OrderlyRig, stub_consumer

from rmq_async import OrderlyContext, OrderlyResult
from rmq_async.config import Timing
from rmq_async.consumer.orderly import OrderlyConsumeService
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt

MQ = MessageQueue("T", "b", 0)


async def _start_queue(c: OrderlyRig, svc: OrderlyConsumeService, count: int = 1) -> ProcessQueue:
    """Lock a new queue (as a rebalance does), then hand it pulled messages (as the pull loop does)."""
    pq = owned(c.ctx, ProcessQueue(MQ))
    c.pqs[MQ] = pq
    assert await svc.locks.lock_new(pq)
    msgs = [MessageExt("T", b"x", queue_offset=100 + k) for k in range(count)]
    pq.put(msgs)
    svc.submit(pq, msgs)
    return pq


async def _run_until_committed(c: OrderlyRig, handler: Any) -> None:
    """Run the service on one locked queue with one message until the first commit (5 s at most)."""
    svc = c.service(handler)
    async with anyio.create_task_group() as tg:
        await svc.run(tg)
        await _start_queue(c, svc)
        with anyio.fail_after(5):
            await c.offset_store.committed.wait()
        tg.cancel_scope.cancel()


async def test_a_stray_cancelled_error_from_the_handler_is_a_failed_consume_not_a_stop() -> None:
    # A handler awaits a future (a shared fetch, a connection's waiter) that its owner cancelled: the
    # handler's task gets a CancelledError although nobody cancelled it. That is the handler failing:
    # the batch must be consumed again (SUSPEND), and the consumer must go on. The drive task must not
    # end with that CancelledError: anyio then cancels the task group it runs in, i.e. the consumer's
    # whole group (pull loops, rebalance, lock renewal), and the consumer stops without a shutdown.
    c = stub_consumer(Timing(suspend_current_queue=0.01))
    calls: list[list[int]] = []
    c.offset_store.calls_before = calls

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        calls.append([m.queue_offset for m in msgs])
        if len(calls) == 1:
            fut = asyncio.get_running_loop().create_future()
            fut.cancel()  # cancelled by its owner, not by us
            await fut  # raises CancelledError in this (not cancelled) task
        return OrderlyResult.SUCCESS

    svc = c.service(handler)
    went_on = False
    async with anyio.create_task_group() as tg:
        await svc.run(tg)
        await _start_queue(c, svc)
        with anyio.fail_after(5):
            await c.offset_store.committed.wait()
        went_on = True
        tg.cancel_scope.cancel()
    assert went_on, (
        f"the consumer's task group was cancelled by the drive task (handler calls: {calls}): "
        "a stray CancelledError from the handler stopped the consumer"
    )
    assert calls == [[100], [100]]
    assert c.offset_store.read_memory(MQ) == 101


async def test_an_after_hook_emptying_its_list_does_not_commit_a_suspended_batch() -> None:
    # The handler asks for the batch to be consumed again (SUSPEND). An after-consume hook drains the
    # list it is given (a tracing/audit hook that pops what it records). The batch must still be put
    # back and consumed again; the offset may move past it only after a call that succeeded.
    c = stub_consumer(Timing(suspend_current_queue=0.01))
    calls: list[list[int]] = []
    c.offset_store.calls_before = calls

    async def drain(msgs: list[MessageExt], ctx: OrderlyContext, result: OrderlyResult) -> None:
        while msgs:
            msgs.pop()

    c.after_hooks.append(drain)

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        calls.append([m.queue_offset for m in msgs])
        return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if len(calls) == 1 else OrderlyResult.SUCCESS

    await _run_until_committed(c, handler)
    # (offset committed, handler calls made before that commit): the first commit must follow the
    # second call (the one that succeeded), never the first (SUSPEND)
    assert c.offset_store.commits[0] == (101, 2), (
        f"commits {c.offset_store.commits}, handler calls {calls}: offset 100 was committed after a "
        "SUSPEND without being consumed again"
    )
    assert calls == [[100], [100]]


@pytest.mark.parametrize("bad", ["1", object(), float("nan"), True])
async def test_a_suspend_time_that_is_not_a_number_suspends_for_the_default(bad: object) -> None:
    # a handler's typo in ctx.suspend_time must not end the drive task (float("x") raised in it, and
    # with it the consumer's task group): the queue is suspended for the default time and retried
    c = stub_consumer(Timing(suspend_current_queue=0.01))
    calls: list[list[int]] = []
    c.offset_store.calls_before = calls

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        calls.append([m.queue_offset for m in msgs])
        if len(calls) == 1:
            ctx.suspend_time = bad  # type: ignore[assignment]
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyResult.SUCCESS

    await _run_until_committed(c, handler)
    assert calls == [[100], [100]]
    assert c.offset_store.read_memory(MQ) == 101


async def test_orderly_handler_is_not_cancelled_by_the_consume_timeout() -> None:
    # Java's ConsumeMessageOrderlyService has no consume timeout: a handler runs under the queue's
    # lock until it returns (consumeTimeout only labels the hook's return type TIME_OUT), and its
    # SUCCESS is committed. Here consume_timeout is 0.3 s and the handler takes 0.6 s, while the broker
    # lock is renewed all along: it must run once and its batch be committed, not be cancelled,
    # suspended (reconsume_times + 1, the DLQ once max_reconsume_times is set) and run again forever.
    timing = Timing.fast().model_copy(update={"consume_timeout": 0.3})
    c = stub_consumer(timing)
    calls: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        calls.append(msgs[0].reconsume_times)
        await anyio.sleep(0.6)
        return OrderlyResult.SUCCESS

    svc = c.service(handler)
    async with anyio.create_task_group() as tg:
        await svc.run(tg)
        pq = owned(c.ctx, ProcessQueue(MQ))
        c.pqs[MQ] = pq
        assert await svc.locks.lock_new(pq)
        msgs = [MessageExt("T", b"x", queue_offset=100)]
        pq.put(msgs)
        svc.submit(pq, msgs)
        with anyio.move_on_after(3):
            await c.offset_store.committed.wait()
        tg.cancel_scope.cancel()
    assert [off for off, _ in c.offset_store.commits] == [101], (c.offset_store.commits, calls)
    assert calls == [0], calls
