"""A small scriptable remoting server for the transport tests and benchmark.

Strategy: an ``asyncio.Protocol`` per accepted connection decodes frames with the same
:class:`FrameDecoder` as the client. Each request says what the server should do with it in its
``act`` ext field (default ``echo``), so a test scripts the server from the client side:

* ``echo``: answer code 0 (or ``status``), remark ``ok``, the same ext fields and body;
* ``hold``: keep it unanswered in :attr:`FrameServer.held` (the test answers it later, in any
  order, with :meth:`FrameServer.answer`, or never);
* ``close``: close the connection; ``garbage`` / ``oversize``: write a frame with a bad length.

:attr:`FrameServer.mute` holds every request (a half-open peer). The server can also send requests
to the client (:meth:`ServerConn.request`, :meth:`ServerConn.oneway`). Tests await conditions with
:meth:`FrameServer.wait_for`, never sleep.

Run as a script (``python tests/support/transport_server.py [--uvloop]``) it echoes on an ephemeral port,
prints ``LISTENING <port>`` and serves until its stdin closes: the benchmark's child process.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

if __package__ in (None, ""):  # run as a script: make rmq_async importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rmq_async.errors import ProtocolError
from rmq_async.protocol.command import FrameDecoder, RemotingCommand

__all__ = ["FrameServer", "ServerConn"]

GARBAGE = struct.pack(">i", 2) + b"\x00\x00"  # frame length 2 < 4
OVERSIZE = struct.pack(">iI", 0x7FFFFFF0, 20)  # longer than any max_frame


class ServerConn(asyncio.Protocol):
    """One accepted connection."""

    def __init__(self, server: FrameServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(server.max_frame)
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.next_opaque = 1_000_000  # the broker's own counter, far from the client's
        self.lost = asyncio.Event()

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop: not a subclass
        self.server.conns.append(self)
        self.server.accepted += 1
        self.server.notify()

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except ProtocolError:
            self.abort()
            return
        server = self.server
        for cmd in commands:
            if cmd.is_response:
                server.responses.append(cmd)
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                continue
            if server.fast_echo:  # benchmark: answer at once, record nothing
                if not cmd.is_oneway:
                    self.send(cmd.make_response(0, "ok", cmd.ext_fields, cmd.body))
                continue
            server.received.append(cmd)
            self.dispatch(cmd)
        server.notify()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("client connection lost"))
        self.pending.clear()
        self.server.notify()

    # -- behaviour ------------------------------------------------------------------------------

    def dispatch(self, cmd: RemotingCommand) -> None:
        act = cmd.ext_fields.get("act", "echo")
        if self.server.mute or act == "hold":
            self.server.held.append((self, cmd))
        elif act == "close":
            self.close()
        elif act == "garbage":
            self.send_raw(GARBAGE)
        elif act == "oversize":
            self.send_raw(OVERSIZE)
        elif not cmd.is_oneway:
            self.send(echo_response(cmd))

    def send(self, cmd: RemotingCommand) -> None:
        self.send_raw(cmd.encode())

    def send_raw(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def request(self, cmd: RemotingCommand, timeout: float = 2.0) -> RemotingCommand:
        """Send a request to the client and wait for its answer."""
        cmd.opaque = self.next_opaque
        self.next_opaque += 1
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        self.send(cmd)
        return await asyncio.wait_for(fut, timeout)

    def oneway(self, cmd: RemotingCommand) -> int:
        """Send a oneway request to the client; returns its opaque."""
        cmd.opaque = self.next_opaque
        self.next_opaque += 1
        cmd.flag |= 0x2
        self.send(cmd)
        return cmd.opaque

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def echo_response(cmd: RemotingCommand, code: int | None = None) -> RemotingCommand:
    """Code 0 (or the request's ``status`` field), remark ``ok``, same ext fields and body."""
    if code is None:
        code = int(cmd.ext_fields.get("status", "0"))
    return cmd.make_response(code, "ok", dict(cmd.ext_fields), cmd.body)


class FrameServer:
    """A listening socket on 127.0.0.1 plus the record of what it saw."""

    def __init__(self, *, max_frame: int = 16 << 20, fast_echo: bool = False) -> None:
        self.max_frame = max_frame
        self.fast_echo = fast_echo  # answer every request at once (benchmark)
        self.mute = False
        self.conns: list[ServerConn] = []
        self.accepted = 0
        self.received: list[RemotingCommand] = []
        self.responses: list[RemotingCommand] = []
        self.held: list[tuple[ServerConn, RemotingCommand]] = []
        self._server: asyncio.Server | None = None
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self.port = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> FrameServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ServerConn(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def aclose(self) -> None:
        """Stop listening and drop every connection."""
        await self.stop_listening()
        for conn in self.conns:
            conn.abort()
        for conn in self.conns:
            await conn.lost.wait()

    async def __aenter__(self) -> FrameServer:
        return self if self._server is not None else await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- waiting on conditions ------------------------------------------------------------------

    def notify(self) -> None:
        keep = []
        for pred, fut in self._waiters:
            if fut.done():
                continue
            if pred():
                fut.set_result(None)
            else:
                keep.append((pred, fut))
        self._waiters = keep

    async def wait_for(self, pred: Callable[[], bool], timeout: float = 2.0) -> None:
        """Wait until ``pred()`` holds (re-checked on every server event)."""
        if pred():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((pred, fut))
        await asyncio.wait_for(fut, timeout)

    # -- answering held requests ----------------------------------------------------------------

    def answer(self, index: int = 0, code: int | None = None) -> RemotingCommand:
        """Answer (echo) the held request at ``index`` and remove it from :attr:`held`."""
        conn, cmd = self.held.pop(index)
        conn.send(echo_response(cmd, code))
        return cmd


async def _main(argv: list[str]) -> None:
    server = await FrameServer(fast_echo=True).start()
    print(f"LISTENING {server.port}", flush=True)
    loop = asyncio.get_running_loop()
    # Serve until the parent closes our stdin.
    await loop.run_in_executor(None, sys.stdin.read)
    await server.aclose()


if __name__ == "__main__":
    if "--uvloop" in sys.argv:
        import uvloop

        uvloop.run(_main(sys.argv))
    else:
        asyncio.run(_main(sys.argv))
