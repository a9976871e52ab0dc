"""What one started :class:`~rmq_async.admin.Admin` works with: its client instance, the admin RPCs
over the instance's pool and settings, and the lookups every command starts with (the cluster table,
a topic's route, which address of each broker to ask), as ``DefaultMQAdminExtImpl`` has them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ..client.admin_api import MQAdminAPI
from ..client.instance import ClientInstance
from ..errors import BrokerError, ConfigError, MQClientError, RocketMQError
from ..protocol.bodies import BrokerData, ClusterInfo, TopicRouteData

__all__ = ["Session"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Session:
    """The parts of a running admin; every request has ``timeout`` (the client's request timeout)."""

    client: ClientInstance
    api: MQAdminAPI
    timeout: float

    @property
    def namesrvs(self) -> list[str]:
        return self.client.config.namesrv_list()

    def wire(self, resource: str) -> str:
        """A topic or group as the broker stores it (the client's namespace applied)."""
        return self.client.config.with_namespace(resource)

    async def on_namesrv(self, call: Callable[[str], Awaitable[T]]) -> T:
        """``call`` on the name servers in turn until one answers (an error code is an answer);
        :class:`MQClientError` when none does, after at most one timeout each."""
        last: RocketMQError | None = None
        for addr in self.namesrvs:
            try:
                return await call(addr)
            except BrokerError:
                raise
            except RocketMQError as exc:
                last = exc
        raise MQClientError(f"no name server answered: {last}") from last

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106) from a name server."""
        return await self.on_namesrv(lambda ns: self.api.get_broker_cluster_info(ns, self.timeout))

    async def cluster_brokers(self, cluster: str | None) -> tuple[str, list[BrokerData]]:
        """The cluster's name and broker groups (``cluster`` None: the only cluster, else the first
        by name); :class:`ConfigError` for a cluster the name server does not know."""
        info = await self.cluster_info()
        if not info.cluster_addr_table:
            raise MQClientError("the name server knows no cluster")
        name = cluster if cluster is not None else sorted(info.cluster_addr_table)[0]
        names = info.cluster_addr_table.get(name)
        if names is None:
            raise ConfigError(f"no cluster {name!r}; the name server has {sorted(info.cluster_addr_table)}")
        return name, [info.broker_addr_table[n] for n in sorted(names) if n in info.broker_addr_table]

    async def masters(self, cluster: str | None) -> tuple[str, list[str]]:
        """The cluster's name and its masters' addresses (``CommandUtil.fetchMasterAddrByClusterName``)."""
        name, brokers = await self.cluster_brokers(cluster)
        return name, [bd.broker_addrs[0] for bd in brokers if 0 in bd.broker_addrs]

    async def route(self, topic: str) -> TopicRouteData:
        """The topic's route, fresh from the name servers (``examineTopicRouteInfo``, not the cache)."""
        return await self.client.update_route(topic)

    @staticmethod
    def selected(route: TopicRouteData) -> list[tuple[str, str]]:
        """(broker name, address) of each broker of a route: the master, else a slave
        (``BrokerData.selectBrokerAddr``), by broker name."""
        out = []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.select_broker_addr()
            if addr is not None:
                out.append((bd.broker_name, addr))
        return out

    async def broker_name_of(self, addr: str) -> str:
        """The name of the broker at ``addr`` in the cluster table (``CommandUtil.fetchBrokerNameByAddr``);
        :class:`ConfigError` when no broker has that address."""
        info = await self.cluster_info()
        for name, bd in info.broker_addr_table.items():
            if addr in bd.broker_addrs.values():
                return name
        raise ConfigError(f"no broker at {addr} in the name server's cluster table")

    async def kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG (101) of a name server (the first that answers); None when it has no value."""
        return await self.on_namesrv(lambda ns: self.api.get_kv_config(ns, namespace, key, self.timeout))

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG (100) to every name server (``putKVConfigValue``): a refusal is raised once
        all were asked."""
        refused: BrokerError | None = None
        for ns in self.namesrvs:
            try:
                await self.api.put_kv_config(ns, namespace, key, value, self.timeout)
            except BrokerError as exc:
                refused = exc
        if refused is not None:
            raise refused
