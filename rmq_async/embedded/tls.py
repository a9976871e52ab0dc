"""TLS on the embedded servers, in the real broker's three modes (``TlsMode``, ``tls.server.mode``).

Strategy: ``disabled`` is the plain server, unchanged (a ClientHello then fails as a bad frame and
closes the connection, as the real server closes it). In ``permissive`` and ``enforcing`` mode the
server accepts connections itself and, before any transport reads from a socket, waits until it is
readable and peeks at its first byte (``MSG_PEEK``: nothing is consumed), as the real server's
``TlsModeHandler`` looks at the first byte of the first read: 0x16 (a TLS handshake record) hands the
socket to the loop with the server's ``SSLContext``; any other byte hands it over plain in
``permissive`` mode and closes it in ``enforcing`` mode. One short task per accepted connection lives
only until that decision; the listener tracks and cancels them. asyncio and uvloop alike, through
``sock_accept`` / ``add_reader`` / ``connect_accepted_socket`` only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["TLS_HANDSHAKE", "ServerTLS", "TLSListener", "TLSMode"]

log = logging.getLogger("rmq_async.embedded")

TLSMode = Literal["disabled", "permissive", "enforcing"]
#: the first byte of a TLS handshake record (``TlsModeHandler.HANDSHAKE_MAGIC_CODE``)
TLS_HANDSHAKE = 0x16
_MODES = ("disabled", "permissive", "enforcing")
_CLIENT_AUTH = ("none", "optional", "require")


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """TLS settings of the embedded name server and brokers (the real ``tls.server.*`` properties).

    ``mode``: ``tls.server.mode``; ``cert_file`` / ``key_file`` / ``key_password``: the server's PEM
    certificate chain and key (``tls.server.certPath``, ``keyPath``, ``keyPassword``); ``client_auth``:
    ``tls.server.need.client.auth`` (``none``, ``optional``, ``require``), client certificates checked
    against ``ca_file`` (``tls.server.trustCertPath``).
    """

    mode: TLSMode = "permissive"
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    ca_file: str | None = None
    client_auth: Literal["none", "optional", "require"] = "none"

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"TLS mode must be one of {', '.join(_MODES)}, not {self.mode!r}")
        if self.client_auth not in _CLIENT_AUTH:
            raise ValueError(
                f"client_auth must be one of {', '.join(_CLIENT_AUTH)}, not {self.client_auth!r}"
            )
        if self.mode != "disabled" and not self.cert_file:
            raise ValueError(f"TLS mode {self.mode!r} needs cert_file (and key_file unless the PEM holds it)")
        if self.client_auth != "none" and not self.ca_file:
            raise ValueError(f"client_auth={self.client_auth!r} needs ca_file to check client certificates")

    def __repr__(self) -> str:  # the key password never shows
        return (
            f"ServerTLS(mode={self.mode!r}, cert_file={self.cert_file!r}, key_file={self.key_file!r}, "
            f"ca_file={self.ca_file!r}, client_auth={self.client_auth!r})"
        )

    @property
    def active(self) -> bool:
        """True when the server accepts TLS (``permissive`` or ``enforcing``)."""
        return self.mode != "disabled"

    def server_context(self) -> ssl.SSLContext:
        """The server side ``SSLContext``."""
        assert self.cert_file is not None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.ca_file)
        ctx.load_cert_chain(self.cert_file, self.key_file, self.key_password)
        ctx.verify_mode = {
            "none": ssl.CERT_NONE,
            "optional": ssl.CERT_OPTIONAL,
            "require": ssl.CERT_REQUIRED,
        }[self.client_auth]
        return ctx

    def inner_client_context(self) -> ssl.SSLContext | None:
        """For the cluster's own connections (broker -> name server, admin -> broker): TLS only where
        plain is refused (``enforcing``), trusting the peer as the real broker's client does by default
        (``tls.client.authServer=false``), presenting the server's own certificate when clients must
        have one."""
        if self.mode != "enforcing":
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if self.client_auth != "none":
            assert self.cert_file is not None
            ctx.load_cert_chain(self.cert_file, self.key_file, self.key_password)
        return ctx


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte the peer sent, peeked (still unread); b"" if it closed without sending."""
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), _wake, readable)
        try:
            await readable
        finally:
            loop.remove_reader(sock.fileno())


class TLSListener:
    """Accepts on ``host:port`` and hands each connection to ``factory``, with TLS or plain by its first
    byte (see the module docstring). Use :meth:`start` and :meth:`close`."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], tls: ServerTLS, name: str) -> None:
        self._factory = factory
        self.tls = tls
        self._ctx = tls.server_context()
        self._name = name
        self._sock: socket.socket | None = None
        self._accept: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        sock = socket.create_server((host, port), backlog=1024)  # SO_REUSEADDR as create_server sets it
        sock.setblocking(False)
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        self._accept = asyncio.get_running_loop().create_task(
            self._accept_loop(sock), name=f"{self._name}-accept"
        )
        return self.port

    async def _accept_loop(self, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(lsock)
            except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                log.warning("%s: accept failed: %s", self._name, exc)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            task = loop.create_task(self._admit(sock))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            first = await _first_byte(loop, sock)
        except BaseException:  # cancelled (the server stops) or a socket error: not handed over yet
            sock.close()
            raise
        if not first:
            sock.close()
            return
        if first[0] == TLS_HANDSHAKE:
            try:
                await loop.connect_accepted_socket(
                    self._factory, sock, ssl=self._ctx, ssl_handshake_timeout=10.0
                )
            except (OSError, ssl.SSLError) as exc:  # the loop has closed the socket
                log.info("%s: TLS handshake failed: %s", self._name, exc)
        elif self.tls.mode == "enforcing":
            log.info("%s: closing a plain connection (TLS mode enforcing)", self._name)
            sock.close()
        else:
            await loop.connect_accepted_socket(self._factory, sock)

    async def close(self) -> None:
        """Stop accepting; connections not handed over yet are closed (handed over ones are not)."""
        tasks = [t for t in (self._accept, *self._admitting) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)  # their outcomes (cancelled) are not errors
        self._accept = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
