"""Request/response bodies: the JSON beans the Java side writes with fastjson.

Strategy: each body is a pydantic model with snake_case attributes and camelCase wire names
(``extra="ignore"``, so the keys 5.x adds are accepted). ``decode`` parses with
:func:`~rmq_async.protocol.fastjson.loads` (unquoted int keys, object keys) and validates; any failure
is a :class:`~rmq_async.errors.ProtocolError` naming the class. ``encode`` writes the bean the way
fastjson does: properties in alphabetical order, ``None`` left out, maps in the order held (Java
``TreeMap``/``TreeSet`` properties are sorted first), ``MessageQueue`` map keys as objects.

The fields a 5.x peer adds (``heartbeatFingerprint``, ``withoutSub``, ``enableActingMaster``,
``onlyThisBroker``) default to ``None``: ``encode()`` writes them when they are set, and
``encode(flavour5=True)`` writes them always (with the Java default when unset). A body decoded from
a 5.x capture therefore re-encodes to the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from ..errors import ProtocolError
from . import fastjson
from .fastjson import ObjectKeyMap
from .mq import MessageQueue

__all__ = [
    "BrokerData",
    "CheckClientRequestBody",
    "ClusterInfo",
    "ConnectionBody",
    "ConsumeMessageDirectlyResult",
    "ConsumeStats",
    "ConsumeStatus",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerRunningInfo",
    "DataVersion",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerStatusBody",
    "GroupList",
    "HeartbeatData",
    "JsonBody",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "OffsetWrapper",
    "ProcessQueueInfo",
    "ProducerData",
    "QueueData",
    "RegisterBrokerBody",
    "ResetOffsetBody",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicOffset",
    "TopicRouteData",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
]


# -- MessageQueue as a value and as a map key -------------------------------------------------------


def _to_mq(value: Any) -> MessageQueue:
    if isinstance(value, MessageQueue):
        return value
    if isinstance(value, Mapping):
        try:
            return MessageQueue(str(value["topic"]), str(value["brokerName"]), int(value["queueId"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a MessageQueue: {value!r} ({exc!r})") from None
    raise ValueError(f"not a MessageQueue: {value!r}")


def _to_mq_map(value: Any) -> Any:
    """An object-key map (ObjectKeyMap pairs, or a dict) -> dict keyed by MessageQueue."""
    if isinstance(value, ObjectKeyMap):
        return {_to_mq(k): v for k, v in value}
    if isinstance(value, Mapping):
        return {_to_mq(k): v for k, v in value.items()}
    raise ValueError(f"not a map keyed by MessageQueue: {type(value).__name__}")


MQ = Annotated[MessageQueue, PlainValidator(_to_mq)]
MQOffsets = Annotated[dict[MQ, int], BeforeValidator(_to_mq_map)]


def _java_str_key(s: str) -> bytes:
    # Java String.compareTo orders by UTF-16 code unit.
    return s.encode("utf-16-be", "surrogatepass")


def _wire(name: str, **kwargs: Any) -> Any:
    """A field whose wire name is not the camelCase of its attribute name."""
    return Field(validation_alias=AliasChoices(name), serialization_alias=name, **kwargs)


# -- base -------------------------------------------------------------------------------------------

_WIRE_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _plain(value: Any, flavour5: bool) -> Any:
    if isinstance(value, JsonBody):
        return value.to_bean(flavour5)
    if isinstance(value, (list, tuple)):
        return [_plain(v, flavour5) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, flavour5) for k, v in value.items()}
    if isinstance(value, MessageQueue):
        return value.to_json()
    return value


class JsonBody(BaseModel):
    """Base of the bodies: fastjson bean encoding and decoding (see the module doc)."""

    # defer_build: validators are built at first use, not at import (see config.ConfigModel)
    model_config = ConfigDict(
        extra="ignore", populate_by_name=True, alias_generator=to_camel, defer_build=True
    )

    #: Fields a 5.x peer writes, with the Java default ``encode(flavour5=True)`` uses when unset.
    _FLAVOUR5: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def _wire_fields(cls) -> tuple[tuple[str, str], ...]:
        got = _WIRE_FIELDS.get(cls)
        if got is None:
            pairs = []
            for name, info in cls.model_fields.items():
                wire = info.serialization_alias or info.alias or name
                pairs.append((name, wire))
            got = tuple(sorted(pairs, key=lambda p: _java_str_key(p[1])))
            _WIRE_FIELDS[cls] = got
        return got

    def _sorted_view(self) -> dict[str, Any]:
        """Field values as encoded; subclasses sort their Java TreeMap/TreeSet properties here."""
        return {name: getattr(self, name) for name, _ in self._wire_fields()}

    def to_bean(self, flavour5: bool = False) -> dict[str, Any]:
        """The bean as plain JSON-able data in fastjson's property order (MessageQueue keys kept)."""
        values = self._sorted_view()
        out: dict[str, Any] = {}
        for name, wire in self._wire_fields():
            value = values[name]
            if value is None and flavour5 and name in self._FLAVOUR5:
                value = self._FLAVOUR5[name]
            if value is not None:
                out[wire] = _plain(value, flavour5)
        return out

    def encode(self, flavour5: bool = False) -> bytes:
        """The body bytes, as fastjson writes this bean (5.x fields always with ``flavour5``)."""
        return fastjson.dumps(self.to_bean(flavour5)).encode("utf-8")

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> Self:
        """Parse a body; any failure is a ProtocolError naming the class."""
        try:
            obj = fastjson.loads(body)
            if not isinstance(obj, dict):
                raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}")
            return cls.model_validate(obj)
        except ProtocolError as exc:
            raise ProtocolError(f"{cls.__name__}: {exc}") from None
        except (ValidationError, ValueError, TypeError) as exc:
            raise ProtocolError(f"{cls.__name__}: invalid body: {exc}") from None


# -- heartbeat ----------------------------------------------------------------------------------------


class SubscriptionData(JsonBody):
    """One subscription of a consumer group (``heartbeat/SubscriptionData.java``).

    ``code_set`` holds Java ``String.hashCode()`` of each tag; the broker filters by it.
    """

    topic: str
    sub_string: str
    tags_set: list[str] = Field(default_factory=list)
    code_set: list[int] = Field(default_factory=list)
    sub_version: int
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    def java_sort_key(self) -> bytes:
        """``SubscriptionData.compareTo``: ``topic + "@" + subString``."""
        return _java_str_key(f"{self.topic}@{self.sub_string}")


class ConsumerData(JsonBody):
    """A consumer group in a heartbeat (``heartbeat/ConsumerData.java``)."""

    group_name: str
    consume_type: str  # "CONSUME_PASSIVELY" (push) / "CONSUME_ACTIVELY" (pull, lite pull)
    message_model: str  # "CLUSTERING" / "BROADCASTING"
    consume_from_where: str
    subscription_data_set: list[SubscriptionData] = Field(default_factory=list)
    unit_mode: bool = False


class ProducerData(JsonBody):
    """A producer group in a heartbeat."""

    group_name: str


class HeartbeatData(JsonBody):
    """HEART_BEAT (34) body. ``heartbeat_fingerprint`` and ``without_sub`` are the 5.x additions."""

    client_id: str = _wire("clientID")
    consumer_data_set: list[ConsumerData] = Field(default_factory=list)
    producer_data_set: list[ProducerData] = Field(default_factory=list)
    heartbeat_fingerprint: int | None = None
    without_sub: bool | None = None

    _FLAVOUR5: ClassVar[Mapping[str, Any]] = {"heartbeat_fingerprint": 0, "without_sub": False}


# -- route ----------------------------------------------------------------------------------------


class QueueData(JsonBody):
    """Queues of a topic on one broker. Older servers spell ``topicSysFlag`` as ``topicSynFlag``."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = Field(
        default=0,
        validation_alias=AliasChoices("topicSysFlag", "topicSynFlag"),
        serialization_alias="topicSysFlag",
    )


class BrokerData(JsonBody):
    """Addresses of one broker group by broker id (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = Field(default_factory=dict)
    enable_acting_master: bool | None = None  # 5.x
    zone_name: str | None = None  # 5.x, null unless configured

    _FLAVOUR5: ClassVar[Mapping[str, Any]] = {"enable_acting_master": False}

    def select_broker_addr(self) -> str | None:
        """The master's address (id 0), else any address (the first), else None."""
        addr = self.broker_addrs.get(0)
        if addr is not None:
            return addr
        return next(iter(self.broker_addrs.values()), None)


class TopicRouteData(JsonBody):
    """GET_ROUTEINFO_BY_TOPIC (105) answer. ``brokerAddrs`` keys may come quoted or not."""

    queue_datas: list[QueueData] = Field(default_factory=list)
    broker_datas: list[BrokerData] = Field(default_factory=list)
    filter_server_table: dict[str, list[str]] = Field(default_factory=dict)
    order_topic_conf: str | None = None


class CheckClientRequestBody(JsonBody):
    """CHECK_CLIENT_CONFIG (46) body (``body/CheckClientRequestBody.java``): a consumer asks a broker
    whether it can serve one subscription (``checkClientInBroker``, SQL92 ones only)."""

    client_id: str
    group: str
    subscription_data: SubscriptionData


# -- orderly locks, consumer lists ---------------------------------------------------------------------


class LockBatchRequestBody(JsonBody):
    """LOCK_BATCH_MQ (41) body. ``only_this_broker`` is the 5.x addition."""

    consumer_group: str
    client_id: str
    mq_set: list[MQ] = Field(default_factory=list)
    only_this_broker: bool | None = None

    _FLAVOUR5: ClassVar[Mapping[str, Any]] = {"only_this_broker": False}


class UnlockBatchRequestBody(JsonBody):
    """UNLOCK_BATCH_MQ (42) body."""

    consumer_group: str
    client_id: str
    mq_set: list[MQ] = Field(default_factory=list)
    only_this_broker: bool | None = None

    _FLAVOUR5: ClassVar[Mapping[str, Any]] = {"only_this_broker": False}


class LockBatchResponseBody(JsonBody):
    """LOCK_BATCH_MQ answer: the queues now locked for the client (empty if another holds them)."""

    lock_ok_mq_set: list[MQ] = _wire("lockOKMQSet", default_factory=list)


class GetConsumerListByGroupResponseBody(JsonBody):
    """GET_CONSUMER_LIST_BY_GROUP (38) answer."""

    consumer_id_list: list[str] = Field(default_factory=list)


# -- broker to client (admin) -------------------------------------------------------------------------


class ResetOffsetBody(JsonBody):
    """RESET_CONSUMER_CLIENT_OFFSET (220) body: ``{"offsetTable":{{mq}:offset,...}}``."""

    offset_table: MQOffsets = Field(default_factory=dict)


class GetConsumerStatusBody(JsonBody):
    """GET_CONSUMER_STATUS_FROM_CLIENT (221) answer."""

    message_queue_table: MQOffsets = Field(default_factory=dict)
    consumer_table: dict[str, MQOffsets] = Field(default_factory=dict)


class ConsumeMessageDirectlyResult(JsonBody):
    """CONSUME_MESSAGE_DIRECTLY (309) answer. ``consume_result``: CR_SUCCESS, CR_LATER, ..."""

    order: bool = False
    auto_commit: bool = True
    consume_result: str
    remark: str | None = None
    spent_time_mills: int = 0


class ProcessQueueInfo(JsonBody):
    """State of one process queue in ConsumerRunningInfo (``ProcessQueueInfo.java``)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = _wire("cachedMsgSizeInMiB", default=0)
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False  # sic, the Java property name
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


class ConsumeStatus(JsonBody):
    """Per-topic rates in ConsumerRunningInfo (``ConsumeStatus.java``)."""

    pull_rt: float = _wire("pullRT", default=0.0)
    pull_tps: float = _wire("pullTPS", default=0.0)
    consume_rt: float = _wire("consumeRT", default=0.0)
    consume_ok_tps: float = _wire("consumeOKTPS", default=0.0)
    consume_failed_tps: float = _wire("consumeFailedTPS", default=0.0)
    consume_failed_msgs: int = 0


class ConsumerRunningInfo(JsonBody):
    """GET_CONSUMER_RUNNING_INFO (307) answer, in the Java shape ``mqadmin consumerStatus`` reads.

    ``mq_table``, ``status_table`` and ``subscription_set`` are Java TreeMaps/TreeSets: encode sorts them.
    """

    properties: dict[str, str] = Field(default_factory=dict)
    subscription_set: list[SubscriptionData] = Field(default_factory=list)
    mq_table: Annotated[dict[MQ, ProcessQueueInfo], BeforeValidator(_to_mq_map)] = Field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = Field(default_factory=dict)
    jstack: str | None = None

    def _sorted_view(self) -> dict[str, Any]:
        view = super()._sorted_view()
        view["mq_table"] = dict(sorted(self.mq_table.items(), key=lambda kv: _mq_java_key(kv[0])))
        view["status_table"] = dict(sorted(self.status_table.items(), key=lambda kv: _java_str_key(kv[0])))
        view["subscription_set"] = sorted(self.subscription_set, key=SubscriptionData.java_sort_key)
        return view


def _mq_java_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    return (_java_str_key(mq.topic), _java_str_key(mq.broker_name), mq.queue_id)


# -- admin (mqadmin, ``DefaultMQAdminExt``) -------------------------------------------------------------


class ClusterInfo(JsonBody):
    """GET_BROKER_CLUSTER_INFO (106) answer: brokers by name, broker names by cluster."""

    broker_addr_table: dict[str, BrokerData] = Field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = Field(default_factory=dict)


class KVTable(JsonBody):
    """GET_BROKER_RUNTIME_INFO (28) answer: the broker's runtime figures, every value a string."""

    table: dict[str, str] = Field(default_factory=dict)


class TopicList(JsonBody):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) answer."""

    topic_list: list[str] = Field(default_factory=list)
    broker_addr: str | None = None


class GroupList(JsonBody):
    """QUERY_TOPIC_CONSUME_BY_WHO (300) answer: the groups with offsets on the topic."""

    group_list: list[str] = Field(default_factory=list)


class TopicOffset(JsonBody):
    """One queue of GET_TOPIC_STATS_INFO (202)."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


class TopicStatsTable(JsonBody):
    """GET_TOPIC_STATS_INFO (202) answer (object keys: not strict JSON)."""

    offset_table: Annotated[dict[MQ, TopicOffset], BeforeValidator(_to_mq_map)] = Field(default_factory=dict)


class OffsetWrapper(JsonBody):
    """One queue of GET_CONSUME_STATS (208); ``pull_offset`` is the 5.x addition."""

    broker_offset: int = 0
    consumer_offset: int = 0
    pull_offset: int | None = None
    last_timestamp: int = 0


class ConsumeStats(JsonBody):
    """GET_CONSUME_STATS (208) answer (object keys: not strict JSON)."""

    consume_tps: float = 0.0
    offset_table: Annotated[dict[MQ, OffsetWrapper], BeforeValidator(_to_mq_map)] = Field(
        default_factory=dict
    )


class ConnectionBody(JsonBody):
    """One member of GET_CONSUMER_CONNECTION_LIST (203) (``protocol/body/Connection.java``)."""

    client_id: str
    client_addr: str
    language: str
    version: int


class ConsumerConnection(JsonBody):
    """GET_CONSUMER_CONNECTION_LIST (203) answer (strict JSON)."""

    connection_set: list[ConnectionBody] = Field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = Field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


class SubscriptionGroupConfig(JsonBody):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) body, the 4.9.8 bean and its defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = False
    consume_broadcast_enable: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


# -- broker registration (embedded name server) --------------------------------------------------------


class TopicConfig(JsonBody):
    """A topic as a broker registers it (``common/TopicConfig.java``; Java defaults)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None  # 5.x


class DataVersion(JsonBody):
    """Version stamp of a broker's topic table."""

    timestamp: int
    counter: int = 0
    state_version: int | None = None  # 5.x


class TopicConfigSerializeWrapper(JsonBody):
    """The topic table a broker registers."""

    topic_config_table: dict[str, TopicConfig] = Field(default_factory=dict)
    data_version: DataVersion


class RegisterBrokerBody(JsonBody):
    """REGISTER_BROKER (103) body in its JSON form (header ``compressed=false``)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper
    filter_server_list: list[str] = Field(default_factory=list)
