"""The contract between the pull side and a consume service (Java ``ConsumeMessageService``).

The pull loop hands every pulled batch to :meth:`ConsumeService.submit`; the queue table asks the
service before a queue pulls (``gates_pulls``/``before_pull``), when a new queue is taken
(``lock_new``) and when one is dropped (``drop``, ``unlock_dropped``); the facade runs, closes and
shuts it down. The concurrent service answers the queue questions trivially; the orderly one holds
broker locks. A consumer without a handler consumes through :attr:`deliveries` (the ``async for``
stream), which the service feeds and settles.
"""

from __future__ import annotations

from typing import Protocol

import anyio.abc

from ..protocol.stored import MessageExt
from .delivery import DeliveryStream
from .process_queue import ProcessQueue

__all__ = ["ConsumeService"]


class ConsumeService(Protocol):
    #: the consume timeout this service applies (seconds)
    timeout: float
    #: the ``async for`` stream, for a consumer without a handler (else None)
    deliveries: DeliveryStream | None
    #: whether :meth:`before_pull` must be awaited before every pull (orderly, clustering)
    gates_pulls: bool
    #: whether the offset of a dropped queue is persisted synchronously (orderly: the next owner
    #: reads it as soon as the lock is released)
    sync_drop: bool

    def open_deliveries(self) -> DeliveryStream:
        """The ``async for`` stream (a consumer without a handler), made on first use."""

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Pulled messages, already in ``pq``: consume them."""

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the service's tasks in ``tg``."""

    def close(self) -> None:
        """Start no new consumption (running handlers finish; see :meth:`wait_idle`)."""

    async def wait_idle(self) -> None:
        """Return once no handler is running."""

    def set_timeout(self, timeout: float) -> None:
        """A new consume timeout, applied to the handlers already running too."""

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may pull now (waits as needed); False once it is dropped."""

    async def lock_new(self, pq: ProcessQueue) -> bool:
        """Take a newly assigned queue before its first pull; False: not ours yet."""

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        """Drop ``pq`` (bounded wait for its running handler); True when nothing ran on at the end."""

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        """After a drop, once its offset is persisted: let the next owner have the queue."""

    async def shutdown(self) -> None:
        """At shutdown, after offsets were persisted: release what the service holds."""
