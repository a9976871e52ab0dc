"""The harness's cluster side: an embedded cluster in an exec'd child, topics, and the preload.

Strategy: the harness itself is synchronous and starts every child with ``subprocess.Popen`` (exec,
never a fork of a running event loop). The embedded name server + broker run as
``python -m rmq_async.embedded --exit-on-stdin-eof``: the harness holds the child's stdin, so the
child ends when the harness ends, however it ends. Topics are created with UPDATE_AND_CREATE_TOPIC on
every broker of the cluster's TBW102 route (which also works against a real cluster given with
``--namesrv``); the preload pipelines ``send_batch`` calls and shows a progress bar on a terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import TracebackType

import anyio

from ..cli.progress import ProgressLine
from ..client.instance import ClientInstance
from ..config import ClientConfig, ProducerConfig
from ..errors import BrokerError, ClientError
from ..producer.producer import Producer
from ..protocol.message import Message

__all__ = ["ChildCluster", "create_topic", "preload"]


class ChildCluster:
    """An embedded cluster in a child process; a (sync) context manager with ``namesrv_addr``."""

    def __init__(
        self,
        *,
        brokers: int = 1,
        queues: int = 8,
        timing: str = "default",
        acl_file: str | None = None,
        tls_mode: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        flavour: int = 4,
    ) -> None:
        self.brokers = brokers
        self.flavour = flavour  # 4: answer as RocketMQ 4.9.8; 5: as 5.3.3 (POP, broker-side assignment)
        self.acl_file = acl_file  # a plain_acl.yml: the brokers enforce ACL
        # TLS (``permissive`` or ``enforcing``) with this server certificate chain (and key: its password,
        # if any, reaches the child through the inherited RMQ_EMBEDDED_TLS_KEY_PASSWORD, never argv)
        self.tls_mode = tls_mode
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.queues = queues
        self.timing = timing
        self.namesrv_addr = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rmq_async.embedded",
            "--brokers",
            str(self.brokers),
            "--queues",
            str(self.queues),
            "--port",
            "0",
            "--timing",
            self.timing,
            "--exit-on-stdin-eof",
            *(["--flavour", str(self.flavour)] if self.flavour != 4 else []),
            *(["--acl-file", self.acl_file] if self.acl_file else []),
            *(["--tls-mode", self.tls_mode] if self.tls_mode else []),
            *(["--tls-cert", self.tls_cert] if self.tls_cert else []),
            *(["--tls-key", self.tls_key] if self.tls_key else []),
        ]

    def start(self) -> str:
        """Start the child and return the name server address once it listens."""
        self.proc = proc = subprocess.Popen(self.args(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()  # printed once it listens; "" if it died
        if not line.startswith("namesrv="):
            self.stop()
            raise ClientError(f"embedded cluster child did not start (first line {line!r})")
        for _ in range(self.brokers):
            proc.stdout.readline()
        self.namesrv_addr = line.partition("=")[2]
        return self.namesrv_addr

    def stop(self) -> None:
        """Close the child's stdin (it exits on EOF), then SIGTERM, then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> ChildCluster:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def create_topic(namesrv: str, topic: str, queues: int, timeout: float = 5.0) -> None:
    """Create ``topic`` with ``queues`` read/write queues on every broker the name server knows."""
    async with ClientInstance(ClientConfig(namesrv_addr=namesrv), instance_name=f"bench{os.getpid()}") as c:
        route = await c.api.get_route(namesrv, "TBW102", timeout)
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is not None:
                await c.api.create_topic(addr, topic, queues, timeout)
        # wait until the name server routes the topic to every broker (registration is periodic
        # on a real cluster, immediate on the embedded one)
        with anyio.fail_after(60):
            while True:
                try:
                    r = await c.api.get_route(namesrv, topic, timeout)
                    if len(r.queue_datas) >= len(route.broker_datas):
                        return
                except BrokerError:
                    pass
                await anyio.sleep(0.2)  # a remote cluster registers on its own timer: nothing to await


async def preload(
    namesrv: str,
    topic: str,
    n: int,
    size: int,
    *,
    batch: int = 32,
    inflight: int = 16,
    progress: bool | None = None,
    keys_prefix: str | None = None,
) -> float:
    """Send ``n`` messages of ``size`` bytes to ``topic`` (``batch`` per request, ``inflight`` requests
    in flight); returns messages per second. A progress bar shows on a terminal (``progress=None``).
    ``keys_prefix``: message ``i`` has the key ``<prefix><i>`` (as ``rmq-async produce`` sends them)."""
    body = b"x" * size
    bar = ProgressLine(n, f"preload {topic}", enabled=sys.stderr.isatty() if progress is None else progress)
    cfg = ProducerConfig(group=f"bench_preload_{os.getpid()}")
    producer = Producer(config=cfg, client_config=ClientConfig(namesrv_addr=namesrv))
    chunks = iter([(i, min(batch, n - i)) for i in range(0, n, batch)])
    t0 = time.perf_counter()
    try:
        async with producer:

            async def sender() -> None:
                for i, k in chunks:
                    if keys_prefix is None:
                        msgs = [Message(topic, body) for _ in range(k)]
                    else:
                        msgs = [Message(topic, body, keys=f"{keys_prefix}{j}") for j in range(i, i + k)]
                    await producer.send_batch(msgs)
                    bar.advance(k)

            async with anyio.create_task_group() as tg:
                for _ in range(inflight):
                    tg.start_soon(sender)
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    return n / secs if secs > 0 else 0.0
