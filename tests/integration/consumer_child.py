"""A consumer in its own process (started by exec) for kill tests: prints one line per consumed key.

python consumer_child.py NAMESRV GROUP TOPIC
"""

from __future__ import annotations

import asyncio
import sys

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer, Timing


async def main(namesrv: str, group: str, topic: str) -> None:
    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        sys.stdout.write("".join(f"K {m.keys}\n" for m in msgs))
        sys.stdout.flush()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        group,
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        timing=Timing.fast(),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    async with consumer:
        print(f"READY {consumer.client_id}", flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
