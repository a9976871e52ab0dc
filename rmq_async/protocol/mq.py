"""MessageQueue: (topic, broker name, queue id), ordered like Java's ``MessageQueue.compareTo``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MessageQueue"]


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """A queue of a topic on one broker.

    Ordering is topic, then broker name, then queue id, as ``MessageQueue.compareTo`` in Java, so a
    sorted list equals the Java client's sorted list (allocation depends on it).
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        # MessageQueue.toString(): the consistent-hash strategy hashes this exact text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        """The fastjson bean form: properties in alphabetical order."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
