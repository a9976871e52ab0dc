"""The one handler invocation (``rmq_async.consumer.invoke.Invoker``): hooks, deadline, failures and
results the same for every path that takes one batch at a time (POP, consume-directly, orderly)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest
from support.consumer_context import make_context

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, OrderlyContext, OrderlyResult
from rmq_async.consumer.invoke import Invoker
from rmq_async.protocol.mq import MessageQueue

MQ = MessageQueue("T", "b", 0)


def _batch(n: int) -> list[MessageExt]:
    out = []
    for i in range(n):
        m = MessageExt(topic="T", body=b"x")
        m.queue_offset = 10 + i
        out.append(m)
    return out


async def test_result_normalised_and_hooks_see_it() -> None:
    c = make_context()
    seen: list[Any] = []
    c.before_hooks.append(lambda b, ctx: seen.append(("before", len(b))))
    c.after_hooks.append(lambda b, ctx, r: seen.append(("after", len(b), r)))

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> object:
        msgs.clear()  # the handler's own list: the hooks after it still see the batch
        return None

    batch = _batch(3)
    call = await Invoker(c, handler).call(batch, ConsumeContext(MQ), timeout=5)
    assert call.result is ConsumeResult.SUCCESS and not call.timed_out and call.error is None
    assert seen == [("before", 3), ("after", 3, ConsumeResult.SUCCESS)]
    assert len(batch) == 3


@pytest.mark.parametrize("bad", ["SUCCESS", 1, OrderlyResult.SUCCESS])
async def test_a_result_that_is_not_a_consume_result_is_reconsume_later(
    bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> object:
        return bad

    with caplog.at_level(logging.ERROR, "rmq_async.consumer"):
        call = await Invoker(make_context(), handler).call(_batch(1), ConsumeContext(MQ), timeout=5)
    assert call.result is ConsumeResult.RECONSUME_LATER and call.error is None
    assert "not a ConsumeResult" in caplog.text


async def test_a_raising_handler_or_hook_is_a_logged_failure(caplog: pytest.LogCaptureFixture) -> None:
    c = make_context()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, "rmq_async.consumer"):
        call = await Invoker(c, handler).call(_batch(2), ConsumeContext(MQ), timeout=5)
    assert call.result is ConsumeResult.RECONSUME_LATER
    assert call.error == "ValueError('boom')"
    assert "raised ValueError" in caplog.text and "offsets 10..11" in caplog.text

    def bad_hook(b: list[MessageExt], ctx: object) -> None:
        raise KeyError("hook")

    c.before_hooks.append(bad_hook)

    async def ok(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        return None

    call = await Invoker(c, ok).call(_batch(1), ConsumeContext(MQ), timeout=5)
    assert call.result is ConsumeResult.RECONSUME_LATER and call.error == "KeyError('hook')"


async def test_the_deadline_cuts_a_hung_handler() -> None:
    started = anyio.Event()

    async def hung(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        started.set()
        await anyio.sleep_forever()

    call = await Invoker(make_context(), hung).call(_batch(1), ConsumeContext(MQ), timeout=0.05)
    assert started.is_set()
    assert call.timed_out and call.result is ConsumeResult.RECONSUME_LATER and call.error is None


async def test_a_stray_cancelled_error_is_the_users_failure_and_ours_propagates() -> None:
    async def stray(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.cancel()
        await fut  # cancelled by its owner, not by anybody cancelling this task

    call = await Invoker(make_context(), stray).call(_batch(1), ConsumeContext(MQ), timeout=5)
    assert call.result is ConsumeResult.RECONSUME_LATER and call.error is not None

    entered = anyio.Event()

    async def waits(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        entered.set()
        await anyio.sleep_forever()

    outcome: list[object] = []

    async def run() -> None:
        outcome.append(await Invoker(make_context(), waits).call(_batch(1), ConsumeContext(MQ), timeout=60))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await entered.wait()
        tg.cancel_scope.cancel()  # our cancellation (shutdown): not a result
    assert outcome == []


async def test_orderly_failures_suspend_and_results_are_normalised() -> None:
    c = make_context(orderly=True)

    async def raises(msgs: list[MessageExt], ctx: OrderlyContext) -> None:
        raise RuntimeError("x")

    async def later(msgs: list[MessageExt], ctx: OrderlyContext) -> ConsumeResult:
        return ConsumeResult.RECONSUME_LATER

    async def none(msgs: list[MessageExt], ctx: OrderlyContext) -> None:
        return None

    suspend = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
    assert await Invoker(c, raises).call_orderly(_batch(1), OrderlyContext(MQ)) is suspend
    assert await Invoker(c, later).call_orderly(_batch(1), OrderlyContext(MQ)) is suspend
    assert await Invoker(c, none).call_orderly(_batch(1), OrderlyContext(MQ)) is OrderlyResult.SUCCESS
    timed = await Invoker(c, raises).call_orderly_timed(_batch(1), OrderlyContext(MQ), timeout=5)
    assert timed.result is suspend and timed.error == "RuntimeError('x')"
