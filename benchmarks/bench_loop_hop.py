"""What one turn of the event loop costs at a low message rate, with nothing of rmq_async in the way:
the floor under the consumer's "read -> decoded" and "queued -> picked" stages.

A forked sender writes a 64-byte packet into a socket pair every ``--gap-ms`` (0.5: 2,000 a second,
the rate of the 2k latency run); the receiving protocol's ``data_received`` stamps the time and
resolves the future a task awaits (read -> task: the consumer's socket read -> pull task); that task
resolves a second task's future (task -> task: the hand-over to a consume worker). Between packets
the process sleeps in the loop's poll, as the consumer does at 2,000 msgs/s.

    python benchmarks/bench_loop_hop.py [--loop asyncio|uvloop|both] [--packets N] [--gap-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time


def _pct(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] / 1000.0


def _send(sock: socket.socket, n: int, gap: float) -> None:
    for _ in range(n):
        sock.send(b"x" * 64)
        time.sleep(gap)
    os._exit(0)


async def measure(packets: int, gap: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    first: list[int] = []
    second: list[int] = []
    waiting: list[asyncio.Future[int] | None] = [None]

    class Receiver(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            t = time.perf_counter_ns()
            fut = waiting[0]
            if fut is not None and not fut.done():
                fut.set_result(t)

    transport, _ = await loop.connect_accepted_socket(Receiver, a)
    pid = os.fork()
    if pid == 0:  # the sender (a forked child: no event loop of its own)
        _send(b, packets + 100, gap)
    handed: list[asyncio.Future[int] | None] = [None]

    async def worker() -> None:
        while True:
            fut = handed[0] = loop.create_future()
            t = await fut
            second.append(time.perf_counter_ns() - t)

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    for _ in range(packets):
        fut = waiting[0] = loop.create_future()
        t = await fut
        first.append(time.perf_counter_ns() - t)
        h = handed[0]
        if h is not None and not h.done():
            h.set_result(time.perf_counter_ns())
        await asyncio.sleep(0)
    task.cancel()
    transport.close()
    await asyncio.to_thread(os.waitpid, pid, 0)
    return {
        "read_to_task_p50_us": _pct(first, 0.5),
        "read_to_task_p99_us": _pct(first, 0.99),
        "task_to_task_p50_us": _pct(second, 0.5),
        "task_to_task_p99_us": _pct(second, 0.99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    ap.add_argument("--packets", type=int, default=4000)
    ap.add_argument("--gap-ms", type=float, default=0.5)
    args = ap.parse_args()
    for name in ("asyncio", "uvloop") if args.loop == "both" else (args.loop,):
        coro = measure(args.packets, args.gap_ms / 1000.0)
        if name == "uvloop":
            import uvloop

            res = uvloop.run(coro)
        else:
            res = asyncio.run(coro)
        print(name, ", ".join(f"{k} {v:.1f}" for k, v in res.items()))


if __name__ == "__main__":
    main()
