"""The parts of one run (start .. stop) of a lite pull consumer, and the one function that builds
them (as :mod:`.push_run` for the push consumer): the poll buffer, the queue table it owns, the pull
loop feeding it and the rebalancer (subscribe mode). A stopped consumer starts again on a new run:
its buffered messages, queues and pauses are gone; subscriptions, the assigned queues, listeners and
statistics stay with the facade. The offsets side (:class:`~.lite_offsets.LiteOffsets`) needs the
run's client instance and is made when the run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..protocol.mq import MessageQueue
from .context import ConsumerContext
from .poll_buffer import PollBuffer
from .process_queue import PollState, ProcessQueue
from .pulling import PullLoop, PullSettings
from .queues import QueueTable
from .rebalance import StabilityWindow
from .rebalancer import Rebalancer, RebalanceSettings, RebalanceSignals

__all__ = ["LiteRun", "PollLimits", "build_lite_run"]


@dataclass(frozen=True, slots=True)
class PollLimits:
    """The poll buffer's thresholds: per queue (count, bytes) and of all queues (count)."""

    max_queue_count: int
    max_queue_bytes: int
    max_total: int


@dataclass(frozen=True)
class LiteRun:
    """The parts of one start .. stop of a lite pull consumer (see :func:`build_lite_run`)."""

    table: QueueTable
    buffer: PollBuffer
    puller: PullLoop
    rebalancer: Rebalancer
    #: start a queue's pull loop in the run's task group
    start_pull: Callable[[ProcessQueue], None]


def build_lite_run(
    ctx: ConsumerContext,
    *,
    limits: PollLimits,
    auto_commit: bool,
    pull: PullSettings,
    settings: RebalanceSettings,
    signals: RebalanceSignals,
) -> LiteRun:
    """The parts of a new run, each given what it uses (no wiring after construction)."""
    buffer = PollBuffer(
        max_queue_count=limits.max_queue_count,
        max_queue_bytes=limits.max_queue_bytes,
        max_total=limits.max_total,
        auto_commit=auto_commit,
    )
    table = QueueTable(ctx, buffer, make_queue=_lite_queue, on_start=buffer.started)
    puller = PullLoop(ctx, table, buffer, pull, on_undecodable_fail=buffer.fail)

    def start_pull(pq: ProcessQueue) -> None:
        ctx.start_soon(puller.run, pq)

    rebalancer = Rebalancer(ctx, table, settings, signals, StabilityWindow(0.0), start_pull=start_pull)
    return LiteRun(table, buffer, puller, rebalancer, start_pull)


def _lite_queue(mq: MessageQueue) -> ProcessQueue:
    # the poll buffer holds the messages and applies the thresholds: the process queue carries the
    # queue's offsets, its pull loop's scope and the buffer's state
    pq = ProcessQueue(mq, max_count=1 << 62, max_bytes=1 << 62, max_span=None)
    pq.poll = PollState()
    return pq
