"""``Remote``: what a consumer's parts use of the client instance, and nothing more.

The facades (:class:`~.push.PushConsumer`, :class:`~.lite_pull.LitePullConsumer`) own a
:class:`~rmq_async.client.instance.ClientInstance`; the parts below them (rebalancer, pull loop,
services, offset stores, locks, admin answers, POP) see it through this protocol: the typed RPC layer
(:attr:`api`, every request the consumer sends), the routes and broker addresses, the heartbeat, and
the reachability and refusal records ``health()`` reads. A part that needs something else of the
client instance makes this protocol grow, where a reviewer sees it. Tests hand the parts a stand-in
that implements only this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..client.api import MQClientAPI, SendResult
from ..client.auth import AuthErrorLog
from ..client.reach import Reachability
from ..config import Timing
from ..protocol.bodies import TopicRouteData
from ..protocol.message import Message
from ..protocol.mq import MessageQueue

__all__ = ["Remote", "Sender"]


class Sender(Protocol):
    """What sends a message for the consumer: its inner producer (a failed send-back's resend, a
    message for the DLQ)."""

    async def send(self, msg: Message) -> SendResult: ...


class Remote(Protocol):
    #: this member's client id (``ip@instance``)
    @property
    def client_id(self) -> str: ...

    #: the typed RPC layer: every request the consumer sends
    @property
    def api(self) -> MQClientAPI: ...

    @property
    def timing(self) -> Timing: ...

    # -- routes and addresses -----------------------------------------------------------------------

    @property
    def routes(self) -> Mapping[str, TopicRouteData]: ...

    @property
    def broker_addrs(self) -> Mapping[str, Mapping[int, str]]: ...

    async def route(self, topic: str) -> TopicRouteData: ...

    async def update_route(self, topic: str) -> TopicRouteData: ...

    async def update_route_quietly(self, topics: set[str] | list[str]) -> None: ...

    async def subscribe_queues(self, topic: str) -> list[MessageQueue]: ...

    def broker_addr(self, broker_name: str, broker_id: int = ..., *, only_this: bool = ...) -> str | None: ...

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str: ...

    async def master_or_any_addr(self, broker_name: str, topic: str) -> str: ...

    # -- membership ---------------------------------------------------------------------------------

    async def send_heartbeat_to_all_brokers(self, *, raise_auth: bool = False) -> bool: ...

    # -- what health() reports ----------------------------------------------------------------------

    @property
    def auth_errors(self) -> AuthErrorLog: ...

    @property
    def namesrv_reach(self) -> Mapping[str, Reachability]: ...

    @property
    def broker_reach(self) -> Mapping[str, Reachability]: ...

    @property
    def route_errors(self) -> Mapping[str, str]: ...
