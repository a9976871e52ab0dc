"""The embedded broker: lifecycle, registration, request dispatch and the send path.

Strategy: one :class:`Broker` owns a :class:`~.server.Server`, the :class:`~.store.MessageStore`, the
configuration state and the group/lock managers, plus a task group for its timers (registration,
held-pull checks, idle-client scan, delayed delivery, flush) and for the few requests answered
asynchronously (topic creation, forwarding to clients). Requests are dispatched through a table of
synchronous handlers; each follows the corresponding Java processor of RocketMQ 4.9.8
(``flavour=5`` answers as 5.3.3 where the captures show a difference) and lives in a sibling module
(send, pull, clients, admin, delay). Every message is stored through :meth:`Broker.put`
(``CommitLog.putMessage``: delay levels go to the schedule topic; parked pulls are notified).
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..config import Timing, parse_delay_levels
from ..protocol.codes import MQ_VERSION_V4_9_8, MQ_VERSION_V5_3_3, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from . import admin, clients, delay, pull, send
from .groups import ConsumerManager, LockManager, ProducerManager
from .jcompat import java_ext, java_sized_capacity, json_body, props_decode, props_encode
from .outbound import Outbound
from .server import Connection, Reply, Server
from .state import SCHEDULE_TOPIC, BrokerState, TopicConfig
from .store import MessageStore, PutResult, host_bytes, now_ms

__all__ = ["Broker"]

log = logging.getLogger("rmq_async.embedded")

Handler = Callable[[Connection, RemotingCommand], Reply]
Job = tuple[Callable[..., Any], tuple[Any, ...]]
tags_code_of = send.tags_code_of


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
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.namesrv_addr = namesrv_addr
        self.timing = timing
        self.flavour = flavour
        self.version = MQ_VERSION_V5_3_3 if flavour == 5 else MQ_VERSION_V4_9_8
        self.queues = queues
        self.auto_create = auto_create_topic
        self.data_dir = data_dir
        self.delay_levels = parse_delay_levels(delay_levels or timing.delay_levels)
        self.delay_ms = tuple(round(s * 1000) for s in self.delay_levels)
        self.requested_port = port
        self.server = Server(self, name, version=self.version)
        self.faults = self.server.faults
        self.state = BrokerState(
            name,
            cluster,
            default_queues=queues,
            auto_create=auto_create_topic,
            schedule_queues=max(18, len(self.delay_levels)),
            data_dir=data_dir,
        )
        self.store: MessageStore | None = None
        self.consumers = ConsumerManager(self.notify_ids_changed)
        self.producers = ProducerManager()
        self.locks = LockManager(timing.broker_lock_expiry)
        self.holds = pull.HoldService(self)
        self.schedule = delay.ScheduleService(self)
        self._namesrv = Outbound(namesrv_addr)
        self._register_now = anyio.Event()
        self._tg: TaskGroup | None = None
        self._stopped = anyio.Event()
        self._jobs_send: MemoryObjectSendStream[Job] | None = None
        self._jobs_recv: MemoryObjectReceiveStream[Job] | None = None
        self.handlers: dict[int, Handler] = {
            RequestCode.SEND_MESSAGE: lambda c, r: send.send_message(self, c, r),
            RequestCode.SEND_MESSAGE_V2: lambda c, r: send.send_message(self, c, r),
            RequestCode.SEND_BATCH_MESSAGE: lambda c, r: send.send_message(self, c, r),
            RequestCode.PULL_MESSAGE: lambda c, r: pull.pull_message(self, c, r, True),
            RequestCode.CONSUMER_SEND_MSG_BACK: lambda c, r: delay.send_back(self, c, r),
        }
        self.handlers.update(clients.handlers(self))
        self.handlers.update(admin.handlers(self))

    # -- properties ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def respond(
        self,
        cmd: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """A response in the request's serialize type; ``ext`` None leaves ``extFields`` out."""
        return cmd.make_response(int(code), remark, java_ext(ext) if ext else ext, body, version=self.version)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
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

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; ``task_status.started()`` once registered with the name server."""
        await self.server.start(self.requested_port)
        self.requested_port = self.server.port
        self.store = MessageStore(host_bytes("127.0.0.1", self.server.port), self.data_dir)
        recovered = self.store.open(self._recovery_tags_code)
        if recovered:
            log.info("%s: recovered %d messages from %s", self.name, recovered, self.data_dir)
        self.schedule.load()
        self._jobs_send, self._jobs_recv = anyio.create_memory_object_stream[Job](math.inf)
        try:
            async with self._jobs_send, self._jobs_recv, anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    await self.register()
                except Exception as exc:  # the name server may be down: keep trying in the loop
                    log.warning("%s: first registration failed: %s", self.name, exc)
                tg.start_soon(self._job_runner, tg, self._jobs_recv)
                tg.start_soon(self._register_loop)
                tg.start_soon(self.holds.run)
                tg.start_soon(self._housekeeping)
                tg.start_soon(self.schedule.run)
                task_status.started()
                await self._stopped.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._jobs_send = self._jobs_recv = None
            with anyio.move_on_after(2, shield=True):
                await self._shutdown()

    async def _shutdown(self) -> None:
        try:
            if self._namesrv.connected:
                req = RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER,
                    {
                        "brokerAddr": self.addr,
                        "brokerId": "0",
                        "brokerName": self.name,
                        "clusterName": self.cluster,
                    },
                    language="JAVA",
                    version=self.version,
                )
                await self._namesrv.request(req, 1.0)
        except Exception as exc:
            log.debug("%s: unregister failed: %s", self.name, exc)
        await self._namesrv.close()
        await self.server.stop()
        self.state.persist(force=self.data_dir is not None)
        self.schedule.persist()
        if self.store is not None:
            self.store.close()

    def stop(self) -> None:
        """Ask :meth:`run` to shut down (unregister, close connections, flush)."""
        self._stopped.set()

    def cut_connections(self) -> None:
        """Close every client connection (the broker keeps serving new ones)."""
        self.server.cut_connections()

    # -- registration -------------------------------------------------------------------------

    def register_soon(self) -> None:
        self._register_now.set()

    async def register(self) -> None:
        """REGISTER_BROKER with a RegisterBrokerBody (the TopicConfigSerializeWrapper inside)."""
        body = json_body({"filterServerList": [], "topicConfigSerializeWrapper": self.state.wrapper_json()})
        ext = {
            "brokerAddr": self.addr,
            "brokerId": "0",
            "brokerName": self.name,
            "clusterName": self.cluster,
            "haServerAddr": f"127.0.0.1:{self.server.port + 1}",
            "compressed": "false",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
        }
        req = RemotingCommand.request(
            RequestCode.REGISTER_BROKER, ext, body, language="JAVA", version=self.version
        )
        resp = await self._namesrv.request(req, self.timing.request_timeout)
        if resp is not None and resp.code != ResponseCode.SUCCESS:
            log.warning("%s: register answered %s %s", self.name, resp.code, resp.remark)

    async def _register_loop(self) -> None:
        while True:
            with anyio.move_on_after(self.timing.broker_register_interval):
                await self._register_now.wait()
            self._register_now = anyio.Event()
            try:
                await self.register()
            except Exception as exc:
                log.debug("%s: register failed: %s", self.name, exc)

    async def _housekeeping(self) -> None:
        """Idle client scan (``ClientHousekeepingService``), state persistence and commit-log flush."""
        idle = self.timing.channel_idle_timeout
        step = min(1.0, idle / 4)
        while True:
            await anyio.sleep(step)
            for conn in self.consumers.scan_idle(idle) + self.producers.scan_idle(idle):
                conn.close()
            self.state.persist()
            self.schedule.persist()
            if self.store is not None:
                self.store.flush()

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, conn: Connection, cmd: RemotingCommand) -> Reply:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return self.respond(
                cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        return handler(conn, cmd)

    def connection_closed(self, conn: Connection) -> None:
        self.consumers.connection_closed(conn)
        self.producers.connection_closed(conn)
        self.holds.connection_closed(conn)

    def notify_ids_changed(self, conns: list[Connection], group: str) -> None:
        for conn in conns:
            conn.oneway(
                RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                    {"consumerGroup": group},
                    language="JAVA",
                    version=self.version,
                )
            )

    # -- topics -------------------------------------------------------------------------------

    def create_topic_in_back_method(
        self, topic: str, queues: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig:
        tc = self.state.topics.get(topic)
        if tc is None:
            tc = TopicConfig(topic, queues, queues, perm, sys_flag)
            self.state.put_topic(tc)
            self.register_soon()
        return tc

    def find_group(self, group: str) -> bool:
        """``findSubscriptionGroupConfig`` with auto-creation (always succeeds here)."""
        self.state.add_group(group)
        return True

    # -- the put path -------------------------------------------------------------------------

    def _recovery_tags_code(self, topic: str, props: str, store_ts: int) -> int:
        p = props_decode(props)
        if topic == SCHEDULE_TOPIC:
            return store_ts + self.delay_ms[min(int(p.get("DELAY", "1")), len(self.delay_ms)) - 1]
        return tags_code_of(p)

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        props: dict[str, str],
        props_str: str,
        sys_flag: int,
        born_ts: int,
        born_host: bytes,
        reconsume_times: int = 0,
        store_host: bytes | None = None,
    ) -> PutResult:
        """``CommitLog.putMessage``: a DELAY > 0 goes to the schedule topic; holds are notified."""
        assert self.store is not None
        store_ts = None
        tags_code = tags_code_of(props)
        level = delay.delay_level(props)
        tran = (sys_flag >> 2) & 0x3
        if level > 0 and tran in (0, 2):
            level = min(level, len(self.delay_ms))
            props["REAL_TOPIC"] = topic
            props["REAL_QID"] = str(queue_id)
            props_str = self.encode_props(props)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            store_ts = now_ms()
            tags_code = store_ts + self.delay_ms[level - 1]
        res = self.store.put(
            topic,
            queue_id,
            body,
            flag,
            props_str,
            tags_code,
            sys_flag,
            born_ts,
            born_host,
            reconsume_times,
            store_ts=store_ts,
        )
        if topic == SCHEDULE_TOPIC:
            self.schedule.wake()
        else:
            self.holds.notify(topic, queue_id, res.queue_offset + 1, tags_code)
        return res

    def encode_props(self, props: dict[str, str], capacity: int | None = None) -> str:
        """``messageProperties2String`` of a map made by ``string2messageProperties``.

        4.9.8 builds it with ``new HashMap()`` (grows from 16), 5.3.3 with ``new HashMap(128)`` and
        keeps the trailing separator.
        """
        if self.flavour == 5:
            return props_encode(props, capacity=java_sized_capacity(128, len(props)), trailing=True)
        return props_encode(props, capacity=capacity)
