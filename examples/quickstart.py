"""Quickstart: produce and consume with rmq_async.

With no name server address (no argument, no NAMESRV_ADDR) it starts the embedded name server +
broker in this process, so it runs on a fresh machine with nothing else installed:

    python examples/quickstart.py                 # embedded cluster
    python examples/quickstart.py 127.0.0.1:9876  # a real cluster
    python examples/quickstart.py --no-uvloop     # the default asyncio loop instead of uvloop
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

from rmq_async import ConsumeContext, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from rmq_async.embedded import EmbeddedCluster

TOPIC = "QuickstartTopic"
GROUP = "quickstart_group"
COUNT = 1000


async def main(namesrv: str | None) -> dict[str, object]:
    async with contextlib.AsyncExitStack() as stack:
        if namesrv is None:
            cluster = await stack.enter_async_context(EmbeddedCluster(brokers=1, queues=4))
            namesrv = cluster.namesrv_addr
        run = int(time.time())
        topic = f"{TOPIC}{run}"

        async with Producer("quickstart_producer", namesrv_addr=namesrv) as producer:
            t0 = time.perf_counter()
            results = await asyncio.gather(
                *(
                    producer.send(Message(topic, f"hello {i}".encode(), tags="TagA", keys=f"k-{i}"))
                    for i in range(COUNT)
                )
            )
            send_secs = time.perf_counter() - t0
        queues = sorted({str(r.message_queue) for r in results})

        seen: set[str] = set()
        all_seen = asyncio.Event()

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
            for m in msgs:
                seen.add(m.keys or m.msg_id)
            if len(seen) >= COUNT:
                all_seen.set()
            return ConsumeResult.SUCCESS

        t1 = time.perf_counter()
        async with PushConsumer(
            f"{GROUP}_{run}",
            namesrv_addr=namesrv,
            handler=handler,
            subscriptions={topic: "TagA"},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        ):
            await asyncio.wait_for(all_seen.wait(), timeout=120)
        consume_secs = time.perf_counter() - t1
        return {
            "namesrv": namesrv,
            "topic": topic,
            "sent": len(results),
            "queues": len(queues),
            "consumed_unique": len(seen),
            "send_seconds": round(send_secs, 3),
            "consume_seconds": round(consume_secs, 3),
        }


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-uvloop"]
    addr = args[0] if args else os.environ.get("NAMESRV_ADDR")
    try:
        if "--no-uvloop" in sys.argv:
            raise ImportError
        import uvloop

        summary = uvloop.run(main(addr))
    except ImportError:
        summary = asyncio.run(main(addr))
    print(json.dumps(summary))
    sys.exit(0 if summary["consumed_unique"] == summary["sent"] else 1)
