"""A consumer process killed with SIGKILL mid-stream: its queues move to the other members and every
message is consumed at least once."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import anyio
from support.integration import Collector, produce, until_rebalanced

from rmq_async import PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster

CHILD = Path(__file__).with_name("consumer_child.py")


async def test_sigkilled_member_queues_move_to_the_others(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=8)
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), cluster.namesrv_addr, group, topic, stdout=asyncio.subprocess.PIPE
    )
    child_keys: set[str] = set()
    child_consumed = asyncio.Event()
    assert child.stdout is not None
    ready = await asyncio.wait_for(child.stdout.readline(), 20)
    assert ready.startswith(b"READY ")

    async def read_child() -> None:
        assert child.stdout is not None
        async for line in child.stdout:
            if line.startswith(b"K "):
                child_keys.add(line[2:].decode().strip())
                child_consumed.set()

    col = Collector()
    members = [
        PushConsumer(
            group,
            namesrv_addr=cluster.namesrv_addr,
            handler=col,
            subscriptions={topic: "*"},
            timing=timing,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        for _ in range(2)
    ]
    reader = asyncio.create_task(read_child())
    try:
        for m in members:
            await m.start()
        await produce(cluster.namesrv_addr, topic, 200)
        with anyio.fail_after(20):
            await child_consumed.wait()  # the child reports its keys through its stdout
        child.send_signal(signal.SIGKILL)
        await child.wait()
        killed_at = time.monotonic()
        await produce(cluster.namesrv_addr, topic, 200, start=200)

        def each_queue_once() -> bool:
            owned = [{q for q in m.assignment() if q.topic == topic} for m in members]
            return sum(len(o) for o in owned) == 8 and len(set().union(*owned)) == 8

        with anyio.fail_after(timing.rebalance_interval + timing.channel_idle_timeout + 5):
            await until_rebalanced(members, each_queue_once)
        takeover = time.monotonic() - killed_at
        await col.wait_until(lambda: len(set(col.seen) | child_keys) >= 400, 30)
    finally:
        for m in members:
            await m.stop()
        if child.returncode is None:
            child.kill()
            await child.wait()
        reader.cancel()
    assert set(col.seen) | child_keys == {f"k-{i}" for i in range(400)}
    # no queue owned twice once settled (checked above), and the take-over was bounded
    assert takeover < timing.rebalance_interval + timing.channel_idle_timeout
