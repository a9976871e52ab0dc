"""The embedded name server: broker registration and topic routes (``RouteInfoManager``).

Strategy: brokers register with REGISTER_BROKER (103) carrying their topic configs; the name server
keeps queue data per (topic, broker name), broker addresses per broker name, and a live table per
broker address with the registering connection. A broker is dropped when it unregisters (104), when
its registering connection closes, or when it has not registered for ``timing.broker_expiry``
(checked by a periodic scan, as ``scanNotActiveBroker``). GET_ROUTEINFO_BY_TOPIC (105) answers with
the route body the real name server writes: standard JSON (quoted ``brokerAddrs`` keys, non-ASCII
escaped) for clients at V4_9_4 or later or asking ``acceptStandardJsonOnly``, the fastjson form with
unquoted integer keys for older ones. PUT_KV_CONFIG (100) and GET_KV_CONFIG (101) keep the
``KVConfigManager`` table (kept across a restart, as Java's ``kvConfig.json``); with
``order_message_enable`` (``orderMessageEnable``, off by default as in Java) a route carries its
topic's ``ORDER_TOPIC_CONFIG`` value as ``orderTopicConf`` (``getRouteInfoByTopic``).
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..config import Timing
from ..protocol.codes import (
    MQ_VERSION_V4_9_8,
    MQ_VERSION_V5_3_3,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    RequestCode,
    ResponseCode,
)
from ..protocol.command import RemotingCommand
from .fields import opt_bool, opt_int, opt_str, req_int, req_str
from .jcompat import faq_suffix, java_hashmap_order
from .server import Connection, Server
from .tls import ServerTLS

__all__ = ["MQ_VERSION_V4_9_4", "NameServer", "route_body"]

log = logging.getLogger("rmq_async.embedded")

#: ``MQVersion.Version.V4_9_4.ordinal()``: from here on clients get standard JSON routes
MQ_VERSION_V4_9_4 = 401


@dataclass
class _QueueData:
    read: int
    write: int
    perm: int
    sys_flag: int


@dataclass
class _BrokerData:
    cluster: str
    name: str
    addrs: dict[int, str] = field(default_factory=dict)


@dataclass
class _Live:
    last_update: float
    data_version: Any
    conn: Connection | None


def _broker_json(bd: _BrokerData, *, standard: bool, flavour: int) -> str:
    """One BrokerData bean: ``brokerAddrs`` with quoted keys (standard JSON) or fastjson's bare ints."""
    if standard:
        addrs = "{" + ",".join(f'"{k}":{json.dumps(v)}' for k, v in sorted(bd.addrs.items())) + "}"
    else:
        addrs = (
            "{"
            + ",".join(f"{k}:{json.dumps(v, ensure_ascii=False)}" for k, v in sorted(bd.addrs.items()))
            + "}"
        )
    item = (
        f'{{"brokerAddrs":{addrs},"brokerName":{json.dumps(bd.name, ensure_ascii=standard)},'
        f'"cluster":{json.dumps(bd.cluster, ensure_ascii=standard)}'
    )
    if flavour == 5:
        item += ',"enableActingMaster":false'
    return item + "}"


def route_body(
    brokers: list[_BrokerData],
    queues: list[tuple[str, _QueueData]],
    *,
    standard: bool,
    flavour: int,
    order_topic_conf: str | None = None,
) -> bytes:
    """TopicRouteData as the name server writes it (fastjson: fields by name, a null one left out)."""
    bds = [_broker_json(bd, standard=standard, flavour=flavour) for bd in brokers]
    qds = [
        f'{{"brokerName":{json.dumps(name, ensure_ascii=standard)},"perm":{q.perm},"readQueueNums":{q.read},'
        f'"topicSysFlag":{q.sys_flag},"writeQueueNums":{q.write}}}'
        for name, q in queues
    ]
    order = (
        ""
        if order_topic_conf is None
        else f'"orderTopicConf":{json.dumps(order_topic_conf, ensure_ascii=standard)},'
    )
    text = (
        '{"brokerDatas":['
        + ",".join(bds)
        + '],"filterServerTable":{},'
        + order
        + '"queueDatas":['
        + ",".join(qds)
        + "]}"
    )
    return text.encode("utf-8")


class NameServer:
    """Routes and broker registrations, served on 127.0.0.1."""

    def __init__(
        self,
        timing: Timing,
        *,
        flavour: int = 4,
        tls: ServerTLS | None = None,
        order_message_enable: bool = False,
    ) -> None:
        self.timing = timing
        #: ``NamesrvConfig.orderMessageEnable``: routes carry the topic's order config (``orderTopicConf``)
        self.order_message_enable = order_message_enable
        #: ``KVConfigManager``: namespace -> key -> value (PUT_KV_CONFIG, GET_KV_CONFIG)
        self.kv: dict[str, dict[str, str]] = {}
        self.flavour = flavour
        self.version = MQ_VERSION_V5_3_3 if flavour == 5 else MQ_VERSION_V4_9_8
        self.server = Server(self, "namesrv", version=self.version, tls=tls)
        self.faults = self.server.faults
        self.topics: dict[str, dict[str, _QueueData]] = {}
        self.brokers: dict[str, _BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, _Live] = {}

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self, port: int = 0) -> None:
        await self.server.start(port)

    async def stop(self) -> None:
        await self.server.stop()

    async def run_expiry(self) -> None:
        """Drop brokers that have not registered for ``broker_expiry`` (``scanNotActiveBroker``)."""
        interval = min(10.0, self.timing.broker_expiry / 4)
        while True:
            await anyio.sleep(interval)
            self.scan_not_active()

    def scan_not_active(self) -> None:
        now = time.monotonic()
        for addr, live in list(self.live.items()):
            if now - live.last_update > self.timing.broker_expiry:
                log.info("namesrv: broker %s expired", addr)
                if live.conn is not None:
                    live.conn.close()
                self._remove_addr(addr)

    # -- state --------------------------------------------------------------------------------

    def _remove_addr(self, addr: str) -> None:
        self.live.pop(addr, None)
        for name, bd in list(self.brokers.items()):
            for bid, a in list(bd.addrs.items()):
                if a == addr:
                    del bd.addrs[bid]
            if not bd.addrs:
                del self.brokers[name]
                for names in self.clusters.values():
                    names.discard(name)
                for topic, qmap in list(self.topics.items()):
                    qmap.pop(name, None)
                    if not qmap:
                        del self.topics[topic]

    def register(
        self,
        cluster: str,
        addr: str,
        name: str,
        broker_id: int,
        wrapper: dict[str, Any],
        conn: Connection | None,
    ) -> None:
        self.clusters.setdefault(cluster, set()).add(name)
        bd = self.brokers.get(name)
        first = bd is None
        if bd is None:
            bd = self.brokers[name] = _BrokerData(cluster, name)
        for bid, a in list(bd.addrs.items()):
            if a == addr and bid != broker_id:
                del bd.addrs[bid]
        old = bd.addrs.get(broker_id)
        bd.addrs[broker_id] = addr
        first = first or old is None
        version = wrapper.get("dataVersion")
        live = self.live.get(addr)
        if broker_id == 0 and (first or live is None or live.data_version != version):
            for tc in (wrapper.get("topicConfigTable") or {}).values():
                self.topics.setdefault(str(tc["topicName"]), {})[name] = _QueueData(
                    int(tc.get("readQueueNums", 16)),
                    int(tc.get("writeQueueNums", 16)),
                    int(tc.get("perm", 6)),
                    int(tc.get("topicSysFlag", 0)),
                )
        self.live[addr] = _Live(time.monotonic(), version, conn)

    # -- requests -----------------------------------------------------------------------------

    def connection_closed(self, conn: Connection) -> None:
        for addr, live in list(self.live.items()):
            if live.conn is conn:
                log.info("namesrv: broker %s connection closed", addr)
                self._remove_addr(addr)

    def handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return self._route(cmd)
        if code == RequestCode.REGISTER_BROKER:
            return self._register(conn, cmd)
        if code == RequestCode.UNREGISTER_BROKER:
            addr = req_str(cmd, "brokerAddr")
            name = req_str(cmd, "brokerName")
            bd = self.brokers.get(name)
            if bd is not None:
                bd.addrs.pop(req_int(cmd, "brokerId"), None)
            self._remove_addr(addr)
            return cmd.make_response(ResponseCode.SUCCESS, None, None, version=self.version)
        if code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return self._cluster_info(cmd)
        if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            # a Java HashSet of the topic table's names, strict JSON (no extFields)
            body = json.dumps({"topicList": java_hashmap_order(self.topics)}, separators=(",", ":"))
            return cmd.make_response(ResponseCode.SUCCESS, None, None, body.encode(), version=self.version)
        if code == RequestCode.PUT_KV_CONFIG:
            self.kv.setdefault(req_str(cmd, "namespace"), {})[req_str(cmd, "key")] = req_str(cmd, "value")
            return cmd.make_response(ResponseCode.SUCCESS, None, None, version=self.version)
        if code == RequestCode.GET_KV_CONFIG:
            return self._get_kv(cmd)
        if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
            self._delete_topic(req_str(cmd, "topic"), opt_str(cmd, "clusterName"))
            return cmd.make_response(ResponseCode.SUCCESS, None, None, version=self.version)
        return cmd.make_response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f" request type {code} not supported",
            None,
            version=self.version,
        )

    def _get_kv(self, cmd: RemotingCommand) -> RemotingCommand:
        namespace, key = req_str(cmd, "namespace"), req_str(cmd, "key")
        value = self.kv.get(namespace, {}).get(key)
        if value is None:
            return cmd.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {namespace} Key: {key}",
                {},
                version=self.version,
            )
        return cmd.make_response(ResponseCode.SUCCESS, None, {"value": value}, version=self.version)

    def _delete_topic(self, topic: str, cluster: str | None) -> None:
        """``RouteInfoManager.deleteTopic``: the topic's queues on the cluster's brokers (every broker
        without a cluster name) go; the topic goes with the last of them."""
        qmap = self.topics.get(topic)
        if qmap is None:
            return
        names = self.clusters.get(cluster, set()) if cluster else set(qmap)
        for name in names:
            qmap.pop(name, None)
        if not qmap:
            del self.topics[topic]

    def _register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        crc = opt_int(cmd, "bodyCrc32", 0) or 0
        if crc != 0 and (zlib.crc32(cmd.body) & 0x7FFFFFFF) != crc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match", None, version=self.version)
        if opt_bool(cmd, "compressed") and cmd.body:
            raise ValueError("compressed RegisterBrokerBody is not supported by the embedded name server")
        wrapper: dict[str, Any] = {}
        if cmd.body:
            obj = json.loads(cmd.body)
            # RegisterBrokerBody wraps the TopicConfigSerializeWrapper; a bare wrapper is accepted too
            wrapper = obj.get("topicConfigSerializeWrapper", obj)
        self.register(
            req_str(cmd, "clusterName"),
            req_str(cmd, "brokerAddr"),
            req_str(cmd, "brokerName"),
            req_int(cmd, "brokerId"),
            wrapper,
            conn,
        )
        return cmd.make_response(ResponseCode.SUCCESS, None, {}, version=self.version)

    def pickup_route(self, topic: str) -> tuple[list[_BrokerData], list[tuple[str, _QueueData]]] | None:
        qmap = self.topics.get(topic)
        if not qmap:
            return None
        names = sorted(qmap)
        brokers = [self.brokers[n] for n in names if n in self.brokers]
        if not brokers:
            return None
        return brokers, [(n, qmap[n]) for n in names]

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        route = self.pickup_route(topic)
        if route is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{faq_suffix(self.flavour)}",
                None,
                version=self.version,
            )
        standard = cmd.version >= MQ_VERSION_V4_9_4 or opt_bool(cmd, "acceptStandardJsonOnly")
        order = (
            self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, {}).get(topic) if self.order_message_enable else None
        )
        body = route_body(route[0], route[1], standard=standard, flavour=self.flavour, order_topic_conf=order)
        return cmd.make_response(ResponseCode.SUCCESS, None, None, body, version=self.version)

    def _cluster_info(self, cmd: RemotingCommand) -> RemotingCommand:
        """ClusterInfo as fastjson writes it for every client (``brokerAddrs`` with bare int keys, not
        strict JSON; the two tables are HashMaps, in their iteration order)."""
        brokers = ",".join(
            json.dumps(name, ensure_ascii=False)
            + ":"
            + _broker_json(self.brokers[name], standard=False, flavour=self.flavour)
            for name in java_hashmap_order(self.brokers)
        )
        clusters = json.dumps(
            {c: java_hashmap_order(self.clusters[c]) for c in java_hashmap_order(self.clusters)},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        body = '{"brokerAddrTable":{' + brokers + '},"clusterAddrTable":' + clusters + "}"
        return cmd.make_response(ResponseCode.SUCCESS, None, None, body.encode(), version=self.version)
