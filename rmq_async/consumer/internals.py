"""The views :func:`rmq_async.internals.internals` gives of a consumer's parts (for tests,
benchmarks and diagnostic tools; not the public API)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..client.instance import ClientInstance
from ..errors import ClientError
from ..protocol.mq import MessageQueue
from .context import ConsumerContext
from .lite_offsets import LiteOffsets
from .offset_store import OffsetStore
from .poll_buffer import PollBuffer
from .process_queue import ProcessQueue
from .queues import QueueTable
from .rebalancer import Rebalancer, RebalanceSettings
from .subcheck import SubscriptionChecker

if TYPE_CHECKING:
    from .admin import ConsumerAdmin
    from .pop import PopService
    from .push_run import PushRun
    from .service import ConsumeService

__all__ = ["LiteInternals", "PushInternals"]


@dataclass(frozen=True)
class _Common:
    ctx: ConsumerContext
    table: QueueTable
    rebalancer: Rebalancer
    settings: RebalanceSettings
    #: completes when the consumer's run ends (with its error); None when not started
    ended: asyncio.Future[None] | None
    #: the client instance of the current run (None when not started)
    instance: ClientInstance | None

    @property
    def queues(self) -> dict[MessageQueue, ProcessQueue]:
        """The process queues owned now, by queue (as the broker names it)."""
        return self.table.pqs

    @property
    def client(self) -> ClientInstance:
        """The client instance of the current run (ClientError when not started)."""
        if self.instance is None:
            raise ClientError("consumer is not started")
        return self.instance

    @property
    def offset_store(self) -> OffsetStore:
        """The offset store of the current run (ClientError when not started)."""
        return self.ctx.offset_store


@dataclass(frozen=True)
class PushInternals(_Common):
    run: PushRun
    subcheck: SubscriptionChecker

    @property
    def service(self) -> ConsumeService:
        return self.run.service

    @property
    def pop(self) -> PopService | None:
        return self.run.pop

    @property
    def admin(self) -> ConsumerAdmin:
        return self.run.admin


@dataclass(frozen=True)
class LiteInternals(_Common):
    buffer: PollBuffer
    #: the offsets side (seek, commit), None before the consumer starts
    offsets: LiteOffsets | None
