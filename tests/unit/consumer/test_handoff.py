"""Handoff: the FIFO from the pull loops to the consume workers."""

from __future__ import annotations

import asyncio
from typing import cast

import anyio
import pytest

from rmq_async.consumer.handoff import Handoff


async def test_fifo_without_waiting() -> None:
    h: Handoff[int] = Handoff()
    for i in range(5):
        assert h.put(i)
    assert len(h) == 5
    assert [await h.get() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert not h


async def test_put_wakes_one_waiter_per_item() -> None:
    h: Handoff[int] = Handoff()
    got: list[tuple[int, int | None]] = []

    async def worker(k: int) -> None:
        got.append((k, await h.get()))

    async with anyio.create_task_group() as tg:
        for k in range(3):
            tg.start_soon(worker, k)
        await anyio.wait_all_tasks_blocked()
        h.put(10)
        await anyio.wait_all_tasks_blocked()
        assert got == [(0, 10)]  # the first waiter, and only one of them
        h.put(11)
        h.put(12)
    assert sorted(cast(int, v) for _, v in got) == [10, 11, 12]


async def test_close_drains_then_returns_none() -> None:
    h: Handoff[str] = Handoff()
    h.put("a")
    h.close()
    assert h.closed
    assert not h.put("b")
    assert await h.get() == "a"
    assert await h.get() is None


async def test_close_releases_waiters() -> None:
    h: Handoff[int] = Handoff()
    results: list[int | None] = []

    async def worker() -> None:
        results.append(await h.get())

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        h.close()
    assert results == [None] * 4


async def test_cancelled_waiter_leaves_no_trace() -> None:
    h: Handoff[int] = Handoff()
    with anyio.move_on_after(0.01):
        await h.get()
    assert not h._waiters
    h.put(1)
    assert await h.get() == 1


async def test_wake_up_of_a_cancelled_worker_passes_to_another() -> None:
    # a worker is woken (its future resolved) and cancelled before it runs: the item must not wait
    # for the next put, another idle worker takes it
    h: Handoff[int] = Handoff()
    got: list[int | None] = []
    first_cancelled = False

    async def victim() -> None:
        nonlocal first_cancelled
        try:
            await h.get()
        except asyncio.CancelledError:
            first_cancelled = True
            raise

    async def other() -> None:
        got.append(await h.get())

    t1 = asyncio.ensure_future(victim())
    await asyncio.sleep(0)  # t1 waits first, so it is the one put() wakes
    t2 = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    h.put(7)  # resolves t1's future
    t1.cancel()  # ... and t1 is cancelled before it resumes
    with anyio.fail_after(1):
        await t2
    with pytest.raises(asyncio.CancelledError):
        await t1
    assert first_cancelled
    assert got == [7]


async def test_an_item_is_kept_for_the_worker_its_put_woke() -> None:
    # a busy worker asking for more work takes only what nobody was woken for, so the woken worker
    # finds its item instead of the empty queue (which would send it back to sleep: a wasted wake-up)
    h: Handoff[int] = Handoff()
    got: list[int | None] = []

    async def idle_worker() -> None:
        got.append(await h.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(idle_worker)
        await anyio.wait_all_tasks_blocked()
        h.put(1)  # wakes the idle worker: one item is kept for it
        h.put(2)  # nobody idle: anyone's
        assert h.available() == 1 and len(h) == 2
        assert await h.get() == 1  # FIFO: the oldest
        assert h.available() == 0 and len(h) == 1
        await anyio.wait_all_tasks_blocked()
        assert got == [2] and not h._waiters  # it did not go back to sleep
    assert not h and h.available() == 0


async def test_a_busy_getter_waits_while_every_item_is_reserved() -> None:
    h: Handoff[int] = Handoff()
    order: list[str] = []

    async def idle_worker() -> None:
        order.append(f"idle {await h.get()}")

    async def busy_worker() -> None:
        order.append(f"busy {await h.get()}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(idle_worker)
        await anyio.wait_all_tasks_blocked()
        h.put(5)
        tg.start_soon(busy_worker)  # asks while 5 is reserved: must wait, not take it
        await anyio.wait_all_tasks_blocked()
        assert order == ["idle 5"]
        h.put(6)
    assert order == ["idle 5", "busy 6"]


async def test_close_with_reserved_items_does_not_hang_other_getters() -> None:
    h: Handoff[int] = Handoff()
    got: list[int | None] = []

    async def worker() -> None:
        got.append(await h.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        h.put(1)  # reserved for the woken worker
        h.close()
        with anyio.fail_after(1):
            assert await h.get() is None  # the rest is reserved: this caller is done
    assert got == [1]
