"""What :class:`~rmq_async.admin.Admin` returns: frozen, slotted dataclasses read off the wire bodies
(``protocol/bodies.py``), in the shape mqadmin prints them. Names are the broker's (namespaced topics
and groups as stored), offsets are queue offsets, times are epoch milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.mq import MessageQueue

__all__ = [
    "BrokerInfo",
    "ClientConnection",
    "ClusterInfo",
    "GroupConnections",
    "GroupProgress",
    "QueueProgress",
    "QueueStatus",
    "TraceRecord",
]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One address of a broker group (``clusterList``): ``stats`` is its GET_BROKER_RUNTIME_INFO
    table, None when it did not answer."""

    cluster: str
    name: str
    broker_id: int
    addr: str
    stats: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Every broker address the name server knows, by cluster (``clusters``: broker names)."""

    brokers: tuple[BrokerInfo, ...]
    clusters: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue of ``topicStatus``."""

    mq: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """One member of a group (``consumerConnection``)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class GroupConnections:
    """A group's members and what they declared; an offline group has no ``clients`` (and None for
    what only members declare)."""

    group: str
    clients: tuple[ClientConnection, ...] = ()
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None
    #: topic -> subscription expression
    subscriptions: dict[str, str] = field(default_factory=dict)

    @property
    def online(self) -> bool:
        """Whether any member is connected."""
        return bool(self.clients)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue of ``consumerProgress``: ``lag`` is broker offset - consumer offset."""

    mq: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        """Messages stored and not yet committed by the group."""
        return self.broker_offset - self.consumer_offset


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """``consumerProgress -g``: per queue offsets (the ``%RETRY%`` queue included, as mqadmin) and the
    brokers' consume TPS summed."""

    group: str
    queues: tuple[QueueProgress, ...] = ()
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        """The lag of every queue, summed (mqadmin's ``Diff Total``)."""
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One trace record of a message (``queryMsgTraceById``'s ``TraceView``): ``trace_type`` is
    ``Pub``, ``SubBefore`` or ``SubAfter``; ``group`` the producer or consumer group."""

    trace_type: str
    timestamp: int
    group: str
    topic: str
    msg_id: str
    offset_msg_id: str
    tags: str
    keys: str
    store_host: str
    cost_time: int
    success: bool
    retry_times: int
    request_id: str
