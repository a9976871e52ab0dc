"""A push consumer in its own process for the SIGKILL scenarios (started by exec, killed with SIGKILL).

Usage: ``python child_consumer.py NAMESRV GROUP TOPIC INSTANCE [concurrent|orderly|pop]``. Prints
``READY`` once started, then one line per message, flushed before the handler returns SUCCESS: a
line printed is a message the handler saw; a message acknowledged was printed first.

* concurrent (the default): ``SEEN <msg_id>``, printed when the handler is called; ``pop`` the same,
  with ``client_rebalance=False`` (POP consumption on a 5.x broker).
* orderly (``orderly=True``, handler returns ``OrderlyResult.SUCCESS``): ``OSEEN <msg_id> <queue id>
  <keys> <call no> <call start> <call end>`` printed after the handler's work, with no await between
  the print and the return, so a printed batch is one that completed (a batch cancelled at its lease
  end is never printed). Times are ``time.monotonic()`` (CLOCK_MONOTONIC: comparable across
  processes on one Linux host); call numbers count this process's handler calls.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    MessageExt,
    OrderlyContext,
    OrderlyResult,
    PushConsumer,
    Timing,
)


async def main(namesrv: str, group: str, topic: str, instance: str, mode: str = "concurrent") -> None:
    out = sys.stdout
    calls = itertools.count()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        out.write("".join(f"SEEN {m.msg_id}\n" for m in msgs))
        out.flush()
        await asyncio.sleep(0.002)  # a little work, so kills land mid-stream
        return ConsumeResult.SUCCESS

    async def orderly_handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        start = time.monotonic()
        await asyncio.sleep(0.002)  # a little work, so kills land mid-stream
        n, end, qid = next(calls), time.monotonic(), ctx.mq.queue_id
        out.write("".join(f"OSEEN {m.msg_id} {qid} {m.keys} {n} {start:.6f} {end:.6f}\n" for m in msgs))
        out.flush()
        return OrderlyResult.SUCCESS

    orderly = mode == "orderly"
    async with PushConsumer(
        group,
        namesrv_addr=namesrv,
        handler=orderly_handler if orderly else handler,
        subscriptions={topic: "*"},
        timing=Timing.fast(),
        instance_name=instance,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        concurrency=4,
        orderly=orderly,
        client_rebalance=mode != "pop",
    ):
        out.write("READY\n")
        out.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
