"""A frame-level TCP proxy for tests: forwards requests to an upstream server (counting them by request
code) and passes each of the server's frames through a rewrite function, e.g. a name server's route
answers with other broker addresses (a master that is down, a slave). :meth:`FrameProxy.cut` is a
network partition between the proxy's clients and the server: every connection closes (both ends) and
new ones are closed as they arrive, until :meth:`FrameProxy.heal`. ``on_answer`` sees each request
with the server's answer to it, as the answer is passed on (e.g. which queues a LOCK_BATCH_MQ got)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Callable

from rmq_async.protocol.command import FrameDecoder, RemotingCommand

__all__ = ["FrameProxy", "route_rewriter"]


class FrameProxy:
    """A TCP proxy that decodes the server's frames and passes each through ``rewrite``; counts the
    requests it forwards by code (``requests``; ``pulls``: PULL_MESSAGE, 11); calls
    ``on_answer(request, response)`` for every answered request (not oneways), right after passing
    the answer on to the client."""

    def __init__(
        self,
        upstream: str,
        rewrite: Callable[[RemotingCommand], RemotingCommand],
        *,
        on_answer: Callable[[RemotingCommand, RemotingCommand], None] | None = None,
    ) -> None:
        self.upstream = upstream
        self.rewrite = rewrite
        self.on_answer = on_answer
        self.addr = ""
        self.pulls = 0
        self.requests: Counter[int] = Counter()
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._cut = False

    async def __aenter__(self) -> FrameProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def cut(self) -> None:
        """Partition: close every connection through the proxy, at both ends (the server sees its
        clients go, the clients their server), and close new ones at once until :meth:`heal`."""
        self._cut = True
        for w in self._writers:
            w.close()
        self._writers.clear()

    def heal(self) -> None:
        """End the partition: new connections are proxied again."""
        self._cut = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.close()
            return
        host, _, port = self.upstream.rpartition(":")
        ureader, uwriter = await asyncio.open_connection(host, int(port))
        self._writers += [writer, uwriter]
        asked: dict[int, RemotingCommand] = {}  # this connection's requests awaiting an answer, by opaque

        async def up() -> None:
            decoder = FrameDecoder()
            try:
                while data := await reader.read(65536):
                    for cmd in decoder.feed(data):
                        if not cmd.is_response:
                            self.requests[cmd.code] += 1
                            if cmd.code == 11:
                                self.pulls += 1
                            if self.on_answer is not None and not cmd.is_oneway:
                                asked[cmd.opaque] = cmd
                        uwriter.write(cmd.encode())
                    await uwriter.drain()
            finally:
                uwriter.close()

        async def down() -> None:
            decoder = FrameDecoder()
            try:
                while data := await ureader.read(65536):
                    for cmd in decoder.feed(data):
                        cmd = self.rewrite(cmd)
                        writer.write(cmd.encode())
                        if cmd.is_response and (req := asked.pop(cmd.opaque, None)) is not None:
                            assert self.on_answer is not None
                            self.on_answer(req, cmd)
                    await writer.drain()
            finally:
                writer.close()

        await asyncio.gather(up(), down(), return_exceptions=True)


def route_rewriter(
    addrs: Callable[[dict[str, str]], dict[str, str]],
) -> Callable[[RemotingCommand], RemotingCommand]:
    def rewrite(cmd: RemotingCommand) -> RemotingCommand:
        if cmd.is_response and cmd.body[:1] == b"{" and b'"brokerDatas"' in cmd.body:
            route = json.loads(cmd.body)
            for bd in route["brokerDatas"]:
                bd["brokerAddrs"] = addrs(bd["brokerAddrs"])
            cmd.body = json.dumps(route, separators=(",", ":")).encode()
        return cmd

    return rewrite
