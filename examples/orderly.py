"""Orderly consumption: the events of each order are handled in the order they were sent.

Each order goes through created -> paid -> packed -> shipped -> delivered. The producer sends every
event with a queue selector keyed by the order id, so all events of one order land in one queue; the
consumer runs with ``orderly=True``, which consumes each queue strictly in offset order (one batch at a
time, under a broker lock), while different queues progress concurrently.

    python examples/orderly.py                 # embedded cluster in this process
    python examples/orderly.py 127.0.0.1:9876  # a real cluster

Prints one JSON line: orders, events consumed, and how many events arrived out of order (0).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

from rmq_async import (
    Message,
    MessageExt,
    OrderlyContext,
    OrderlyResult,
    Producer,
    PushConsumer,
    select_by_key_hash,
)
from rmq_async.embedded import EmbeddedCluster

ORDERS = 10
STEPS = ("created", "paid", "packed", "shipped", "delivered")


async def main(namesrv: str | None) -> dict[str, object]:
    async with contextlib.AsyncExitStack() as stack:
        if namesrv is None:
            cluster = await stack.enter_async_context(EmbeddedCluster(brokers=1, queues=4))
            namesrv = cluster.namesrv_addr
        run = int(time.time())
        topic = f"OrderEvents{run}"

        async with Producer("orderly_example_producer", namesrv_addr=namesrv) as producer:
            # one sender per order keeps each order's events in send order; orders interleave
            async def send_order(order_id: int) -> None:
                for step in STEPS:
                    msg = Message(topic, f"{step}".encode(), tags=step, keys=f"order-{order_id}")
                    await producer.send(msg, selector=select_by_key_hash, arg=f"order-{order_id}")

            await asyncio.gather(*(send_order(o) for o in range(ORDERS)))

        progress: dict[str, int] = {}  # order key -> index of the last step seen
        out_of_order = 0
        events = 0
        done = asyncio.Event()

        async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            nonlocal out_of_order, events
            for m in msgs:
                key = m.keys or ""
                step = STEPS.index(m.body.decode())
                if step != progress.get(key, -1) + 1:
                    out_of_order += 1
                progress[key] = step
                events += 1
            if events >= ORDERS * len(STEPS):
                done.set()
            return OrderlyResult.SUCCESS  # or SUSPEND_CURRENT_QUEUE_A_MOMENT to retry this queue later

        async with PushConsumer(
            f"orderly_example_{run}",
            namesrv_addr=namesrv,
            handler=handler,
            subscriptions={topic: "*"},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            orderly=True,
        ):
            await asyncio.wait_for(done.wait(), timeout=120)
        return {
            "namesrv": namesrv,
            "orders": len(progress),
            "events": events,
            "out_of_order": out_of_order,
            "completed": sum(1 for s in progress.values() if s == len(STEPS) - 1),
        }


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if a != "--no-uvloop"]
    addr = argv[0] if argv else os.environ.get("NAMESRV_ADDR")
    print(json.dumps(asyncio.run(main(addr))), flush=True)
