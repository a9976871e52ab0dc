"""EmbeddedCluster: a name server and N brokers on 127.0.0.1, in-process or in a child process.

Strategy: in-process, the name server and each broker run in one task group owned by a runner task
that ``__aenter__`` starts and ``__aexit__`` stops and awaits (so the cluster may be entered and left
from different tasks, as pytest-asyncio fixtures do); tests can stop/start single brokers (same
port, same data directory: re-read ``cluster.brokers[i]`` afterwards, fault rules carry over) and the
name server, and inject faults (``broker.faults``, ``cluster.namesrv_faults``).
With ``process=True`` the same cluster runs in a child started by exec
(``python -m rmq_async.embedded``): it prints ``namesrv=...`` then one ``<broker>=<addr>`` line per
broker, dies when its stdin closes (so it never outlives this process), and is stopped with SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..config import Timing
from ..errors import BrokerError, ClientError, ConfigError
from ..protocol.acl import sign_fields
from ..protocol.codes import MQ_VERSION_V4_9_8, RequestCode
from ..protocol.command import RemotingCommand
from .acl import AclConfig
from .broker import Broker
from .faults import Faults
from .namesrv import NameServer
from .outbound import Outbound
from .state import load_json, save_json
from .store import MAX_TRANSFER_BYTES, MAX_TRANSFER_COUNT
from .tls import ServerTLS

__all__ = ["ACL_ENV", "TLS_KEY_PASSWORD_ENV", "EmbeddedCluster", "RemoteBroker"]

#: the child-process cluster reads its ACL accounts (the plain_acl.yml mapping, as JSON) from here
ACL_ENV = "RMQ_EMBEDDED_ACL_JSON"
#: ... and the server key's password (``ServerTLS.key_password``) from here: never on its command line
TLS_KEY_PASSWORD_ENV = "RMQ_EMBEDDED_TLS_KEY_PASSWORD"

log = logging.getLogger("rmq_async.embedded")


class RemoteBroker:
    """A broker of a child-process cluster: only its name and address are known here."""

    def __init__(self, name: str, addr: str) -> None:
        self.name = name
        self.addr = addr

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])


def _check_args(flavour: int, brokers: int, queues: int, port: int, count: int, nbytes: int) -> None:
    """The constructor's numbers, each refused with a :class:`ConfigError` naming it (a ValueError:
    what used to be raised), before anything starts."""

    def whole(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if flavour not in (4, 5) or not whole(flavour):
        raise ConfigError(f"EmbeddedCluster flavour must be 4 or 5, not {flavour!r}")
    for name, value in (
        ("brokers", brokers),
        ("queues", queues),
        ("max_transfer_count", count),
        ("max_transfer_bytes", nbytes),
    ):
        if not whole(value) or value < 1:
            raise ConfigError(f"EmbeddedCluster {name} must be a positive integer, not {value!r}")
    if not whole(port) or not 0 <= port <= 65535:
        raise ConfigError(f"EmbeddedCluster port must be 0 (any free port) to 65535, not {port!r}")


def broker_name(i: int) -> str:
    return "broker-" + (chr(ord("a") + i) if i < 26 else str(i))


class EmbeddedCluster:
    """Name server + ``brokers`` brokers; an async context manager.

    ``namesrv_addr`` is "127.0.0.1:P"; ``brokers`` lists the broker handles (``.name``, ``.addr``,
    and in-process ``.faults`` and ``.cut_connections()``). ``tls`` (:class:`~.tls.ServerTLS`) puts
    the name server and every broker in a TLS mode (``disabled``, ``permissive``, ``enforcing``).
    """

    def __init__(
        self,
        brokers: int = 1,
        queues: int = 4,
        *,
        timing: Timing | None = None,
        flavour: int = 4,
        data_dir: str | Path | None = None,
        port: int = 0,
        delay_levels: str | None = None,
        auto_create_topic: bool = True,
        process: bool = False,
        acl: AclConfig | Mapping[str, Any] | str | Path | None = None,
        tls: ServerTLS | None = None,
        enable_property_filter: bool = False,
        filter_support_retry: bool = False,
        trace_topic_enable: bool = False,
        max_transfer_count: int = MAX_TRANSFER_COUNT,
        max_transfer_bytes: int = MAX_TRANSFER_BYTES,
        order_message_enable: bool = False,
    ) -> None:
        _check_args(flavour, brokers, queues, port, max_transfer_count, max_transfer_bytes)
        self.broker_count = brokers
        self.queues = queues
        self.timing = timing or Timing()
        self.flavour = flavour
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.port = port
        self.delay_levels = delay_levels
        self.auto_create_topic = auto_create_topic
        self.process = process
        self.tls = tls
        #: the brokers' ``enablePropertyFilter`` (SQL92 subscriptions) and ``filterSupportRetry``
        self.enable_property_filter = enable_property_filter
        self.filter_support_retry = filter_support_retry
        #: the brokers' ``traceTopicEnable``: ``RMQ_SYS_TRACE_TOPIC`` exists from the start
        self.trace_topic_enable = trace_topic_enable
        #: the brokers' ``maxTransferCountOnMessageInMemory`` / ``maxTransferBytesOnMessageInMemory``:
        #: what one pull answers at most (Java's defaults, 32 messages and 256 KiB)
        self.max_transfer_count = max_transfer_count
        self.max_transfer_bytes = max_transfer_bytes
        #: the name server's ``orderMessageEnable``: routes carry the order config ``mqadmin updateTopic
        #: -o true`` wrote (``orderTopicConf``)
        self.order_message_enable = order_message_enable
        #: ACL accounts every broker enforces (None: off); a path is read as a ``plain_acl.yml``
        self.acl = AclConfig.coerce(acl) if acl is not None else None
        self.namesrv_addr = ""
        self.namesrv: NameServer | None = None
        self.brokers: list[Any] = []
        self._tg: TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing = anyio.Event()
        self._broker_done: list[anyio.Event] = []
        self._namesrv_scope: anyio.CancelScope | None = None
        self._namesrv_done: anyio.Event | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._advertised: dict[int, str] = {}

    # -- context manager ----------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedCluster:
        if self.process:
            await self._start_process()
            return self
        # The task group lives in a runner task owned by the cluster, so the cluster may be entered
        # and exited from different tasks (as pytest-asyncio fixtures do).
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._closing = anyio.Event()
        self._runner = loop.create_task(self._run(ready), name="embedded-cluster")
        try:
            await asyncio.shield(ready)
        except BaseException:
            self._closing.set()
            with contextlib.suppress(BaseException):
                await self._runner
            raise
        return self

    async def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self.start_namesrv()
                for i in range(self.broker_count):
                    self.brokers.append(None)
                    self._broker_done.append(anyio.Event())
                    await self.start_broker(i)
                ready.set_result(None)
                await self._closing.wait()
                for i in range(len(self.brokers)):
                    await self.stop_broker(i)
                await self.stop_namesrv()
                tg.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            raise
        finally:
            self._tg = None

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            await self._stop_process()
            return
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._closing.set()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([runner])
        if not runner.cancelled() and runner.exception() is not None:
            raise runner.exception()  # type: ignore[misc]

    # -- in-process control -------------------------------------------------------------------

    def _need_tg(self) -> TaskGroup:
        if self._tg is None:
            raise ClientError("this operation needs an in-process cluster that is running")
        return self._tg

    async def start_namesrv(self) -> None:
        """(Re)start the name server on the same port."""
        tg = self._need_tg()
        if self._namesrv_done is not None and not self._namesrv_done.is_set():
            return
        ns = NameServer(
            self.timing, flavour=self.flavour, tls=self.tls, order_message_enable=self.order_message_enable
        )
        if self.namesrv is not None:
            ns.faults = self.namesrv.faults
            ns.server.faults = ns.faults
            ns.kv = self.namesrv.kv  # Java keeps it in kvConfig.json
        self.namesrv = ns
        self._namesrv_done = anyio.Event()
        await tg.start(self._run_namesrv, ns, self._namesrv_done)
        self.port = ns.server.port
        self.namesrv_addr = ns.addr

    async def _run_namesrv(self, ns: NameServer, done: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._namesrv_scope = scope
                await ns.start(self.port)
                task_status.started()
                await ns.run_expiry()
        finally:
            with anyio.CancelScope(shield=True):
                await ns.stop()
            done.set()

    async def stop_namesrv(self) -> None:
        """Stop the name server (brokers keep running and re-register once it is back)."""
        if self._namesrv_scope is not None:
            self._namesrv_scope.cancel()
        if self._namesrv_done is not None:
            await self._namesrv_done.wait()

    def _broker_dir(self, name: str) -> Path | None:
        return self.data_dir / name if self.data_dir is not None else None

    async def start_broker(self, i: int) -> None:
        """(Re)start broker ``i`` on its previous port and data directory."""
        tg = self._need_tg()
        old = self.brokers[i]
        if old is not None and not self._broker_done[i].is_set():
            return
        name = broker_name(i)
        bdir = self._broker_dir(name)
        port = old.port if old is not None else 0
        if port == 0 and bdir is not None:
            saved = load_json(bdir / "broker.json")
            port = int(saved["port"]) if saved else 0
        b = Broker(
            name,
            self.namesrv_addr,
            self.timing,
            flavour=self.flavour,
            queues=self.queues,
            auto_create_topic=self.auto_create_topic,
            data_dir=bdir,
            delay_levels=self.delay_levels,
            port=port,
            acl=self.acl,
            tls=self.tls,
            advertised_addr=self._advertised.get(i),
            enable_property_filter=self.enable_property_filter,
            filter_support_retry=self.filter_support_retry,
            trace_topic_enable=self.trace_topic_enable,
            max_transfer_count=self.max_transfer_count,
            max_transfer_bytes=self.max_transfer_bytes,
        )
        if old is not None:
            b.faults = old.faults
            b.server.faults = old.faults
        self.brokers[i] = b
        done = self._broker_done[i] = anyio.Event()
        await tg.start(self._run_broker, b, done)
        if bdir is not None:
            save_json(bdir / "broker.json", {"port": b.port})

    @staticmethod
    async def _run_broker(b: Broker, done: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        try:
            await b.run(task_status=task_status)
        finally:
            done.set()

    async def stop_broker(self, i: int) -> None:
        """Stop broker ``i`` cleanly (unregister, close connections, flush its data)."""
        b = self.brokers[i]
        if b is None:
            return
        b.stop()
        await self._broker_done[i].wait()

    def advertise(self, i: int, addr: str | None) -> None:
        """Make broker ``i`` register ``addr`` with the name server instead of its listening address,
        so that clients reach it through ``addr`` (a fault proxy in front of it, as Java's
        ``brokerIP1`` behind a port forward); None: its own address again. Takes effect when the
        broker next (re)starts (``stop_broker`` then ``start_broker``: the running one unregisters
        the address it registered). In-process clusters only."""
        if self.process:
            raise ClientError("the brokers of a child-process cluster cannot advertise another address")
        if addr is None:
            self._advertised.pop(i, None)
        else:
            self._advertised[i] = addr

    # -- admin --------------------------------------------------------------------------------

    async def create_topic(self, topic: str, queues: int | None = None, *, perm: int = 6) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) on every broker; each then registers with the name server."""
        n = queues if queues is not None else self.queues
        version = 479 if self.flavour == 5 else MQ_VERSION_V4_9_8
        for b in self.brokers:
            out = Outbound(b.addr, self.tls.inner_client_context() if self.tls is not None else None)
            try:
                ext = {
                    "topic": topic,
                    "defaultTopic": "TBW102",
                    "readQueueNums": str(n),
                    "writeQueueNums": str(n),
                    "perm": str(perm),
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": "0",
                    "order": "false",
                }
                req = RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC, ext, language="JAVA", version=version
                )
                admin = self.acl.admin_account() if self.acl is not None else None
                if admin is not None:  # as mqadmin does with the admin's keys (tools.yml)
                    sign_fields(req.ext_fields, req.body, admin.access_key, admin.secret_key)
                resp = await out.request(req, self.timing.request_timeout)
                assert resp is not None
                if resp.code != 0:
                    raise BrokerError(resp.code, resp.remark, request_code=17, addr=b.addr)
            finally:
                await out.close()

    def truncate_head(self, topic: str, offset: int, *, queue_id: int | None = None) -> None:
        """Retention on every broker: delete the messages of ``topic`` below ``offset`` in each queue (or
        in ``queue_id`` only), so the queues' min offset moves up as on a real broker whose oldest
        files expired (in-process clusters only)."""
        for b in self.brokers:
            if not isinstance(b, Broker):
                raise ClientError("the brokers of a child-process cluster cannot delete messages")
            held = sorted(q for t, q in b.store.cqs if t == topic)  # an empty queue has nothing to delete
            for q in held if queue_id is None else [queue_id]:
                b.truncate_head(topic, q, offset)

    def corrupt_message(
        self, topic: str, queue_id: int, offset: int, how: str = "body", *, broker: int = 0
    ) -> int:
        """Fault injection: spoil the stored message at ``offset`` of ``topic``:``queue_id`` on broker
        ``broker`` so that no client can decode it (``how``: ``"body"``, ``"type"``, ``"framing"``,
        ``"magic"`` or ``"ids"``, see :meth:`~.store.MessageStore.corrupt`); returns its commit-log
        offset (in-process clusters only)."""
        b = self.brokers[broker]
        if not isinstance(b, Broker):
            raise ClientError("the brokers of a child-process cluster cannot corrupt messages")
        return b.store.corrupt(topic, queue_id, offset, how)

    def update_acl(self, acl: AclConfig | Mapping[str, Any] | str | Path) -> None:
        """Replace the ACL accounts of every broker (in-process clusters started with ``acl`` only), as
        editing the real broker's ``plain_acl.yml`` does; restarted brokers keep the new ones."""
        if self.acl is None:
            raise ClientError("this cluster was started without ACL")
        self.acl = AclConfig.coerce(acl)
        for b in self.brokers:
            if not isinstance(b, Broker):
                raise ClientError("the brokers of a child-process cluster cannot change their ACL")
            b.update_acl(self.acl)

    @property
    def namesrv_faults(self) -> Faults:
        """The name server's fault rules (in-process only; kept across stop/start_namesrv)."""
        if self.namesrv is None:
            raise ClientError("the name server of a child-process cluster has no fault injection")
        return self.namesrv.faults

    # -- child process ------------------------------------------------------------------------

    def _child_args(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "rmq_async.embedded",
            "--brokers",
            str(self.broker_count),
            "--queues",
            str(self.queues),
            "--port",
            str(self.port),
            "--flavour",
            str(self.flavour),
            "--timing-json",
            self.timing.model_dump_json(),
            "--exit-on-stdin-eof",
        ]
        if self.data_dir is not None:
            args += ["--data-dir", str(self.data_dir)]
        if self.delay_levels is not None:
            args += ["--delay-levels", self.delay_levels]
        if not self.auto_create_topic:
            args.append("--no-auto-create-topic")
        if self.enable_property_filter:
            args.append("--enable-property-filter")
        if self.filter_support_retry:
            args.append("--filter-support-retry")
        if self.trace_topic_enable:
            args.append("--trace-topic-enable")
        if self.order_message_enable:
            args.append("--order-message-enable")
        if self.max_transfer_count != MAX_TRANSFER_COUNT:
            args += ["--max-transfer-count", str(self.max_transfer_count)]
        if self.max_transfer_bytes != MAX_TRANSFER_BYTES:
            args += ["--max-transfer-bytes", str(self.max_transfer_bytes)]
        if self.tls is not None:  # the key password, if any, goes in the environment (_child_env)
            args += ["--tls-mode", self.tls.mode, "--tls-client-auth", self.tls.client_auth]
            for flag, value in (
                ("--tls-cert", self.tls.cert_file),
                ("--tls-key", self.tls.key_file),
                ("--tls-ca", self.tls.ca_file),
            ):
                if value:
                    args += [flag, value]
        return args

    def _child_env(self) -> dict[str, str]:
        """The child's environment: ours, plus the ACL accounts and the server key's password, which go
        there rather than on its (world-readable) command line; never ones of ours under those names."""
        env = {k: v for k, v in os.environ.items() if k not in (ACL_ENV, TLS_KEY_PASSWORD_ENV)}
        if self.acl is not None:
            env[ACL_ENV] = json.dumps(self.acl.to_mapping())
        if self.tls is not None and self.tls.key_password:
            env[TLS_KEY_PASSWORD_ENV] = self.tls.key_password
        return env

    async def _start_process(self) -> None:
        self._proc = proc = await asyncio.create_subprocess_exec(
            *self._child_args(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self._child_env(),
        )
        assert proc.stdout is not None
        try:
            with anyio.fail_after(30):
                line = (await proc.stdout.readline()).decode().strip()
                if not line.startswith("namesrv="):
                    raise ClientError(f"embedded cluster child did not start: first line {line!r}")
                self.namesrv_addr = line.partition("=")[2]
                for _ in range(self.broker_count):
                    name, _, addr = (await proc.stdout.readline()).decode().strip().partition("=")
                    self.brokers.append(RemoteBroker(name, addr))
        except BaseException:
            await self._stop_process()
            raise

    async def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                with anyio.move_on_after(10):
                    await proc.wait()
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
            if proc.stdout is not None:
                with contextlib.suppress(Exception):
                    await proc.stdout.read()
        log.debug("embedded cluster child exited with %s", proc.returncode)
