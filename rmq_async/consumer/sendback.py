"""The retry path of failed messages: send-back (CONSUMER_SEND_MSG_BACK), its fallback send to
``%RETRY%group`` by the client's inner producer, the orderly path to the DLQ (a send to the retry
topic with the reconsume count at the maximum, which the broker redirects to ``%DLQ%group``), and the
reverse mapping that shows a retried message under its original topic.

The functions take a :class:`RetryTarget`: what they read of the consumer (the consumer context
satisfies it), so this module depends on nothing above it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from ..config import unwrap_namespace, wrap_namespace
from ..errors import RocketMQError
from ..protocol import headers as H
from ..protocol.codes import Prop
from ..protocol.message import Message
from ..protocol.stored import MessageExt
from .remote import Remote, Sender
from .stats import ConsumerStats

__all__ = ["RetryTarget", "reset_retry_topic", "send_back", "send_to_dlq"]

log = logging.getLogger("rmq_async.consumer")


class RetryTarget(Protocol):
    """The consumer's side of a send-back."""

    @property
    def group(self) -> str: ...
    @property
    def retry_topic(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def max_reconsume_times(self) -> int: ...
    @property
    def stats(self) -> ConsumerStats: ...
    @property
    def client(self) -> Remote: ...
    @property
    def inner_producer(self) -> Sender: ...


def reset_retry_topic(msgs: Sequence[MessageExt], retry_topic: str, namespace: str | None = None) -> None:
    """``resetRetryAndNamespace``: a message from ``%RETRY%group`` is shown under its original topic,
    and with a namespace, under the topic's name without it."""
    for m in msgs:
        if m.topic == retry_topic:
            original = m.get_property(Prop.RETRY_TOPIC)
            if original:
                m.topic = original
        if namespace:
            m.topic = unwrap_namespace(namespace, m.topic)


async def send_back(c: RetryTarget, m: MessageExt, delay_level: int) -> bool:
    """Send a failed message back for a later retry; False if every path failed."""
    client = c.client
    topic = wrap_namespace(c.namespace, m.topic)  # handlers saw it without the namespace
    try:
        addr = await client.master_addr(m.broker_name, topic)
        h = H.ConsumerSendMsgBackRequestHeader(
            offset=m.commit_log_offset,
            group=c.group,
            delay_level=delay_level,
            origin_msg_id=m.msg_id,
            origin_topic=topic,
            unit_mode=False,
            max_reconsume_times=c.max_reconsume_times,
            bname=m.broker_name,
        )
        await client.api.consumer_send_msg_back(addr, h, client.timing.request_timeout)
        c.stats.sent_back += 1
        if delay_level < 0 or m.reconsume_times >= c.max_reconsume_times:
            c.stats.to_dlq += 1  # the broker puts it in %DLQ% (SendMessageProcessor)
        return True
    except RocketMQError as exc:
        log.warning("send-back of %s failed (%s): falling back to a send to %s", m.msg_id, exc, c.retry_topic)
    try:
        props = dict(m.properties)
        origin = props.get(Prop.ORIGIN_MESSAGE_ID) or m.msg_id
        props[Prop.ORIGIN_MESSAGE_ID] = origin
        props[Prop.RETRY_TOPIC] = topic
        props[Prop.RECONSUME_TIME] = str(m.reconsume_times + 1)
        props[Prop.MAX_RECONSUME_TIMES] = str(c.max_reconsume_times)
        props.pop("TRAN_MSG", None)
        props.pop(Prop.DELAY_TIME_LEVEL, None)
        msg = Message.resent(c.retry_topic, m.body, props, flag=m.flag, delay_level=3 + m.reconsume_times)
        await c.inner_producer.send(msg)
        c.stats.sent_back += 1
        if m.reconsume_times + 1 > c.max_reconsume_times:
            c.stats.to_dlq += 1
        return True
    except (RocketMQError, ValueError) as exc:
        log.error("fallback send of %s to %s failed (%s): retrying locally", m.msg_id, c.retry_topic, exc)
        return False


async def send_to_dlq(c: RetryTarget, m: MessageExt, limit: int) -> bool:
    """Orderly ``sendMessageBack``: a send to ``%RETRY%group`` with the reconsume count at the maximum,
    which the broker redirects to ``%DLQ%group``. False if the send failed."""
    props = dict(m.properties)
    props[Prop.ORIGIN_MESSAGE_ID] = props.get(Prop.ORIGIN_MESSAGE_ID) or m.msg_id
    props[Prop.RETRY_TOPIC] = wrap_namespace(c.namespace, m.topic)  # handlers saw it without
    props[Prop.RECONSUME_TIME] = str(m.reconsume_times)
    props[Prop.MAX_RECONSUME_TIMES] = str(limit)
    props.pop("TRAN_MSG", None)
    props.pop(Prop.DELAY_TIME_LEVEL, None)
    props.pop(Prop.CONSUME_START_TIMESTAMP, None)
    try:
        msg = Message.resent(c.retry_topic, m.body, props, flag=m.flag, delay_level=3 + m.reconsume_times)
        await c.inner_producer.send(msg)
    except (RocketMQError, ValueError) as exc:
        log.error("moving %s to the DLQ of %s failed (%s): consuming it again", m.msg_id, c.group, exc)
        return False
    log.warning(
        "%s reached max reconsume times (%d) in orderly group %s: moved to the DLQ",
        m.msg_id,
        limit,
        c.group,
    )
    c.stats.sent_back += 1
    c.stats.to_dlq += 1
    return True
