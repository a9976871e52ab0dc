"""MessageQueue: (topic, broker name, queue id), ordered like Java's ``MessageQueue.compareTo``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["MessageQueue"]


@dataclass(frozen=True, order=True)
class MessageQueue:
    """A queue of a topic on one broker.

    Ordering is topic, then broker name, then queue id, as ``MessageQueue.compareTo`` in Java, so a
    sorted list equals the Java client's sorted list (allocation depends on it).
    """

    # _hash: computed once (process queues, offsets and pull state are dicts keyed by queues and
    # looked up on every pull); not a field, and never pickled (string hashes differ by process)
    __slots__ = ("_hash", "broker_name", "queue_id", "topic")

    topic: str
    broker_name: str
    queue_id: int
    if TYPE_CHECKING:
        _hash: ClassVar[int]  # a slot, not a field: see __slots__

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.broker_name, self.queue_id)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (MessageQueue, (self.topic, self.broker_name, self.queue_id))

    def __str__(self) -> str:
        # MessageQueue.toString(): the consistent-hash strategy hashes this exact text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        """The fastjson bean form: properties in alphabetical order."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
