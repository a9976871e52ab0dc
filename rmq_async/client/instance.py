"""ClientInstance: what the consumers and producers of one client id share (Java ``MQClientInstance``).

It owns the connection pool, the route cache and broker address table, the heartbeat and
route-refresh timers, and answers the requests brokers send to clients (40, 220, 221, 307, 309) by
handing them to the registered consumer of the group. It is an async context manager: its timers run
in its own task group, which lives exactly as long as the ``async with`` block.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio
import anyio.abc

from ..config import ClientConfig
from ..errors import (
    AuthError,
    BrokerError,
    MQClientError,
    ProtocolError,
    RocketMQError,
    TLSError,
    TopicNotExist,
)
from ..lifecycle import Supervisor
from ..protocol.acl import RequestSigner
from ..protocol.bodies import ConsumerData, HeartbeatData, ProducerData, TopicRouteData
from ..protocol.codes import Perm, Prop, RequestCode, ResponseCode, SerializeType
from ..protocol.command import RemotingCommand
from ..protocol.mq import MessageQueue
from ..protocol.reply import ReplyMessageRequestHeader, reply_message_ext
from ..protocol.stored import BrokenBodyError, MessageExt, decode_messages
from ..transport.connection import Connection
from ..transport.pool import ConnectionPool
from ..transport.tls import client_ssl_context
from .api import MQClientAPI
from .auth import AuthErrorLog
from .reach import Reachability

__all__ = [
    "INNER_PRODUCER_GROUP",
    "ClientInstance",
    "ConsumerHandle",
    "TransactionCheckHandler",
    "build_client_id",
    "local_ip",
]

log = logging.getLogger("rmq_async.client")

MASTER_ID = 0
#: route lookups of different topics in flight at once (update_routes): a bound on the requests one
#: start or refresh sends a name server
ROUTE_LOOKUPS = 16
#: ``MixAll.CLIENT_INNER_PRODUCER_GROUP``: the group of every client instance's own producer
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class ConsumerHandle(Protocol):
    """What a consumer registers with its client instance."""

    @property
    def group(self) -> str: ...

    def _consumer_data(self) -> ConsumerData: ...

    def _subscribed_topics(self) -> set[str]: ...

    def rebalance_now(self) -> None: ...

    async def _handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None: ...


#: ``handler(broker_addr, request, half_message)``: a transactional producer taking a broker's
#: CHECK_TRANSACTION_STATE (its answer is a oneway END_TRANSACTION of its own). It must not block: it
#: hands the check to the producer's tasks and returns.
TransactionCheckHandler = Callable[[str, RemotingCommand, MessageExt], None]

_SIOCGIFADDR = 0x8915  # Linux


def _interface_ipv4s() -> list[str]:
    """The IPv4 address of each network interface that is not a bridge (Linux; [] elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Unix
        return []
    out: list[str] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return []
    for name in names:
        if os.path.isdir(f"/sys/class/net/{name}/bridge"):  # RemotingUtil.isBridge
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address (or not Linux)
        out.append(socket.inet_ntoa(raw[20:24]))
    return out


@functools.cache
def local_ip() -> str:
    """This host's address as Java's ``RemotingUtil.getLocalAddress`` picks it (the client id's IP):
    the first non-loopback IPv4 of the interfaces that is not 127.0.* or 192.168.*, else the last
    non-loopback one, else the address the host name resolves to, else 127.0.0.1."""
    ips = [ip for ip in _interface_ipv4s() if not ip.startswith("127.")]
    for ip in ips:
        if not ip.startswith(("127.0", "192.168")):
            return ip
    if ips:
        return ips[-1]
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
    return ip or "127.0.0.1"


def build_client_id(config: ClientConfig, instance_name: str) -> str:
    """``ClientConfig.buildMQClientId``: ``ip@instance[@unit][@STREAM]``."""
    cid = f"{config.client_ip or local_ip()}@{instance_name}"
    if config.unit_name:
        cid += f"@{config.unit_name}"
    if config.stream:
        cid += "@STREAM"
    return cid


def pid_instance_name() -> str:
    """``changeInstanceNameToPID``: ``pid#nanotime``, distinct for every member started in one process."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


class ClientInstance:
    """Shared client state for one client id. Use as ``async with ClientInstance(cfg) as inst``."""

    def __init__(self, config: ClientConfig, *, instance_name: str | None = None) -> None:
        self.config = config
        self.timing = config.timing
        self.instance_name = instance_name or config.instance_name
        self.client_id = build_client_id(config, self.instance_name)
        self._namesrvs = config.namesrv_list()
        self._ns_index = random.randrange(len(self._namesrvs))
        creds = config.effective_credentials()
        #: the ACL signer of every request and oneway (None: unsigned, no cost)
        self.signer = (
            None
            if creds is None
            else RequestSigner(
                creds.access_key,
                creds.secret_key.get_secret_value(),
                creds.security_token.get_secret_value() if creds.security_token is not None else None,
            )
        )
        tls = config.effective_tls()
        #: TLS for every connection (name servers and brokers), as Java's ``useTLS``; None: plain TCP
        self.tls = tls
        self.pool = ConnectionPool(
            handler=self._on_server_request,
            max_timeouts=config.max_timeouts,
            signer=self.signer,
            ssl_context=client_ssl_context(tls) if tls is not None else None,
            server_hostname=tls.server_hostname if tls is not None else None,
            client_cert=tls is not None and tls.cert_file is not None,
        )
        self.api = MQClientAPI(
            self.pool,
            language=config.language,
            version=config.version,
            serialize_type=SerializeType[config.serialize_type],
            stream=config.stream,
        )
        #: ACL refusals lately, by resource (health(); the log is rate-limited by it)
        self.auth_errors = AuthErrorLog()
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        #: whether each name server answered its last route lookup, and each broker its last heartbeat
        self.namesrv_reach = {addr: Reachability(addr) for addr in self._namesrvs}
        self.broker_reach: dict[str, Reachability] = {}
        #: each broker's MQVersion ordinal, as the ``version`` of its last heartbeat answer says
        self.broker_versions: dict[str, int] = {}
        #: topics whose last route lookup found nothing (no cached route), with the reason
        self.route_errors: dict[str, str] = {}
        self._consumers: dict[str, ConsumerHandle] = {}
        self._producers: set[str] = set()
        #: the transactional producers' check handlers by (wire) group (Java's ``selectProducer``)
        self._tx_checkers: dict[str, TransactionCheckHandler] = {}
        #: the requests awaiting their reply, by correlation id (Java's ``RequestFutureHolder``)
        self._replies: dict[str, asyncio.Future[MessageExt]] = {}
        self._extra_topics: set[str] = set()
        #: one lookup at a time per topic (different topics are looked up at once: update_routes)
        self._route_locks: dict[str, anyio.Lock] = {}
        self._heartbeat_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._life = Supervisor(f"client instance {self.client_id}")
        #: a heartbeat went to some broker (answered or not): unregister CLIENT_INNER_PRODUCER at the end
        self._heartbeat_sent = False
        self._route_listeners: list[Callable[[str], None]] = []

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> ClientInstance:
        """Open the connection pool and start the heartbeat and route loops, in a supervisor task
        (:mod:`rmq_async.lifecycle`): the instance may be closed from another task than the one that
        opened it, and no task group is entered by hand."""
        await self._life.start(self._run)
        return self

    async def _run(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        async with self.pool:
            try:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._heartbeat_loop)
                    tg.start_soon(self._route_loop)
                    ready()
                    await stopping.wait()
                    self._tg = None
                    tg.cancel_scope.cancel()
            finally:
                self._tg = None
                # last, as Java's MQClientInstance.shutdown stops its inner producer: every broker
                # whose address this client knows is told it is gone (unregisterClient walks
                # brokerAddrTable, whether or not a heartbeat of ours was answered there). An
                # instance that never sent a heartbeat (a Spark reader's, an admin call's) listed
                # itself nowhere: it has nothing to unregister
                if self._heartbeat_sent:
                    with anyio.move_on_after(self.timing.request_timeout * 2, shield=True):
                        await self.unregister_everywhere(producer_group=INNER_PRODUCER_GROUP)

    async def __aexit__(self, *exc: Any) -> None:
        # bounded (the unregister and the pool's close are): done even when the caller is cancelled
        with anyio.CancelScope(shield=True):
            await self._life.stop()

    def spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``fn`` in the instance's task group (server-request handlers, one-off work)."""
        if self._tg is None:
            raise MQClientError("client instance is not running")
        self._tg.start_soon(fn)

    # -- registration -----------------------------------------------------------------------------

    def register_consumer(self, consumer: ConsumerHandle) -> None:
        if consumer.group in self._consumers:
            raise MQClientError(
                f"consumer group {consumer.group!r} is already registered on {self.client_id}"
            )
        self._consumers[consumer.group] = consumer

    def unregister_consumer_local(self, group: str) -> None:
        self._consumers.pop(group, None)

    def register_producer(self, group: str) -> None:
        self._producers.add(group)

    def unregister_producer_local(self, group: str) -> None:
        self._producers.discard(group)

    def register_transaction_checker(self, group: str, handler: TransactionCheckHandler) -> None:
        """Route the broker's CHECK_TRANSACTION_STATE of half messages of ``group`` to ``handler``."""
        self._tx_checkers[group] = handler

    def unregister_transaction_checker(self, group: str) -> None:
        self._tx_checkers.pop(group, None)

    def expect_reply(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        """A future the broker's PUSH_REPLY_MESSAGE_TO_CLIENT with ``correlation_id`` resolves; the
        caller drops it with :meth:`forget_reply` when done (reply or not)."""
        fut: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._replies[correlation_id] = fut
        return fut

    def forget_reply(self, correlation_id: str) -> None:
        self._replies.pop(correlation_id, None)

    def add_topic(self, topic: str) -> None:
        """Keep ``topic``'s route refreshed (producers' topics)."""
        self._extra_topics.add(topic)

    def on_route_change(self, cb: Callable[[str], None]) -> None:
        self._route_listeners.append(cb)

    # -- routes -----------------------------------------------------------------------------------

    def _topics_in_use(self) -> set[str]:
        topics = set(self._extra_topics)
        for c in self._consumers.values():
            topics |= c._subscribed_topics()
        return topics

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """Ask the name servers (in turn, starting with the last good one) for ``topic``'s route. When
        none answered and a TLS handshake failed, that :class:`TLSError` is raised as it is (the
        settings to fix, not a failure to retry); else :class:`MQClientError`."""
        last: RocketMQError | None = None
        tls: TLSError | None = None
        n = len(self._namesrvs)
        for k in range(n):
            i = (self._ns_index + k) % n
            addr = self._namesrvs[i]
            reach = self.namesrv_reach[addr]
            try:
                route = await self.api.get_route(addr, topic, self.timing.request_timeout)
            except TopicNotExist:
                reach.ok()  # it answered
                raise
            except RocketMQError as exc:
                if isinstance(exc, BrokerError):
                    reach.ok()  # an error code is an answer
                else:
                    reach.failed(exc)
                last = exc
                if isinstance(exc, TLSError):
                    tls = exc
                log.warning("route lookup of %r on name server %s failed: %s", topic, addr, exc)
                continue
            reach.ok()
            self._ns_index = i
            return route
        if tls is not None:
            raise tls
        raise MQClientError(f"no name server answered the route of {topic!r}: {last}") from last

    async def update_route(self, topic: str) -> TopicRouteData:
        """Fetch and cache ``topic``'s route; on failure keep the cached one (and raise if none)."""
        lock = self._route_locks.get(topic)
        if lock is None:
            lock = self._route_locks[topic] = anyio.Lock()
        async with lock:
            try:
                route = await self.fetch_route(topic)
            except TopicNotExist as exc:
                self.route_errors[topic] = f"the name server has no route: {exc}"
                raise
            except RocketMQError as exc:
                cached = self.routes.get(topic)
                if cached is None:
                    self.route_errors[topic] = str(exc)
                    raise
                return cached
            self.route_errors.pop(topic, None)
            old = self.routes.get(topic)
            self.routes[topic] = route
            for bd in route.broker_datas:
                self.broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
            if old != route:
                for cb in self._route_listeners:
                    cb(topic)
            return route

    async def update_routes(self, topics: set[str] | list[str]) -> dict[str, RocketMQError]:
        """Refresh the routes of ``topics`` at once, at most :data:`ROUTE_LOOKUPS` at a time: against a
        name server that does not answer, a start (or a refresh) then lasts about one request timeout,
        not one per topic. Returns the failures by topic (nothing raised)."""
        failed: dict[str, RocketMQError] = {}
        limiter = anyio.CapacityLimiter(ROUTE_LOOKUPS)

        async def one(topic: str) -> None:
            async with limiter:
                try:
                    await self.update_route(topic)
                except RocketMQError as exc:
                    failed[topic] = exc

        async with anyio.create_task_group() as tg:
            for topic in sorted(topics):
                tg.start_soon(one, topic)
        return failed

    async def update_route_quietly(self, topics: set[str] | list[str]) -> None:
        """Refresh the routes of ``topics`` (:meth:`update_routes`), logging (not raising) failures."""
        for topic, exc in sorted((await self.update_routes(topics)).items()):
            log.debug("route refresh of %r failed: %s", topic, exc)

    async def route(self, topic: str) -> TopicRouteData:
        r = self.routes.get(topic)
        if r is None:
            r = await self.update_route(topic)
        return r

    async def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of ``topic`` (``topicRouteData2TopicSubscribeInfo``)."""
        route = await self.route(topic)
        out: list[MessageQueue] = []
        for qd in route.queue_datas:
            if qd.perm & Perm.READ:
                out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
        return sorted(out)

    def broker_addr(
        self, broker_name: str, broker_id: int = MASTER_ID, *, only_this: bool = False
    ) -> str | None:
        """``findBrokerAddressInSubscribe``: the address of ``broker_id``, else (unless only_this) any."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is None and not only_this:
            addr = addrs.get(MASTER_ID) or next(iter(addrs.values()))
        return addr

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str:
        addr = self.broker_addr(broker_name, MASTER_ID, only_this=True)
        if addr is None and topic is not None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name, MASTER_ID, only_this=True)
        if addr is None:
            raise MQClientError(f"broker {broker_name!r} has no master address in the route table")
        return addr

    async def master_or_any_addr(self, broker_name: str, topic: str) -> str:
        """Java's offset-store lookup: the master; else, once the route is refreshed, the master or
        any slave (``findBrokerAddressInSubscribe(name, MASTER_ID, false)``), so offsets are read and
        committed while a master is down."""
        addr = self.broker_addr(broker_name, MASTER_ID, only_this=True)
        if addr is None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name)
        if addr is None:
            raise MQClientError(f"broker {broker_name!r} is not in the route table")
        return addr

    async def any_broker_addr(self, broker_name: str, topic: str | None = None) -> str:
        addr = self.broker_addr(broker_name)
        if addr is None and topic is not None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name)
        if addr is None:
            raise MQClientError(f"broker {broker_name!r} is not in the route table")
        return addr

    async def _route_loop(self) -> None:
        while True:
            await anyio.sleep(self.timing.route_refresh_interval)
            await self.refresh_routes()

    async def refresh_routes(self) -> None:
        await self.update_route_quietly(self._topics_in_use())
        self._clean_offline_brokers()

    def _clean_offline_brokers(self) -> None:
        """``cleanOfflineBroker``: forget brokers that no route of a topic in use names any more."""
        live: set[str] = set()
        for topic in self._topics_in_use():
            route = self.routes.get(topic)
            if route is not None:
                live.update(bd.broker_name for bd in route.broker_datas)
        for name in list(self.broker_addrs):
            if name not in live:
                del self.broker_addrs[name]

    # -- heartbeat --------------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            consumer_data_set=[c._consumer_data() for c in self._consumers.values()],
            # every Java client instance runs an inner producer (for send-back fallbacks) and lists it
            producer_data_set=[
                ProducerData(group_name=g) for g in sorted(self._producers | {INNER_PRODUCER_GROUP})
            ],
        )

    async def send_heartbeat_to_all_brokers(self, *, raise_auth: bool = False) -> bool:
        """Heartbeat every known broker; True if every one answered. A failed heartbeat closes the
        connection (it may be half-open), so the next request dials anew; an ACL refusal does not
        (:attr:`auth_errors` keeps it, logged once per resource per interval), and with ``raise_auth``
        the first one is raised (a consumer's start)."""
        if not self._consumers and not self._producers:
            return True
        async with self._heartbeat_lock:
            data = self.heartbeat_data()
            ok = True
            for name, addrs in list(self.broker_addrs.items()):
                for bid, addr in list(addrs.items()):
                    if bid != MASTER_ID and not self._consumers:
                        continue
                    reach = self.broker_reach.get(addr)
                    if reach is None:
                        reach = self.broker_reach[addr] = Reachability(addr)
                    try:
                        self._heartbeat_sent = True
                        resp = await self.api.heartbeat(addr, data, self.timing.request_timeout)
                        self.broker_versions[addr] = resp.version
                        reach.ok()
                    except AuthError as exc:
                        reach.ok()  # it answered
                        if raise_auth:
                            raise
                        ok = False
                        if self.auth_errors.note(exc):
                            log.error("heartbeat to %s (%s) refused: %s", name, addr, exc)
                    except RocketMQError as exc:
                        ok = False
                        reach.failed(exc)
                        log.warning("heartbeat to %s (%s) failed: %s", name, addr, exc)
                        await self.pool.close_address(addr)
            return ok

    async def check_tls(self, topic: str) -> None:
        """With TLS: ask a name server for ``topic``'s route now, so that a handshake these settings
        cannot pass (a CA that does not trust the server, a certificate that does not name it, a client
        certificate refused, which TLS 1.3 tells only at the first request) fails the start with
        :class:`TLSError` rather than every send after retries. Any other failure (no name server up
        yet, no such topic) is left to the sends, as Java starts without the network."""
        if self.config.effective_tls() is None:
            return
        try:
            await self.fetch_route(topic)
        except TLSError:
            raise
        except RocketMQError as exc:
            log.debug("TLS check of the name servers inconclusive: %s", exc)

    async def broker_version(self, addr: str) -> int:
        """The MQVersion ordinal of the broker at ``addr``: what its heartbeat answers say (a
        RocketMQ server writes its own version in every command). Unknown yet: a heartbeat now, as
        the next periodic one would send (what a timer message's send asks before it goes)."""
        version = self.broker_versions.get(addr)
        if version is None:
            self._heartbeat_sent = True
            resp = await self.api.heartbeat(addr, self.heartbeat_data(), self.timing.request_timeout)
            version = self.broker_versions[addr] = resp.version
        return version

    async def check_access(self, topic: str) -> None:
        """With credentials: heartbeat the masters of ``topic``'s route now, so that a wrong or unknown
        key fails here with :class:`AuthError` rather than later in the background (a 4.x broker checks
        a heartbeat's signature, and the SUB permission of the consumers' groups and topics in it).
        Without credentials, or when the route cannot be had, there is nothing to check."""
        if self.signer is None:
            return
        try:
            route = await self.update_route(topic)
        except RocketMQError as exc:
            log.debug("access check skipped: no route of %r: %s", topic, exc)
            return
        data = self.heartbeat_data()
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID)
            if addr is None:
                continue
            self._heartbeat_sent = True
            try:
                await self.api.heartbeat(addr, data, self.timing.request_timeout)
            except AuthError:
                raise
            except RocketMQError as exc:
                log.debug("access check of %s (%s) inconclusive: %s", bd.broker_name, addr, exc)

    async def _heartbeat_loop(self) -> None:
        while True:
            await anyio.sleep(self.timing.heartbeat_interval)
            await self.send_heartbeat_to_all_brokers()

    async def unregister_everywhere(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        for addrs in list(self.broker_addrs.values()):
            for addr in list(addrs.values()):
                try:
                    await self.api.unregister_client(
                        addr,
                        self.client_id,
                        self.timing.request_timeout,
                        producer_group=producer_group,
                        consumer_group=consumer_group,
                    )
                except RocketMQError as exc:
                    what = f"producer group {producer_group}" if producer_group else f"group {consumer_group}"
                    log.warning("unregister of %s (%s) from %s failed: %s", self.client_id, what, addr, exc)

    # -- requests from brokers ----------------------------------------------------------------------

    async def _on_server_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        group = cmd.ext_fields.get("consumerGroup") or cmd.ext_fields.get("group")
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info("broker %s: consumer ids of group %s changed", conn.addr, group)
            for c in self._consumers.values():
                c.rebalance_now()
            return None
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction(conn.addr, cmd)
            return None
        if cmd.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return self._receive_reply(conn.addr, cmd)
        consumer = self._consumers.get(group or "")
        if consumer is None:
            if cmd.is_oneway:
                return None
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{group}> not exist in this consumer",
                language=self.config.language,
            )
        resp = await consumer._handle_server_request(cmd)
        if resp is None and not cmd.is_oneway:
            return cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request type {cmd.code} not supported by the consumer",
                language=self.config.language,
            )
        return resp

    def _receive_reply(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """``ClientRemotingProcessor.receiveReplyMessage``: the reply goes to the request waiting for
        its correlation id (a late one, whose request timed out, is dropped, as Java's); answered code
        0 with nothing else, as Java answers, unless the frame cannot be read (SYSTEM_ERROR)."""
        try:
            header = ReplyMessageRequestHeader.from_ext_fields(cmd.ext_fields)
            msg = reply_message_ext(header, cmd.body or b"")
        except ProtocolError as exc:
            log.warning("broker %s: unreadable reply message: %s", addr, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(exc), language=self.config.language)
        correlation_id = msg.get_property(Prop.CORRELATION_ID)
        fut = self._replies.get(correlation_id or "")
        if fut is None or fut.done():
            log.warning("broker %s: reply %s came for no waiting request (timed out?)", addr, correlation_id)
        else:
            fut.set_result(msg)
        return cmd.make_response(ResponseCode.SUCCESS, language=self.config.language)

    def _check_transaction(self, addr: str, cmd: RemotingCommand) -> None:
        """``ClientRemotingProcessor.checkTransactionState``: the half message in the body names its
        producer group (``PGROUP``); the producer of that group answers. Nothing is answered here
        (the request is oneway): a message that cannot be read, or a group with no transactional
        producer here, is logged and left to the broker's next check."""
        try:
            msgs = decode_messages(cmd.body or b"")
        except BrokenBodyError as exc:
            log.warning("broker %s: check of a transaction with an unreadable message: %s", addr, exc)
            return
        if not msgs:
            log.warning("broker %s: check of a transaction without a message", addr)
            return
        msg = msgs[0]
        group = msg.get_property(Prop.PRODUCER_GROUP)
        handler = self._tx_checkers.get(group or "")
        if handler is None:
            log.debug("broker %s: check of a transaction of group %r: no such producer here", addr, group)
            return
        handler(addr, cmd, msg)
