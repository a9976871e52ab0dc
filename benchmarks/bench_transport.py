"""Transport benchmark: request/response round trips per second over one connection.

Strategy: the echo server of ``tests/support/transport_server.py`` runs in a child process (on uvloop), so
client and server do not share a core or an event loop. The client measures, on the default
asyncio loop and on uvloop, (1) sequential round trips (one request in flight: latency) and
(2) pipelined round trips (``--concurrency`` tasks sharing the connection: throughput). The
request is a QUERY_CONSUMER_OFFSET-sized JSON header (four ext fields, no body); ``--body`` adds
a body echoed back. Each figure is the best of ``--repeat`` runs.

    python benchmarks/bench_transport.py [--count 20000] [--concurrency 64] [--write]

``--write`` replaces the "## Transport" section of benchmarks/history/bench-transport.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import uvloop  # noqa: E402

from rmq_async.protocol.command import RemotingCommand  # noqa: E402
from rmq_async.transport import Connection  # noqa: E402

__all__ = ["main"]

RESULTS = ROOT / "benchmarks" / "history" / "bench-transport.md"  # the log; RESULTS.md quotes it
SECTION = "## Transport"
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def make_request(body: bytes) -> RemotingCommand:
    fields = {"consumerGroup": "bench_cg", "topic": "BenchTopic", "queueId": "3", "bname": "broker-a"}
    return RemotingCommand.request(14, fields, body)


async def sequential(addr: str, count: int, body: bytes) -> float:
    conn = await Connection.connect(addr)
    try:
        for _ in range(200):  # warm-up
            await conn.request(make_request(body), 5.0)
        t0 = time.perf_counter()
        for _ in range(count):
            await conn.request(make_request(body), 5.0)
        return count / (time.perf_counter() - t0)
    finally:
        await conn.aclose()


async def pipelined(addr: str, count: int, concurrency: int, body: bytes) -> float:
    conn = await Connection.connect(addr)
    per_task = count // concurrency

    async def worker(n: int) -> None:
        for _ in range(n):
            await conn.request(make_request(body), 5.0)

    try:
        await asyncio.gather(*(worker(20) for _ in range(concurrency)))  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(per_task) for _ in range(concurrency)))
        return per_task * concurrency / (time.perf_counter() - t0)
    finally:
        await conn.aclose()


class _Floor(asyncio.Protocol):
    """The floor: pre-encoded frames out, response bytes counted, nothing decoded on our side."""

    def __init__(self, frame: bytes, resp_len: int, in_flight: int, total: int) -> None:
        self.frame, self.resp_len, self.in_flight, self.total = frame, resp_len, in_flight, total
        self.received = 0
        self.sent = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def start(self) -> None:
        self._send(min(self.in_flight, self.total))

    def _send(self, n: int) -> None:
        assert self.transport is not None
        self.transport.write(self.frame * n)
        self.sent += n

    def data_received(self, data: bytes) -> None:
        before = self.received // self.resp_len
        self.received += len(data)
        answered = self.received // self.resp_len
        more = min(answered - before, self.total - self.sent)
        if more > 0:
            self._send(more)
        if answered >= self.total and not self.done.done():
            self.done.set_result(None)


async def floor(addr: str, count: int, in_flight: int, body: bytes) -> float:
    host, port = addr.rsplit(":", 1)
    req = make_request(body)
    resp_len = len(req.make_response(0, "ok", req.ext_fields, req.body).encode())
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(
        lambda: _Floor(req.encode(), resp_len, in_flight, count), host, int(port)
    )
    try:
        t0 = time.perf_counter()
        proto.start()
        await proto.done
        return count / (time.perf_counter() - t0)
    finally:
        transport.close()


def run_on(loop_name: str, coro_fn: Callable[[], Coroutine[Any, Any, float]]) -> float:
    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        return runner.run(coro_fn())


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "support" / "transport_server.py"), "--uvloop"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if line[:1] != ["LISTENING"]:
        proc.kill()
        raise RuntimeError(f"server did not start: {line}")
    return proc, f"127.0.0.1:{line[1]}"


def stop_server(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()  # the server exits when its stdin closes
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def write_section(text: str) -> None:
    current = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    start = current.find(SECTION + "\n")
    if start < 0:
        new = current.rstrip("\n") + "\n\n" + text
    else:
        end = current.find("\n## ", start + len(SECTION))
        new = current[:start] + text + (current[end + 1 :] if end >= 0 else "")
    RESULTS.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20000, help="round trips per run")
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight when pipelined")
    ap.add_argument("--body", type=int, default=0, help="request body bytes (echoed back)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    ap.add_argument("--write", action="store_true", help="update its section in history/bench-transport.md")
    args = ap.parse_args(argv)
    body = b"x" * args.body

    proc, addr = start_server()
    rows = []

    def best(fn: Callable[[], Coroutine[Any, Any, float]], loop_name: str) -> float:
        return max(run_on(loop_name, fn) for _ in range(args.repeat))

    seq_n, n, conc = args.count // 4, args.count, args.concurrency
    try:
        for loop_name in LOOPS:
            seq = best(lambda: sequential(addr, seq_n, body), loop_name)
            pipe = best(lambda: pipelined(addr, n, conc, body), loop_name)
            floor_seq = best(lambda: floor(addr, seq_n, 1, body), loop_name)
            floor_pipe = best(lambda: floor(addr, n, conc, body), loop_name)
            rows.append((loop_name, seq, pipe, floor_seq, floor_pipe))
            print(f"{loop_name:8} sequential {seq:8.0f} rt/s (floor {floor_seq:8.0f})", end="  ")
            print(f"pipelined {pipe:8.0f} rt/s (floor {floor_pipe:8.0f})")
    finally:
        stop_server(proc)

    table = [
        SECTION,
        "",
        "`python benchmarks/bench_transport.py --write`: request/response round trips over one",
        "`Connection` to the echo server of `tests/support/transport_server.py` running on uvloop in a child",
        f"process. Request: code 14 with 4 ext fields (JSON header), {args.body} B body, echoed back.",
        f"Sequential = 1 request in flight ({args.count // 4} round trips); pipelined = {args.concurrency}",
        f"tasks sharing the connection ({args.count} round trips). Best of {args.repeat} runs.",
        f"Python {platform.python_version()}, uvloop {version('uvloop')}, {os.cpu_count()} CPUs,",
        f"{platform.machine()} {platform.system()}; figures from a shared machine, so expect noise.",
        "",
        "The floor columns replay pre-encoded request frames on a bare `asyncio.Protocol` and only",
        "count response bytes: kernel, loop and server cost, no client-side work. The gap to them is",
        "what `Connection` adds (encode, opaque table, timer, decode, future wake-up).",
        "",
        "| client loop | sequential rt/s | mean latency | floor (seq.) | pipelined rt/s | floor (pipel.) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for loop_name, seq, pipe, floor_seq, floor_pipe in rows:
        cells = [loop_name, f"{seq:,.0f}", f"{1e6 / seq:.0f} µs", f"{floor_seq:,.0f}"]
        cells += [f"{pipe:,.0f}", f"{floor_pipe:,.0f}"]
        table.append("| " + " | ".join(cells) + " |")
    text = "\n".join(table) + "\n"
    print()
    print(text)
    if args.write:
        write_section(text)
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
