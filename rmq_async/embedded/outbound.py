"""A minimal outgoing remoting connection for the embedded servers.

Strategy: the broker talks to the name server (register/unregister) and the cluster talks to brokers
(UPDATE_AND_CREATE_TOPIC) through this small client, so the embedded package depends only on the
sans-IO protocol layer and never on the SDK's transport (the broker must not share the client's
assumptions). One reader task per connection resolves futures by opaque.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl

from ..errors import ConnectError, ConnectionClosed, ProtocolError, RequestTimeout
from ..protocol.command import FrameDecoder, RemotingCommand

__all__ = ["Outbound"]


class Outbound:
    """One client connection to ``addr`` ("host:port"), TLS with ``ssl_context``."""

    def __init__(self, addr: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.addr = addr
        self.ssl_context = ssl_context
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _connect(self) -> None:
        host, _, port = self.addr.rpartition(":")
        try:
            self._reader, self._writer = await asyncio.open_connection(host, int(port), ssl=self.ssl_context)
        except OSError as exc:
            raise ConnectError(f"cannot connect: {exc}", self.addr) from exc
        self._task = asyncio.get_running_loop().create_task(self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    fut = self._pending.pop(cmd.opaque, None)
                    if cmd.is_response and fut is not None and not fut.done():
                        fut.set_result(cmd)
        except (OSError, ProtocolError):
            pass
        finally:
            self._drop()

    def _drop(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed("connection closed", self.addr))
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()
        self._writer = None

    async def request(
        self, cmd: RemotingCommand, within: float, *, oneway: bool = False
    ) -> RemotingCommand | None:
        """Send ``cmd`` (connecting first if needed) and wait for its response (None for oneway)."""
        async with self._lock:
            if not self.connected:
                await self._connect()
        assert self._writer is not None
        cmd.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        if oneway:
            cmd.flag |= 0x2
            self._writer.write(cmd.encode())
            return None
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = fut
        try:
            self._writer.write(cmd.encode())
            return await asyncio.wait_for(fut, within)
        except TimeoutError:
            raise RequestTimeout(cmd.code, self.addr, within) from None
        finally:
            self._pending.pop(opaque, None)

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        task, self._task = self._task, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
