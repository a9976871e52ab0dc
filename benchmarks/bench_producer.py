"""Producer benchmark: throughput, latency and client CPU of the ways to send.

Strategy: the embedded name server + broker run in a child process (``EmbeddedCluster(process=
True)``, default ``Timing()``), so the broker's work is not on the producer's event loop and the
client's CPU (``time.process_time`` of this process) is the producer's alone. One topic of
``--queues`` queues; ``--size``-byte bodies; each scenario sends ``--messages`` messages after a
warm-up of 200, timed from the first send to the last answer:

* sync: one ``send()`` at a time (latency = each send's round trip);
* inflight: ``--inflight`` tasks each sending one at a time (latency per send, queueing included);
* batch: ``send_batch()`` of ``--batch`` messages, one at a time (latency per batch);
* accumulator: ``auto_batch=True`` and ``--inflight`` concurrent senders (latency per send, the
  accumulator's wait included);
* transactional: ``send_in_transaction()`` one at a time, a local transaction that commits at once
  (half send + oneway END_TRANSACTION).

Figures are medians of ``--runs``: messages/s, p50/p99 latency in ms, client CPU microseconds per
message. The last line printed is the one-line JSON summary.

    python benchmarks/bench_producer.py [--messages N] [--size B] [--inflight K] [--batch M]
                                        [--queues Q] [--runs R] [--loop asyncio|uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async import (  # noqa: E402
    ClientConfig,
    Message,
    MessageExt,
    Producer,
    ProducerConfig,
    SendResult,
    Timing,
    TransactionProducer,
    TransactionResult,
)
from rmq_async.embedded import EmbeddedCluster  # noqa: E402

WARMUP = 200


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


async def _timed(n: int, run: Callable[[list[float]], Awaitable[None]]) -> dict[str, float]:
    lat: list[float] = []
    c0, t0 = time.process_time(), time.perf_counter()
    await run(lat)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "msgs_per_s": n / wall,
        "p50_ms": _quantile(lat, 0.5) * 1000,
        "p99_ms": _quantile(lat, 0.99) * 1000,
        "cpu_us_per_msg": cpu / n * 1e6,
    }


async def _one_at_a_time(send: Callable[[], Awaitable[object]], n: int, lat: list[float]) -> None:
    for _ in range(n):
        t = time.perf_counter()
        await send()
        lat.append(time.perf_counter() - t)


async def _concurrent(send: Callable[[], Awaitable[object]], n: int, k: int, lat: list[float]) -> None:
    left = n

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t = time.perf_counter()
            await send()
            lat.append(time.perf_counter() - t)

    await asyncio.gather(*(lane() for _ in range(k)))


async def scenario(name: str, args: argparse.Namespace, ns: str, topic: str) -> dict[str, float]:
    n, body = args.messages, b"x" * args.size
    cfg = ClientConfig(namesrv_addr=ns)

    def msg() -> Message:
        return Message(topic, body)

    if name == "transactional":

        async def commit(m: Message, r: SendResult) -> TransactionResult:
            return TransactionResult.COMMIT

        async def check(m: MessageExt) -> TransactionResult:
            return TransactionResult.COMMIT

        async with TransactionProducer("bench_tx_pg", checker=check, client_config=cfg) as tp:
            await _one_at_a_time(lambda: tp.send_in_transaction(msg(), commit), WARMUP, [])
            return await _timed(
                n, lambda lat: _one_at_a_time(lambda: tp.send_in_transaction(msg(), commit), n, lat)
            )
    pcfg = ProducerConfig(group=f"bench_{name}_pg", auto_batch=name == "accumulator")
    async with Producer(config=pcfg, client_config=cfg) as p:
        if name == "batch":
            size = args.batch

            def send() -> Awaitable[object]:
                return p.send_batch([msg() for _ in range(size)])

            await _one_at_a_time(send, WARMUP // size + 1, [])
            return await _timed(n // size * size, lambda lat: _one_at_a_time(send, n // size, lat))

        def send1() -> Awaitable[object]:
            return p.send(msg())

        if name == "sync":
            await _one_at_a_time(send1, WARMUP, [])
            return await _timed(n, lambda lat: _one_at_a_time(send1, n, lat))
        await _concurrent(send1, WARMUP, args.inflight, [])
        return await _timed(n, lambda lat: _concurrent(send1, n, args.inflight, lat))


SCENARIOS = ("sync", "inflight", "batch", "accumulator", "transactional")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "loop": args.loop,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "messages": args.messages,
        "size": args.size,
        "inflight_tasks": args.inflight,
        "batch_size": args.batch,
        "runs": args.runs,
    }
    async with EmbeddedCluster(brokers=1, queues=args.queues, timing=Timing(), process=True) as cluster:
        topic = f"BenchProd{int(time.time())}"
        await cluster.create_topic(topic)
        runs: dict[str, list[dict[str, float]]] = {s: [] for s in SCENARIOS}
        for _ in range(args.runs):
            for s in SCENARIOS:
                runs[s].append(await scenario(s, args, cluster.namesrv_addr, topic))
                print(s, json.dumps({k: round(v, 2) for k, v in runs[s][-1].items()}), file=sys.stderr)
    for s, rs in runs.items():
        out[s] = {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    args = p.parse_args()
    if args.loop == "uvloop":
        import uvloop

        res = uvloop.run(bench(args))
    else:
        res = asyncio.run(bench(args))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
