"""Producer (Java ``DefaultMQProducer``): route lookup with the TBW102 fallback, queue selection that
avoids the broker that just failed, retries within the send timeout, the 4 MiB size limit and the
compression of bodies of 4 KiB or more (``compressType`` ZLIB, LZ4 or ZSTD as 5.x has it; zlib on a
4.x cluster, whose consumers may read nothing else).

The tests, the benchmarks, the CLI and the consumer's send-back fallback all send through it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ..client.api import SendResult
from ..client.instance import INNER_PRODUCER_GROUP, ClientInstance, pid_instance_name
from ..config import ClientConfig, ProducerConfig, Timing, client_settings
from ..errors import (
    AuthError,
    BrokerError,
    ClientError,
    InvalidMessageError,
    MQClientError,
    RemotingError,
    TLSError,
    TopicNotExist,
    UnsupportedByBrokerError,
)
from ..lifecycle import Supervisor
from ..observability.otel import SendObserver, telemetry
from ..observability.trace.dispatcher import TraceDispatcher, TraceSender
from ..observability.trace.encoder import GROUP_NAME_PREFIX
from ..observability.trace.hooks import SendTracer
from ..protocol import headers as H
from ..protocol.bodies import TopicRouteData
from ..protocol.codes import MQ_VERSION_V5_0_0, Perm, Prop, ResponseCode
from ..protocol.commitlog import stored_size
from ..protocol.fastjson import java_map_order
from ..protocol.filter import java_string_hash
from ..protocol.message import (
    TIMER_PROPERTIES,
    CompressionType,
    Message,
    check_topic,
    compress_body,
    compression_flag,
    encode_batch_members,
    is_timer,
)
from ..protocol.mq import MessageQueue
from ..protocol.msgid import new_uniq_id, new_uniq_ids
from ..protocol.properties import PROPERTIES_MAX, encode_properties
from ..protocol.reply import MSG_TYPE_REPLY
from ..protocol.stored import MessageExt
from .accumulator import ProduceAccumulator
from .fault import LatencyFaultTolerance, select_queue
from .request import Requester

__all__ = [
    "MessageQueueSelector",
    "Producer",
    "ProducerConfig",
    "ProducerInternals",
    "TopicPublishInfo",
    "select_by_key_hash",
    "trace_producer",
]

log = logging.getLogger("rmq_async.producer")

#: ``selector(queues, message, arg) -> queue``, as Java's MessageQueueSelector
MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]

# Answers after which the Java producer tries again (DefaultMQProducer.retryResponseCodes).
_RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        204,  # NO_BUYER_ID
        205,  # NOT_IN_CURRENT_UNIT
        1500,  # GO_AWAY (5.x: a proxy or broker going away; 5.3.3 retries it)
    }
)


#: messages whose properties go in the Java client's HashMap order once UNIQ_KEY is added (timer
#: messages and replies, as ``v5-timer.jsonl`` and ``reply.jsonl`` show them)
_HASHMAP_ORDERED = TIMER_PROPERTIES | {Prop.MESSAGE_TYPE}
#: the properties of a SEND_BATCH_MESSAGE request's header (each member carries its own)
_BATCH_PROPERTIES = encode_properties({Prop.WAIT_STORE_MSG_OK: "true"})


def select_by_key_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """``SelectMessageQueueByHash``: ``queues[abs(hash(arg)) % n]`` with ints used as they are."""
    value = arg if isinstance(arg, int) else java_string_hash(str(arg))
    return queues[abs(value) % len(queues)]


@dataclass(slots=True)
class TopicPublishInfo:
    queues: list[MessageQueue]
    route: TopicRouteData
    from_default_topic: bool = False

    def select(
        self,
        counter: int,
        last_broker: str | None,
        fault: LatencyFaultTolerance | None = None,
        now: float = 0.0,
    ) -> MessageQueue:
        """``selectOneMessageQueue``: the next queue, on another broker than ``last_broker`` if
        possible, and with ``fault`` on a broker it does not avoid (:func:`.fault.select_queue`)."""
        return select_queue(self.queues, counter, last_broker, fault, now)


def publish_info(topic: str, route: TopicRouteData, *, cap: int | None = None) -> TopicPublishInfo:
    """``topicRouteData2TopicPublishInfo``: writable queues of brokers that have a master."""
    masters = {bd.broker_name for bd in route.broker_datas if 0 in bd.broker_addrs}
    queues: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & Perm.WRITE and qd.broker_name in masters:
            # the default topic's stand-in: min(defaultTopicQueueNums, readQueueNums), as Java sets both
            # of its queue counts (MQClientInstance.updateTopicRouteInfoFromNameServer)
            n = qd.write_queue_nums if cap is None else min(cap, qd.read_queue_nums)
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(n))
    return TopicPublishInfo(queues, route, from_default_topic=cap is not None)


@dataclass(frozen=True)
class ProducerInternals:
    """What :func:`rmq_async.internals.internals` shows of a producer (tests, tools)."""

    #: message trace (``ClientConfig.trace``); None for the inner producers (send-back, trace)
    tracer: SendTracer | None
    #: OpenTelemetry (set at start when the application has set a provider)
    otel: SendObserver | None
    #: latency fault tolerance (``send_latency_fault_enable``), else None
    fault: LatencyFaultTolerance | None = None
    #: the send accumulator (``auto_batch``), else None
    accumulator: ProduceAccumulator | None = None


class Producer:
    """An async producer. ``async with Producer("group", namesrv_addr=...) as p: await p.send(msg)``."""

    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        namesrv_addr: str | None = None,
        config: ProducerConfig | None = None,
        client_config: ClientConfig | None = None,
        timing: Timing | None = None,
        instance_name: str | None = None,
        client: ClientInstance | None = None,
    ) -> None:
        self.config = config or ProducerConfig(group=group)
        # the consumers' keywords for the client settings, by the same rule
        self._client_config = client_settings(
            client_config, namesrv_addr=namesrv_addr, timing=timing, instance_name=instance_name
        )
        # with a namespace the group and the topics go on the wire as ``ns%name`` (Java's withNamespace)
        self._ns = self._client_config.with_namespace
        self.group = self._ns(self.config.group)
        self._own_client = client is None
        self._client = client
        self._publish: dict[str, TopicPublishInfo] = {}
        self._counter = itertools.count(random.randrange(1 << 16))
        self._started = False
        self._route_listening = False
        self._life = Supervisor(f"producer {self.group}")
        cfg = self.config
        #: ``sendLatencyFaultEnable``: the brokers sends avoid for a while (None: off)
        self._fault = (
            LatencyFaultTolerance(cfg.latency_max, cfg.not_available_duration)
            if cfg.send_latency_fault_enable
            else None
        )
        #: ``autoBatch``: concurrent small sends batched (None: off)
        self._accumulator = (
            ProduceAccumulator(
                self._send_accumulated,
                max_delay=cfg.batch_max_delay,
                max_bytes=cfg.batch_max_bytes,
                total_max_bytes=cfg.total_batch_max_bytes,
            )
            if cfg.auto_batch
            else None
        )
        #: ``request()``: the requests awaiting their replies
        self._requests = Requester(self)
        #: message trace (``ClientConfig.trace``); never for the inner producers (send-back, trace)
        self._tracer: SendTracer | None = None
        #: OpenTelemetry (set at start when the application has set a provider): send spans, send cost
        self._otel: SendObserver | None = None
        trace = self._client_config.trace
        if (
            trace.enabled
            and self.config.group != INNER_PRODUCER_GROUP
            and not self.config.group.startswith(GROUP_NAME_PREFIX)
        ):
            self._tracer = SendTracer(TraceDispatcher(self.group, "PRODUCE", trace), self.group)

    def __repr__(self) -> str:
        """Group, name servers and state; nothing else of the settings (credentials live there)."""
        namesrv = self._client_config.namesrv_addr or "$NAMESRV_ADDR"
        state = "running" if self._started else "not running"
        return f"<Producer group={self.group!r} namesrv={namesrv!r} {state}>"

    def _internals(self) -> ProducerInternals:
        """(for :func:`~rmq_async.internals.internals`)"""
        return ProducerInternals(
            tracer=self._tracer, otel=self._otel, fault=self._fault, accumulator=self._accumulator
        )

    @property
    def client(self) -> ClientInstance:
        if self._client is None or not self._started:
            raise ClientError("producer is not started: use 'async with Producer(...)' or 'await start()'")
        return self._client

    async def start(self) -> None:
        """Connect (an own client instance) and register the group; returns when the producer can send.
        ``start()`` and :meth:`stop` may be called from different tasks of one event loop (an ASGI
        app's startup and shutdown hooks): the own client instance lives in a supervisor task."""
        if self._started:
            return
        if self._client is not None and not self._own_client:
            await self._begin(self._client)  # a shared client instance: nothing of its own to run
            return
        await self._life.start(self._run)

    async def _run(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        """The producer's life on its own client instance (in the supervisor's task)."""
        async with ClientInstance(self._client_config, instance_name=self._instance_name()) as client:
            self._client = client
            try:
                await self._begin(client)
            except BaseException:
                self._client = None
                self._route_listening = False
                raise
            ready()
            await stopping.wait()
            try:
                with anyio.CancelScope(shield=True):
                    await self._end(client)
            finally:
                self._client = None
                self._route_listening = False
                self._publish.clear()

    async def _begin(self, client: ClientInstance) -> None:
        if not self._route_listening:
            client.on_route_change(self._on_route_change)
            self._route_listening = True
        client.register_producer(self.group)
        try:
            # with TLS, a handshake these settings cannot pass fails start() now (TLSError)
            await client.check_tls(self.config.create_topic_key)
            # with ACL credentials, a wrong or unknown key fails start() now (AuthError), not each send
            await client.check_access(self.config.create_topic_key)
        except BaseException:
            client.unregister_producer_local(self.group)
            raise
        self._started = True
        tel = telemetry()
        if tel is not None and not self.config.group.startswith(GROUP_NAME_PREFIX):  # not trace sends
            self._otel = SendObserver(tel, client.client_id, self._client_config.otel)
        else:
            self._otel = None
        if self._tracer is not None:
            client.spawn(self._run_tracer)

    async def _end(self, client: ClientInstance) -> None:
        self._started = False
        if self._tracer is not None:
            await self._tracer.dispatcher.close()  # flush what is queued (bounded)
        client.unregister_producer_local(self.group)
        with anyio.move_on_after(self._client_config.timing.request_timeout, shield=True):
            await client.unregister_everywhere(producer_group=self.group)

    async def _run_tracer(self) -> None:
        assert self._tracer is not None
        await self._tracer.dispatcher.run(self._trace_sender)

    def _trace_sender(self, group: str) -> TraceSender:
        """The inner trace producer (Java's: 5 s send timeout, 128 KB messages), on this client."""
        assert self._client is not None
        return Producer(
            config=ProducerConfig(
                group=group, send_timeout=5.0, max_message_size=self.config.max_message_size
            ),
            client_config=self._client_config,
            client=self._client,
        )

    def _instance_name(self) -> str:
        name = self._client_config.instance_name
        return pid_instance_name() if name == "DEFAULT" else name

    async def stop(self) -> None:
        """Unregister and close the own client instance (from any task of the loop that started it)."""
        if self._own_client:
            await self._life.stop()
        elif self._started and self._client is not None:
            await self._end(self._client)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- routes -------------------------------------------------------------------------------------

    async def publish_info(self, topic: str, *, refresh: bool = False) -> TopicPublishInfo:
        """The queues a send to ``topic`` may use. An unknown topic uses the ``TBW102`` route, so the
        broker creates the topic on the first send (autoCreateTopicEnable), as the Java producer does.
        With a namespace, ``topic`` is the plain name or the namespaced one."""
        return await self._publish_info(self._ns(topic), refresh)

    async def _publish_info(self, topic: str, refresh: bool = False) -> TopicPublishInfo:
        """:meth:`publish_info` of the topic as it goes on the wire (namespaced or a reply topic)."""
        info = self._publish.get(topic)
        if info is not None and not refresh:
            return info
        client = self.client
        client.add_topic(topic)
        try:
            route = await client.update_route(topic)
            info = publish_info(topic, route)
        except TopicNotExist:
            try:
                route = await client.update_route(self.config.create_topic_key)
            except TopicNotExist:
                # no broker creates topics (autoCreateTopicEnable=false): Java's "No route info of
                # this topic", not an error about the default topic
                raise TopicNotExist(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"no route info of topic {topic!r}: the name server does not know it and no broker "
                    f"creates topics (autoCreateTopicEnable=false?)",
                ) from None
            info = publish_info(topic, route, cap=self.config.default_topic_queue_nums)
        if not info.queues:
            raise MQClientError(f"no writable queue for topic {topic!r} (route: {info.route})")
        self._publish[topic] = info
        return info

    def _on_route_change(self, topic: str) -> None:
        """``updateTopicPublishInfo``: a refreshed route (the periodic refresh, a send's lookup)
        replaces the queues sends rotate over: queues added or removed, brokers gone, permissions, and
        a topic's own route replacing the default topic's stand-in."""
        if topic not in self._publish or self._client is None:
            return
        route = self._client.routes.get(topic)
        if route is None:
            return
        info = publish_info(topic, route)
        if info.queues:
            self._publish[topic] = info
        else:
            del self._publish[topic]  # the next send looks it up again (and says why it cannot)

    async def queues(self, topic: str) -> list[MessageQueue]:
        return list((await self.publish_info(topic)).queues)

    # -- sending ------------------------------------------------------------------------------------

    def _wire_topic(self, msg: Message) -> str:
        """The topic ``msg`` goes to: ``ns%topic`` with a namespace, but a reply's as it is. Its
        ``<cluster>_REPLY_TOPIC`` is a system topic of every broker (``TopicConfigManager`` adds it
        to ``TopicValidator``'s set at start), which the Java client, whose own set lacks it, would
        namespace into a topic no broker has (refused, or made anew where topics are auto-created)."""
        if msg.properties.get(Prop.MESSAGE_TYPE) == MSG_TYPE_REPLY:
            return msg.topic
        return self._ns(msg.topic)

    def _check_stored(self, topic: str, body: bytes, props: dict[str, str]) -> None:
        """Refuse what the broker would refuse for its size: it compares the whole stored message (fixed
        fields, the body as sent, the topic and the properties: ``CommitLog``'s ``msgLen``) with its
        ``maxMessageSize``, taken here to be ``max_message_size`` (hosts counted as IPv4; the
        broker's own properties, such as ``CLUSTER``, are not known here)."""
        limit = self.config.max_message_size
        if stored_size(8, 8, len(body), len(topic), 0) + 32767 <= limit:
            return  # cannot reach the limit whatever the properties (the common case: no encoding)
        size = stored_size(8, 8, len(body), len(topic), len(encode_properties(props).encode()))
        if size > limit:
            raise ClientError(
                f"message of {size} bytes as stored (body {len(body)} bytes as sent, topic, properties) "
                f"exceeds max_message_size {limit}: the broker would refuse it (code 13)"
            )

    def _check(self, msg: Message) -> None:
        if not isinstance(msg, Message):
            raise TypeError(f"expected a Message, got {type(msg).__name__}")
        if len(msg.body) > self.config.max_message_size:
            raise ClientError(
                f"message body of {len(msg.body)} bytes exceeds "
                f"max_message_size {self.config.max_message_size}"
            )

    def _header(
        self, msg: Message, mq: MessageQueue, properties: dict[str, str], sys_flag: int
    ) -> H.SendMessageRequestHeader:
        reconsume_times = 0
        max_reconsume: int | None = None
        if mq.topic.startswith("%RETRY%"):
            reconsume_times = int(properties.get(Prop.RECONSUME_TIME, "0") or 0)
            mrt = properties.get(Prop.MAX_RECONSUME_TIMES)
            max_reconsume = int(mrt) if mrt else None
        return H.SendMessageRequestHeader(
            producer_group=self.group,
            topic=mq.topic,
            default_topic=self.config.create_topic_key,
            default_topic_queue_nums=self.config.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=msg.flag,
            properties=encode_properties(properties),
            reconsume_times=reconsume_times,
            unit_mode=False,
            batch=False,
            max_reconsume_times=max_reconsume,
            bname=mq.broker_name,
        )

    def compress_type_for(self, info: TopicPublishInfo) -> CompressionType:
        """The compression type of a send with ``info``'s route: the configured one, but zlib when the
        route comes from a 4.x name server (no ``enableActingMaster`` in its broker data): 4.x Java
        sets no compression type but zlib, and consumers before 4.9.x read only zlib."""
        wanted = self.config.compress_type
        if wanted == "ZLIB" or not info.route.broker_datas:
            return wanted
        if any(bd.enable_acting_master is None for bd in info.route.broker_datas):
            return "ZLIB"
        return wanted

    def _prepare(
        self, msg: Message, compress_type: CompressionType = "ZLIB"
    ) -> tuple[bytes, dict[str, str], int, str]:
        props = dict(msg.properties)
        uniq = props.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not uniq:
            uniq = new_uniq_id()
            props[Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            if not _HASHMAP_ORDERED.isdisjoint(props):  # the Java client's order, as captured
                props = java_map_order(props)
        body = msg.body
        sys_flag = 0
        if len(body) >= self.config.compress_threshold:  # tryToCompressMessage: ">="
            body = compress_body(body, self.config.compress_level, compress_type)
            sys_flag |= compression_flag(compress_type)
        return body, props, sys_flag, uniq

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send ``msg`` and wait for the broker's answer.

        With ``queue`` or ``selector`` the message goes to that queue only (orderly sends: no retry on
        another queue, as in Java); otherwise queues rotate and a failed send is retried on another
        broker, up to ``retries`` more times within the send timeout.
        """
        self._check(msg)
        timeout = timeout or self.config.send_timeout
        topic = self._wire_topic(msg)
        acc = self._accumulator
        if acc is not None and selector is None and acc.takes(msg, topic):
            return await acc.send(msg, queue, timeout)
        deadline = time.monotonic() + timeout
        info = await self._publish_info(topic)
        body, props, sys_flag, uniq = self._prepare(msg, self.compress_type_for(info))
        self._check_stored(topic, body, props)
        otel = self._otel
        if otel is None:
            return await self._send_prepared(
                msg, topic, info, body, props, sys_flag, uniq, deadline, queue, selector, arg
            )
        token = otel.start(msg.topic, props)  # a span's traceparent goes into props
        try:
            res = await self._send_prepared(
                msg, topic, info, body, props, sys_flag, uniq, deadline, queue, selector, arg
            )
        except BaseException as exc:
            otel.end(token, msg.topic, uniq, exc)
            raise
        otel.end(token, msg.topic, uniq, None)
        return res

    async def _send_prepared(
        self,
        msg: Message,
        topic: str,
        info: TopicPublishInfo,
        body: bytes,
        props: dict[str, str],
        sys_flag: int,
        uniq: str,
        deadline: float,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> SendResult:
        if queue is not None or selector is not None:
            mq = queue if queue is not None else selector(list(info.queues), msg, arg)  # type: ignore[misc]
            header = self._header(msg, mq, props, sys_flag)
            res = await self._send_to(mq, header, body, deadline, uniq, msg=msg)
            assert res is not None
            return res
        return await self._send_retrying(
            topic, info, lambda mq: self._header(msg, mq, props, sys_flag), body, deadline, uniq, msg=msg
        )

    async def _send_retrying(
        self,
        topic: str,
        info: TopicPublishInfo,
        header_for: Callable[[MessageQueue], H.SendMessageRequestHeader],
        body: bytes,
        deadline: float,
        msg_id: str,
        *,
        batch: bool = False,
        msg: Message | None = None,
    ) -> SendResult:
        """Rotate queues, retrying on another broker after a retriable failure, within the deadline."""
        last_broker: str | None = None
        error: Exception | None = None
        fault = self._fault
        for attempt in range(1 + self.config.retries):
            began = time.monotonic()
            mq = info.select(next(self._counter), last_broker, fault, began)
            try:
                res = await self._send_to(mq, header_for(mq), body, deadline, msg_id, batch=batch, msg=msg)
                assert res is not None
                if fault is not None:
                    self._note(fault, mq, began, isolation=False, reachable=True)
                return res
            except (AuthError, TLSError):
                # the same keys get the same refusal on every broker, the same TLS settings the same
                # failed handshake: not retried (Java retries an ACL refusal)
                raise
            except BrokerError as exc:
                if fault is not None:  # MQBrokerException: isolated, unreachable until a send works
                    self._note(fault, mq, began, isolation=True, reachable=False)
                if exc.code not in _RETRY_CODES:
                    raise
                error = exc
            except (RemotingError, MQClientError) as exc:
                if fault is not None:  # RemotingException isolates the broker; MQClientException not
                    self._note(fault, mq, began, isolation=isinstance(exc, RemotingError), reachable=True)
                error = exc
            last_broker = mq.broker_name
            if time.monotonic() >= deadline:
                break
            log.debug("send to %s failed (attempt %d): %s", mq, attempt + 1, error)
            if isinstance(error, BrokerError) and error.code == ResponseCode.TOPIC_NOT_EXIST:
                info = await self._publish_info(topic, refresh=True)
        raise MQClientError(f"send to topic {topic!r} failed after retries: {error}") from error

    @staticmethod
    def _note(
        fault: LatencyFaultTolerance, mq: MessageQueue, began: float, *, isolation: bool, reachable: bool
    ) -> None:
        """``updateFaultItem`` after one attempt on ``mq``'s broker."""
        now = time.monotonic()
        latency = round((now - began) * 1000)
        fault.update(mq.broker_name, latency, now, isolation=isolation, reachable=reachable)

    async def _send_accumulated(
        self, msgs: list[Message], queue: MessageQueue | None, timeout: float
    ) -> SendResult:
        """What the accumulator sends a batch with (the namespace is added by :meth:`send_batch`)."""
        return await self.send_batch(msgs, queue=queue, timeout=timeout)

    async def _send_to(
        self,
        mq: MessageQueue,
        header: H.SendMessageRequestHeader,
        body: bytes,
        deadline: float,
        msg_id: str,
        *,
        batch: bool = False,
        oneway: bool = False,
        msg: Message | None = None,
    ) -> SendResult | None:
        client = self.client
        addr = await client.master_addr(mq.broker_name, mq.topic)
        reply = False
        if msg is not None:
            props = msg.properties
            if is_timer(props):
                await self._check_timer_support(addr)
            reply = props.get(Prop.MESSAGE_TYPE) == MSG_TYPE_REPLY
        left = deadline - time.monotonic()
        if left <= 0:
            raise MQClientError(f"send to {mq} timed out before it could be sent")
        tracer = self._tracer
        if tracer is None or oneway:
            return await client.api.send(
                addr, mq, header, body, left, batch=batch, oneway=oneway, msg_id=msg_id, reply=reply
            )
        tc = tracer.before(msg, mq.topic, len(body), addr)
        res = await client.api.send(addr, mq, header, body, left, batch=batch, msg_id=msg_id, reply=reply)
        tracer.after(tc, res)
        return res

    async def request(
        self,
        msg: Message,
        timeout: float | None = None,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> MessageExt:
        """Send ``msg`` as a request and return the reply (Java's ``request(msg, timeout)``): the
        responder's consumer answers with :func:`~rmq_async.create_reply_message` (or
        ``PushConsumer.reply``), which the broker pushes back to this client.

        ``timeout`` (default ``send_timeout``) bounds the send and the wait for the reply together,
        and goes with the request as its TTL. No reply in time: :class:`~rmq_async.RequestTimeoutError`
        (nothing is cancelled: a late reply is dropped). A failed send raises what :meth:`send`
        raises. ``queue``/``selector``/``arg`` as for :meth:`send`.
        """
        self._check(msg)
        timeout = timeout or self.config.send_timeout
        return await self._requests.request(
            msg, timeout, lambda m: self.send(m, queue=queue, selector=selector, arg=arg, timeout=timeout)
        )

    async def _check_timer_support(self, addr: str) -> None:
        """A timer message goes to 5.x brokers only: a 4.9.8 broker knows no TIMER_* property and
        would deliver it at once. The broker's version is the one its heartbeat answers carry (a
        5.x name server routes to 4.x brokers too, so the route's form cannot tell)."""
        version = await self.client.broker_version(addr)
        if version < MQ_VERSION_V5_0_0:
            raise UnsupportedByBrokerError(
                "timer messages (deliver_at, delay)", addr, version, "RocketMQ 5.0 or later; use delay_level"
            )

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer (no retries, as in Java)."""
        self._check(msg)
        topic = self._wire_topic(msg)
        info = await self._publish_info(topic)
        body, props, sys_flag, uniq = self._prepare(msg, self.compress_type_for(info))
        self._check_stored(topic, body, props)
        mq = queue or info.select(next(self._counter), None, self._fault, time.monotonic())
        deadline = time.monotonic() + self.config.send_timeout
        await self._send_to(
            mq, self._header(msg, mq, props, sys_flag), body, deadline, uniq, oneway=True, msg=msg
        )

    async def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (no delay levels, as in Java)."""
        if not msgs:
            raise ClientError("send_batch needs at least one message")
        topic = self._ns(msgs[0].topic)
        if topic.startswith("%RETRY%"):  # as Java's DefaultMQProducer.batch
            raise ClientError("a retry topic cannot take a batch: send its messages one by one")
        batch_props: list[dict[str, str]] = []
        ids: list[str] = []
        fresh = iter(new_uniq_ids(len(msgs)))  # one clock read for the batch (unused ids are skipped)
        uniq_key = Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        ns = self._ns
        for m in msgs:
            self._check(m)
            if m.topic != topic and ns(m.topic) != topic:
                raise ClientError(f"a batch must have one topic: {m.topic!r} != {topic!r}")
            props = dict(m.properties)
            if m.delay_level > 0 or is_timer(props):
                raise ClientError("delayed messages cannot be sent in a batch")
            uniq = props.get(uniq_key) or next(fresh)
            props[uniq_key] = uniq
            ids.append(uniq)
            batch_props.append(props)
        otel = self._otel
        if otel is None:
            return await self._send_batch_body(msgs, topic, batch_props, ids, queue, timeout)
        token = otel.start_batch(msgs[0].topic, batch_props)  # the span's traceparent in every message
        try:
            res = await self._send_batch_body(msgs, topic, batch_props, ids, queue, timeout)
        except BaseException as exc:
            otel.end(token, msgs[0].topic, None, exc, len(msgs))
            raise
        otel.end(token, msgs[0].topic, res.msg_id, None, len(msgs))
        return res

    async def _send_batch_body(
        self,
        msgs: Sequence[Message],
        topic: str,
        batch_props: list[dict[str, str]],
        ids: list[str],
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> SendResult:
        """The batch of :meth:`send_batch`, encoded and sent (one trace ``Pub`` record for the whole
        batch, its ids joined, as Java's send hook sees a ``MessageBatch``). Each member's properties
        go as they are (``MessageBatch.encode``: the message's own map, ``WAIT`` included), checked
        again here (the dict may have been changed since the :class:`Message` checked it)."""
        encoded: list[bytes] = []
        for props in batch_props:
            try:
                data = encode_properties(props).encode()
            except ValueError as exc:  # a separator; UnicodeEncodeError: a lone surrogate
                what = "a lone surrogate" if isinstance(exc, UnicodeError) else str(exc)
                raise InvalidMessageError("properties", what) from None
            if len(data) > PROPERTIES_MAX:
                raise InvalidMessageError("properties", f"{len(data)} bytes exceed {PROPERTIES_MAX}")
            encoded.append(data)
        body = encode_batch_members([m.body for m in msgs], encoded, [m.flag for m in msgs])
        return await self.send_batch_body(topic, body, ids, queue=queue, timeout=timeout)

    async def send_batch_body(
        self,
        topic: str,
        body: bytes,
        msg_ids: Sequence[str],
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send a batch body already encoded (:func:`~rmq_async.protocol.message.encode_batch_members`
        or ``encode_batch_body``) to ``topic`` as one SEND_BATCH_MESSAGE, as :meth:`send_batch`
        sends its messages: for a caller that builds the body from columns without a
        :class:`Message` per member (the Spark sink). ``msg_ids`` are the members' ``UNIQ_KEY``
        values, in order (the result's ``msg_id``, comma-joined); the members are not checked
        again here. With ``queue`` that queue only, else queues rotate with retries."""
        try:
            check_topic(self._ns(topic))
        except ValueError as exc:
            raise ClientError(f"a batch to topic {topic!r}: {exc}") from None
        topic = self._ns(topic)
        if topic.startswith("%RETRY%"):  # as Java's DefaultMQProducer.batch
            raise ClientError("a retry topic cannot take a batch: send its messages one by one")
        if len(body) > self.config.max_message_size:
            raise ClientError(
                f"batch of {len(body)} bytes exceeds max_message_size {self.config.max_message_size}"
            )
        timeout = timeout or self.config.send_timeout
        deadline = time.monotonic() + timeout
        info = await self.publish_info(topic)
        msg_id = ",".join(msg_ids)

        def header_for(mq: MessageQueue) -> H.SendMessageRequestHeader:
            return H.SendMessageRequestHeader(
                producer_group=self.group,
                topic=topic,
                default_topic=self.config.create_topic_key,
                default_topic_queue_nums=self.config.default_topic_queue_nums,
                queue_id=mq.queue_id,
                sys_flag=0,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties=_BATCH_PROPERTIES,
                reconsume_times=0,
                unit_mode=False,
                batch=True,
                bname=mq.broker_name,
            )

        if queue is not None:
            res = await self._send_to(queue, header_for(queue), body, deadline, msg_id, batch=True)
            assert res is not None
            return res
        return await self._send_retrying(topic, info, header_for, body, deadline, msg_id, batch=True)


def trace_producer(client_config: ClientConfig, client: ClientInstance, group: str) -> Producer:
    """An inner trace producer of ``group`` on a consumer's client instance (Java's: 5 s send
    timeout); what a consumer's trace dispatcher sends its records with."""
    return Producer(
        config=ProducerConfig(group=group, send_timeout=5.0), client_config=client_config, client=client
    )
