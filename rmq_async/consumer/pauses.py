"""What the user paused of a push consumer (``PushConsumer.pause``): whole topics and single queues.
It outlives a run (a consumer started again stays paused) and is read where a queue starts, so a
queue newly assigned for a paused topic starts paused. Pure bookkeeping: the process queues carry the
effect (:meth:`~.process_queue.ProcessQueue.set_paused`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError
from ..protocol.mq import MessageQueue

__all__ = ["Pauses", "Target"]

#: what pause() and resume() take: a topic (every queue of it, the ones assigned later too) or a queue
Target = str | MessageQueue


class Pauses:
    __slots__ = ("queues", "topics")

    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.queues: set[MessageQueue] = set()

    def covers(self, mq: MessageQueue) -> bool:
        return mq.topic in self.topics or mq in self.queues

    def pause(self, targets: Iterable[Target]) -> None:
        for t in targets:
            if isinstance(t, MessageQueue):
                self.queues.add(t)
            else:
                self.topics.add(t)

    def resume(self, targets: Iterable[Target]) -> None:
        """Resume topics (with every queue of them paused on its own) and queues; a queue whose topic
        is paused cannot be resumed alone (:class:`ConfigError`: resume the topic)."""
        items = list(targets)
        for t in items:
            if isinstance(t, MessageQueue) and t.topic in self.topics and t.topic not in items:
                raise ConfigError(f"{t} is paused with its topic {t.topic!r}: resume the topic")
        for t in items:
            if isinstance(t, MessageQueue):
                self.queues.discard(t)
            else:
                self.topics.discard(t)
                self.queues = {mq for mq in self.queues if mq.topic != t}

    def snapshot(self) -> set[Target]:
        return {*self.topics, *self.queues}
