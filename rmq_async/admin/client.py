"""``Admin``: an async admin client (Java ``DefaultMQAdminExt``, the mqadmin commands).

It runs its own :class:`~rmq_async.client.instance.ClientInstance` (routes, name servers, the
connection pool with the ACL signer and TLS of its :class:`~rmq_async.config.ClientConfig`), named as
mqadmin names its instance (the current time in ms), and sends every request through the typed RPC
layer (:class:`~rmq_async.client.admin_api.MQAdminAPI`, on the instance's pool and request settings).
It heartbeats nobody and registers nothing, so brokers see it only while it asks. Topic and group
names get the client's namespace on the wire. Errors are ours: :class:`BrokerError` (code, remark)
for a refusal, :class:`MQClientError` when no name server or broker answers (bounded by the request
timeout), :class:`ConfigError` for bad arguments, :class:`ClientError` before ``start()``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio

from ..client.admin_api import MQAdminAPI
from ..client.instance import ClientInstance
from ..config import ClientConfig
from ..errors import BrokerError, ClientError, ConfigError, MQClientError, RocketMQError, TopicNotExist
from ..protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    SubscriptionGroupConfig,
    TopicRouteData,
)
from ..protocol.codes import NAMESPACE_ORDER_TOPIC_CONFIG
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from . import messages
from . import offsets as offsets_mod
from .models import (
    BrokerInfo,
    ClientConnection,
    ClusterInfo,
    GroupConnections,
    GroupProgress,
    QueueProgress,
    QueueStatus,
    TraceRecord,
)
from .order_conf import cluster_order_conf, merged_order_conf
from .session import Session

__all__ = ["Admin", "set_consume_mode"]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class Admin:
    """Cluster administration: ``async with Admin("127.0.0.1:9876") as admin: await admin.topics()``.

    ``namesrv_addr`` (``host:port[;...]``, default ``$NAMESRV_ADDR``) or a whole ``client_config``
    (ACL credentials, TLS, namespace, timing); given both, ``namesrv_addr`` wins."""

    def __init__(self, namesrv_addr: str | None = None, *, client_config: ClientConfig | None = None) -> None:
        if client_config is None:
            client_config = ClientConfig(namesrv_addr=namesrv_addr)
        elif namesrv_addr is not None:
            client_config = client_config.model_copy(update={"namesrv_addr": namesrv_addr})
        client_config.namesrv_list()  # no address at all: ConfigError now, not at the first call
        self._config = client_config
        self._session: Session | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        state = "started" if self._session is not None else "stopped"
        return f"Admin({self._config.namesrv_addr or '$NAMESRV_ADDR'}, {state})"

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the client instance (idempotent)."""
        async with self._lock:
            if self._session is not None:
                return
            client = ClientInstance(self._config, instance_name=str(int(time.time() * 1000)))
            await client.__aenter__()
            self._session = Session(
                client, MQAdminAPI.sharing(client.api), self._config.timing.request_timeout
            )

    async def stop(self) -> None:
        """Close the client instance (idempotent, bounded: the pool's close is)."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                session, self._session = self._session, None
                if session is not None:
                    await session.client.__aexit__(None, None, None)

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def _s(self) -> Session:
        if self._session is None:
            raise ClientError("Admin is not started: use `async with Admin(...)` or await start()")
        return self._session

    # -- cluster ----------------------------------------------------------------------------------

    async def cluster(self) -> ClusterInfo:
        """``clusterList``: every broker address (106), with its GET_BROKER_RUNTIME_INFO (28) table, or
        None where the address did not answer."""
        s = self._s()
        info = await s.cluster_info()
        brokers: list[BrokerInfo] = []
        for name, bd in sorted(info.broker_addr_table.items()):
            for bid, addr in sorted(bd.broker_addrs.items()):
                try:
                    stats: dict[str, str] | None = await s.api.get_broker_runtime_info(addr, s.timeout)
                except RocketMQError:
                    stats = None
                brokers.append(BrokerInfo(bd.cluster, name, bid, addr, stats))
        clusters = {c: tuple(sorted(n)) for c, n in sorted(info.cluster_addr_table.items())}
        return ClusterInfo(tuple(brokers), clusters)

    # -- topics -----------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        read_queues: int = 8,
        write_queues: int = 8,
        perm: int = 6,
        cluster: str | None = None,
        broker_addr: str | None = None,
        order: bool = False,
    ) -> list[str]:
        """``updateTopic``: UPDATE_AND_CREATE_TOPIC (17) to every master of ``cluster`` (None: the only,
        else the first cluster by name), or to ``broker_addr`` alone; the addresses written.

        ``order`` (mqadmin ``-o true``) sets the topic config's flag and then writes the name servers'
        order config (PUT_KV_CONFIG, :data:`~rmq_async.protocol.codes.NAMESPACE_ORDER_TOPIC_CONFIG`,
        key the topic, ``brokerName:writeQueues`` per broker): for a cluster, each of its brokers
        (what was there is replaced); for ``broker_addr``, that broker's entry merged into the
        config the name server has (``createOrUpdateOrderConf``)."""
        for name, value in (("read_queues", read_queues), ("write_queues", write_queues)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1024:
                raise ConfigError(f"{name} must be 1..1024, not {value!r}")
        if isinstance(perm, bool) or perm not in range(8):
            raise ConfigError(f"perm must be 0..7 (2 write, 4 read, 6 both), not {perm!r}")
        s = self._s()
        wire = s.wire(topic)
        conf: str | None = None  # the order config to write
        if broker_addr is not None:
            addrs = [broker_addr]
            if order:  # the broker's name first (fetchBrokerNameByAddr), so nothing is half done
                broker = await s.broker_name_of(broker_addr)
                conf = merged_order_conf(
                    await s.kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, wire), broker, write_queues
                )
        else:
            name, addrs = await s.masters(cluster)
            if order:  # fetchBrokerNameByClusterName
                names = (await s.cluster_info()).cluster_addr_table.get(name, [])
                conf = cluster_order_conf(names, write_queues)
        for addr in addrs:
            await s.api.update_and_create_topic(
                addr,
                wire,
                read_queues=read_queues,
                write_queues=write_queues,
                perm=perm,
                order=order,
                timeout=s.timeout,
            )
        if conf is not None:
            await s.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, wire, conf)
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        """``deleteTopic``: DELETE_TOPIC_IN_BROKER (215) to every master of the cluster, then
        DELETE_TOPIC_IN_NAMESRV (216) to every name server."""
        s = self._s()
        await self._delete_topic(s, s.wire(topic), cluster)

    @staticmethod
    async def _delete_topic(s: Session, wire_topic: str, cluster: str | None) -> None:
        name, masters = await s.masters(cluster)
        for addr in masters:
            await s.api.delete_topic_in_broker(addr, wire_topic, s.timeout)
        for ns in s.namesrvs:
            await s.api.delete_topic_in_namesrv(ns, wire_topic, name, s.timeout)

    async def topics(self) -> list[str]:
        """``topicList``: GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), sorted."""
        s = self._s()
        return sorted(await s.on_namesrv(lambda ns: s.api.get_all_topic_list(ns, s.timeout)))

    async def route(self, topic: str) -> TopicRouteData:
        """``topicRoute``: the topic's route from the name servers (:class:`TopicNotExist` if none)."""
        s = self._s()
        return await s.route(s.wire(topic))

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """``topicStatus``: GET_TOPIC_STATS_INFO (202) to each broker of the route."""
        s = self._s()
        wire = s.wire(topic)
        out: list[QueueStatus] = []
        for _, addr in s.selected(await s.route(wire)):
            table = await s.api.get_topic_stats(addr, wire, s.timeout)
            for mq, t in table.offset_table.items():
                out.append(QueueStatus(mq, t.min_offset, t.max_offset, t.last_update_timestamp))
        return sorted(out, key=lambda q: q.mq)

    # -- groups -----------------------------------------------------------------------------------

    async def groups(self) -> list[str]:
        """The consumer groups, as ``consumerProgress`` without ``-g`` finds them: the ``%RETRY%``
        topics of the name server's topic list (206), prefix cut, sorted. A group that never
        consumed (no retry topic) is not among them."""
        topics = await self.topics()
        return sorted(t[len(RETRY_PREFIX) :] for t in topics if t.startswith(RETRY_PREFIX))

    async def create_group(
        self,
        group: str,
        *,
        retry_max_times: int = 16,
        consume_broadcast: bool = False,
        cluster: str | None = None,
    ) -> None:
        """``updateSubGroup``: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) to every master of the cluster,
        the body as mqadmin writes it."""
        if isinstance(retry_max_times, bool) or not isinstance(retry_max_times, int) or retry_max_times < -1:
            raise ConfigError(f"retry_max_times must be an int >= -1, not {retry_max_times!r}")
        s = self._s()
        config = SubscriptionGroupConfig(
            group_name=s.wire(group),
            retry_max_times=retry_max_times,
            consume_broadcast_enable=consume_broadcast,
        )
        for addr in (await s.masters(cluster))[1]:
            await s.api.create_subscription_group(addr, config, s.timeout)

    async def delete_group(
        self, group: str, *, cluster: str | None = None, remove_offset: bool = False
    ) -> None:
        """``deleteSubGroup``: DELETE_SUBSCRIPTIONGROUP (207) to every master, then the group's
        ``%RETRY%`` and ``%DLQ%`` topics deleted as :meth:`delete_topic` does (215 + 216)."""
        s = self._s()
        wire = s.wire(group)
        for addr in (await s.masters(cluster))[1]:
            await s.api.delete_subscription_group(addr, wire, remove_offset, s.timeout)
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            await self._delete_topic(s, prefix + wire, cluster)

    async def connections(self, group: str) -> GroupConnections:
        """``consumerConnection``: GET_CONSUMER_CONNECTION_LIST (203) to a broker of the group's
        ``%RETRY%`` route; an offline group (206, or no retry route) has no clients."""
        s = self._s()
        wire = s.wire(group)
        try:
            route = await s.route(RETRY_PREFIX + wire)
        except TopicNotExist:
            return GroupConnections(group)
        for _, addr in s.selected(route):
            cc = await s.api.get_consumer_connection_list(addr, wire, s.timeout)
            if cc is None:
                continue
            return GroupConnections(
                group,
                tuple(
                    ClientConnection(c.client_id, c.client_addr, c.language, c.version)
                    for c in sorted(cc.connection_set, key=lambda c: c.client_id)
                ),
                cc.consume_type,
                cc.message_model,
                cc.consume_from_where,
                {t: sd.sub_string for t, sd in sorted(cc.subscription_table.items())},
            )
        return GroupConnections(group)

    async def progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """``consumerProgress -g``: GET_CONSUME_STATS (208) to each broker of the group's ``%RETRY%``
        route and, with ``topic``, of the topic's (``examineConsumeStats``); no route at all: no queues."""
        s = self._s()
        wire = s.wire(group)
        topics = [RETRY_PREFIX + wire] + ([s.wire(topic)] if topic is not None else [])
        addrs: dict[str, str] = {}
        for t in topics:
            try:
                addrs.update(s.selected(await s.route(t)))
            except TopicNotExist:
                continue
        queues: dict[MessageQueue, QueueProgress] = {}
        tps = 0.0
        for _, addr in sorted(addrs.items()):
            stats = await s.api.get_consume_stats(
                addr, wire, s.timeout, topic=s.wire(topic) if topic else None
            )
            tps += stats.consume_tps
            for mq, w in stats.offset_table.items():
                queues[mq] = QueueProgress(mq, w.broker_offset, w.consumer_offset, w.last_timestamp)
        return GroupProgress(group, tuple(sorted(queues.values(), key=lambda q: q.mq)), tps)

    async def running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """``consumerStatus -i``: GET_CONSUMER_RUNNING_INFO (307) through a broker of the group's
        ``%RETRY%`` route, which forwards it to the member."""
        s = self._s()
        wire = s.wire(group)
        last: BrokerError | None = None
        for _, addr in s.selected(await s.route(RETRY_PREFIX + wire)):
            try:
                return await s.api.get_consumer_running_info(addr, wire, client_id, s.timeout)
            except BrokerError as exc:
                last = exc
        if last is not None:
            raise last
        raise MQClientError(f"no broker serves {RETRY_PREFIX + wire}")

    # -- offsets ----------------------------------------------------------------------------------

    async def reset_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp: int | None = None,
        to: str | None = None,
        offsets: Mapping[MessageQueue, int] | None = None,
        force: bool = True,
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic``: exactly one of ``timestamp`` (ms), ``to`` (``"earliest"``
        or ``"latest"``) or ``offsets`` ({queue: offset}). Online members move at once (222 and the
        broker's 220); an offline group gets its offsets committed (the mqadmin fallback). Returns
        the queues moved and their new offsets. How each case goes: :mod:`rmq_async.admin.offsets`."""
        ts = offsets_mod.timestamp_of(timestamp, to, offsets)
        s = self._s()
        wire_group, wire_topic = s.wire(group), s.wire(topic)
        if ts is None:
            assert offsets is not None
            wired = {
                MessageQueue(wire_topic, mq.broker_name, mq.queue_id): off for mq, off in offsets.items()
            }
            return await offsets_mod.reset_to_offsets(s, wire_group, wired)
        return await offsets_mod.reset_by_time(s, wire_group, wire_topic, ts, force)

    # -- messages ---------------------------------------------------------------------------------

    async def message_by_id(self, msg_id: str, *, topic: str | None = None) -> MessageExt:
        """``queryMsgById``: by offset message id (33 to its broker) or by UNIQ_KEY (12 with
        ``_UNIQUE_KEY_QUERY`` on ``topic``'s brokers; ``topic`` then required)."""
        s = self._s()
        return await messages.message_by_id(s, msg_id, s.wire(topic) if topic is not None else None)

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0, end_ms: int | None = None
    ) -> list[MessageExt]:
        """``queryMsgByKey``: QUERY_MESSAGE (12) on every broker of the topic, stored time order."""
        if isinstance(max_num, bool) or not isinstance(max_num, int) or max_num <= 0:
            raise ConfigError(f"max_num must be a positive int, not {max_num!r}")
        s = self._s()
        end = messages.LONG_MAX if end_ms is None else end_ms
        return await messages.query_by_key(s, s.wire(topic), key, max_num, begin_ms, end)

    async def message_at(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        """``queryMsgByOffset``: the message at ``offset`` of ``mq`` (a one-message pull of group
        TOOLS_CONSUMER that commits nothing), None when there is none."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"offset must be an int >= 0, not {offset!r}")
        s = self._s()
        return await messages.message_at(
            s, MessageQueue(s.wire(mq.topic), mq.broker_name, mq.queue_id), offset
        )

    async def message_trace(
        self, msg_id: str, *, trace_topic: str = "RMQ_SYS_TRACE_TOPIC"
    ) -> list[TraceRecord]:
        """``queryMsgTraceById``: the trace records of the message (``Pub``, ``SubBefore``,
        ``SubAfter``), from the trace topic by key = ``msg_id`` (the message's UNIQ_KEY)."""
        return await messages.message_trace(self._s(), msg_id, trace_topic)

    async def consume_directly(
        self, group: str, client_id: str, msg_id: str, *, topic: str | None = None
    ) -> ConsumeMessageDirectlyResult:
        """``queryMsgById -g -d`` / ``consumeMessageDirectly``: the member ``client_id`` of ``group``
        handles the message now, through the broker storing it (309); its answer."""
        s = self._s()
        return await messages.consume_directly(
            s, s.wire(group), client_id, msg_id, s.wire(topic) if topic is not None else None
        )

    async def who_consumes(self, topic: str) -> list[str]:
        """``queryMsgById``'s track: QUERY_TOPIC_CONSUME_BY_WHO (300) on each broker of the topic."""
        s = self._s()
        wire = s.wire(topic)
        groups: set[str] = set()
        for _, addr in s.selected(await s.route(wire)):
            groups.update(await s.api.query_topic_consume_by_who(addr, wire, s.timeout))
        return sorted(self._config.without_namespace(g) for g in groups)

    # -- POP (5.x) --------------------------------------------------------------------------------

    async def set_consume_mode(
        self, topic: str, group: str, mode: str, pop_share_queue_num: int = 0
    ) -> dict[str, tuple[int, str | None]]:
        """``setConsumeMode``: SET_MESSAGE_REQUEST_MODE (401) to the master of every broker of the
        topic: {broker address: (response code, remark)}, 0 where it was taken. ``mode``: POP or PULL."""
        if mode not in ("POP", "PULL"):
            raise ConfigError(f"mode must be POP or PULL, not {mode!r}")
        s = self._s()
        wire_topic, wire_group = s.wire(topic), s.wire(group)
        out: dict[str, tuple[int, str | None]] = {}
        route = await s.route(wire_topic)
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.broker_addrs.get(0)
            if addr is None:
                continue
            try:
                await s.api.set_message_request_mode(
                    addr, wire_topic, wire_group, mode, pop_share_queue_num, s.timeout
                )
            except BrokerError as exc:
                out[addr] = (exc.code, exc.remark)
            else:
                out[addr] = (0, None)
        return out


async def set_consume_mode(
    topic: str,
    group: str,
    mode: str,
    pop_share_queue_num: int = 0,
    *,
    namesrv_addr: str | None = None,
    client_config: ClientConfig | None = None,
) -> dict[str, tuple[int, str | None]]:
    """:meth:`Admin.set_consume_mode` in one call, on an Admin of its own (set up before a POP
    consumer starts, as ``mqadmin setConsumeMode`` is)."""
    if mode not in ("POP", "PULL"):
        raise ConfigError(f"mode must be POP or PULL, not {mode!r}")
    async with Admin(namesrv_addr, client_config=client_config) as admin:
        return await admin.set_consume_mode(topic, group, mode, pop_share_queue_num)
