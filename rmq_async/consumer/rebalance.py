"""Rebalance decisions (Java ``RebalanceImpl``), as pure functions: the I/O happens in the consumer.

* :func:`allocate_topic` sorts the queues and the member ids as the Java client does and runs the
  strategy, so Java and Python members of one group agree on who owns what;
* :func:`diff` says which process queues to drop and which queues to start;
* :class:`StabilityWindow` (an option, off by default as in Java) keeps a flapping member list from
  triggering a reallocation storm: a new list is used only once it has stayed the same for ``window``
  seconds, for every member alike (see :class:`StabilityWindow`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ..protocol.mq import MessageQueue
from .allocate import AllocateStrategy, sort_for_allocation

__all__ = ["StabilityWindow", "allocate_topic", "diff"]


def allocate_topic(
    strategy: AllocateStrategy,
    group: str,
    client_id: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> set[MessageQueue]:
    """The queues of one topic this member owns (``rebalanceByTopic``, clustering)."""
    if not mq_all or not cid_all:
        return set()
    mqs, cids = sort_for_allocation(mq_all, cid_all)
    if client_id not in cids:
        return set()
    return set(strategy.allocate(group, client_id, mqs, cids))


def diff(
    owned: Collection[MessageQueue], allocated: Collection[MessageQueue], topic: str
) -> tuple[set[MessageQueue], set[MessageQueue]]:
    """(queues of ``topic`` to drop, queues to start) (``updateProcessQueueTableInRebalance``)."""
    mine = {mq for mq in owned if mq.topic == topic}
    target = set(allocated)
    return mine - target, target - mine


@dataclass
class StabilityWindow:
    """Count a member only once it has been listed without a break for ``window`` seconds.

    Every member applies the same rule to the same broker list (joiners included, to themselves), so
    all members switch to a new allocation at about the same moment: a flapping member is never
    counted and never triggers a reallocation, and a joiner takes no queues while the others still
    hold them. A member that leaves the list is forgotten at once, so its queues are reassigned
    without waiting. With ``window`` 0 every list applies immediately, as in Java.
    """

    window: float
    _first_seen: dict[str, float] = field(default_factory=dict)

    def observe(self, cids: Sequence[str], now: float, client_id: str) -> list[str]:
        if self.window <= 0:
            return sorted(cids)
        seen = set(cids)
        for cid in [c for c in self._first_seen if c not in seen]:
            del self._first_seen[cid]
        for cid in seen:
            self._first_seen.setdefault(cid, now)
        return sorted(c for c, t in self._first_seen.items() if now - t >= self.window)

    def pending(self, now: float) -> float | None:
        """Seconds until the next listed member is counted, or None when every one is."""
        if self.window <= 0:
            return None
        waits = [self.window - (now - t) for t in self._first_seen.values() if now - t < self.window]
        return max(0.0, min(waits)) if waits else None
