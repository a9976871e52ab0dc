"""Message trace records, byte-compatible with the Java client's ``TraceDataEncoder`` (sans-IO).

Strategy: one :class:`TraceContext` per record group, as Java's: a ``Pub`` context holds one bean (the
sent message), a ``SubBefore`` / ``SubAfter`` context one bean per consumed message of a handler call.
:func:`encode` writes the fields in Java's order, separated by ``\\x01`` (``CONTENT_SPLITOR``), each
record ended by ``\\x02`` (``FIELD_SPLITOR``); what Java appends for a null string (``"null"``) is
kept: a message without tags or keys shows ``null`` there, as a Java-written trace does. The keys of
the trace message are the traced msg ids and the messages' own keys (split on spaces), so
``mqadmin queryMsgTraceById`` finds them through the broker's key index. :func:`decode` is
``decoderFromTraceDataString`` (what ``TraceView.decodeFromTraceTransData`` starts from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

__all__ = [
    "CONTENT_SPLITOR",
    "FIELD_SPLITOR",
    "GROUP_NAME_PREFIX",
    "RMQ_SYS_TRACE_TOPIC",
    "ConsumeReturnType",
    "MessageType",
    "TraceBean",
    "TraceContext",
    "decode",
    "encode",
    "trace_producer_group",
]

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
#: ``TopicValidator.RMQ_SYS_TRACE_TOPIC``: the default trace topic
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: ``TraceConstants.GROUP_NAME_PREFIX``
GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"


class MessageType(IntEnum):
    """``MessageType``; the record carries the ordinal."""

    NORMAL = 0  # Normal_Msg
    TRANS_HALF = 1  # Trans_Msg_Half
    TRANS_COMMIT = 2  # Trans_msg_Commit
    DELAY = 3  # Delay_Msg
    ORDER = 4  # Order_Msg


class ConsumeReturnType(IntEnum):
    """``ConsumeReturnType``; ``SubAfter`` carries the ordinal (``contextCode``)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


def trace_producer_group(group: str, kind: str, n: int) -> str:
    """``AsyncTraceDispatcher.genGroupNameForTrace``: ``_INNER_TRACE_PRODUCER-<group>-<TYPE>-<n>``
    (TYPE ``PRODUCE`` or ``CONSUME``, n a per-process counter from 1)."""
    return f"{GROUP_NAME_PREFIX}-{group}-{kind}-{n}"


def _s(value: str | None) -> str:
    # StringBuilder.append((String) null) writes "null"
    return "null" if value is None else value


def _b(value: bool) -> str:
    return "true" if value else "false"


@dataclass(slots=True)
class TraceBean:
    """``TraceBean``: one message of a record. Defaults as Java's (empty strings, zeros)."""

    topic: str | None = ""
    msg_id: str | None = ""
    offset_msg_id: str | None = ""
    tags: str | None = ""
    keys: str | None = ""
    store_host: str | None = ""
    store_time: int = 0
    retry_times: int = 0
    body_length: int = 0
    msg_type: MessageType = MessageType.NORMAL
    #: ``EndTransaction`` records only: the transaction id, the ``LocalTransactionState`` name
    #: (``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE``, ``UNKNOW``) and whether a check-back answered it
    transaction_id: str | None = None
    transaction_state: str = "UNKNOW"
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """``TraceContext``. ``trace_type`` is ``Pub``, ``SubBefore`` or ``SubAfter``; ``timestamp`` in ms;
    ``request_id`` ties a ``SubBefore`` to its ``SubAfter`` (a new UNIQ id per handler call)."""

    trace_type: str
    timestamp: int = 0
    region_id: str | None = ""
    group_name: str = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)
    #: ``AccessChannel.CLOUD`` leaves the timestamp and group out of ``SubAfter``
    cloud: bool = False


def encode(ctx: TraceContext) -> tuple[str, list[str]]:
    """``encoderFromContextBean``: (the records' text, the keys of the trace message)."""
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    parts: list[str] = []
    t = ctx.trace_type
    if t == "Pub":
        b = ctx.beans[0]
        parts += [
            "Pub", c, str(ctx.timestamp), c, _s(ctx.region_id), c, ctx.group_name, c,
            _s(b.topic), c, _s(b.msg_id), c, _s(b.tags), c, _s(b.keys), c, _s(b.store_host), c,
            str(b.body_length), c, str(ctx.cost_time), c, str(int(b.msg_type)), c,
            _s(b.offset_msg_id), c, _b(ctx.success), f,
        ]  # fmt: skip
    elif t == "SubBefore":
        for b in ctx.beans:
            parts += [
                "SubBefore", c, str(ctx.timestamp), c, _s(ctx.region_id), c, ctx.group_name, c,
                ctx.request_id, c, _s(b.msg_id), c, str(b.retry_times), c, _s(b.keys), f,
            ]  # fmt: skip
    elif t == "SubAfter":
        for b in ctx.beans:
            parts += [
                "SubAfter", c, ctx.request_id, c, _s(b.msg_id), c, str(ctx.cost_time), c,
                _b(ctx.success), c, _s(b.keys), c, str(ctx.context_code), c,
            ]  # fmt: skip
            if not ctx.cloud:
                parts += [str(ctx.timestamp), c, ctx.group_name]
            parts.append(f)
    elif t == "EndTransaction":
        b = ctx.beans[0]
        parts += [
            "EndTransaction", c, str(ctx.timestamp), c, _s(ctx.region_id), c, ctx.group_name, c,
            _s(b.topic), c, _s(b.msg_id), c, _s(b.tags), c, _s(b.keys), c, _s(b.store_host), c,
            str(int(b.msg_type)), c, _s(b.transaction_id), c, b.transaction_state, c,
            _b(b.from_transaction_check), f,
        ]  # fmt: skip
    else:
        raise ValueError(f"unknown trace type {t!r}")
    keys: list[str] = []
    for b in ctx.beans:
        keys.append(_s(b.msg_id))
        if b.keys:
            keys.extend(b.keys.split(" "))
    return "".join(parts), keys


def _int(text: str) -> int:
    return int(text)


def decode(data: str) -> list[TraceContext]:
    """``decoderFromTraceDataString``: the records of a trace message's body (unknown types skipped)."""
    out: list[TraceContext] = []
    if not data:
        return out
    for record in data.split(FIELD_SPLITOR):
        line = record.split(CONTENT_SPLITOR)
        kind = line[0]
        if kind == "Pub" and len(line) >= 13:
            bean = TraceBean(
                topic=line[4], msg_id=line[5], tags=line[6], keys=line[7], store_host=line[8],
                body_length=_int(line[9]), msg_type=MessageType(_int(line[11])),
            )  # fmt: skip
            ctx = TraceContext("Pub", _int(line[1]), line[2], line[3], cost_time=_int(line[10]), beans=[bean])
            if len(line) == 13:
                ctx.success = line[12] == "true"
            else:
                bean.offset_msg_id = line[12]
                ctx.success = line[13] == "true"
            out.append(ctx)
        elif kind == "SubBefore" and len(line) >= 8:
            bean = TraceBean(msg_id=line[5], retry_times=_int(line[6]), keys=line[7])
            out.append(
                TraceContext("SubBefore", _int(line[1]), line[2], line[3], request_id=line[4], beans=[bean])
            )
        elif kind == "SubAfter" and len(line) >= 6:
            bean = TraceBean(msg_id=line[2], keys=line[5])
            ctx = TraceContext(
                "SubAfter",
                request_id=line[1],
                cost_time=_int(line[3]),
                success=line[4] == "true",
                beans=[bean],
            )
            if len(line) >= 7:
                ctx.context_code = _int(line[6])
            if len(line) >= 9:
                ctx.timestamp = _int(line[7])
                ctx.group_name = line[8]
            out.append(ctx)
        elif kind == "EndTransaction" and len(line) >= 13:
            bean = TraceBean(
                topic=line[4], msg_id=line[5], tags=line[6], keys=line[7], store_host=line[8],
                msg_type=MessageType(_int(line[9])), transaction_id=line[10], transaction_state=line[11],
                from_transaction_check=line[12] == "true",
            )  # fmt: skip
            out.append(TraceContext("EndTransaction", _int(line[1]), line[2], line[3], beans=[bean]))
    return out
