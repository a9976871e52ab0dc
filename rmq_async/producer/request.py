"""Request-reply on the requester's side (Java ``DefaultMQProducerImpl.request``), the part of a
:class:`~.producer.Producer` that :meth:`~.producer.Producer.request` delegates to.

Strategy: the request is an ordinary send whose properties name this client (``REPLY_TO_CLIENT``),
its TTL and a fresh ``CORRELATION_ID`` (:func:`~rmq_async.protocol.reply.request_properties`); the
client instance keeps a future per correlation id that the broker's PUSH_REPLY_MESSAGE_TO_CLIENT
resolves. Before the send the route is looked up and, if a broker of it has had no heartbeat from
this client yet, one is sent: the broker pushes the reply on the connection a heartbeat registered.
The send and the wait share the one timeout.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from ..client.api import SendResult
from ..client.instance import ClientInstance
from ..errors import RequestTimeoutError
from ..protocol.codes import Prop
from ..protocol.message import Message
from ..protocol.msgid import new_uniq_id
from ..protocol.reply import new_correlation_id, request_properties
from ..protocol.stored import MessageExt

__all__ = ["Requester"]

#: how a request goes out: the producer's ``send`` with the caller's queue choice and timeout
SendRequest = Callable[[Message], Awaitable[SendResult]]


class _Producer(Protocol):
    """What a requester uses of its producer."""

    @property
    def client(self) -> ClientInstance: ...

    async def publish_info(self, topic: str, *, refresh: bool = False) -> object: ...


class Requester:
    """The requests of one producer (its ``request()``)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: _Producer) -> None:
        self._producer = producer

    async def request(self, msg: Message, timeout: float, send: SendRequest) -> MessageExt:
        """Send ``msg`` as a request with ``send`` and return its reply within ``timeout`` seconds
        (the send included), else :class:`~rmq_async.RequestTimeoutError`."""
        started = time.monotonic()
        client = self._producer.client
        correlation_id = new_correlation_id()
        props = dict(msg.properties)
        props.setdefault(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, new_uniq_id())
        props = request_properties(props, client.client_id, round(timeout * 1000), correlation_id)
        request = Message.with_properties(msg.topic, msg.body, props, flag=msg.flag)
        reply = client.expect_reply(correlation_id)
        try:
            await self._producer.publish_info(msg.topic)
            await self._make_known(client)
            await send(request)
            with anyio.move_on_after(max(0.0, timeout - (time.monotonic() - started))):
                return await reply
            raise RequestTimeoutError(msg.topic, timeout, correlation_id)
        finally:
            client.forget_reply(correlation_id)

    @staticmethod
    async def _make_known(client: ClientInstance) -> None:
        """Heartbeat now when a broker this client routes to has had none from it: the reply comes
        back on the connection a heartbeat registered (Java heartbeats after a request's first
        route lookup)."""
        masters = (addrs.get(0) for addrs in client.broker_addrs.values())
        if any(addr is not None and addr not in client.broker_reach for addr in masters):
            await client.send_heartbeat_to_all_brokers()
