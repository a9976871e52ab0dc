"""One TCP connection to a broker or name server.

Strategy (asyncpg's protocol shell over our sans-IO codec): :class:`Connection` *is* the
``asyncio.BufferedProtocol``: the transport reads straight into :class:`FrameDecoder`'s reused
buffer, and ``buffer_updated`` settles the waiting request futures right there, in the callback: no
reader task, no task per frame, no task per request, no allocation per read. A request registers a
future under its opaque (responses may come out of order), writes its frame with ``transport.write``
(awaiting only while the transport has paused writing) and arms one ``call_later`` timer that fails
the future with :class:`RequestTimeout`. ``max_timeouts`` consecutive timeouts mean a half-open peer
and close the connection; any inbound frame resets the count. Closing, for whatever reason, is one
synchronous step (:meth:`Connection._shutdown`): every pending future fails at once with
:class:`ConnectionClosed` chained to the original error, or with :class:`TLSError` when a TLS peer
closed before answering our first request (see :meth:`Connection.connection_lost`).

Requests the server sends us (40, 220, 221, 307, 309) go to the ``handler``, run through ``spawn``
(the owner's task group) or, by default, as a task the connection tracks and cancels at close.
OSError and timeouts are mapped to our errors here, ``from exc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

import anyio

from ..errors import ConnectError, ConnectionClosed, ProtocolError, RemotingError, RequestTimeout, TLSError
from ..protocol.codes import ResponseCode
from ..protocol.command import DEFAULT_MAX_FRAME, FLAG_ONEWAY, FLAG_RESPONSE, FrameDecoder, RemotingCommand
from .tls import handshake_error

__all__ = [
    "CLOSE_TIMEOUT",
    "Connection",
    "PreparedRequest",
    "ServerRequestHandler",
    "Signer",
    "Spawn",
    "format_addr",
    "parse_addr",
    "reads_stamped",
    "run_awaitable",
    "stamp_reads",
]

_DISCARD = bytearray(1 << 16)  # read into, and ignored, once a connection is closing
log = logging.getLogger(__name__)

#: ``handler(conn, request)``: the answer to a server-initiated request, or None for no answer.
ServerRequestHandler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]
#: Runs a zero-argument coroutine function in the owner's task group (``tg.start_soon``).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]
#: Completes an outgoing request in place right before it is encoded (ACL signing); never responses.
Signer = Callable[[RemotingCommand], None]


class PreparedRequest(Protocol):
    """A request that writes its own frame once given its opaque (a queue's pull from its template,
    :class:`~rmq_async.protocol.pull.PreparedPull`), byte for byte what :meth:`command` encodes to
    with that opaque; :meth:`Connection.request` signs :meth:`command` instead where it signs."""

    @property
    def code(self) -> int: ...

    def frame(self, opaque: int) -> bytes: ...

    def command(self) -> RemotingCommand: ...


#: Bound (seconds) on a graceful close: flushing our buffer and waiting for handler tasks.
CLOSE_TIMEOUT = 1.0
_OPAQUE_MASK = 0x7FFFFFFF
_LANG = "PYTHON"  # language of the answers the transport writes itself
_stamp_users = 0  # how many stage recorders want reads stamped (see stamp_reads)
_clock = time.perf_counter_ns


def stamp_reads(on: bool) -> None:
    """Ask (``on``) or stop asking for every received frame's read time in
    ``RemotingCommand.received_ns`` (``perf_counter_ns``), for a consumer's stage recorder; counted,
    so the stamps stop when the last one stops asking. Off (the default), a read costs one test."""
    global _stamp_users
    _stamp_users = max(0, _stamp_users + (1 if on else -1))


def reads_stamped() -> bool:
    """Whether received frames are stamped now (:func:`stamp_reads`)."""
    return _stamp_users > 0


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``; raises :class:`ConnectError` if malformed."""
    host, sep, port_text = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not sep or not host or not 0 < port < 65536:
        raise ConnectError(f"bad address {addr!r}: expected host:port or [ipv6]:port", addr)
    return host, port


def format_addr(sockaddr: object) -> str:
    """A socket address tuple as ``host:port`` (``[host]:port`` for IPv6)."""
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        host, port = str(sockaddr[0]), sockaddr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(sockaddr)


async def run_awaitable(fn: Callable[[], Awaitable[None]]) -> None:
    """``await fn()`` as a coroutine (task groups need a coroutine function)."""
    await fn()


class Connection(asyncio.BufferedProtocol):
    """One remoting connection; open it with :meth:`connect`, close it with :meth:`aclose`."""

    __slots__ = (
        "_addr",
        "_cert_refused",
        "_client_cert",
        "_close_callbacks",
        "_close_cause",
        "_close_reason",
        "_corked",
        "_decoder",
        "_handler",
        "_local_addr",
        "_loop",
        "_lost",
        "_max_timeouts",
        "_next_opaque",
        "_paused",
        "_pending",
        "_signer",
        "_spawn",
        "_tasks",
        "_timeouts",
        "_tls",
        "_transport",
        "_writable",
    )

    def __init__(
        self,
        addr: str,
        *,
        handler: ServerRequestHandler | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_timeouts: int = 3,
        spawn: Spawn | None = None,
        signer: Signer | None = None,
    ) -> None:
        """Use :meth:`connect`; the constructor only builds the protocol object."""
        self._addr = addr
        self._signer = signer
        self._handler = handler
        self._spawn: Spawn = spawn if spawn is not None else self._spawn_tracked
        self._max_timeouts = max_timeouts
        self._decoder = FrameDecoder(max_frame)
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._next_opaque = 0
        self._timeouts = 0
        self._tls = False
        self._client_cert = False  # TLS with our own certificate (mutual TLS)
        self._cert_refused = False  # closed as a TLS server closes after refusing a client certificate
        self._transport: asyncio.Transport | None = None
        self._local_addr = ""
        self._paused = False
        #: frames waiting for the end of this turn of the loop (:meth:`request` with ``coalesce``),
        #: written together by :meth:`_flush`; None: nothing waits, a write goes out at once
        self._corked: list[bytes] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = asyncio.Event()
        self._close_reason: str | None = None
        self._close_cause: BaseException | None = None
        self._close_callbacks: list[Callable[[Connection], object]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(
        cls,
        addr: str,
        *,
        handler: ServerRequestHandler | None = None,
        connect_timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_timeouts: int = 3,
        spawn: Spawn | None = None,
        signer: Signer | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        client_cert: bool = False,
    ) -> Connection:
        """Open a TCP connection to ``addr`` (``host:port`` or ``[v6]:port``), TCP_NODELAY on.

        ``handler`` answers server-initiated requests (none: they get code 3); ``spawn`` runs its
        calls in the owner's task group. ``max_timeouts`` consecutive request timeouts close the
        connection (0 disables that). ``signer`` completes every request and oneway right before it
        is encoded (ACL signing). With ``ssl_context`` the connection is TLS, the server's certificate
        checked against ``server_hostname`` (default: the host of ``addr``), ``connect_timeout``
        covering the handshake too; ``client_cert``: ``ssl_context`` presents a client certificate
        (only the wording of a refusal depends on it). Raises :class:`ConnectError` if it cannot
        connect in time, its subclass :class:`~rmq_async.errors.TLSError` if the TLS handshake fails.
        """
        host, port = parse_addr(addr)
        conn = cls(
            addr, handler=handler, max_frame=max_frame, max_timeouts=max_timeouts, spawn=spawn, signer=signer
        )
        try:
            with anyio.fail_after(connect_timeout):
                if ssl_context is None:
                    await conn._loop.create_connection(lambda: conn, host, port)
                else:
                    conn._tls = True
                    conn._client_cert = client_cert
                    await conn._loop.create_connection(
                        lambda: conn, host, port, ssl=ssl_context, server_hostname=server_hostname or host
                    )
        except TimeoutError as exc:
            what = "no TLS connection" if ssl_context is not None else "no connection"
            raise ConnectError(f"cannot connect: {what} within {connect_timeout:.3f}s", addr) from exc
        except OSError as exc:
            tls_error = handshake_error(exc, addr) if ssl_context is not None else None
            if tls_error is not None:
                raise tls_error from exc
            raise ConnectError(f"cannot connect: {exc}", addr) from exc
        return conn

    # -- properties -----------------------------------------------------------------------------

    @property
    def addr(self) -> str:
        """The address this connection was opened to, as given."""
        return self._addr

    @property
    def local_addr(self) -> str:
        """Our end of the connection, ``host:port``."""
        return self._local_addr

    @property
    def closed(self) -> bool:
        """True once the connection is closing or closed (requests fail with ConnectionClosed)."""
        return self._close_reason is not None

    @property
    def in_flight(self) -> int:
        """Number of requests waiting for their response."""
        return len(self._pending)

    def __repr__(self) -> str:
        state = f"closed: {self._close_reason}" if self._close_reason else f"in_flight={len(self._pending)}"
        return f"<Connection {self._local_addr} -> {self._addr} {state}>"

    # -- requests -------------------------------------------------------------------------------

    def _closed_error(self) -> RemotingError:
        cls = TLSError if self._cert_refused else ConnectionClosed
        err = cls(f"connection {self._close_reason}", self._addr)
        err.__cause__ = self._close_cause
        return err

    def _take_opaque(self) -> int:
        opaque = self._next_opaque
        while opaque in self._pending:  # only after a wrap, with a request pending for 2**31 requests
            opaque = (opaque + 1) & _OPAQUE_MASK
        self._next_opaque = (opaque + 1) & _OPAQUE_MASK
        return opaque

    def _encode_request(self, cmd: RemotingCommand, opaque: int) -> bytes:
        cmd.flag &= ~(FLAG_ONEWAY | FLAG_RESPONSE)
        cmd.opaque = opaque
        if self._signer is not None:
            self._signer(cmd)
        return cmd.encode()

    async def request(
        self, cmd: RemotingCommand | PreparedRequest, timeout: float, *, coalesce: bool = False
    ) -> RemotingCommand:
        """Send ``cmd`` and return its response; its ``opaque`` is assigned here. A
        :class:`PreparedRequest` writes its own frame with that opaque (the connection signs nothing),
        or, on a connection that signs its requests, gives its command to sign.

        ``coalesce``: the frame is written at the loop's next turn, together with every frame
        written on this connection until then (one system call for the pulls of many queues, and
        the consume tasks woken by the answers just read run before it); frames keep their order.

        Raises :class:`RequestTimeout` after ``timeout`` seconds without an answer (a late answer is
        dropped) and :class:`ConnectionClosed` when the connection is or becomes closed
        (:class:`TLSError` when a TLS server closed it before answering anything: see
        :meth:`connection_lost`).
        """
        if self._close_reason is not None:
            raise self._closed_error()
        opaque = self._take_opaque()
        if type(cmd) is RemotingCommand:
            frame = self._encode_request(cmd, opaque)
        elif self._signer is None:  # prepared: it writes its own frame
            frame = cast(PreparedRequest, cmd).frame(opaque)
        else:  # unless it must be signed
            frame = self._encode_request(cast(PreparedRequest, cmd).command(), opaque)
        loop = self._loop
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        timer = loop.call_later(timeout, self._on_timeout, opaque, fut, cmd.code, timeout)
        try:
            if self._paused:
                # Back-pressure: wait until the transport drains, or the timer/close settles fut.
                with anyio.move_on_after(timeout):
                    await self._writable.wait()
                if fut.done():
                    return fut.result()
            if coalesce:
                self._write_later(frame)
            else:
                self._write(frame)
            return await fut
        finally:
            timer.cancel()
            if self._pending.get(opaque) is fut:
                del self._pending[opaque]
            if not fut.done():  # cancelled while waiting for the drain
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # mark a close/timeout error seen even if we were cancelled meanwhile

    async def oneway(self, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``cmd`` with the oneway flag; nothing is awaited unless writing is paused.

        ``timeout`` bounds only that wait (then :class:`RequestTimeout`).
        """
        if self._close_reason is not None:
            raise self._closed_error()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        cmd.opaque = self._take_opaque()
        if self._signer is not None:
            self._signer(cmd)
        frame = cmd.encode()
        if self._paused:
            try:
                with anyio.fail_after(timeout):
                    await self._writable.wait()
            except TimeoutError:
                raise RequestTimeout(cmd.code, self._addr, timeout) from None
            if self._close_reason is not None:
                raise self._closed_error()
        self._write(frame)

    def _write(self, frame: bytes) -> None:
        """Write now, or after the frames already waiting (see :meth:`_write_later`)."""
        corked = self._corked
        if corked is not None:
            corked.append(frame)
            return
        assert self._transport is not None
        self._transport.write(frame)

    def _write_later(self, frame: bytes) -> None:
        corked = self._corked
        if corked is None:
            self._corked = [frame]
            self._loop.call_soon(self._flush)
        else:
            corked.append(frame)

    def _flush(self) -> None:
        frames, self._corked = self._corked, None
        if frames and self._close_reason is None and self._transport is not None:
            self._transport.writelines(frames)

    def _on_timeout(
        self, opaque: int, fut: asyncio.Future[RemotingCommand], code: int, timeout: float
    ) -> None:
        if fut.done():
            return
        if self._pending.get(opaque) is fut:
            del self._pending[opaque]
        fut.set_exception(RequestTimeout(code, self._addr, timeout))
        self._timeouts += 1
        if 0 < self._max_timeouts <= self._timeouts:
            cause = RequestTimeout(code, self._addr, timeout)
            self._shutdown(f"closed after {self._timeouts} consecutive request timeouts (half-open?)", cause)

    # -- server-initiated requests --------------------------------------------------------------

    def _on_server_request(self, cmd: RemotingCommand) -> None:
        handler = self._handler
        if handler is None:
            if not cmd.is_oneway:
                remark = f" request type {cmd.code} not supported"
                self._answer(
                    cmd, cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark, language=_LANG)
                )
            return
        try:
            self._spawn(functools.partial(self._serve, handler, cmd))
        except Exception as exc:  # the owner's task group is closing
            log.warning("%s: cannot run handler for request %d: %r", self._addr, cmd.code, exc)
            if not cmd.is_oneway:
                self._answer(
                    cmd, cmd.make_response(ResponseCode.SYSTEM_BUSY, f"client busy: {exc}", language=_LANG)
                )

    async def _serve(self, handler: ServerRequestHandler, cmd: RemotingCommand) -> None:
        try:
            response = await handler(self, cmd)
        except Exception as exc:
            log.warning("%s: handler for request %d failed: %r", self._addr, cmd.code, exc)
            remark = f"{type(exc).__name__}: {exc}"
            response = cmd.make_response(ResponseCode.SYSTEM_ERROR, remark, language=_LANG)
        if response is not None and not cmd.is_oneway:
            self._answer(cmd, response)

    def _answer(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Write ``response`` with the request's opaque and serialize type (as Java does)."""
        if self._close_reason is not None or self._transport is None:
            return
        response.opaque = request.opaque
        response.flag = (response.flag | FLAG_RESPONSE) & ~FLAG_ONEWAY
        response.serialize_type = request.serialize_type
        try:
            frame = response.encode()
        except ProtocolError as exc:
            remark = f"cannot encode the answer: {exc}"
            frame = request.make_response(ResponseCode.SYSTEM_ERROR, remark, language=_LANG).encode()
        self._write(frame)

    def _spawn_tracked(self, fn: Callable[[], Awaitable[None]]) -> None:
        task = self._loop.create_task(run_awaitable(fn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- closing --------------------------------------------------------------------------------

    def add_close_callback(self, cb: Callable[[Connection], object]) -> None:
        """Call ``cb(conn)`` once when the connection closes (at once if it already has)."""
        if self._close_reason is not None:
            self._call_close_callback(cb)
        else:
            self._close_callbacks.append(cb)

    def _call_close_callback(self, cb: Callable[[Connection], object]) -> None:
        try:
            cb(self)
        except Exception:
            log.exception("%s: close callback %r failed", self._addr, cb)

    def _shutdown(self, reason: str, cause: BaseException | None, *, graceful: bool = False) -> None:
        """Close now (idempotent): fail pending requests, cancel tracked handlers, run callbacks."""
        if self._close_reason is not None:
            return
        self._close_reason = reason
        self._close_cause = cause
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(self._closed_error())
        self._writable.set()  # wake writers waiting for a drain: they see the close
        for task in self._tasks:
            task.cancel()
        transport = self._transport
        corked, self._corked = self._corked, None
        if transport is not None and not self._lost.is_set():
            if graceful:
                if corked:  # a oneway queued behind a coalesced request still goes out
                    transport.writelines(corked)
                transport.close()
            else:
                transport.abort()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for cb in callbacks:
            self._call_close_callback(cb)

    def abort(self) -> None:
        """Close at once without flushing (idempotent); pending requests fail with ConnectionClosed."""
        self._shutdown("aborted by the client", None)

    async def aclose(self) -> None:
        """Close the connection (idempotent), bounded by :data:`CLOSE_TIMEOUT` even if cancelled."""
        self._shutdown("closed by the client", None, graceful=True)
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await self._lost.wait()
            others = self._tasks - {asyncio.current_task()}  # aclose() may run inside a handler
            if others:
                await asyncio.wait(others)
        if not self._lost.is_set() and self._transport is not None:
            self._transport.abort()  # the peer does not read: drop our unsent bytes

    async def wait_closed(self) -> None:
        """Wait until the socket is closed (whoever closed it)."""
        await self._lost.wait()

    # -- asyncio.BufferedProtocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport without subclassing it
        self._transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._local_addr = format_addr(transport.get_extra_info("sockname"))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._close_reason is None:
            try:
                return self._decoder.get_buffer(sizehint)
            except ProtocolError as exc:
                self._shutdown(f"closed on a protocol error: {exc}", exc)
        return memoryview(_DISCARD)  # closing: whatever still arrives is dropped

    def buffer_updated(self, nbytes: int) -> None:
        if self._close_reason is not None:
            return
        try:
            commands = self._decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            self._shutdown(f"closed on a protocol error: {exc}", exc)
            return
        self._settle(commands)

    def _settle(self, commands: list[RemotingCommand]) -> None:
        if commands:
            self._timeouts = 0  # the peer is alive
            if _stamp_users:
                now = _clock()
                for cmd in commands:
                    cmd.received_ns = now
        pending = self._pending
        for cmd in commands:
            if cmd.flag & FLAG_RESPONSE:
                fut = pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                # else: a late answer to a request that timed out or was cancelled: dropped
            else:
                self._on_server_request(cmd)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        """The peer or the transport closed the connection: fail what is pending.

        Our first request (opaque 0) still unanswered means the server closed without answering
        anything (no per-read bookkeeping is needed for this guess). Over TLS that is how a refused
        client certificate shows under TLS 1.3: the client's handshake completes before the server has
        checked our certificate, so the refusal comes after it, as a clean close or a reset on asyncio
        and uvloop (the embedded server drops the connection without its alert) or as the alert's
        ``SSLError`` (a server that sends it, as Netty does). Then the pending requests fail with
        :class:`TLSError`, not retriable, instead of :class:`ConnectionClosed`.
        """
        self._lost.set()
        first_pending = 0 in self._pending
        if self._tls and first_pending:
            self._cert_refused = True
            what = (
                "the server refused our client certificate? see TLSConfig.cert_file / key_file and the "
                "CA the server trusts"
                if self._client_cert
                else "does the server require a client certificate? see TLSConfig.cert_file"
            )
            how = "closed by the peer" if exc is None else f"lost ({exc})"
            self._shutdown(f"{how} right after the TLS handshake, before any answer: {what}", exc)
            return
        hint = ""
        if first_pending:
            hint = " before any answer (a server that requires TLS? see ClientConfig.tls)"
        if exc is None:
            self._shutdown(f"closed by the peer{hint}", None)
        elif isinstance(exc, ssl.SSLError):
            self._shutdown(f"lost on a TLS error: {exc}", exc)
        else:
            self._shutdown(f"lost: {exc}{hint}", exc)

    def pause_writing(self) -> None:
        self._paused = True
        self._writable.clear()

    def resume_writing(self) -> None:
        self._paused = False
        self._writable.set()
