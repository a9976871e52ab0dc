"""The soak's cluster child: 2 embedded brokers (5.x flavour) + name server, each broker behind a cut proxy.

Usage: ``python -m rmq_async.bench.soak_cluster --data-dir DIR [--queues Q] [--timing-json JSON]``.
Strategy: the cluster runs in-process here (so single brokers and the name server can be stopped and
started on the same port and data directory, as :class:`~rmq_async.embedded.cluster.EmbeddedCluster`
allows in-process only), in a child process of the soak harness. Every broker advertises the address
of a small TCP proxy in front of it, so every client connection to a broker can be cut. The child
prints ``namesrv=ADDR`` once ready, then reads one command per line on stdin and answers one line:

* ``cut``: abort every proxied broker connection -> ``ok cut N``;
* ``restart I``: stop broker I cleanly (unregister, flush) and start it on its port and data dir ->
  ``ok restart I SECONDS``;
* ``nsdown S``: stop the name server, wait S seconds, start it again on its port -> ``ok nsdown S``;
* ``rss``: -> ``ok rss MB``.

stdin EOF (the harness ended, however it ended) stops the cluster (brokers flush) and the child.
The proxy is small on purpose (cut only): the reliability suite's ``FaultProxy`` lives under
``tests/`` and is not part of the installed package.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

from ..config import Timing
from ..embedded.cluster import EmbeddedCluster

__all__ = ["CutProxy", "main"]


class CutProxy:
    """A TCP proxy on 127.0.0.1 whose live connections :meth:`cut` aborts (RST both ways)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.host, self.port = host, int(port)
        self.links: set[tuple[asyncio.WriteTransport, asyncio.WriteTransport]] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None
        self.addr = ""
        self.cuts = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(self.host, self.port)
        except OSError:
            cw.transport.abort()
            return
        link = (cw.transport, uw.transport)
        self.links.add(link)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(262144):
                    w.write(data)
                    await w.drain()
            except (OSError, ConnectionError):
                pass

        up = asyncio.create_task(pump(cr, uw))
        down = asyncio.create_task(pump(ur, cw))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            for tr in link:
                tr.abort()
            self.links.discard(link)

    def cut(self) -> int:
        n = len(self.links)
        for link in list(self.links):
            for tr in link:
                tr.abort()
        self.cuts += n
        return n

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        self.cut()


def _rss_mb() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def main(args: argparse.Namespace) -> int:
    timing = Timing.model_validate_json(args.timing_json) if args.timing_json else Timing.fast()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with EmbeddedCluster(
        brokers=args.brokers, queues=args.queues, timing=timing, flavour=5, data_dir=Path(args.data_dir)
    ) as cluster:
        proxies: list[CutProxy] = []
        for i, b in enumerate(cluster.brokers):
            px = CutProxy(b.addr)
            await px.start()
            proxies.append(px)
            cluster.advertise(i, px.addr)
            await cluster.stop_broker(i)  # re-registers with the proxy's address
            await cluster.start_broker(i)
        print(f"namesrv={cluster.namesrv_addr}", flush=True)
        try:
            while line := (await reader.readline()).decode().strip():
                cmd, *rest = line.split()
                if cmd == "cut":
                    answer = f"ok cut {sum(p.cut() for p in proxies)}"
                elif cmd == "restart":
                    i = int(rest[0])
                    t0 = time.monotonic()
                    await cluster.stop_broker(i)
                    await cluster.start_broker(i)
                    answer = f"ok restart {i} {time.monotonic() - t0:.2f}"
                elif cmd == "nsdown":
                    await cluster.stop_namesrv()
                    await asyncio.sleep(float(rest[0]))  # the outage itself: a schedule
                    await cluster.start_namesrv()
                    answer = f"ok nsdown {rest[0]}"
                elif cmd == "rss":
                    answer = f"ok rss {_rss_mb():.1f}"
                else:
                    answer = f"error unknown command {cmd!r}"
                print(answer, flush=True)
        finally:
            for p in proxies:
                await p.close()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m rmq_async.bench.soak_cluster")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--brokers", type=int, default=2)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--timing-json", default="")
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(ap.parse_args())))
