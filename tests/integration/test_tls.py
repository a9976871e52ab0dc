"""TLS on the embedded cluster: verified, refused, trust-all, mutual TLS, the three server
modes, the environment switch and the CLI; every async test runs on asyncio and on uvloop.

Certificates are made per session with trustme (``support/tls.py``). Push consumers, lite pull
consumers and producers all reach the cluster through the client instance's pool, so TLS there is TLS
everywhere; ``enforcing`` clusters prove it (a plain connection would be closed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives import serialization
from support.integration import Collector, child_env
from support.tls import KEY_PASSWORD, Certs, make_certs

from rmq_async import (
    ClientConfig,
    ClientError,
    ConnectError,
    ConsumeResult,
    Message,
    MQClientError,
    Producer,
    PushConsumer,
    Timing,
    TLSConfig,
    TLSError,
)
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster, ServerTLS
from rmq_async.embedded.server import Server
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.transport import Connection, ConnectionPool
from rmq_async.transport.tls import client_ssl_context

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    """Runs a test's coroutine on a fresh asyncio or uvloop loop (each test runs on both)."""
    if request.param == "uvloop":
        import uvloop

        def on_uvloop(coro: Coroutine[Any, Any, None]) -> None:
            async def check() -> None:
                assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
                await coro

            uvloop.run(check())

        return on_uvloop
    return asyncio.run


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _cc(cluster: EmbeddedCluster, tls: TLSConfig | bool | None, timing: Timing) -> ClientConfig:
    return ClientConfig(namesrv_addr=cluster.namesrv_addr, tls=tls, timing=timing)


async def _send(cluster: EmbeddedCluster, topic: str, tls: Any, timing: Timing, n: int = 1) -> None:
    async with Producer("tls_producer", client_config=_cc(cluster, tls, timing)) as p:
        for i in range(n):
            await p.send(Message(topic, f"m{i}".encode(), keys=f"k{i}"))


def _is_tls(server: Server) -> list[bool]:
    """Whether each connection the server holds is TLS."""
    return [c.transport is not None and c.transport.get_extra_info("ssl_object") is not None
            for c in server.connections]  # fmt: skip


@asynccontextmanager
async def enforcing(certs: Certs, timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(queues=2, timing=timing, tls=certs.server_tls("enforcing")) as c:
        yield c


# -- verified connections ---------------------------------------------------------------------------

Run = Callable[[Coroutine[Any, Any, None]], None]


def test_verified_tls_produce_push_and_lite_pull(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    tls = certs.client_tls()

    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            await _send(cluster, topic, tls, timing, n=20)
            col = Collector()
            async with PushConsumer(
                group, client_config=_cc(cluster, tls, timing), handler=col, subscriptions={topic: "*"},
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            ):  # fmt: skip
                await col.wait_unique(20)
                kinds = _is_tls(cluster.brokers[0].server)
                assert kinds and all(kinds)
            async with LitePullConsumer(
                group + "_lite", client_config=_cc(cluster, tls, timing),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            ) as lite:  # fmt: skip
                await lite.subscribe(topic)
                got: list[Any] = []
                with anyio.fail_after(15):
                    while len(got) < 20:
                        got.extend(await lite.poll(1.0))
            assert sorted(m.keys for m in got) == sorted(f"k{i}" for i in range(20))

    run(main())


def test_send_back_and_redelivery_over_tls(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    """A failed message goes back to the broker (the send-back path) and is redelivered, over TLS."""
    topic, group = names
    tls = certs.client_tls()

    async def main() -> None:
        attempts: dict[str, int] = {}
        done = anyio.Event()

        async def handler(msgs: list[Any], ctx: Any) -> ConsumeResult:
            for m in msgs:
                attempts[m.keys] = attempts.get(m.keys, 0) + 1
            if sum(v >= 2 for v in attempts.values()) == 3:
                done.set()
            first = msgs[0].reconsume_times == 0
            return ConsumeResult.RECONSUME_LATER if first else ConsumeResult.SUCCESS

        async with enforcing(certs, timing) as cluster:
            await _send(cluster, topic, tls, timing, n=3)
            async with PushConsumer(
                group, client_config=_cc(cluster, tls, timing), handler=handler, subscriptions={topic: "*"},
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            ):  # fmt: skip
                with anyio.fail_after(20):
                    await done.wait()

    run(main())


def test_hostname_is_checked(run: Run, certs: Certs, timing: Timing) -> None:
    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            addr = cluster.namesrv_addr
            ctx = client_ssl_context(certs.client_tls())
            conn = await Connection.connect(addr, ssl_context=ctx, server_hostname="localhost")
            await conn.aclose()
            with pytest.raises(TLSError, match=r"Hostname mismatch.*server_hostname"):
                await Connection.connect(addr, ssl_context=ctx, server_hostname="other.example")
            relaxed = client_ssl_context(certs.client_tls(check_hostname=False))
            conn = await Connection.connect(addr, ssl_context=relaxed, server_hostname="other.example")
            await conn.aclose()

    run(main())


# -- refusals ----------------------------------------------------------------------------------------


def test_wrong_ca_is_refused_with_a_clear_error(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            ctx = client_ssl_context(TLSConfig(ca_file=certs.wrong_ca))
            with pytest.raises(TLSError, match=r"certificate verification failed.*ca_file") as info:
                await Connection.connect(cluster.namesrv_addr, ssl_context=ctx)
            assert isinstance(info.value, ConnectError) and not info.value.retriable
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            # through a producer: the TLSError itself, at once (no hang), not a retriable MQClientError
            with pytest.raises(TLSError, match="certificate verification failed") as failed:
                with anyio.fail_after(10):
                    await _send(cluster, names[0], TLSConfig(ca_file=certs.wrong_ca), timing)
            assert not failed.value.retriable

    run(main())


def test_wrong_ca_is_not_retried_in_a_tight_loop(run: Run, certs: Certs, timing: Timing) -> None:
    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            addr = cluster.namesrv_addr
            ctx = client_ssl_context(TLSConfig(ca_file=certs.wrong_ca))
            async with ConnectionPool(ssl_context=ctx, initial_backoff=0.01, max_backoff=5.0) as pool:
                with pytest.raises(TLSError):
                    await pool.get(addr)
                assert pool.backoff_remaining(addr) > 4.0  # straight to the longest back-off
                with pytest.raises(TLSError, match="not dialing"):  # no new handshake meanwhile
                    await pool.get(addr)

    run(main())


def test_verify_false_trusts_any_server(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            await _send(cluster, names[0], TLSConfig(verify=False), timing)

    run(main())


def test_enforcing_refuses_plain_clients(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            with pytest.raises(MQClientError, match="requires TLS"):
                with anyio.fail_after(10):
                    await _send(cluster, names[0], False, timing)
            assert cluster.namesrv is not None and all(_is_tls(cluster.namesrv.server))  # only the broker's

    run(main())


def test_disabled_server_refuses_tls_clients(run: Run, certs: Certs, timing: Timing) -> None:
    async def main() -> None:
        async with EmbeddedCluster(timing=timing, tls=ServerTLS(mode="disabled")) as cluster:
            ctx = client_ssl_context(certs.client_tls())
            with pytest.raises(TLSError, match=r"server closed the connection.*disabled"):
                await Connection.connect(cluster.namesrv_addr, ssl_context=ctx)
            await _send(cluster, "DisabledTopic", False, timing)  # plain still works

    run(main())


# -- permissive: TLS and plain on one port ----------------------------------------------------------


def test_permissive_serves_plain_and_tls_clients_at_once(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names

    async def main() -> None:
        async with EmbeddedCluster(queues=2, timing=timing, tls=certs.server_tls("permissive")) as cluster:
            col = Collector()
            async with PushConsumer(
                group, client_config=_cc(cluster, certs.client_tls(), timing), handler=col,
                subscriptions={topic: "*"}, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            ):  # fmt: skip
                await _send(cluster, topic, False, timing, n=10)  # a plain producer meanwhile
                await col.wait_unique(10)
                async with Producer("plain_live", client_config=_cc(cluster, False, timing)) as p:
                    await p.send(Message(topic, b"live", keys="k-live"))
                    kinds = _is_tls(cluster.brokers[0].server)
                    assert True in kinds and False in kinds  # both kinds at once on one port
                await col.wait_unique(11)

    run(main())


# -- mutual TLS -------------------------------------------------------------------------------------


def test_mutual_tls(run: Run, certs: Certs, names: tuple[str, str], timing: Timing) -> None:
    topic = names[0]

    async def main() -> None:
        tls = certs.server_tls("enforcing", client_auth="require")
        async with EmbeddedCluster(timing=timing, tls=tls) as cluster:
            plain_key = certs.client_tls(cert_file=certs.client_cert, key_file=certs.client_key)
            await _send(cluster, topic, plain_key, timing)
            encrypted = certs.client_tls(
                cert_file=certs.client_cert, key_file=certs.client_key_encrypted, key_password=KEY_PASSWORD
            )
            await _send(cluster, topic, encrypted, timing)
            for refused in (certs.client_tls(), certs.client_tls(cert_file=certs.wrong_client)):
                with pytest.raises(TLSError, match="TLS") as info:
                    with anyio.fail_after(10):
                        await _send(cluster, topic, refused, timing)
                assert "certificate" in str(info.value).lower()

    run(main())


def test_refused_client_certificate_is_a_tls_error(run: Run, certs: Certs, timing: Timing) -> None:
    """TLS 1.3: our handshake completes before the server checks our certificate, so its refusal is a
    close right after the handshake; the first request fails with TLSError (not ConnectionClosed)
    naming the likely cause, on both loops."""

    async def main() -> None:
        tls = certs.server_tls("enforcing", client_auth="require")
        async with EmbeddedCluster(timing=timing, tls=tls) as cluster:
            route = RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"})
            cases = (
                (certs.client_tls(cert_file=certs.wrong_client), True, "refused our client certificate?"),
                (certs.client_tls(), False, "require a client certificate?"),
            )
            for cfg, has_cert, why in cases:
                conn = await Connection.connect(
                    cluster.namesrv_addr, ssl_context=client_ssl_context(cfg), client_cert=has_cert
                )
                with pytest.raises(TLSError, match=r"right after the TLS handshake") as info:
                    with anyio.fail_after(10):
                        await conn.request(route, 5.0)
                assert why in str(info.value)
                assert not info.value.retriable
                with pytest.raises(TLSError):  # later requests on it say the same
                    await conn.request(route, 5.0)
                await conn.aclose()
            good = certs.client_tls(cert_file=certs.client_cert, key_file=certs.client_key)
            conn = await Connection.connect(
                cluster.namesrv_addr, ssl_context=client_ssl_context(good), client_cert=True
            )
            await conn.request(route, 5.0)  # answered (whatever the code): accepted
            await conn.aclose()
            # through a client: the route lookup's failure is the TLSError
            with pytest.raises(TLSError, match="refused our client certificate"):
                with anyio.fail_after(10):
                    await _send(cluster, "T", certs.client_tls(cert_file=certs.wrong_client), timing)

    run(main())


def test_a_tls_handshake_failure_is_a_tls_error_from_start_and_send(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    """A wrong CA, a certificate that does not name the server, a missing client certificate: the
    same settings get the same refusal, so start() and send() raise TLSError (not retriable), never
    MQClientError(retriable=True) after the retries."""

    async def main() -> None:
        tls = certs.server_tls("enforcing", client_auth="require")
        mutual = {"cert_file": certs.client_cert, "key_file": certs.client_key}
        async with EmbeddedCluster(queues=2, timing=timing, tls=tls) as cluster:
            for cfg in (
                TLSConfig(ca_file=certs.wrong_ca, **mutual),
                certs.client_tls(server_hostname="other.example", **mutual),
                certs.client_tls(),  # no client certificate
            ):
                p = Producer("tls_start_producer", client_config=_cc(cluster, cfg, timing))
                with anyio.fail_after(10), pytest.raises(TLSError) as info:
                    await p.start()
                assert not info.value.retriable
                await p.stop()
            # met by send(): the name server was down at start (not a TLS failure: the start goes on,
            # as Java's), and refuses the handshake once it is back
            wrong = TLSConfig(ca_file=certs.wrong_ca, **mutual)
            await cluster.stop_namesrv()
            async with Producer("tls_send_producer", client_config=_cc(cluster, wrong, timing)) as p:
                await cluster.start_namesrv()
                # the pool's back-off after the refused connection at start (not a TLS one: short)
                await anyio.sleep(p.client.api.pool.backoff_remaining(cluster.namesrv_addr))
                with anyio.fail_after(10), pytest.raises(TLSError) as info:
                    await p.send(Message(names[0], b"refused"))
                assert not info.value.retriable

    run(main())


# -- environment and CLI ----------------------------------------------------------------------------


def test_environment_switch(
    run: Run, certs: Certs, names: tuple[str, str], timing: Timing, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RMQ_TLS", "1")
    monkeypatch.setenv("RMQ_TLS_CA_FILE", certs.ca)

    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            await _send(cluster, names[0], None, timing)  # tls=None: from the environment
            with pytest.raises(MQClientError, match="requires TLS"):
                await _send(cluster, names[0], False, timing)  # tls=False: plain whatever the env

    run(main())


def test_cli_produce_and_consume_over_tls(certs: Certs) -> None:
    """``rmq-async embedded --tls-mode enforcing`` in a child, then ``produce`` / ``consume --tls``."""
    env = child_env()
    cli = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop"]
    tls_args = ["--tls-mode", "enforcing", "--tls-cert", certs.server]
    emb = subprocess.Popen(
        [*cli, "embedded", "--port", "0", "--timing", "fast", *tls_args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    try:
        assert emb.stdout is not None
        namesrv = emb.stdout.readline().strip().partition("=")[2]
        base = [*cli, "produce", "--namesrv", namesrv, "--topic", "CliTlsTopic"]

        def call(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*args], env=env, capture_output=True, text=True, timeout=40)

        out = call(*base, "--count", "5", "--tls", "--tls-ca", certs.ca)
        assert out.returncode == 0, out.stderr
        consume = [*cli, "consume", "--namesrv", namesrv, "--topic", "CliTlsTopic", "--group", "cli_tls"]
        out = call(*consume, "--count", "5", "--tls", "--tls-ca", certs.ca)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1])["consumed"] >= 5, out.stdout
        out = call(*base, "--count", "1")  # plain against enforcing
        assert out.returncode != 0 and "TLS" in out.stderr, out.stderr
        out = call(*base, "--count", "1", "--tls-insecure")
        assert out.returncode == 0, out.stderr
    finally:
        emb.terminate()
        emb.communicate(timeout=10)  # waits, and closes its pipes


def _proc_files(pid: int) -> tuple[bytes, bytes]:
    """The command line and the environment of process ``pid``, as ``ps`` and root see them."""
    return Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes()


def test_child_process_cluster_gets_the_key_password(
    certs: Certs, names: tuple[str, str], timing: Timing, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``EmbeddedCluster(process=True)`` with an encrypted server key: the password reaches the child in
    its environment (``RMQ_EMBEDDED_TLS_KEY_PASSWORD``), never on its command line or in a log line."""
    pem = Path(certs.server).read_text()  # key + chain in one file: split, with the key encrypted
    chain = "".join(
        m.group(0)
        for m in re.finditer(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n?", pem, re.S)
    )
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    password = "srv-" + KEY_PASSWORD
    (tmp_path / "srv.pem").write_text(chain)
    (tmp_path / "srv.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        )
    )

    def server_tls(pw: str) -> ServerTLS:
        return ServerTLS(
            mode="enforcing",
            cert_file=str(tmp_path / "srv.pem"),
            key_file=str(tmp_path / "srv.key"),
            key_password=pw,
        )

    async def main() -> None:
        caplog.set_level(logging.DEBUG)
        async with EmbeddedCluster(timing=timing, tls=server_tls(password), process=True) as cluster:
            assert cluster._proc is not None
            cmdline, environ = _proc_files(cluster._proc.pid)
            assert b"--tls-key" in cmdline and password.encode() not in cmdline
            assert f"RMQ_EMBEDDED_TLS_KEY_PASSWORD={password}".encode() in environ.split(b"\0")
            await _send(cluster, names[0], certs.client_tls(), timing)
        # a wrong password: the child cannot load its key and does not start
        with pytest.raises(ClientError, match="did not start") as info:
            async with EmbeddedCluster(timing=timing, tls=server_tls("wrong-" + password), process=True):
                pass
        assert password not in str(info.value)
        assert not [r for r in caplog.records if password in r.getMessage()]

    asyncio.run(main())


def test_child_process_cluster_with_tls(certs: Certs, names: tuple[str, str], timing: Timing) -> None:
    """``EmbeddedCluster(process=True, tls=...)`` passes the TLS mode and files to the child."""

    async def main() -> None:
        tls = certs.server_tls("enforcing")
        async with EmbeddedCluster(timing=timing, tls=tls, process=True) as cluster:
            await _send(cluster, names[0], certs.client_tls(), timing)
            with pytest.raises(MQClientError, match="requires TLS"):
                await _send(cluster, names[0], False, timing)

    asyncio.run(main())


# -- the Spark source's executor path (blocking sockets, not the pool) -------------------------------


def test_spark_executor_pulls_over_verified_tls(run: Run, certs: Certs, timing: Timing) -> None:
    """The executor's pulls run on plain blocking sockets of their own (``spark/pipe.py``): on an
    enforcing cluster they read every message, so they are TLS too; a wrong CA is refused."""
    pytest.importorskip("pyarrow")
    from support.spark_read import pull_chunks

    from rmq_async.spark.bridge import Session
    from rmq_async.spark.columns import build_batch
    from rmq_async.spark.offsets import Range
    from rmq_async.spark.options import parse_options

    async def main() -> None:
        async with enforcing(certs, timing) as cluster:
            await cluster.create_topic("TlsSpark", 1)
            await _send(cluster, "TlsSpark", certs.client_tls(), timing, n=40)
            broker = cluster.brokers[0].name
            opts = parse_options(
                {"namesrv": cluster.namesrv_addr, "topic": "TlsSpark", "tls": "true", "tlsCaFile": certs.ca},
                streaming=False,
            )
            async with Session(opts) as s:
                chunks = await pull_chunks(s, opts, Range("TlsSpark", broker, 0, 0, 40))
                got = build_batch(chunks, "TlsSpark", broker)
                assert got.column("keys").to_pylist() == [f"k{i}" for i in range(40)]
                addr = await s._addr(("TlsSpark", broker, 0))
                s.client.tls = certs.client_tls(ca_file=certs.wrong_ca)  # the sockets' settings
                s._ssl = None
                with pytest.raises(TLSError, match="verification failed"):
                    await anyio.to_thread.run_sync(s.open_socket, addr)

    run(main())
