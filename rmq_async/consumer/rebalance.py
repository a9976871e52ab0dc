"""Rebalance decisions (Java ``RebalanceImpl``), as pure functions: the I/O happens in the consumer.

* :func:`allocate_topic` sorts the queues and the member ids as the Java client does and runs the
  strategy, so Java and Python members of one group agree on who owns what;
* :func:`diff` says which process queues to drop and which queues to start;
* :class:`StabilityWindow` (an option, off by default as in Java) keeps a flapping member list from
  triggering a reallocation storm: a new list is used only once it has stayed the same for ``window``
  seconds; until then the last stable list is kept (but never one without this member).
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
    """Use a member list only after it has been seen unchanged for ``window`` seconds."""

    window: float
    _stable: tuple[str, ...] | None = None
    _candidate: tuple[str, ...] | None = None
    _since: float = 0.0
    _by_topic: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def observe(self, cids: Sequence[str], now: float, client_id: str) -> list[str]:
        seen = tuple(sorted(cids))
        if self.window <= 0:
            self._stable = seen
            return list(seen)
        if seen != self._candidate:
            self._candidate, self._since = seen, now
        if self._stable is None or now - self._since >= self.window:
            self._stable = seen
        elif client_id not in self._stable and client_id in seen:
            # never keep a list that leaves this member out while the broker lists it
            self._stable = seen
        return list(self._stable)

    def pending(self, now: float) -> float | None:
        """Seconds until the candidate list becomes stable, or None when nothing is pending."""
        if self.window <= 0 or self._candidate is None or self._candidate == self._stable:
            return None
        return max(0.0, self.window - (now - self._since))
