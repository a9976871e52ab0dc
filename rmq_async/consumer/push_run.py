"""The parts of one run (start .. stop) of a push consumer, and the one function that builds them.

Each part is given what it uses through its constructor; nothing is wired after construction. The
queue table does not start pulls itself: the rebalancer starts a queue's pull loop (``start_pull``)
once the table owns it, so the table, the pull loop and the rebalancer form no cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from ..protocol.mq import MessageQueue
from .admin import ConsumerAdmin
from .concurrently import ConcurrentConsumeService
from .context import ConsumerContext
from .control import PushControl
from .orderly import OrderlyConsumeService
from .orderly_locks import OrderlyLocks
from .pop import PopService
from .process_queue import ProcessQueue
from .pulling import PullLoop, PullSettings
from .queues import QueueTable
from .rebalance import StabilityWindow
from .rebalancer import Rebalancer, RebalanceSettings, RebalanceSignals
from .service import ConsumeService
from .types import Handler, OrderlyHandler

__all__ = ["PushRun", "build_push_run"]


@dataclass(frozen=True)
class PushRun:
    """The parts of one start .. stop of a push consumer (see :func:`build_push_run`)."""

    table: QueueTable
    service: ConsumeService
    puller: PullLoop
    rebalancer: Rebalancer
    pop: PopService | None
    admin: ConsumerAdmin
    #: the broker locks of an orderly consumer (clustering), None otherwise
    locks: OrderlyLocks | None
    #: the user's pause, seek and commit
    control: PushControl


def build_push_run(
    ctx: ConsumerContext,
    handler: Handler | OrderlyHandler | None,
    *,
    orderly: bool,
    pop: bool,
    settings: RebalanceSettings,
    signals: RebalanceSignals,
) -> PushRun:
    """The parts of a new run, each given what it uses (no wiring after construction). A stopped
    consumer starts again on a fresh run: its process queues, workers and timers are gone;
    subscriptions, hooks, listeners, stats, the rebalance signals and the consume timeout stay."""
    config, timing = ctx.config, ctx.timing
    service: ConsumeService
    owned: dict[MessageQueue, ProcessQueue] = {}  # the queue table's, read by the orderly locks
    locks = OrderlyLocks(ctx, owned) if orderly else None  # [orderly] broker locks, apart
    if locks is not None:
        service = OrderlyConsumeService(ctx, cast(OrderlyHandler | None, handler), locks)
    else:
        service = ConcurrentConsumeService(ctx, cast(Handler | None, handler))
    table = QueueTable(ctx, service, locks=locks, pqs=owned)
    puller = PullLoop(
        ctx,
        table,
        service,
        PullSettings.for_push(config, timing),
        on_illegal_offset=signals.wake,
    )
    pop_service = None
    if pop:  # [pop]
        pop_service = PopService(ctx, cast(Handler, handler), lambda: ctx.deadlines.timeout)

    def start_pull(pq: ProcessQueue) -> None:
        ctx.start_soon(puller.run, pq)

    rebalancer = Rebalancer(
        ctx,
        table,
        settings,
        signals,
        StabilityWindow(config.rebalance_stability_window),
        start_pull=start_pull,
        locks=locks,
        assign=pop_service.assign if pop_service is not None else None,
    )
    admin = ConsumerAdmin(
        ctx,
        table,
        signals.wake,
        settings.strategy.name,
        handler=None if orderly else cast(Handler | None, handler),
        orderly_handler=cast(OrderlyHandler | None, handler) if orderly else None,
        pop_props=pop_service.running_props if pop_service is not None else None,
    )
    control = PushControl(ctx, table, start_pull=start_pull, pop=pop_service)
    return PushRun(table, service, puller, rebalancer, pop_service, admin, locks, control)
