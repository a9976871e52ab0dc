"""Flow control of the push consumer: a pull parked over the queue threshold resumes as soon as
consumption frees room."""

from __future__ import annotations

import os
import time

import anyio
from support.integration import consumer, produce

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals


async def test_pull_resumes_promptly_when_room_frees(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Flow control awaits the process queue: the parked pull goes out the moment consumption frees
    room (measured here as the time from the freeing removal to the handler seeing the first message
    of the next pulled batch)."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 200)
    release = anyio.Event()
    next_batch = anyio.Event()
    parked = -1  # how many messages the queue held when its pull parked (offsets 0..parked-1)

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        await release.wait()
        if 0 <= parked <= msgs[-1].queue_offset:  # pulled after the room freed
            next_batch.set()
        return ConsumeResult.SUCCESS

    async with consumer(
        cluster, group, topic, handler, timing, pull_threshold_for_queue=40, pull_batch_size=16
    ) as c:
        with anyio.fail_after(10):
            while (
                pq := next((p for mq, p in internals(c).queues.items() if mq.topic == topic), None)
            ) is None:
                await c.wait_rebalanced()
            await pq.wait_parked()  # over the threshold (40): the pull waits for room
        parked = pq.count
        assert parked > 40
        await anyio.sleep(timing.suspend_timeout + timing.held_pull_check_interval)
        assert pq.count == parked  # nothing pulled while over the threshold
        t0 = time.perf_counter()
        release.set()
        with anyio.fail_after(5):
            await next_batch.wait()
        delay = time.perf_counter() - t0
    if out := os.environ.get("RMQ_MEASURE_FILE"):  # figures for benchmarks/RESULTS.md
        with open(out, "a") as fh:  # noqa: ASYNC230 (test-only, tiny)
            fh.write(f"resume_delay_ms {delay * 1000:.2f}\n")
    assert delay < 0.1, f"pull resumed {delay * 1000:.1f} ms after room freed"
