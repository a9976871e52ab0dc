"""The lite pull scenario (worker side): ``LitePullConsumer.poll`` drains the preloaded topic.

Strategy: the lite pull consumer is imported by name at run time, so a build without it reports the
scenario as skipped instead of failing to import the harness. The consumer subscribes with a fresh
group from the first offset; ``poll`` is called back to back and the meter counts what it returns.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import anyio

from .scenarios import Meter, Skipped, group_name, sampler

__all__ = ["lite_pull"]


async def lite_pull(p: dict[str, Any]) -> dict[str, Any]:
    """``lite-pull``: poll until ``messages`` messages are handed out."""
    try:
        mod = importlib.import_module("rmq_async.consumer.lite_pull")
        cls: Any = mod.LitePullConsumer
    except (ImportError, AttributeError) as exc:
        raise Skipped(f"rmq_async.consumer.lite_pull.LitePullConsumer is not available: {exc}") from exc
    meter = Meter(p["messages"])
    consumer = cls(
        group_name("lite"), namesrv_addr=p["namesrv"], consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(sampler, meter, lambda: (0, 0), p.get("interval", 0.1))
        meter.started = time.perf_counter()
        async with consumer:
            await consumer.subscribe(p["topic"], "*")
            with anyio.fail_after(p["timeout"]):
                while meter.seen < meter.target:
                    msgs = await consumer.poll(1.0)
                    if msgs:
                        meter.add(len(msgs))
        tg.cancel_scope.cancel()
    return meter.result()
