"""Connections by address: the only way the client reaches servers.

Strategy: one live :class:`Connection` per address, kept in a dict and dropped by its close
callback, so a closed connection is replaced on the next :meth:`ConnectionPool.get`. Dialing runs
as a task in the pool's own task group and publishes its outcome on a future that every concurrent
caller awaits (shielded: a cancelled caller does not cancel the shared connect). A failed connect
puts the address into exponential back-off (``initial_backoff`` doubling to ``max_backoff``, reset on
success); while it lasts, ``get`` raises :class:`ConnectError` at once without dialing. The same
task group runs the server-request handlers of every connection (handed over through a queue to a
dispatcher task, because ``buffer_updated`` runs outside any task, where anyio cannot spawn).
Leaving the pool closes all connections under a shielded, bounded cancel scope, then cancels the
group.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup

from ..errors import ClientError, ConnectError, TLSError
from ..lifecycle import Supervisor
from ..protocol.command import DEFAULT_MAX_FRAME, RemotingCommand
from .connection import Connection, PreparedRequest, ServerRequestHandler, Signer, run_awaitable

__all__ = ["ConnectionPool"]


class _Backoff:
    __slots__ = ("delay", "failures", "last_error", "retry_at", "tls")

    def __init__(self) -> None:
        self.tls = False  # the last failure was a TLS handshake
        self.failures = 0
        self.delay = 0.0
        self.retry_at = 0.0
        self.last_error = ""


class ConnectionPool:
    """Async context manager owning one connection per address and a task group for handlers.

    ``handler`` answers the server-initiated requests of every connection; ``signer`` (ACL) completes
    every request and oneway of every connection right before it is encoded. With ``ssl_context``
    every connection is TLS (``server_hostname``: the name to check instead of each address's host;
    ``client_cert``: the context presents a client certificate);
    a failed handshake (:class:`TLSError`) puts the address straight into the longest back-off, as
    retrying soon with the same certificates gets the same answer. ``clock`` (monotonic
    seconds) is only for tests of the back-off.
    """

    __slots__ = (
        "_backoff",
        "_client_cert",
        "_clock",
        "_close_timeout",
        "_closing",
        "_connect_timeout",
        "_conns",
        "_dialing",
        "_handler",
        "_initial_backoff",
        "_jobs",
        "_life",
        "_max_backoff",
        "_max_frame",
        "_max_timeouts",
        "_server_hostname",
        "_signer",
        "_ssl",
        "_tg",
    )

    def __init__(
        self,
        *,
        handler: ServerRequestHandler | None = None,
        connect_timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_timeouts: int = 3,
        initial_backoff: float = 0.1,
        max_backoff: float = 5.0,
        close_timeout: float = 3.0,
        clock: Callable[[], float] | None = None,
        signer: Signer | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        client_cert: bool = False,
    ) -> None:
        self._handler = handler
        self._signer = signer
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._client_cert = client_cert
        self._connect_timeout = connect_timeout
        self._max_frame = max_frame
        self._max_timeouts = max_timeouts
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._close_timeout = close_timeout
        self._clock = clock if clock is not None else time.monotonic
        self._conns: dict[str, Connection] = {}
        self._dialing: dict[str, asyncio.Future[Connection | ConnectError]] = {}
        self._backoff: dict[str, _Backoff] = {}
        self._tg: TaskGroup | None = None
        self._life = Supervisor("connection pool")
        self._closing = False
        self._jobs: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()

    def __repr__(self) -> str:
        state = "closed" if self._closing else ("open" if self._tg is not None else "not started")
        state += " tls" if self._ssl is not None else ""
        return f"<ConnectionPool {state} connections={sorted(self._conns)} dialing={sorted(self._dialing)}>"

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Open the pool: its dial, handler and dispatch tasks run in a supervisor task
        (:mod:`rmq_async.lifecycle`), so the pool may be left in another task than the one that
        entered it."""
        if self._life.running or self._closing:
            raise ClientError("a ConnectionPool can be entered only once")
        await self._life.start(self._run)
        return self

    async def _run(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._run_jobs)
            ready()
            await stopping.wait()
            try:
                with anyio.move_on_after(self._close_timeout, shield=True):
                    async with anyio.create_task_group() as closers:
                        for conn in list(self._conns.values()):
                            closers.start_soon(conn.aclose)
            finally:
                for conn in list(self._conns.values()):  # past the bound: drop them hard
                    conn.abort()
                self._conns.clear()
                tg.cancel_scope.cancel()  # handler, dial and dispatcher tasks

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing = True
        self._tg = None
        # bounded (the close of the connections is): done even when the caller is being cancelled
        with anyio.CancelScope(shield=True):
            await self._life.stop()

    @property
    def connections(self) -> dict[str, Connection]:
        """The live connections by address (a copy)."""
        return {a: c for a, c in self._conns.items() if not c.closed}

    # -- getting connections --------------------------------------------------------------------

    def _spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        # Called from Connection.buffer_updated, a loop callback outside any task, where anyio
        # cannot start a task (it detects the backend from the current task): hand the job to
        # _run_jobs, which starts it in the group.
        if self._tg is None:
            raise ClientError("the connection pool is closed")
        self._jobs.put_nowait(fn)

    async def _run_jobs(self) -> None:
        while True:
            fn = await self._jobs.get()
            if self._tg is None:
                return
            self._tg.start_soon(run_awaitable, fn)

    def backoff_remaining(self, addr: str) -> float:
        """Seconds until ``addr`` may be dialed again (0.0 when it is not in back-off)."""
        bo = self._backoff.get(addr)
        return max(0.0, bo.retry_at - self._clock()) if bo is not None else 0.0

    async def get(self, addr: str) -> Connection:
        """The live connection to ``addr``, opened if needed (concurrent callers share one connect).

        Raises :class:`ConnectError` if the connect fails, or at once while ``addr`` is in back-off.
        """
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._tg is None:
            raise ClientError(
                "the connection pool is not open" if not self._closing else "the pool is closed"
            )
        fut = self._dialing.get(addr)
        if fut is None:
            bo = self._backoff.get(addr)
            if bo is not None:
                wait = bo.retry_at - self._clock()
                if wait > 0:
                    raise (TLSError if bo.tls else ConnectError)(
                        f"not dialing: {bo.failures} connect attempt(s) failed (last: {bo.last_error}); "
                        f"next try in {wait:.3f}s",
                        addr,
                    )
            fut = asyncio.get_running_loop().create_future()
            self._dialing[addr] = fut
            self._tg.start_soon(self._dial, addr, fut)
        result = await asyncio.shield(fut)
        if isinstance(result, ConnectError):
            raise result
        return result

    async def _dial(self, addr: str, fut: asyncio.Future[Connection | ConnectError]) -> None:
        result: Connection | ConnectError
        try:
            conn = await Connection.connect(
                addr,
                handler=self._handler,
                connect_timeout=self._connect_timeout,
                max_frame=self._max_frame,
                max_timeouts=self._max_timeouts,
                spawn=self._spawn,
                signer=self._signer,
                ssl_context=self._ssl,
                server_hostname=self._server_hostname,
                client_cert=self._client_cert,
            )
        except ConnectError as exc:
            bo = self._backoff.setdefault(addr, _Backoff())
            bo.failures += 1
            bo.delay = min(self._max_backoff, self._initial_backoff * 2 ** (bo.failures - 1))
            if isinstance(exc, TLSError):
                bo.delay = self._max_backoff
            bo.retry_at = self._clock() + bo.delay
            bo.tls = isinstance(exc, TLSError)
            bo.last_error = str(exc) if bo.tls else str(exc.__cause__ or exc)
            result = exc
        except BaseException:  # cancelled: the pool is closing
            self._settle(addr, fut, ConnectError("the pool closed while connecting", addr))
            raise
        else:
            self._backoff.pop(addr, None)
            if self._closing:
                conn.abort()
                result = ConnectError("the pool closed while connecting", addr)
            else:
                self._conns[addr] = conn
                conn.add_close_callback(self._forget)
                result = conn
        self._settle(addr, fut, result)

    def _settle(
        self, addr: str, fut: asyncio.Future[Connection | ConnectError], result: Connection | ConnectError
    ) -> None:
        if self._dialing.get(addr) is fut:
            del self._dialing[addr]
        if not fut.done():
            fut.set_result(result)

    def _forget(self, conn: Connection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]

    async def close_address(self, addr: str) -> None:
        """Close the connection to ``addr`` if there is one (the next ``get`` reconnects)."""
        conn = self._conns.pop(addr, None)
        if conn is not None:
            await conn.aclose()

    # -- conveniences ---------------------------------------------------------------------------

    async def request(
        self, addr: str, cmd: RemotingCommand | PreparedRequest, timeout: float, *, coalesce: bool = False
    ) -> RemotingCommand:
        """``(await get(addr)).request(cmd, timeout, coalesce=coalesce)``."""
        conn = await self.get(addr)
        return await conn.request(cmd, timeout, coalesce=coalesce)

    async def oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """``(await get(addr)).oneway(cmd)``."""
        conn = await self.get(addr)
        await conn.oneway(cmd, timeout)
