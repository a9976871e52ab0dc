"""Handoff: the unbounded FIFO that carries pulled batches from the pull loops to the consume workers.

Strategy: a deque of items plus one asyncio future per idle worker. ``put`` never blocks (the process
queues' thresholds bound what is pulled, so the FIFO needs no bound of its own) and wakes at most one
idle worker; ``get`` returns at once while items are queued, without a checkpoint, an event or a
task lookup (an anyio memory-object stream pays all three per item). The workers yield to the loop
between batches themselves.

Reservations: the item whose ``put`` woke a worker is kept for that worker. A busy worker that asks
for more work takes only items nobody was woken for (:meth:`available`), so it never leaves a woken
worker to find the queue empty and go back to sleep (a wasted task step and future).

Cancellation: a waiting ``get`` raises the cancellation like any await (it never swallows it, so
anyio's repeated cancellation cannot spin on it); a wake-up that lands on a worker being cancelled is
passed on to another idle worker with its reservation (or released when none is idle), so no queued
item waits for the next ``put``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Handoff"]

T = TypeVar("T")


class Handoff(Generic[T]):
    __slots__ = ("_closed", "_items", "_loop", "_waiters", "_woken")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None  # bound at the first wait
        self._items: deque[T] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._woken = 0  # woken waiters that have not resumed: each has an item reserved
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def available(self) -> int:
        """Queued items that no woken worker is about to take."""
        return len(self._items) - self._woken

    def put(self, item: T) -> bool:
        """Queue ``item`` and wake one idle worker; False (nothing queued) once closed."""
        if self._closed:
            return False
        self._items.append(item)
        self._wake_one()
        return True

    def close(self) -> None:
        """No more puts; waiting and later ``get`` calls return None once the queue is drained."""
        self._closed = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                self._woken += 1

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                self._woken += 1
                return

    async def get(self) -> T | None:
        """The oldest item, waiting while there is none for this caller; None once closed and
        drained."""
        items = self._items
        if len(items) > self._woken:
            return items.popleft()
        while True:
            if self._closed and len(items) <= self._woken:
                return None  # drained, or what is left is reserved for woken workers
            loop = self._loop
            if loop is None:  # looked up once: get_running_loop() costs a getpid() system call
                loop = self._loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    # woken, then cancelled before it ran: the reservation passes to another idle
                    # worker, or is released for whoever asks next
                    self._woken -= 1
                    if len(items) > self._woken:
                        self._wake_one()
                else:
                    fut.cancel()
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(fut)
                raise
            self._woken -= 1
            if items:
                return items.popleft()
