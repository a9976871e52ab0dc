"""Latency fault tolerance (Java ``MQFaultStrategy`` and ``LatencyFaultToleranceImpl``).

Strategy: with ``send_latency_fault_enable``, every send attempt reports its broker and latency;
a latency at or above ``latency_max[i]`` (the largest such i) keeps the broker out of queue
selection for ``not_available_duration[i]`` ms; a connection failure counts as 10 s of latency
(``isolation``: 10 s out, by the default table), and a broker's error answer also marks it
unreachable until a send to it succeeds again. Queue selection then tries, in turn, a queue of an
available broker other than the last one tried, one of a reachable broker, and any queue (Java's
``selectOneMessageQueue`` with its filters). Plain data and decisions: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..protocol.mq import MessageQueue

__all__ = ["ISOLATION_LATENCY_MS", "LatencyFaultTolerance", "select_queue"]

#: ``updateFaultItem(..., isolation=true)``: the latency a failed connection counts as
ISOLATION_LATENCY_MS = 10_000


@dataclass(slots=True)
class _FaultItem:
    latency_ms: int = 0
    available_from: float = 0.0  # monotonic seconds
    reachable: bool = True


@dataclass(slots=True)
class LatencyFaultTolerance:
    """The brokers a producer avoids for a while, by ``latency_max`` / ``not_available_duration``
    (ms, as long as each other; Java's 5.x defaults in :class:`~rmq_async.ProducerConfig`)."""

    latency_max: Sequence[int]
    not_available_duration: Sequence[int]
    _items: dict[str, _FaultItem] = field(default_factory=dict)

    def not_available_ms(self, latency_ms: int) -> int:
        """``computeNotAvailableDuration``."""
        for limit, duration in zip(
            reversed(self.latency_max), reversed(self.not_available_duration), strict=True
        ):
            if latency_ms >= limit:
                return duration
        return 0

    def update(self, broker: str, latency_ms: int, now: float, *, isolation: bool, reachable: bool) -> None:
        """``updateFaultItem``: what one attempt on ``broker`` took (``now``: monotonic seconds)."""
        item = self._items.get(broker)
        if item is None:
            item = self._items[broker] = _FaultItem()
        item.latency_ms = latency_ms
        duration = self.not_available_ms(ISOLATION_LATENCY_MS if isolation else latency_ms)
        if duration > 0 and now + duration / 1000 > item.available_from:
            item.available_from = now + duration / 1000
        item.reachable = reachable

    def is_available(self, broker: str, now: float) -> bool:
        item = self._items.get(broker)
        return item is None or now >= item.available_from

    def is_reachable(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or item.reachable


def _first(
    queues: Sequence[MessageQueue], counter: int, ok: Callable[[MessageQueue], bool]
) -> MessageQueue | None:
    n = len(queues)
    for k in range(n):
        mq = queues[(counter + k) % n]
        if ok(mq):
            return mq
    return None


def select_queue(
    queues: Sequence[MessageQueue],
    counter: int,
    last_broker: str | None,
    fault: LatencyFaultTolerance | None,
    now: float,
) -> MessageQueue:
    """``MQFaultStrategy.selectOneMessageQueue``: round robin from ``counter`` over the queues that
    pass the filters (another broker than ``last_broker``; with ``fault``, first an available
    broker, then a reachable one), else the plain next queue."""

    def other(mq: MessageQueue) -> bool:
        return last_broker is None or mq.broker_name != last_broker

    if fault is not None:
        mq = _first(queues, counter, lambda q: fault.is_available(q.broker_name, now) and other(q))
        if mq is None:
            mq = _first(queues, counter, lambda q: fault.is_reachable(q.broker_name) and other(q))
    else:
        mq = _first(queues, counter, other) if last_broker is not None else None
    return mq if mq is not None else queues[counter % len(queues)]
