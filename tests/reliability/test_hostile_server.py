"""A hostile server: garbage, oversize frames, absurd header lengths, answers to unknown opaques, half
frames then close, a reply that never ends.

Strategy: one asyncio server on 127.0.0.1 whose behaviour per accepted connection is taken from a
script (a list of modes, the last one repeating). The client side (Connection, ConnectionPool, and a
Producer / PushConsumer using it as name server) must raise one of our typed errors within a bound,
reconnect when the server turns sane, and keep its memory bounded (tracemalloc peak).
"""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from collections.abc import AsyncIterator

import anyio
import pytest

from rmq_async import (
    ClientConfig,
    ConsumeContext,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    RocketMQError,
    Timing,
)
from rmq_async.errors import ConnectionClosed, ProtocolError, RequestTimeout
from rmq_async.protocol.command import FrameDecoder, RemotingCommand
from rmq_async.transport.connection import Connection
from rmq_async.transport.pool import ConnectionPool


def frame(header: bytes, body: bytes = b"", header_len: int | None = None, total: int | None = None) -> bytes:
    hl = len(header) if header_len is None else header_len
    tot = 4 + len(header) + len(body) if total is None else total
    return struct.pack(">iI", tot, hl) + header + body


GOOD_HEADER = (
    b'{"code":0,"flag":1,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":409}'
)

MODES = {
    "garbage": lambda op: b"\xde\xad\xbe\xef" * 64,
    "oversize": lambda op: struct.pack(">iI", 0x7FFFFFF0, 20),
    "negative": lambda op: struct.pack(">iI", -5, 0),
    "header_len_absurd": lambda op: frame(b"{}", header_len=0xFFFFFF),
    "header_not_json": lambda op: frame(b"{not json at all"),
    "unknown_opaque": lambda op: frame(GOOD_HEADER % (op + 12345)),
    "half_then_close": lambda op: frame(GOOD_HEADER % op)[:20],
}


class Hostile:
    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.accepted = 0
        self.addr = ""
        self._server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Hostile:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self.writers:  # Server.close_clients is 3.12+
            w.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        mode = self.script[min(self.accepted, len(self.script) - 1)]
        self.accepted += 1
        self.writers.append(w)
        dec = FrameDecoder()
        try:
            while data := await r.read(65536):
                for cmd in dec.feed(data):
                    if cmd.is_oneway:
                        continue
                    if mode == "echo":
                        w.write(cmd.make_response(0, "ok").encode())
                    elif mode == "silent":
                        pass
                    elif mode == "endless":  # a frame that claims 8 MiB and drips forever
                        w.write(struct.pack(">iI", 8 << 20, 16) + b"x" * 65536)
                    else:
                        w.write(MODES[mode](cmd.opaque))
                        if mode == "half_then_close":
                            await w.drain()
                            w.close()
                            return
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()


@pytest.fixture
async def mem() -> AsyncIterator[dict[str, int]]:
    tracemalloc.start()
    out: dict[str, int] = {}
    yield out
    out["peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()


def req() -> RemotingCommand:
    return RemotingCommand.request(105, {"topic": "T"})


@pytest.mark.parametrize("mode", [*MODES, "endless"])
async def test_connection_raises_typed_error_and_stays_bounded(mode: str) -> None:
    tracemalloc.start()
    try:
        async with Hostile([mode]) as srv:
            conn = await Connection.connect(srv.addr, max_frame=4 << 20)
            try:
                with anyio.fail_after(5):  # never hangs
                    with pytest.raises((ProtocolError, ConnectionClosed, RequestTimeout)):
                        await conn.request(req(), 1.0)
                        if mode == "unknown_opaque":  # the stray answer is dropped; ours never comes
                            raise AssertionError("unreachable")
            finally:
                await conn.aclose()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"{mode}: peak {peak} bytes"  # a 2 GiB or 8 MiB claim allocates nothing


async def test_pool_reconnects_after_hostile_connections() -> None:
    srv = Hostile(["garbage", "header_len_absurd", "half_then_close", "echo"])
    async with srv, ConnectionPool(initial_backoff=0.01, max_backoff=0.05) as pool:
        errors = []
        for _ in range(3):
            with anyio.fail_after(5):
                try:
                    await pool.request(srv.addr, req(), 1.0)
                except RocketMQError as exc:
                    errors.append(type(exc).__name__)
        with anyio.fail_after(5):
            while True:  # back-off may refuse the first try: each attempt is bounded
                try:
                    resp = await pool.request(srv.addr, req(), 1.0)
                    break
                except RocketMQError:
                    await anyio.sleep(0.02)
        assert resp.code == 0
    assert len(errors) == 3 and srv.accepted == 4


@pytest.mark.parametrize("mode", ["garbage", "oversize", "half_then_close", "silent", "unknown_opaque"])
async def test_producer_against_hostile_name_server(mode: str) -> None:
    async with Hostile([mode]) as srv:
        cc = ClientConfig(namesrv_addr=srv.addr, timing=Timing.fast(request_timeout=0.5))
        with anyio.fail_after(15):
            async with Producer("hostile_p", client_config=cc) as p:
                with pytest.raises(RocketMQError):
                    await p.send(Message("T", b"x"))


@pytest.mark.parametrize("mode", ["garbage", "header_len_absurd", "silent"])
async def test_push_consumer_against_hostile_name_server(mode: str) -> None:
    async def nothing(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        return None

    async with Hostile([mode]) as srv:
        c = PushConsumer(
            "hostile_g",
            namesrv_addr=srv.addr,
            handler=nothing,  # a sync handler is refused when the consumer is made (ConfigError)
            subscriptions={"T": "*"},
            timing=Timing.fast(request_timeout=0.5),
        )
        with anyio.fail_after(15):  # starts (routes are looked up in the background) and stops in time
            try:
                async with c:
                    with anyio.move_on_after(1.0):
                        await c.wait_rebalanced()
            except RocketMQError:
                pass  # a typed refusal at start is acceptable too
        assert not c.running
