"""The accept loop and per-connection dispatch shared by the embedded name server and brokers.

Strategy: an ``asyncio.Protocol`` per connection. ``data_received`` feeds the sans-IO
``FrameDecoder`` and dispatches every complete request synchronously to the handler (no task per
frame); the handler returns the response, or None when it answers later (a held pull) or never (a
oneway). Answers are written with ``writelines`` so a pull body made of commit-log slices goes out
without being joined. A malformed or oversize frame closes only that connection. Requests the
server sends to a client (307, 221, 309) use the server's own opaque counter and are matched to the
client's responses here. Fault rules (:mod:`.faults`) are applied before dispatch. With TLS in
``permissive`` or ``enforcing`` mode, :class:`~.tls.TLSListener` accepts instead of ``create_server``
and hands over each connection, TLS or plain by its first byte, to the same protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Sequence
from typing import Protocol, cast

from ..errors import ConnectionClosed, ProtocolError, RequestTimeout
from ..protocol.codes import ResponseCode
from ..protocol.command import DEFAULT_MAX_FRAME, FLAG_ONEWAY, FrameDecoder, RemotingCommand, frame_prefix
from .faults import Faults
from .tls import ServerTLS, TLSListener

__all__ = ["Connection", "HeaderError", "Reply", "RequestHandler", "Server", "error_response"]

log = logging.getLogger("rmq_async.embedded")


class HeaderError(Exception):
    """A request header field is missing or malformed: answered with code 1 and this remark."""


#: what a handler returns: a response, a response whose body continues with ``parts`` (commit-log
#: slices, written without joining them), or None (answered later, or a oneway)
Reply = RemotingCommand | tuple[RemotingCommand, Sequence[bytes | memoryview]] | None


class RequestHandler(Protocol):
    def handle(self, conn: Connection, cmd: RemotingCommand) -> Reply: ...

    def connection_closed(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One accepted TCP connection."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(server.max_frame)
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.addr = "?"
        self.ip = "0.0.0.0"
        self.port = 0
        self.closed = False
        self.client_id: str | None = None
        self._out: list[bytes | memoryview] | None = None  # answers batched while a chunk is processed

    def __repr__(self) -> str:
        return f"<Connection {self.addr} to {self.server.name}>"

    # -- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check here
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.ip, self.port = str(peer[0]), int(peer[1])
            self.addr = f"{self.ip}:{self.port}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            cmds = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("%s: closing %s after a bad frame: %s", self.server.name, self.addr, exc)
            self.close()
            return
        # Answers produced while this chunk is processed go out in one writelines (one syscall for a
        # pipelining client instead of one per frame).
        out: list[bytes | memoryview] = []
        self._out = out
        try:
            for cmd in cmds:
                if self.closed:
                    return
                if cmd.is_response:
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self.server.dispatch(self, cmd)
        finally:
            self._out = None
            if out and self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed("client connection closed", self.addr))
        self.pending.clear()
        try:
            self.server.handler.connection_closed(self)
        except Exception:  # pragma: no cover - a handler bug must not break the loop
            log.exception("%s: error in connection_closed", self.server.name)

    # -- writing ------------------------------------------------------------------------------

    def send(self, cmd: RemotingCommand, parts: Sequence[bytes | memoryview] = ()) -> None:
        """Write one command; ``parts`` (if any) follow ``cmd.body`` as more body bytes."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        header = cmd.encode_header()
        body_len = len(cmd.body) + sum(len(p) for p in parts)
        prefix = frame_prefix(len(header), body_len, cmd.serialize_type)
        out = self._out
        if out is not None:
            out.append(prefix + header + cmd.body)
            out.extend(parts)
        elif parts:
            self.transport.writelines([prefix + header + cmd.body, *parts])
        else:
            self.transport.write(prefix + header + cmd.body)

    def oneway(self, cmd: RemotingCommand) -> None:
        """Send a server-initiated oneway request."""
        cmd.flag |= FLAG_ONEWAY
        cmd.opaque = self.server.next_opaque()
        self.send(cmd)

    async def invoke(self, cmd: RemotingCommand, within: float) -> RemotingCommand:
        """Send a server-initiated request and wait for the client's answer."""
        if self.closed:
            raise ConnectionClosed("client connection closed", self.addr)
        cmd.opaque = opaque = self.server.next_opaque()
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        try:
            self.send(cmd)
            try:
                return await asyncio.wait_for(fut, within)
            except TimeoutError:
                raise RequestTimeout(cmd.code, self.addr, within) from None
        finally:
            self.pending.pop(opaque, None)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Server:
    """Accepts connections on 127.0.0.1 and dispatches their requests to ``handler``."""

    def __init__(
        self,
        handler: RequestHandler,
        name: str,
        *,
        version: int,
        max_frame: int = DEFAULT_MAX_FRAME,
        tls: ServerTLS | None = None,
    ) -> None:
        self.handler = handler
        #: TLS mode and certificates; None or mode ``disabled``: plain only
        self.tls = tls
        self._listener: TLSListener | None = None
        self.name = name
        self.version = version
        self.max_frame = max_frame
        self.faults = Faults()
        self.connections: set[Connection] = set()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._opaques = itertools.count(1)
        self._delayed: set[asyncio.TimerHandle] = set()

    def next_opaque(self) -> int:
        return next(self._opaques) & 0x7FFFFFFF

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> int:
        if self.tls is not None and self.tls.active:
            self._listener = TLSListener(lambda: Connection(self), self.tls, self.name)
            self.port = await self._listener.start(host, port)
            return self.port
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True, backlog=1024
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    @property
    def serving(self) -> bool:
        return self._server is not None or self._listener is not None

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        srv, self._server = self._server, None
        if srv is not None:
            srv.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        for h in self._delayed:
            h.cancel()
        self._delayed.clear()
        self.cut_connections()
        if srv is not None:
            await srv.wait_closed()
        await asyncio.sleep(0)  # let connection_lost callbacks run

    def cut_connections(self) -> None:
        """Close every accepted connection (the server keeps listening)."""
        for conn in list(self.connections):
            conn.close()

    # -- dispatch -----------------------------------------------------------------------------

    def dispatch(self, conn: Connection, cmd: RemotingCommand) -> None:
        delay = 0.0
        if self.faults:
            self.faults.saw(cmd)
            rule = self.faults.take(cmd.code)
            if rule is not None:
                if rule.kind == "drop":
                    return
                if rule.kind == "refuse":
                    if not cmd.is_oneway:
                        conn.send(error_response(cmd, rule.response_code, rule.remark, version=self.version))
                    return
                delay = rule.seconds
        resp: Reply
        try:
            resp = self.handler.handle(conn, cmd)
        except HeaderError as exc:
            resp = error_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc), version=self.version)
        except Exception as exc:
            log.exception("%s: error handling request code %s from %s", self.name, cmd.code, conn.addr)
            resp = error_response(
                cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}", version=self.version
            )
        if resp is None or cmd.is_oneway:
            return
        answer, parts = resp if isinstance(resp, tuple) else (resp, ())
        if delay > 0:
            loop = asyncio.get_running_loop()
            handle: asyncio.TimerHandle | None = None

            def fire() -> None:
                if handle is not None:
                    self._delayed.discard(handle)
                conn.send(answer, parts)

            handle = loop.call_later(delay, fire)
            self._delayed.add(handle)
            return
        conn.send(answer, parts)


def error_response(cmd: RemotingCommand, code: int, remark: str | None, *, version: int) -> RemotingCommand:
    """A response without header fields (``extFields`` absent), as ``createResponseCommand(code, remark)``."""
    return cmd.make_response(int(code), remark, None, version=version)
