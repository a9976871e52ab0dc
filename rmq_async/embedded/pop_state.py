"""The embedded broker's POP state (request modes, checkpoints, counters), kept on its
:class:`~.context.BrokerContext` (``ctx.pop``); the POP request handlers are in :mod:`.pop`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["REVIVE_QUEUE_NUM", "PopCheckpoint", "PopState"]

REVIVE_QUEUE_NUM = 8  # BrokerConfig.reviveQueueNum


@dataclass(slots=True)
class PopCheckpoint:
    """``PopCheckPoint``: what one pop took from one queue, and what is still not acked."""

    group: str
    topic: str  # the queue's topic (the pop retry topic for retry messages)
    origin: str  # the topic the consumer popped
    queue_id: int
    start: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    pending: set[int] = field(default_factory=set)

    @property
    def due(self) -> int:
        return self.pop_time + self.invisible_time


class PopState:
    """One broker's POP state: request modes, checkpoints, counters."""

    def __init__(self) -> None:
        self.modes: dict[tuple[str, str], tuple[str, int]] = {}  # (topic, group) -> (mode, share num)
        self.cks: dict[tuple[str, str, int, int, int], PopCheckpoint] = {}  # group, topic, q, start, pt
        self.revive_counter = 0
        self.revived = 0  # messages copied to a pop retry topic
        self.popped = 0
        self.acked = 0
        self.changed = 0
        self.reviver_started = False
        self.saved_empty = True  # the checkpoints file (data dir) holds none
        #: run the revive scan now (tests); set by :func:`handlers`
        self.revive_once: Callable[[], int] = lambda: 0

    def next_revive_qid(self) -> int:
        qid = self.revive_counter % REVIVE_QUEUE_NUM
        self.revive_counter += 1
        return qid

    def add_ck(self, ck: PopCheckpoint) -> None:
        key = (ck.group, ck.topic, ck.queue_id, ck.start, ck.pop_time)
        old = self.cks.get(key)
        if old is not None:
            old.pending |= ck.pending
        else:
            self.cks[key] = ck

    def ack(self, group: str, topic: str, queue_id: int, start: int, pop_time: int, offset: int) -> bool:
        """Take ``offset`` out of its checkpoint; False when it is not there (acked or revived)."""
        ck = self.cks.get((group, topic, queue_id, start, pop_time))
        if ck is None or offset not in ck.pending:
            return False
        ck.pending.discard(offset)
        if not ck.pending:
            del self.cks[(group, topic, queue_id, start, pop_time)]
        self.acked += 1
        return True
