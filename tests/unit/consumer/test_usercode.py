"""rmq_async.consumer.usercode: telling a stray CancelledError raised by user code from a cancellation
of ours, and calling listeners and hooks so that what they raise never ends the consumer."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from rmq_async.consumer.usercode import call_user, stray_cancel


async def _await_cancelled_future() -> None:
    fut = asyncio.get_running_loop().create_future()
    fut.cancel()
    await fut


async def test_a_cancelled_future_awaited_by_an_uncancelled_task_is_stray() -> None:
    with pytest.raises(asyncio.CancelledError):
        await _await_cancelled_future()
    assert stray_cancel()


async def test_a_cancelled_scope_is_not_stray() -> None:
    seen: list[bool] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except asyncio.CancelledError:
            seen.append(stray_cancel())
            raise
    assert seen == [False]


async def test_a_task_cancel_is_not_stray() -> None:
    seen: list[bool] = []
    started = asyncio.Event()

    async def victim() -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(stray_cancel())
            raise

    task = asyncio.get_running_loop().create_task(victim())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False]


async def test_call_user_logs_a_raising_or_stray_cancelling_callable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def sync_raises(x: int) -> None:
        raise ValueError(x)

    caplog.set_level(logging.ERROR, logger="rmq_async.consumer")
    assert not await call_user("listener A", sync_raises, 1)
    assert not await call_user("listener B", _await_cancelled_future)
    assert await call_user("listener C", lambda: None)
    text = caplog.text
    assert "listener A raised" in text and "listener B raised CancelledError" in text


async def test_call_user_lets_a_real_cancellation_through() -> None:
    started = anyio.Event()

    async def waits() -> None:
        started.set()
        await anyio.sleep_forever()

    done: list[bool] = []

    async def runner() -> None:
        done.append(await call_user("hook", waits))

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        await started.wait()
        tg.cancel_scope.cancel()
    assert done == []  # cancelled, not "returned False"
