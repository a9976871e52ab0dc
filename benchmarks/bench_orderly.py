"""Orderly consumer benchmark: throughput with a no-op handler, and per-queue concurrency with a
handler that awaits 1 ms, against the bare bound of Q tasks that each only await 1 ms in a loop.

Strategy: the embedded name server + broker run in a child process (``EmbeddedCluster(process=True)``,
default ``Timing()``) so the broker does not share the consumer's event loop. One topic of
``--queues`` queues is preloaded with ``--messages`` messages spread evenly over the queues (send
batches of 32 per queue). Each run uses a fresh group with ``orderly=True``,
CONSUME_FROM_FIRST_OFFSET, ``consume_batch_max_size`` 1, timed from the first to the last handler call:

* noop: the handler returns SUCCESS at once (all ``--messages``);
* sleep1ms: the handler awaits ``asyncio.sleep(0.001)`` (``--sleep-messages`` messages);
* bound: Q tasks that each await ``asyncio.sleep(0.001)`` in a loop, ``--sleep-messages`` iterations
  in total, on the same event loop: the most a 1 ms handler can do with one task per queue.

Figures are medians of ``--runs``. ``--write`` replaces the "## Orderly" section of
benchmarks/history/bench-orderly.md.

    python benchmarks/bench_orderly.py [--messages N] [--sleep-messages M] [--queues Q] [--runs R]
                                       [--loop asyncio|uvloop] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async import OrderlyContext, OrderlyResult  # noqa: E402
from rmq_async.config import ClientConfig, ProducerConfig, Timing  # noqa: E402
from rmq_async.consumer.push import PushConsumer  # noqa: E402
from rmq_async.embedded.cluster import EmbeddedCluster  # noqa: E402
from rmq_async.producer.producer import Producer  # noqa: E402
from rmq_async.protocol.message import Message  # noqa: E402
from rmq_async.protocol.stored import MessageExt  # noqa: E402

RESULTS = ROOT / "benchmarks" / "history" / "bench-orderly.md"  # the log; RESULTS.md quotes it


async def preload(namesrv: str, topic: str, n: int, queues: int) -> None:
    cfg = ProducerConfig(group="bench_orderly_producer", default_topic_queue_nums=queues)
    async with Producer(config=cfg, client_config=ClientConfig(namesrv_addr=namesrv)) as p:
        mqs = sorted(await p.queues(topic))
        body = b"x" * 64

        async def lane(q: int) -> None:
            idx = list(range(q, n, len(mqs)))
            for i in range(0, len(idx), 32):
                batch = [Message(topic, body, keys=f"k-{j}") for j in idx[i : i + 32]]
                await p.send_batch(batch, queue=mqs[q])

        await asyncio.gather(*(lane(q) for q in range(len(mqs))))


async def consume_run(namesrv: str, topic: str, n: int, group: str, sleep: float) -> dict[str, Any]:
    seen = 0
    t_first = t_last = 0.0
    done = asyncio.Event()
    last: dict[int, int] = {}
    violations = 0
    active: set[int] = set()
    max_active = 0

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        nonlocal seen, t_first, t_last, violations, max_active
        now = time.perf_counter()
        if seen == 0:
            t_first = now
        if sleep:
            active.add(ctx.mq.queue_id)
            max_active = max(max_active, len(active))
            await asyncio.sleep(sleep)
            active.discard(ctx.mq.queue_id)
        for m in msgs:
            if m.queue_offset < last.get(m.queue_id, -1):
                violations += 1
            last[m.queue_id] = m.queue_offset
        seen += len(msgs)
        t_last = time.perf_counter()
        if seen >= n:
            done.set()
        return OrderlyResult.SUCCESS

    async with PushConsumer(
        group,
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        orderly=True,
    ):
        await asyncio.wait_for(done.wait(), timeout=300)
    secs = t_last - t_first
    return {
        "msgs_per_s": seen / secs if secs > 0 else 0.0,
        "violations": violations,
        "max_active": max_active,
    }


async def bound_run(tasks: int, n: int, sleep: float) -> float:
    per = n // tasks

    async def one() -> None:
        for _ in range(per):
            await asyncio.sleep(sleep)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(tasks)))
    return per * tasks / (time.perf_counter() - t0)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    async with EmbeddedCluster(brokers=1, queues=args.queues, timing=Timing(), process=True) as cluster:
        ns = cluster.namesrv_addr
        run = int(time.time())
        t_noop, t_sleep = f"BenchOrdNoop{run}", f"BenchOrdSleep{run}"
        await preload(ns, t_noop, args.messages, args.queues)
        await preload(ns, t_sleep, args.sleep_messages, args.queues)
        noop, slept, bound = [], [], []
        for r in range(args.runs):
            noop.append(await consume_run(ns, t_noop, args.messages, f"bench_ord_noop_{run}_{r}", 0.0))
            slept.append(
                await consume_run(ns, t_sleep, args.sleep_messages, f"bench_ord_sl_{run}_{r}", 0.001)
            )
            bound.append(await bound_run(args.queues, args.sleep_messages, 0.001))
    med = statistics.median
    noop_rate = med(x["msgs_per_s"] for x in noop)
    sleep_rate = med(x["msgs_per_s"] for x in slept)
    bound_rate = med(bound)
    return {
        "loop": args.loop,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "queues": args.queues,
        "messages": args.messages,
        "sleep_messages": args.sleep_messages,
        "runs": args.runs,
        "noop_msgs_per_s": round(noop_rate),
        "noop_range": [round(min(x["msgs_per_s"] for x in noop)), round(max(x["msgs_per_s"] for x in noop))],
        "sleep1ms_msgs_per_s": round(sleep_rate),
        "bound_msgs_per_s": round(bound_rate),
        "sleep1ms_vs_bound": round(sleep_rate / bound_rate, 3),
        "max_queues_in_handlers_at_once": max(x["max_active"] for x in slept),
        "order_violations": sum(x["violations"] for x in noop + slept),
    }


def write_results(res: dict[str, Any]) -> None:
    noop = f"{res['noop_msgs_per_s']} (range {res['noop_range'][0]}-{res['noop_range'][1]})"
    section = f"""## Orderly

`python benchmarks/bench_orderly.py --write` ({res["loop"]} loop, Python {res["python"]}, {res["cpus"]} CPUs;
embedded broker in a child process, default `Timing()`; {res["queues"]} queues, consume batch size 1,
medians of {res["runs"]} runs, timed from the first to the last handler call).

| scenario | msgs/s |
|---|---|
| no-op handler, {res["messages"]} messages | {noop} |
| handler awaiting 1 ms, {res["sleep_messages"]} messages | {res["sleep1ms_msgs_per_s"]} |
| bound: {res["queues"]} tasks each awaiting 1 ms in a loop, same loop | {res["bound_msgs_per_s"]} |
| 1 ms handler / bound | **{res["sleep1ms_vs_bound"]}x** (target >= 0.8x) |

Queues inside the 1 ms handler at once (max): {res["max_queues_in_handlers_at_once"]} of {res["queues"]};
per-queue order violations: {res["order_violations"]}.

"""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    pattern = re.compile(r"^## Orderly\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text.rstrip("\n") + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=8000)
    p.add_argument("--sleep-messages", type=int, default=8000)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    if args.loop == "uvloop":
        import uvloop

        res = uvloop.run(bench(args))
    else:
        res = asyncio.run(bench(args))
    print(json.dumps(res), flush=True)
    if args.write:
        write_results(res)


if __name__ == "__main__":
    main()
