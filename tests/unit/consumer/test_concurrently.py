"""ConcurrentConsumeService._consume on its own: acknowledgement grouping, a drop in the middle of a
pulled batch, failures between successes. The service runs on a real consumer context whose client
is a stub recording send-backs; the integration tests run the same code against the embedded broker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from support.consumer_context import StubApi, StubProducer, make_context, owned

from rmq_async.consumer.concurrently import ConcurrentConsumeService, _Slot
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.types import ConsumeContext, ConsumeResult
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt

MQ = MessageQueue("T", "b", 0)
Handler = Callable[[list[MessageExt], ConsumeContext], Awaitable["ConsumeResult | None"]]


def _consumer(sent_back: list[int]) -> ConsumerContext:
    api = StubApi()
    api.sent_back = sent_back  # the queue offsets of the messages sent back, in order
    return make_context(api=api)


def _msgs(count: int) -> list[MessageExt]:
    # the commit-log offset is what a send-back names: the queue offset here, for the assertions
    return [MessageExt("T", b"x", queue_offset=100 + k, commit_log_offset=100 + k) for k in range(count)]


async def _run(
    handler: Handler,
    count: int = 32,
    pq: ProcessQueue | None = None,
    box: list[ConcurrentConsumeService] | None = None,
) -> tuple[ConsumerContext, ProcessQueue, list[int]]:
    sent_back: list[int] = []
    c = _consumer(sent_back)
    svc = ConcurrentConsumeService(c, handler)
    if box is not None:
        box.append(svc)  # for handlers that call the service
    msgs = _msgs(count)
    pq = owned(c, pq or ProcessQueue(MQ))
    pq.put(msgs)
    w = _Slot()
    w.pq, w.msgs, w.i = pq, msgs, 0
    svc.active += 1
    with anyio.CancelScope() as scope:
        w.scope = scope
        await svc._consume(w)
    svc._pulled_batch_done(w)
    return c, pq, sent_back


async def test_plain_successes_are_acknowledged_once_at_the_end() -> None:
    c, pq, sent_back = await _run(lambda msgs, ctx: _none())
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 132 and not sent_back
    assert c.stats.topics["T"].consumed_ok == 32


async def test_a_slow_message_splits_the_acknowledgements_and_none_is_lost() -> None:
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if msgs[0].queue_offset == 105:
            await anyio.sleep(0.003)  # past the ~1 ms grouping: what came before is acknowledged

    c, pq, _ = await _run(handler)
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 132
    assert c.stats.topics["T"].consumed_ok == 32


async def test_a_drop_in_the_middle_stops_and_acknowledges_only_what_ran() -> None:
    seen: list[int] = []
    pq = ProcessQueue(MQ)

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        seen.append(msgs[0].queue_offset)
        if msgs[0].queue_offset == 110:
            pq.drop()  # the queue moved to another member while this batch ran

    c, _, _ = await _run(handler, pq=pq)
    assert seen == list(range(100, 111))
    assert c.stats.topics["T"].consumed_ok == 11  # the ones that ran, not the 21 after the drop
    assert c.offset_store.read_memory(MQ) == -1  # a dropped queue commits nothing from here


async def test_failures_between_successes_are_sent_back_and_progress_moves() -> None:
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        failed = msgs[0].queue_offset in (103, 117)
        if msgs[0].queue_offset == 117:
            msgs.clear()  # the handler's list is its own: the failed message is still sent back
        return ConsumeResult.RECONSUME_LATER if failed else ConsumeResult.SUCCESS

    c, pq, sent_back = await _run(handler)
    assert sent_back == [103, 117]
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 132
    t = c.stats.topics["T"]
    assert (t.consumed_ok, t.consumed_failed) == (30, 2)


async def _none() -> None:
    return None


async def test_every_call_sees_a_pristine_context_and_a_kept_one_is_never_reused() -> None:
    kept: list[ConsumeContext] = []
    kept_lists: list[tuple[int, list[MessageExt]]] = []
    dirty: list[int] = []
    expected = iter(range(100, 164))

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        off = msgs[0].queue_offset
        if ctx.ack_index is not None or ctx.delay_level != 0 or ctx.mq != MQ:
            dirty.append(off)
        if len(msgs) != 1 or off != next(expected):
            dirty.append(-off)
        if off % 5 == 0:
            kept.append(ctx)  # held by the handler: must not come back for another message
            kept_lists.append((off, msgs))  # the same for the list of messages
        if off % 13 == 0:
            msgs.clear()  # emptied by the handler: the next call still gets its message
        if off % 7 == 0:
            ctx.delay_level = 3  # touched (a success ignores it): must not come back either
        if off % 11 == 0:
            ctx.ack_index = 0
        return ConsumeResult.SUCCESS

    c, pq, _ = await _run(handler, count=64)
    assert not dirty
    assert len({id(k) for k in kept}) == len(kept) and all(k.delay_level in (0, 3) for k in kept)
    assert all([m.queue_offset for m in lst] == ([] if off % 13 == 0 else [off]) for off, lst in kept_lists)
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 164


async def test_set_timeout_moves_a_running_handlers_deadline_never_early() -> None:
    # the running handler's deadline follows a changed timeout: at or after its start + the new
    # timeout (never early), at most the slack (50 ms) later; the default is the Java 15 minutes
    box: list[ConcurrentConsumeService] = []
    seen: list[tuple[float, float, float]] = []  # (new timeout, deadline - start before, after)

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        start = anyio.current_time()
        before = anyio.current_effective_deadline() - start
        new = (0.5, 30.0, 2000.0)[msgs[0].queue_offset % 3]
        box[0].set_timeout(new)
        seen.append((new, before, anyio.current_effective_deadline() - start))

    c, pq, _ = await _run(handler, count=9, box=box)
    assert seen[0][1] >= 900.0  # the first handler ran under the default timeout
    for new, _before, after in seen:
        assert new <= after <= new + 0.05 + 0.01, (new, after)
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 109


async def test_a_changed_timeout_is_used_for_the_deadlines_set_after_it() -> None:
    # the worker moves its deadline lazily (once per 50 ms slack window): once the window in which
    # the timeout changed has passed, the next deadline is set from the new timeout, not the old one
    box: list[ConcurrentConsumeService] = []
    left: list[float] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if msgs[0].queue_offset == 100:
            box[0].set_timeout(5.0)
        elif msgs[0].queue_offset == 101:
            await anyio.sleep(0.08)  # past the slack window
        left.append(anyio.current_effective_deadline() - anyio.current_time())

    await _run(handler, count=3, box=box)
    assert len(left) == 3 and 5.0 <= left[2] <= 5.06, left


async def test_a_failure_returned_just_as_its_deadline_fired_is_settled_once_and_never_acked() -> None:
    # the handler shields its last step (a common pattern: finish a commit whatever happens), so the
    # consume deadline fires while it runs and it still returns normally: its result stands and is
    # settled outside the fired scope; the plain successes before it are acknowledged, the failed
    # message is not (its send-back fails here, so it must stay in the queue for a local retry and
    # the committed offset must not pass it)
    api = StubApi()
    api.send_back_ok = False
    producer = StubProducer()
    producer.ok = False  # the fallback send to %RETRY%g fails too
    c = make_context(api=api, producer=producer)

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        if msgs[0].queue_offset == 103:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)  # past the 0.1 s consume timeout
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    svc = ConcurrentConsumeService(c, handler)
    svc.set_timeout(0.1)
    msgs = _msgs(8)
    pq = owned(c, ProcessQueue(MQ))
    pq.put(msgs)
    svc.submit(pq, msgs)
    svc.close()
    with anyio.fail_after(5):
        await svc._worker()
    # kept for a local retry (outside a run nothing schedules it: counted only)
    assert api.sent_back == [103] and c.stats.local_retries == 1
    t = c.stats.topics["T"]
    assert (t.consumed_ok, t.consumed_failed) == (7, 1)
    assert [m.queue_offset for run in pq._runs.values() for m in run] == [103]  # kept for the retry
    assert c.offset_store.read_memory(MQ) == 103  # the committed offset stops at it


async def test_a_stray_cancelled_error_from_the_handler_is_a_failed_consume() -> None:
    # the handler awaits a future its owner cancelled: its task gets a CancelledError although nobody
    # cancelled it. That message is sent back like any failure; the worker goes on with the rest.
    calls: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        calls.append(msgs[0].queue_offset)
        if msgs[0].queue_offset == 105:
            fut = asyncio.get_running_loop().create_future()
            fut.cancel()
            await fut

    c, pq, sent_back = await _run(handler)
    assert calls == list(range(100, 132))
    assert sent_back == [105]
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 132
    t = c.stats.topics["T"]
    assert (t.consumed_ok, t.consumed_failed) == (31, 1)


async def test_a_cancelled_scope_around_the_handler_still_cancels_it() -> None:
    # the other side of the rule above: a cancellation that is ours (here: an enclosing scope is
    # cancelled while the handler waits) is never swallowed as a failed consume
    started = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_run, handler)
        await started.wait()
        tg.cancel_scope.cancel()
    assert tg.cancel_scope.cancelled_caught


async def test_an_ack_index_that_is_not_an_int_consumes_the_batch_again_and_the_worker_goes_on(
    caplog: Any,
) -> None:
    # a handler's typo (a str, a float) must neither stop the consumer (min() of str and int raised in
    # the worker, ending the consumer's task group) nor drop a message: the batch counts as not acked
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        if msgs[0].queue_offset == 104:
            ctx.ack_index = "0"  # type: ignore[assignment]
        if msgs[0].queue_offset == 108:
            ctx.delay_level = 2.5  # type: ignore[assignment]
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    c, pq, sent_back = await _run(handler, count=16)
    assert sent_back == [104, 108]
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 116
    assert "ctx.ack_index to '0'" in caplog.text and "ctx.delay_level to 2.5" in caplog.text
