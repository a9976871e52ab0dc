"""POP consumption (RocketMQ 5.x, remoting): headers, bodies and the receipt handle (``extraInfo``).

Strategy: the 5.3.3 wire forms as the ``v5-pop-*`` captures show them. The headers of POP_MESSAGE
(200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053) are typed
:class:`~.headers.Header` classes (extFields in Java HashMap order, so our JSON headers are the
Java client's bytes); QUERY_ASSIGNMENT (400), SET_MESSAGE_REQUEST_MODE (401) and BATCH_ACK_MESSAGE
(200151) carry fastjson beans (properties in alphabetical order) and no extFields at all. The
receipt handle is Java's ``ExtraInfoUtil`` string, eight fields separated by one space:
``ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset``.
Pure functions and data only: no clock (the caller passes times in ms).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError
from . import fastjson
from .headers import I32, I64, Header
from .mq import MessageQueue

__all__ = [
    "FIRST_POP_TIME",
    "POP_CK",
    "POP_DELAY_LEVELS",
    "AckMessageRequestHeader",
    "Assignment",
    "BatchAck",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "ExtraInfo",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "build_offset_info",
    "decode_assignments",
    "decode_batch_ack",
    "decode_query_assignment",
    "decode_set_mode",
    "encode_assignments",
    "encode_batch_ack",
    "encode_query_assignment",
    "encode_set_mode",
    "parse_offset_info",
    "pop_retry_topic",
    "real_topic",
]

#: message property: the receipt handle a broker puts on revived messages (``MessageConst.PROPERTY_POP_CK``)
POP_CK = "POP_CK"
#: message property: the time of the first pop (``MessageConst.PROPERTY_FIRST_POP_TIME``)
FIRST_POP_TIME = "1ST_POP_TIME"
#: ``ConsumeMessagePopConcurrentlyService``: the invisible time (s) after the Nth failure (index =
#: reconsume times, the last one repeats): 10 s, 30 s, 1 min, 2 min ... 2 h
POP_DELAY_LEVELS = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


@dataclass(slots=True)
class PopMessageRequestHeader(Header):
    """POP_MESSAGE (200050). ``queue_id`` -1: any queue; ``init_mode`` 0 MIN, 1 MAX; times in ms."""

    consumer_group: str
    topic: str
    queue_id: I32
    max_msg_nums: I32
    poll_time: I64  # before invisible_time: the Java map's bucket order
    invisible_time: I64
    born_time: I64
    init_mode: I32
    exp_type: str | None = None
    exp: str | None = None
    order: bool | None = None
    attempt_id: str | None = None
    bname: str | None = None


@dataclass(slots=True)
class PopMessageResponseHeader(Header):
    """Answer to POP_MESSAGE (0 FOUND, 210 POLLING_TIMEOUT with empty offset infos)."""

    pop_time: I64
    invisible_time: I64
    revive_qid: I32
    rest_num: I64
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(slots=True)
class AckMessageRequestHeader(Header):
    """ACK_MESSAGE (200051)."""

    consumer_group: str
    topic: str
    queue_id: I32
    extra_info: str
    offset: I64
    bname: str | None = None


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME (200053): ``invisible_time`` counts from now (ms)."""

    consumer_group: str
    topic: str
    queue_id: I32
    extra_info: str
    offset: I64
    invisible_time: I64
    bname: str | None = None


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    """Answer to CHANGE_MESSAGE_INVISIBLETIME: the new checkpoint of the message."""

    pop_time: I64
    invisible_time: I64
    revive_qid: I32


# -- receipt handle --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    """``ExtraInfoUtil``: one popped message's handle. ``retry`` "0" normal, "1" retry topic v1
    (``%RETRY%group_topic``), "2" v2 (``%RETRY%group+topic``)."""

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    offset: int

    def __str__(self) -> str:
        return (
            f"{self.ck_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} {self.retry} "
            f"{self.broker_name} {self.queue_id} {self.offset}"
        )

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        parts = text.split(" ")
        if len(parts) < 8:
            raise ProtocolError(f"extraInfo {text!r}: expected 8 fields")
        try:
            return cls(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                int(parts[3]),
                parts[4],
                parts[5],
                int(parts[6]),
                int(parts[7]),
            )
        except ValueError as exc:
            raise ProtocolError(f"extraInfo {text!r}: {exc}") from None

    def changed(self, pop_time: int, invisible_time: int, revive_qid: int) -> ExtraInfo:
        """The handle after CHANGE_MESSAGE_INVISIBLETIME: the checkpoint is the message's own."""
        return ExtraInfo(
            self.offset,
            pop_time,
            invisible_time,
            revive_qid,
            self.retry,
            self.broker_name,
            self.queue_id,
            self.offset,
        )

    def topic(self, topic: str, group: str) -> str:
        """The topic to ack on (``getRealTopic``): the pop retry topic for a retry message."""
        return real_topic(topic, group, self.retry)


def pop_retry_topic(topic: str, group: str, v2: bool = False) -> str:
    """``KeyBuilder.buildPopRetryTopic``: ``%RETRY%group_topic`` (v1) or ``%RETRY%group+topic`` (v2)."""
    return f"%RETRY%{group}{'+' if v2 else '_'}{topic}"


def real_topic(topic: str, group: str, retry: str) -> str:
    if retry == "1":
        return pop_retry_topic(topic, group)
    if retry == "2":
        return pop_retry_topic(topic, group, True)
    return topic


def build_offset_info(items: Iterable[tuple[bool, int, list[int]]]) -> tuple[str, str]:
    """(startOffsetInfo, msgOffsetInfo) of a pop answer: per (retry, queue id, offsets) popped."""
    starts, offs = [], []
    for retry, qid, offsets in items:
        flag = "1" if retry else "0"
        starts.append(f"{flag} {qid} {offsets[0]}")
        offs.append(f"{flag} {qid} {','.join(map(str, offsets))}")
    return ";".join(starts), ";".join(offs)


def parse_offset_info(start_info: str, msg_info: str) -> dict[tuple[str, int, int], int]:
    """``ExtraInfoUtil.parseStartOffsetInfo/parseMsgOffsetInfo``: (retry, queue id, msg offset) ->
    the checkpoint start offset of that queue in this pop."""
    starts: dict[tuple[str, int], int] = {}
    for item in filter(None, start_info.split(";")):
        f = item.split(" ")
        if len(f) != 3:
            raise ProtocolError(f"startOffsetInfo item {item!r}")
        starts[(f[0], int(f[1]))] = int(f[2])
    out: dict[tuple[str, int, int], int] = {}
    for item in filter(None, msg_info.split(";")):
        f = item.split(" ")
        if len(f) != 3:
            raise ProtocolError(f"msgOffsetInfo item {item!r}")
        key = (f[0], int(f[1]))
        for off in f[2].split(","):
            out[(f[0], key[1], int(off))] = starts.get(key, int(off))
    return out


# -- bodies ----------------------------------------------------------------------------------------


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = fastjson.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{what}: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what}: not a JSON object")
    return obj


def _dump(obj: Mapping[str, Any]) -> bytes:
    return fastjson.dumps(dict(sorted(obj.items()))).encode()


def encode_query_assignment(
    topic: str, group: str, client_id: str, strategy: str = "AVG", model: str = "CLUSTERING"
) -> bytes:
    """QUERY_ASSIGNMENT (400) request body."""
    return _dump(
        {
            "clientId": client_id,
            "consumerGroup": group,
            "messageModel": model,
            "strategyName": strategy,
            "topic": topic,
        }
    )


def decode_query_assignment(data: bytes) -> dict[str, str]:
    obj = _load(data, "QueryAssignmentRequestBody")
    try:
        return {k: str(obj[k]) for k in ("clientId", "consumerGroup", "topic")} | {
            "messageModel": str(obj.get("messageModel", "CLUSTERING")),
            "strategyName": str(obj.get("strategyName", "AVG")),
        }
    except KeyError as exc:
        raise ProtocolError(f"QueryAssignmentRequestBody: missing {exc}") from None


@dataclass(frozen=True, slots=True)
class Assignment:
    """One ``MessageQueueAssignment``: a queue (queue id -1: any queue of that broker) and its mode."""

    mq: MessageQueue
    mode: str  # "POP" or "PULL"


def encode_assignments(items: Iterable[Assignment]) -> bytes:
    """QUERY_ASSIGNMENT response body."""
    out = [
        {
            "messageQueue": {"brokerName": a.mq.broker_name, "queueId": a.mq.queue_id, "topic": a.mq.topic},
            "mode": a.mode,
        }
        for a in items
    ]
    return fastjson.dumps({"messageQueueAssignments": out}).encode()


def decode_assignments(data: bytes) -> list[Assignment]:
    obj = _load(data, "QueryAssignmentResponseBody")
    out = []
    try:
        for a in obj.get("messageQueueAssignments") or ():
            q = a["messageQueue"]
            mq = MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"]))
            out.append(Assignment(mq, str(a.get("mode", "PULL"))))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"QueryAssignmentResponseBody: {exc!r}") from None
    return out


def encode_set_mode(topic: str, group: str, mode: str, pop_share_queue_num: int = 0) -> bytes:
    """SET_MESSAGE_REQUEST_MODE (401) request body."""
    return _dump(
        {"consumerGroup": group, "mode": mode, "popShareQueueNum": pop_share_queue_num, "topic": topic}
    )


def decode_set_mode(data: bytes) -> tuple[str, str, str, int]:
    """(topic, group, mode, popShareQueueNum) of a 401 body."""
    obj = _load(data, "SetMessageRequestModeRequestBody")
    try:
        return (
            str(obj["topic"]),
            str(obj["consumerGroup"]),
            str(obj.get("mode", "PULL")),
            int(obj.get("popShareQueueNum", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"SetMessageRequestModeRequestBody: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class BatchAck:
    """One entry of BATCH_ACK_MESSAGE: the acked offsets of one checkpoint."""

    group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]


def _bitset(offsets: Iterable[int], start: int) -> str:
    """Java ``BitSet.toByteArray()`` (little-endian bits) in base64."""
    bits = 0
    for o in offsets:
        bits |= 1 << (o - start)
    n = (bits.bit_length() + 7) // 8
    return base64.b64encode(bits.to_bytes(n, "little")).decode()


def encode_batch_ack(broker_name: str, acks: Iterable[BatchAck]) -> bytes:
    items = [
        {
            "b": _bitset(a.offsets, a.start_offset),
            "c": a.group,
            "it": a.invisible_time,
            "pt": a.pop_time,
            "q": a.queue_id,
            "r": a.retry,
            "rq": a.revive_qid,
            "so": a.start_offset,
            "t": a.topic,
        }
        for a in acks
    ]
    return fastjson.dumps({"acks": items, "brokerName": broker_name}).encode()


def decode_batch_ack(data: bytes) -> tuple[str, list[BatchAck]]:
    obj = _load(data, "BatchAckMessageRequestBody")
    out = []
    try:
        for a in obj.get("acks") or ():
            so = int(a["so"])
            bits = int.from_bytes(base64.b64decode(a["b"]), "little")
            offs = tuple(so + i for i in range(bits.bit_length()) if bits >> i & 1)
            out.append(
                BatchAck(
                    str(a["c"]),
                    str(a["t"]),
                    str(a.get("r", "0")),
                    so,
                    int(a["q"]),
                    int(a.get("rq", 0)),
                    int(a["pt"]),
                    int(a["it"]),
                    offs,
                )
            )
        return str(obj.get("brokerName", "")), out
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"BatchAckMessageRequestBody: {exc!r}") from None
