"""The contract between the pull side and a consume service (Java ``ConsumeMessageService``).

A service is three roles: the pull loop's sink (:class:`~.pulling.PullSink`: ``submit`` the pulled
batches, ``before_pull`` when ``gates_pulls``), the queue table's owner (:class:`~.queues.QueueOwner`:
``drop`` a queue, bounded wait for its running handler) and what the facade runs, closes and shuts
down. The broker locks of orderly consumption are not part of it: they are their own part
(:class:`~.orderly_locks.OrderlyLocks`), given to the orderly service, the queue table and the
rebalancer. A consumer without a handler consumes through :attr:`deliveries` (the ``async for``
stream), which the service feeds and settles.
"""

from __future__ import annotations

from typing import Protocol

import anyio.abc

from .delivery import DeliveryStream
from .pulling import PullSink
from .queues import QueueOwner

__all__ = ["ConsumeService"]


class ConsumeService(PullSink, QueueOwner, Protocol):
    #: the consume timeout this service applies (seconds)
    timeout: float
    #: the ``async for`` stream, for a consumer without a handler (else None)
    deliveries: DeliveryStream | None

    def open_deliveries(self) -> DeliveryStream:
        """The ``async for`` stream (a consumer without a handler), made on first use."""

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the service's tasks in ``tg``."""

    def close(self) -> None:
        """Start no new consumption (running handlers finish; see :meth:`wait_idle`)."""

    async def wait_idle(self) -> None:
        """Return once no handler is running."""

    def set_timeout(self, timeout: float) -> None:
        """A new consume timeout, applied to the handlers already running too."""

    async def shutdown(self) -> None:
        """At shutdown, after offsets were persisted: end what still runs and release what the
        service holds (orderly: its broker locks)."""
