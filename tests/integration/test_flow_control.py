"""Flow control of the push consumer: a pull parked over the queue threshold resumes as soon as
consumption frees room."""

from __future__ import annotations

import os
import time

import anyio
from support.integration import consumer, produce

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    EmbeddedCluster,
    MessageExt,
    Timing,
)


async def test_pull_resumes_promptly_when_room_frees(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Flow control awaits the process queue: the parked pull goes out the moment consumption frees
    room (measured here as the time from the freeing removal to the next pulled batch arriving)."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 200)
    release = anyio.Event()
    consumed = 0

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        nonlocal consumed
        await release.wait()
        consumed += len(msgs)
        return ConsumeResult.SUCCESS

    async with consumer(
        cluster, group, topic, handler, timing, pull_threshold_for_queue=40, pull_batch_size=16
    ) as c:
        with anyio.fail_after(10):
            while not any(mq.topic == topic and pq.count > 40 for mq, pq in c.pqs.items()):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        pq = next(p for mq, p in c.pqs.items() if mq.topic == topic)
        parked = pq.count
        await anyio.sleep(timing.suspend_timeout + timing.held_pull_check_interval)
        assert pq.count == parked  # nothing pulled while over the threshold
        t0 = time.perf_counter()
        release.set()
        with anyio.fail_after(5):
            while pq.queue_offset_max < parked + 15:  # noqa: ASYNC110 (the next pulled batch)
                await anyio.sleep(0.001)
        delay = time.perf_counter() - t0
    if out := os.environ.get("RMQ_MEASURE_FILE"):  # figures for benchmarks/RESULTS.md
        with open(out, "a") as fh:  # noqa: ASYNC230 (test-only, tiny)
            fh.write(f"resume_delay_ms {delay * 1000:.2f}\n")
    assert delay < 0.1, f"pull resumed {delay * 1000:.1f} ms after room freed"
