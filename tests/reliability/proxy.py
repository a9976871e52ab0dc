"""A TCP fault proxy on 127.0.0.1 for the reliability suite (asyncpg's ``_testbase/fuzzer.py`` idea).

Strategy: every accepted client connection becomes a :class:`Link` with two pump tasks (client ->
upstream, upstream -> client). Each pump reads a chunk, then consults the proxy's current mode for its
direction before forwarding, so a mode change applies at once to live and future links:

* ``cut()``: abort every live link (RST both ways); ``refuse``: abort new links at accept;
* ``stall``: stop forwarding without closing (a half-open peer: no FIN, no data);
* ``delay``: hold each chunk for ``seconds`` before forwarding (order kept);
* ``truncate``: forward only the first ``n`` bytes of the next chunk, then abort the link;
* ``reorder``: in the downstream direction, re-assemble whole remoting frames and forward them two by
  two in swapped order (responses arrive out of order; the bytes of each frame are untouched).

Nothing sleeps to poll: stalled pumps park on an event that the next mode change sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from types import TracebackType

__all__ = ["FaultProxy", "Link"]

UP, DOWN = "up", "down"  # client -> upstream, upstream -> client


class Link:
    """One proxied connection."""

    def __init__(self, proxy: FaultProxy, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.cr, self.cw = cr, cw
        self.uw: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = asyncio.Event()
        self.bytes = {UP: 0, DOWN: 0}
        self._held: bytes | None = None  # reorder: a frame waiting for its successor
        self._frames = bytearray()

    def abort(self) -> None:
        for w in (self.cw, self.uw):
            if w is not None:
                transport = w.transport
                if not transport.is_closing():
                    transport.abort()
        self.closed.set()

    async def run(self) -> None:
        p = self.proxy
        try:
            ur, uw = await asyncio.open_connection(p.upstream_host, p.upstream_port)
        except OSError:
            self.abort()
            return
        self.uw = uw
        self.tasks = [
            asyncio.create_task(self._pump(self.cr, uw, UP)),
            asyncio.create_task(self._pump(ur, self.cw, DOWN)),
        ]
        try:
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.abort()

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, d: str) -> None:
        p = self.proxy
        while True:
            try:
                data = await r.read(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    w.write_eof()
                return
            while p.stalled(d):  # half-open: keep the sockets, forward nothing
                await p.changed_event().wait()
            if p.delays[d] > 0:
                await asyncio.sleep(p.delays[d])
            if p.truncate_at[d] is not None:
                n = p.truncate_at[d]
                p.truncate_at[d] = None
                w.write(data[:n])
                with contextlib.suppress(OSError):
                    await w.drain()
                p.truncated += 1
                self.abort()
                return
            if d == DOWN and p.reorder:
                data = self._reorder(data)
            self.bytes[d] += len(data)
            if data:
                w.write(data)
                try:
                    await w.drain()
                except OSError:
                    return

    def _reorder(self, data: bytes) -> bytes:
        self._frames += data
        out = bytearray()
        while len(self._frames) >= 4:
            (length,) = struct.unpack_from(">i", self._frames, 0)
            if length < 0 or len(self._frames) < 4 + length:
                break
            frame = bytes(self._frames[: 4 + length])
            del self._frames[: 4 + length]
            if self._held is None:
                self._held = frame
            else:
                out += frame + self._held  # swapped
                self._held = None
                self.proxy.reordered += 1
        return bytes(out)

    def flush_held(self) -> None:
        if self._held is not None and not self.cw.transport.is_closing():
            self.cw.write(self._held + bytes(self._frames))
        self._held = None
        self._frames.clear()


class FaultProxy:
    """``async with FaultProxy("127.0.0.1:P") as proxy``: listens on ``proxy.addr``."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream_host, self.upstream_port = host, int(port)
        self.links: list[Link] = []
        self.accepted = 0
        self.cuts = 0
        self.truncated = 0
        self.reordered = 0
        self.refusing = False
        self.reorder = False
        self.delays = {UP: 0.0, DOWN: 0.0}
        self.truncate_at: dict[str, int | None] = {UP: None, DOWN: None}
        self._stall = {UP: False, DOWN: False}
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.addr = ""

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.addr = f"127.0.0.1:{port}"
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.clear()
        for link in self.links:
            link.abort()
        # aborted links end their pumps by themselves (a cancelled accept task would be logged by
        # asyncio's stream callback)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            cw.transport.abort()
            return
        link = Link(self, cr, cw)
        self.links.append(link)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await link.run()
        finally:
            self._tasks.discard(task)
            self.links.remove(link)

    # -- modes --------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def changed_event(self) -> asyncio.Event:
        return self._changed

    def stalled(self, d: str) -> bool:
        return self._stall[d]

    def stall(self, up: bool = True, down: bool = True) -> None:
        """Stop forwarding (half-open peer): nothing is closed, nothing arrives."""
        self._stall = {UP: up, DOWN: down}
        self._notify()

    def delay(self, seconds: float, direction: str = DOWN) -> None:
        """Hold every chunk in ``direction`` for ``seconds``."""
        self.delays[direction] = seconds
        self._notify()

    def truncate(self, n: int, direction: str = DOWN) -> None:
        """Forward the first ``n`` bytes of the next chunk in ``direction``, then abort that link."""
        self.truncate_at[direction] = n

    def set_reorder(self, on: bool) -> None:
        """Swap downstream frames pairwise (a lone frame waits for its successor)."""
        self.reorder = on
        if not on:
            for link in self.links:
                link.flush_held()

    def cut(self) -> int:
        """Abort every live link; returns how many were cut."""
        n = len(self.links)
        for link in list(self.links):
            link.abort()
        self.cuts += n
        return n

    def clear(self) -> None:
        """Back to a transparent proxy."""
        self.refusing = False
        self.set_reorder(False)
        self.delays = {UP: 0.0, DOWN: 0.0}
        self.truncate_at = {UP: None, DOWN: None}
        self.stall(False, False)
