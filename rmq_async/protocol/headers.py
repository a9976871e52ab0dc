"""Typed request/response headers <-> ``ext_fields`` (every value a string on the wire).

Strategy: each header is a slotted dataclass whose snake_case attributes map to the Java field names
(camelCase, the wire keys; a few are overridden with ``field(metadata={"key": ...})``). One generic
codec per class, built once from the type hints, converts both ways: ``str`` as is, ints in decimal
(``I32`` for Java ``Integer``/``int``, ``I64`` for ``Long``/``long``, range-checked like
``Integer.parseInt``), booleans ``"true"``/``"false"``. ``None`` fields are left out. Reading ignores
keys it does not know (5.x adds some) and raises :class:`~rmq_async.errors.ProtocolError` naming the
class and the key for a missing required or unparsable value.

Key order: the Java side fills ``extFields`` (a ``java.util.HashMap``) and fastjson writes it in the
map's iteration order, so ``to_ext_fields`` returns the keys in that order (:func:`java_map_order`),
which makes our JSON headers byte-identical to the Java client's.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from ..errors import ProtocolError
from .codes import RequestCode
from .fastjson import java_bucket_order, java_map_order

__all__ = [
    "I32",
    "I64",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetRouteInfoRequestHeader",
    "Header",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PutKVConfigRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnregisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "java_map_order",
]

#: A Java ``Integer``/``int`` header value (32-bit signed).
I32 = Annotated[int, "i32"]
#: A Java ``Long``/``long`` header value (64-bit signed).
I64 = Annotated[int, "i64"]

_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt / Long.parseLong: ASCII digits, no spaces
_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}


# -- generic codec ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Spec:
    attr: str
    key: str
    kind: str  # "str" | "i32" | "i64" | "bool"
    nullable: bool
    default: Any  # dataclasses.MISSING when required


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _kind_of(hint: Any, where: str) -> tuple[str, bool]:
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) != len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"{where}: unsupported header type {hint!r}")
        hint = args[0]
    if typing.get_origin(hint) is Annotated:
        base, *meta = typing.get_args(hint)
        if base is int and meta and meta[0] in _RANGES:
            return str(meta[0]), nullable
    elif hint is str:
        return "str", nullable
    elif hint is bool:
        return "bool", nullable
    raise TypeError(f"{where}: unsupported header type {hint!r} (use str, bool, I32 or I64)")


_SPECS: dict[type, tuple[_Spec, ...]] = {}


def _specs(cls: type) -> tuple[_Spec, ...]:
    got = _SPECS.get(cls)
    return got if got is not None else _SPECS.setdefault(cls, _build_specs(cls))


_SPECS16: dict[type, tuple[_Spec, ...]] = {}


def _specs16(cls: type) -> tuple[_Spec, ...]:
    """The specs in the order a 16-bucket Java HashMap filled in their order iterates their keys."""
    got = _SPECS16.get(cls)
    if got is None:
        specs = _specs(cls)
        got = _SPECS16[cls] = tuple(specs[i] for i in java_bucket_order(tuple(s.key for s in specs), 16))
    return got


def _build_specs(cls: type) -> tuple[_Spec, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            continue
        kind, nullable = _kind_of(hints[f.name], f"{cls.__name__}.{f.name}")
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(_Spec(f.name, f.metadata.get("key", _camel(f.name)), kind, nullable, default))
    # Java fills extFields in its reflection order, which differs from the declaration order; it only
    # shows where two keys share a HashMap bucket. Classes name such keys in _INSERT_FIRST.
    first: tuple[str, ...] = getattr(cls, "_INSERT_FIRST", ())
    out.sort(key=lambda s: (s.attr not in first, first.index(s.attr) if s.attr in first else 0))
    return tuple(out)


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(int(value))


def _parse(cls: type, spec: _Spec, text: str) -> Any:
    kind = spec.kind
    if kind == "str":
        return text
    if kind == "bool":
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ProtocolError(f"{cls.__name__}.{spec.key}: {text!r} is not a boolean")
    # plain ASCII digits (the common case) go straight to int(); anything else must pass the regex,
    # since int() alone would also take spaces, underscores and non-ASCII digits
    if not (text.isascii() and text.isdigit()) and not _INT_TEXT.fullmatch(text):
        raise ProtocolError(f"{cls.__name__}.{spec.key}: {text!r} is not an integer")
    value = int(text)
    lo, hi = _RANGES[kind]
    if not lo <= value <= hi:
        bits = 32 if kind == "i32" else 64
        raise ProtocolError(f"{cls.__name__}.{spec.key}: {text} does not fit in {bits} bits")
    return value


class Header:
    """Base of the typed headers: ``to_ext_fields`` / ``from_ext_fields`` from the dataclass fields."""

    __slots__ = ()

    if typing.TYPE_CHECKING:

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

    def _pairs(self, specs: tuple[_Spec, ...], keys: Mapping[str, str] | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in specs:
            value = getattr(self, spec.attr)
            if value is not None:
                t = type(value)  # exact str and int first: the common cases, without isinstance
                text = value if t is str else str(value) if t is int else _to_text(value)
                out[keys[spec.attr] if keys else spec.key] = text
        return out

    def to_ext_fields(self) -> dict[str, str]:
        """The wire form: Java field names to strings, ``None`` left out, in Java HashMap order."""
        out: dict[str, str] = {}
        # walk the fields in the order of a 16-bucket map (what up to 12 entries fill): no sorting
        # per call; more entries than that resize the Java map, and the generic path orders them
        for spec in _specs16(type(self)):
            value = getattr(self, spec.attr)
            if value is not None:
                t = type(value)
                out[spec.key] = value if t is str else str(value) if t is int else _to_text(value)
        if len(out) > 12:
            return java_map_order(self._pairs(_specs(type(self))))
        return out

    @classmethod
    def _from(cls, ext: Mapping[str, str], keys: Mapping[str, str] | None = None) -> Self:
        kwargs: dict[str, Any] = {}
        for spec in _specs(cls):
            key = keys[spec.attr] if keys else spec.key
            text = ext.get(key)
            if text is None:
                if spec.nullable:
                    kwargs[spec.attr] = None
                elif spec.default is dataclasses.MISSING:
                    raise ProtocolError(f"{cls.__name__}: missing required field {key!r}")
                continue
            if not isinstance(text, str):
                raise ProtocolError(f"{cls.__name__}.{key}: value {text!r} is not a string")
            kwargs[spec.attr] = _parse(cls, spec, text)
        return cls(**kwargs)

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        """Read the header from ``ext_fields``; unknown keys are ignored."""
        return cls._from(ext)


# -- name server ----------------------------------------------------------------------------------


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(slots=True)
class PutKVConfigRequestHeader(Header):
    """PUT_KV_CONFIG (100): a value in the name server's KV config (``KVConfigManager``)."""

    namespace: str
    key: str
    value: str


@dataclass(slots=True)
class GetKVConfigRequestHeader(Header):
    """GET_KV_CONFIG (101); the answer is :class:`GetKVConfigResponseHeader`, or 22
    QUERY_NOT_FOUND when the name server has no such value."""

    namespace: str
    key: str


@dataclass(slots=True)
class GetKVConfigResponseHeader(Header):
    """GET_KV_CONFIG's answer."""

    value: str | None = None


@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER (103), broker to name server."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: I64
    compressed: bool = False
    body_crc32: I32 = 0
    heartbeat_timeout_millis: I64 | None = None  # 5.x
    enable_acting_master: bool | None = None  # 5.x


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    """Answer to REGISTER_BROKER."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnregisterBrokerRequestHeader(Header):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: I64


# -- pull -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE (11)."""

    consumer_group: str
    topic: str
    queue_id: I32
    queue_offset: I64
    max_msg_nums: I32
    sys_flag: I32
    commit_offset: I64
    suspend_timeout_millis: I64
    sub_version: I64
    subscription: str | None = None
    expression_type: str | None = None
    bname: str | None = None
    max_msg_bytes: I32 | None = None  # 5.x


@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    """Answer to PULL_MESSAGE (codes 0, 19, 20, 21)."""

    suggest_which_broker_id: I64
    next_begin_offset: I64
    min_offset: I64
    max_offset: I64
    group_sys_flag: I32 | None = None  # 5.x
    topic_sys_flag: I32 | None = None  # 5.x


# -- send -----------------------------------------------------------------------------------------

# SendMessageRequestHeaderV2: one-letter keys for the V1 fields (createSendMessageRequestHeaderV2).
_V2_KEYS = {
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
    "bname": "n",
}


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10); SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) use the V2 keys a..n."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: I32
    queue_id: I32
    sys_flag: I32
    born_timestamp: I64
    flag: I32
    properties: str | None
    reconsume_times: I32 | None = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: I32 | None = None
    bname: str | None = None

    V2_KEYS: ClassVar[Mapping[str, str]] = _V2_KEYS

    def to_v2_ext_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE_V2 form (keys ``a``..``n``), as the Java client sends it."""
        return java_map_order(self._pairs(_specs(type(self)), _V2_KEYS))

    @classmethod
    def from_v2_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        """Read a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header (keys ``a``..``n``)."""
        return cls._from(ext, _V2_KEYS)


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    """Answer to a send. ``extra`` keeps the other keys the broker adds (``MSG_REGION``, ``TRACE_ON``)."""

    msg_id: str
    queue_id: I32
    queue_offset: I64
    transaction_id: str | None = None  # 5.x brokers always send it
    extra: dict[str, str] = field(default_factory=dict)

    def to_ext_fields(self) -> dict[str, str]:
        # The broker adds the extra keys first (addExtField), then the header fields.
        return java_map_order({**self.extra, **self._pairs(_specs(type(self)))})

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        obj = cls._from(ext)
        known = {s.key for s in _specs(cls)}
        obj.extra = {k: v for k, v in ext.items() if k not in known}
        return obj


# -- offsets --------------------------------------------------------------------------------------


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    """QUERY_CONSUMER_OFFSET (14)."""

    consumer_group: str
    topic: str
    queue_id: I32
    bname: str | None = None
    set_zero_if_not_found: bool | None = None  # 5.x


@dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    """Answer to QUERY_CONSUMER_OFFSET (code 0; 22 has no header)."""

    offset: I64


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    """UPDATE_CONSUMER_OFFSET (15), oneway from the Java client."""

    consumer_group: str
    topic: str
    queue_id: I32
    commit_offset: I64
    bname: str | None = None

    _INSERT_FIRST: ClassVar[tuple[str, ...]] = ("bname",)  # captured: bname before commitOffset


@dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    """GET_MAX_OFFSET (30)."""

    topic: str
    queue_id: I32
    bname: str | None = None
    committed: bool | None = None  # 5.x (a 5.x client always sends it, true)


@dataclass(slots=True)
class GetMaxOffsetResponseHeader(Header):
    """Answer to GET_MAX_OFFSET."""

    offset: I64


@dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    """GET_MIN_OFFSET (31)."""

    topic: str
    queue_id: I32
    bname: str | None = None


@dataclass(slots=True)
class GetMinOffsetResponseHeader(Header):
    """Answer to GET_MIN_OFFSET."""

    offset: I64


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP (29)."""

    topic: str
    queue_id: I32
    timestamp: I64
    bname: str | None = None
    boundary_type: str | None = None  # 5.x: "LOWER" / "UPPER"


@dataclass(slots=True)
class SearchOffsetResponseHeader(Header):
    """Answer to SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: I64


@dataclass(slots=True)
class GetEarliestMsgStoretimeRequestHeader(Header):
    """GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queue_id: I32
    bname: str | None = None


@dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    """Answer to GET_EARLIEST_MSG_STORETIME."""

    timestamp: I64


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): ``offset`` is the commit-log offset from the offset message id."""

    offset: I64
    topic: str | None = None  # 5.x


# -- consumer group -------------------------------------------------------------------------------


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK (36): ``offset`` is the commit-log offset of the copy sent back."""

    offset: I64
    group: str
    delay_level: I32
    origin_msg_id: str | None
    origin_topic: str | None
    unit_mode: bool = False
    max_reconsume_times: I32 | None = None
    bname: str | None = None

    _INSERT_FIRST: ClassVar[tuple[str, ...]] = ("bname",)  # captured: bname before delayLevel


@dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP (38)."""

    consumer_group: str


@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(Header):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker to client, oneway."""

    consumer_group: str


@dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    """UNREGISTER_CLIENT (35): one per producer or consumer group."""

    client_id: str = field(metadata={"key": "clientID"})
    producer_group: str | None = None
    consumer_group: str | None = None


# -- broker to client (admin) ---------------------------------------------------------------------


@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """RESET_CONSUMER_CLIENT_OFFSET (220), broker to client, oneway (body: ResetOffsetBody)."""

    topic: str
    group: str
    timestamp: I64
    is_force: bool
    queue_id: I32 | None = None  # 5.x (-1: all queues)
    offset: I64 | None = None  # 5.x


@dataclass(slots=True)
class GetConsumerStatusRequestHeader(Header):
    """GET_CONSUMER_STATUS_FROM_CLIENT (221), broker to client."""

    topic: str
    group: str
    client_addr: str | None = None


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307), broker to client."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309), broker to client (body: the stored message)."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
    topic: str | None = None  # 5.x
    topic_sys_flag: I32 | None = None  # 5.x
    group_sys_flag: I32 | None = None  # 5.x


#: Request code -> the header class of that request (310/320 use the V2 keys of SendMessageRequestHeader).
REQUEST_HEADERS: Mapping[int, type[Header]] = types.MappingProxyType(
    {
        RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
        RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeader,
        RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
        RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
        RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
        RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
        RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
        RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
        RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
        RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
        RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
        RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
        RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
        RequestCode.UNREGISTER_BROKER: UnregisterBrokerRequestHeader,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
        RequestCode.PUT_KV_CONFIG: PutKVConfigRequestHeader,
        RequestCode.GET_KV_CONFIG: GetKVConfigRequestHeader,
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
        RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: GetConsumerStatusRequestHeader,
        RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
        RequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    }
)

#: Request code -> the header class of its successful answer (pull answers 19/20/21 use it too).
RESPONSE_HEADERS: Mapping[int, type[Header]] = types.MappingProxyType(
    {
        RequestCode.SEND_MESSAGE: SendMessageResponseHeader,
        RequestCode.SEND_MESSAGE_V2: SendMessageResponseHeader,
        RequestCode.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
        RequestCode.PULL_MESSAGE: PullMessageResponseHeader,
        RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
        RequestCode.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
        RequestCode.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
        RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
        RequestCode.REGISTER_BROKER: RegisterBrokerResponseHeader,
        RequestCode.GET_KV_CONFIG: GetKVConfigResponseHeader,
    }
)
