"""Request-reply (Java ``DefaultMQProducer.request``, ``MessageUtil.createReplyMessage``), as
``reply.jsonl`` (4.9.8) shows it.

Strategy: a request is an ordinary send whose properties add ``REPLY_TO_CLIENT`` (the requester's
client id), ``TTL`` (its timeout, ms) and ``CORRELATION_ID`` (a random UUID), in the Java client's
HashMap order (:func:`request_properties`). The responder's consumer sees them with the broker's
``CLUSTER``; the reply (:func:`create_reply_message`) goes to ``<CLUSTER>_REPLY_TOPIC`` with
``MSG_TYPE=reply``, ``REPLY_TO_CLIENT``, ``TTL`` and ``CORRELATION_ID`` only (no ``WAIT``, tags or
keys), which makes the producer send it as SEND_REPLY_MESSAGE_V2 (325). The broker stores it and
pushes it to the requester's connection as PUSH_REPLY_MESSAGE_TO_CLIENT (326), a request with the
long-named :class:`ReplyMessageRequestHeader` and the reply's body; the requester answers code 0
and matches the reply to its request by ``CORRELATION_ID``. Pure data: no clock, no I/O (the
correlation id comes from :mod:`uuid`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ClientError
from .codes import Prop
from .compression import decompress_body
from .fastjson import java_map_order
from .headers import I32, I64, Header
from .message import Message
from .properties import parse_properties
from .stored import MessageExt

__all__ = [
    "MSG_TYPE_REPLY",
    "REPLY_TOPIC_SUFFIX",
    "ReplyMessageRequestHeader",
    "create_reply_message",
    "new_correlation_id",
    "reply_message_ext",
    "reply_topic",
    "request_properties",
]

#: ``MixAll.REPLY_TOPIC_POSTFIX``: the reply topic is ``<cluster>_REPLY_TOPIC``
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"
#: ``MixAll.REPLY_MESSAGE_FLAG``: the ``MSG_TYPE`` of a reply
MSG_TYPE_REPLY = "reply"
_COMPRESSED = 0x1  # MessageSysFlag.COMPRESSED_FLAG


def reply_topic(cluster: str) -> str:
    """The topic a broker of ``cluster`` takes replies on (``MixAll.getReplyTopic``)."""
    return cluster + REPLY_TOPIC_SUFFIX


def new_correlation_id() -> str:
    """``CorrelationIdUtil.createCorrelationId``: a random UUID."""
    return str(uuid.uuid4())


def request_properties(
    properties: Mapping[str, str], client_id: str, timeout_ms: int, correlation_id: str
) -> dict[str, str]:
    """``prepareSendRequest``: ``properties`` with the requester's id, the TTL and the correlation
    id added, in the Java client's HashMap order (``REPLY_TO_CLIENT, KEYS, UNIQ_KEY, WAIT, TTL,
    TAGS, CORRELATION_ID`` in the capture)."""
    props = dict(properties)
    props[Prop.CORRELATION_ID] = correlation_id
    props[Prop.REPLY_TO_CLIENT] = client_id
    props[Prop.MESSAGE_TTL] = str(timeout_ms)
    return java_map_order(props)


def create_reply_message(request: MessageExt, body: bytes) -> Message:
    """The reply to ``request`` (``MessageUtil.createReplyMessage``): to ``<CLUSTER>_REPLY_TOPIC``
    with the request's ``REPLY_TO_CLIENT``, ``CORRELATION_ID`` and ``TTL`` and ``MSG_TYPE=reply``;
    send it with any producer. A message that is not a request (no ``CLUSTER``, as the broker adds
    it, or no ``REPLY_TO_CLIENT``): :class:`~rmq_async.errors.ClientError`."""
    cluster = request.get_property(Prop.CLUSTER)
    if not cluster:
        raise ClientError("create reply message fail, requestMessage error, property[CLUSTER] is null.")
    to_client = request.get_property(Prop.REPLY_TO_CLIENT)
    if not to_client:
        raise ClientError(f"message {request.msg_id} is not a request: it has no {Prop.REPLY_TO_CLIENT}")
    props = {Prop.MESSAGE_TYPE: MSG_TYPE_REPLY, Prop.REPLY_TO_CLIENT: to_client}
    for name in (Prop.CORRELATION_ID, Prop.MESSAGE_TTL):
        value = request.get_property(name)
        if value is not None:
            props[name] = value
    # Java's reply has no WAIT (no setWaitStoreMsgOK); its properties in its HashMap's order
    return Message.with_properties(reply_topic(cluster), body, java_map_order(props))


@dataclass(slots=True)
class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326, broker to requester): ``ReplyMessageRequestHeader``, long
    field names; the body is the reply's (compressed when ``sys_flag`` says so)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: I32
    queue_id: I32
    sys_flag: I32
    born_timestamp: I64
    flag: I32
    born_host: str
    store_host: str
    store_timestamp: I64
    properties: str | None = None
    reconsume_times: I32 | None = None
    unit_mode: bool | None = None


def reply_message_ext(header: ReplyMessageRequestHeader, body: bytes, broker_name: str = "") -> MessageExt:
    """The reply as the requester sees it (``ClientRemotingProcessor.receiveReplyMessage``): the
    header's fields, the body decompressed (and the flag cleared)."""
    sys_flag = header.sys_flag
    if sys_flag & _COMPRESSED:
        body = decompress_body(body, sys_flag)
        sys_flag &= ~_COMPRESSED
    return MessageExt(
        header.topic,
        body,
        properties=parse_properties(header.properties or "", strict=False),
        born_host=header.born_host,
        store_host=header.store_host,
        broker_name=broker_name,
        queue_id=header.queue_id,
        sys_flag=sys_flag,
        flag=header.flag,
        born_timestamp=header.born_timestamp,
        store_timestamp=header.store_timestamp,
        reconsume_times=header.reconsume_times or 0,
    )
