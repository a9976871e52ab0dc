"""The embedded broker: composition and lifecycle.

Strategy: a :class:`Broker` owns a :class:`~.server.Server`, the configuration state and the client
tables, and a task group for its timers (registration, held-pull checks, idle-client scan, delayed
delivery, flush) and for the few requests answered asynchronously (topic creation, forwarding to
clients). :meth:`Broker.run` listens, opens the store (its store host is the listening address),
builds the :class:`~.context.BrokerContext` and merges the request tables of the handler modules
(send, pull, delay, clients, admin), each built once from the context. Handlers are synchronous and
follow the corresponding Java processor of RocketMQ 4.9.8 (``flavour=5`` answers as 5.3.3 where the
captures show a difference); none of them sees this class. A broker restarted on the same port and
data directory is a new :class:`Broker` (see ``EmbeddedCluster.start_broker``).
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..config import Timing, parse_delay_levels
from ..errors import ClientError
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from . import admin, admin_ops, clients, delay, pop, pull, reply, send, timer, transaction
from .acl import AclChecker, AclConfig, Handle, guard
from .context import BrokerContext, BrokerSettings, HandlerTable, Wakeup, open_store
from .groups import ConsumerManager, LockManager, ProducerManager
from .holds import HoldService
from .jcompat import json_body
from .outbound import Outbound
from .server import Connection, Reply, Server, error_response
from .state import BrokerState
from .store import MAX_TRANSFER_BYTES, MAX_TRANSFER_COUNT, MessageStore
from .tls import ServerTLS

__all__ = ["Broker"]

log = logging.getLogger("rmq_async.embedded")

Job = tuple[Callable[..., Any], tuple[object, ...]]
#: each handler module's table builder; the tables do not overlap
_TABLES: tuple[Callable[[BrokerContext], HandlerTable], ...] = (
    send.handlers,
    pull.handlers,
    delay.handlers,
    clients.handlers,
    admin.handlers,
    admin_ops.handlers,
    pop.handlers,
    transaction.handlers,
    reply.handlers,
)


class Broker:
    """One embedded broker (master, broker id 0) of cluster ``DefaultCluster``."""

    def __init__(
        self,
        name: str,
        namesrv_addr: str,
        timing: Timing,
        *,
        flavour: int = 4,
        queues: int = 4,
        auto_create_topic: bool = True,
        data_dir: Path | None = None,
        delay_levels: str | None = None,
        port: int = 0,
        cluster: str = "DefaultCluster",
        acl: AclConfig | None = None,
        tls: ServerTLS | None = None,
        advertised_addr: str | None = None,
        enable_property_filter: bool = False,
        filter_support_retry: bool = False,
        trace_topic_enable: bool = False,
        trace_topic: str = "RMQ_SYS_TRACE_TOPIC",
        max_transfer_count: int = MAX_TRANSFER_COUNT,
        max_transfer_bytes: int = MAX_TRANSFER_BYTES,
    ) -> None:
        self.settings = s = BrokerSettings(
            name,
            cluster,
            namesrv_addr,
            timing,
            flavour,
            queues,
            auto_create_topic,
            data_dir,
            parse_delay_levels(delay_levels or timing.delay_levels),
            enable_property_filter=enable_property_filter,
            filter_support_retry=filter_support_retry,
            trace_topic_enable=trace_topic_enable,
            trace_topic=trace_topic,
            max_transfer_count=max_transfer_count,
            max_transfer_bytes=max_transfer_bytes,
        )
        self.name = name
        self.requested_port = port
        #: the address registered with the name server when clients must not reach the listening one
        #: (a proxy or port forward in front of this broker, as Java's ``brokerIP1``); None: ``addr``
        self.advertised_addr = advertised_addr
        self.server = Server(self, name, version=s.version, tls=tls)
        self.faults = self.server.faults
        self.state = BrokerState(
            name,
            cluster,
            default_queues=queues,
            auto_create=auto_create_topic,
            schedule_queues=max(18, len(s.delay_levels)),
            data_dir=data_dir,
            trace_topic=trace_topic if trace_topic_enable else None,
        )
        self.consumers = ConsumerManager(self._notify_ids_changed)
        self.producers = ProducerManager()
        self.locks = LockManager(timing.broker_lock_expiry)
        self.holds = HoldService()
        self.handlers: HandlerTable = {}  # filled by run(), once the store is open
        #: the dispatch the server calls: the request table, behind the ACL check when ``acl`` is given
        self.acl_checker = AclChecker(acl, flavour) if acl is not None else None
        self.handle: Handle = (
            self._route if self.acl_checker is None else guard(self._route, self.acl_checker, s.version)
        )
        self._ctx: BrokerContext | None = None
        self._schedule: delay.ScheduleService | None = None
        self._transactions: transaction.TransactionCheckService | None = None
        self._timers: timer.TimerService | None = None
        self._namesrv = Outbound(namesrv_addr, tls.inner_client_context() if tls is not None else None)
        self._register_now = Wakeup()
        self._stopped = anyio.Event()
        self._jobs_send: MemoryObjectSendStream[Job] | None = None

    # -- properties ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        """The listening address."""
        return f"127.0.0.1:{self.server.port}"

    @property
    def registered_addr(self) -> str:
        """The address the name server routes clients to: ``advertised_addr``, else ``addr``."""
        return self.advertised_addr or self.addr

    @property
    def context(self) -> BrokerContext:
        """What the handlers work with (from :meth:`run` on; kept after the broker stopped)."""
        if self._ctx is None:
            raise ClientError(f"broker {self.name} has not been started")
        return self._ctx

    @property
    def store(self) -> MessageStore:
        return self.context.store

    @property
    def schedule(self) -> delay.ScheduleService:
        """Delayed delivery (``schedule.deliver_next()`` delivers one message at once: a test hook)."""
        if self._schedule is None:
            raise ClientError(f"broker {self.name} has not been started")
        return self._schedule

    @property
    def transactions(self) -> transaction.TransactionCheckService:
        """The half-message check-back (``transactions.check()``: one walk at once, a test hook)."""
        if self._transactions is None:
            raise ClientError(f"broker {self.name} has not been started")
        return self._transactions

    @property
    def timers(self) -> timer.TimerService:
        """The 5.x timer wheel (``timers.pending``: timer messages not delivered yet)."""
        if self._timers is None:
            raise ClientError(f"broker {self.name} has not been started")
        return self._timers

    def spawn(self, fn: Callable[..., Awaitable[object]], /, *args: object) -> None:
        """Run an async job in the broker's task group (requests answered later).

        Callable from protocol callbacks (outside any task): the job is queued and started by
        :meth:`_job_runner`, so every task still lives in the task group.
        """
        if self._jobs_send is None:
            log.debug("%s: job dropped, broker not running", self.name)
            return
        try:
            self._jobs_send.send_nowait((fn, args))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("%s: job dropped, broker stopping", self.name)

    async def _job_runner(self, tg: TaskGroup, jobs: MemoryObjectReceiveStream[Job]) -> None:
        async for fn, args in jobs:
            tg.start_soon(fn, *args)

    # -- lifecycle ----------------------------------------------------------------------------

    def _open(self) -> tuple[BrokerContext, delay.ScheduleService]:
        """Open the store, build the context and the request table (the server already listens)."""
        store, recovered = open_store(self.settings, self.server.port)
        if recovered:
            log.info("%s: recovered %d messages from %s", self.name, recovered, self.settings.data_dir)
        ctx = BrokerContext(
            self.settings,
            self.state,
            store,
            self.consumers,
            self.producers,
            self.locks,
            self.holds,
            spawn=self.spawn,
            register=self.register,
            register_soon=self.register_soon,
            namesrv_request=self._namesrv.request,
        )
        schedule = delay.ScheduleService(ctx)
        schedule.load()
        handlers: HandlerTable = {}
        for table in _TABLES:
            handlers.update(table(ctx))
        self.handlers, self._ctx, self._schedule = handlers, ctx, schedule
        self._transactions = transaction.TransactionCheckService(ctx)
        self._timers = timer.TimerService(ctx)
        self._timers.load()
        return ctx, schedule

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; ``task_status.started()`` once registered with the name server."""
        await self.server.start(self.requested_port)
        self.requested_port = self.server.port
        ctx, schedule = self._open()
        timing = self.settings.timing
        self._jobs_send, jobs_recv = anyio.create_memory_object_stream[Job](math.inf)
        try:
            async with self._jobs_send, jobs_recv, anyio.create_task_group() as tg:
                try:
                    await self.register()
                except Exception as exc:  # the name server may be down: keep trying in the loop
                    log.warning("%s: first registration failed: %s", self.name, exc)
                tg.start_soon(self._job_runner, tg, jobs_recv)
                tg.start_soon(self._register_loop)
                tg.start_soon(self.holds.run, ctx.store, timing.held_pull_check_interval)
                tg.start_soon(self._housekeeping, ctx, schedule)
                tg.start_soon(schedule.run)
                tg.start_soon(self.timers.run)
                tg.start_soon(self.transactions.run)
                task_status.started()
                await self._stopped.wait()
                tg.cancel_scope.cancel()
        finally:
            self._jobs_send = None
            with anyio.move_on_after(2, shield=True):
                await self._shutdown(ctx, schedule)

    async def _shutdown(self, ctx: BrokerContext, schedule: delay.ScheduleService) -> None:
        s = self.settings
        try:
            if self._namesrv.connected:
                req = RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER,
                    {
                        "brokerAddr": self.registered_addr,
                        "brokerId": "0",
                        "brokerName": s.name,
                        "clusterName": s.cluster,
                    },
                    language="JAVA",
                    version=s.version,
                )
                await self._namesrv.request(req, 1.0)
        except Exception as exc:
            log.debug("%s: unregister failed: %s", self.name, exc)
        await self._namesrv.close()
        await self.server.stop()
        self.state.persist(force=s.data_dir is not None)
        pop.persist(ctx)
        schedule.persist()
        self.timers.persist()
        ctx.store.close()

    def stop(self) -> None:
        """Ask :meth:`run` to shut down (unregister, close connections, flush)."""
        self._stopped.set()

    def update_acl(self, acl: AclConfig) -> None:
        """New ACL accounts from the next request on (a broker started with ACL only)."""
        if self.acl_checker is None:
            raise ClientError(f"broker {self.name} was started without ACL")
        self.acl_checker.update(acl)

    def cut_connections(self) -> None:
        """Close every client connection (the broker keeps serving new ones)."""
        self.server.cut_connections()

    def truncate_head(self, topic: str, queue_id: int, offset: int) -> int:
        """Delete the messages of a queue below ``offset``, as retention deleting expired files does:
        its min offset moves up (returned). See :meth:`MessageStore.truncate_head`."""
        return self.store.truncate_head(topic, queue_id, offset)

    # -- registration -------------------------------------------------------------------------

    def register_soon(self) -> None:
        self._register_now.set()

    async def register(self) -> None:
        """REGISTER_BROKER with a RegisterBrokerBody (the TopicConfigSerializeWrapper inside)."""
        s = self.settings
        body = json_body({"filterServerList": [], "topicConfigSerializeWrapper": self.state.wrapper_json()})
        ext = {
            "brokerAddr": self.registered_addr,
            "brokerId": "0",
            "brokerName": s.name,
            "clusterName": s.cluster,
            "haServerAddr": f"127.0.0.1:{self.server.port + 1}",
            "compressed": "false",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
        }
        req = RemotingCommand.request(
            RequestCode.REGISTER_BROKER, ext, body, language="JAVA", version=s.version
        )
        resp = await self._namesrv.request(req, s.timing.request_timeout)
        if resp is not None and resp.code != ResponseCode.SUCCESS:
            log.warning("%s: register answered %s %s", self.name, resp.code, resp.remark)

    async def _register_loop(self) -> None:
        while True:
            await self._register_now.wait(self.settings.timing.broker_register_interval)
            try:
                await self.register()
            except Exception as exc:
                log.debug("%s: register failed: %s", self.name, exc)

    async def _housekeeping(self, ctx: BrokerContext, schedule: delay.ScheduleService) -> None:
        """Idle client scan (``ClientHousekeepingService``), state persistence and commit-log flush."""
        idle = self.settings.timing.channel_idle_timeout
        step = min(1.0, idle / 4)
        while True:
            await anyio.sleep(step)
            for conn in self.consumers.scan_idle(idle) + self.producers.scan_idle(idle):
                conn.close()
            self.state.persist()
            pop.persist(ctx)
            schedule.persist()
            self.timers.persist()
            ctx.store.flush()

    # -- dispatch -----------------------------------------------------------------------------

    def _route(self, conn: Connection, cmd: RemotingCommand) -> Reply:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return error_response(
                cmd,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {cmd.code} not supported",
                version=self.settings.version,
            )
        return handler(conn, cmd)

    def connection_closed(self, conn: Connection) -> None:
        self.consumers.connection_closed(conn)
        self.producers.connection_closed(conn)
        self.holds.connection_closed(conn)

    def _notify_ids_changed(self, conns: list[Connection], group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (40) to every member of ``group`` (``ConsumerManager``'s hook)."""
        for conn in conns:
            conn.oneway(
                RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                    {"consumerGroup": group},
                    language="JAVA",
                    version=self.settings.version,
                )
            )
