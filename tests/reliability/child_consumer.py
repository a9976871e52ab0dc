"""A push consumer in its own process for the SIGKILL scenario (started by exec, killed with SIGKILL).

Usage: ``python child_consumer.py NAMESRV GROUP TOPIC INSTANCE``. Prints ``READY`` once started, then
one ``SEEN <msg_id>`` line per message, flushed before the handler returns SUCCESS: a line printed is
a message the handler saw; a message acknowledged was printed first.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer, Timing


async def main(namesrv: str, group: str, topic: str, instance: str) -> None:
    out = sys.stdout

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        out.write("".join(f"SEEN {m.msg_id}\n" for m in msgs))
        out.flush()
        await asyncio.sleep(0.002)  # a little work, so kills land mid-stream
        return ConsumeResult.SUCCESS

    async with PushConsumer(
        group,
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        timing=Timing.fast(),
        instance_name=instance,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        concurrency=4,
    ):
        out.write("READY\n")
        out.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
