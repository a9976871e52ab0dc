"""Long polling: held pulls are answered by a matching send at once, else after suspend + check."""

from __future__ import annotations

import asyncio
import contextlib
import time

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType

from .rawclient import RawClient, decode_messages


async def test_held_pull_answered_by_send(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    async with RawClient(cluster.brokers[0].addr) as producer:
        start = time.monotonic()
        held = asyncio.ensure_future(
            broker.pull("lp", topic, 2, 0, sys_flag=6, subscription="*", suspend_ms=15000)
        )
        await asyncio.sleep(0.05)
        assert not held.done()
        await producer.send(topic, b"wake", queue_id=2)
        r = await asyncio.wait_for(held, 1.0)
        assert time.monotonic() - start < 1.0
    assert r.code == 0 and [m.body for m in decode_messages(r.body)] == [b"wake"]


async def test_unmatched_send_does_not_wake(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    """A message the filter rejects leaves the pull parked; the next hold check answers 20."""
    await cluster.create_topic(topic)
    held = asyncio.ensure_future(
        broker.pull("lp", topic, 0, 0, sys_flag=6, subscription="TagA", suspend_ms=15000)
    )
    await asyncio.sleep(0.05)
    await broker.send(topic, b"other", tags="TagB")
    await asyncio.sleep(0.05)
    assert not held.done()
    r = await asyncio.wait_for(held, 1.0)  # the check (every 0.25 s) sees new data: re-run -> no match
    assert (r.code, r.remark, r.ext_fields["nextBeginOffset"]) == (20, "NO_MATCHED_MESSAGE", "1")


async def test_held_pull_times_out_after_suspend_and_check(cluster: EmbeddedCluster, topic: str) -> None:
    await cluster.create_topic(topic)
    check = cluster.timing.held_pull_check_interval
    async with RawClient(cluster.brokers[0].addr) as c:
        start = time.monotonic()
        r = await c.pull(
            "lp", topic, 1, 0, sys_flag=6, subscription="*", suspend_ms=300, serialize=SerializeType.ROCKETMQ
        )
        took = time.monotonic() - start
    assert (r.code, r.remark) == (19, "NO_MESSAGE_IN_QUEUE")
    assert 0.3 <= took <= 0.3 + check + 0.3
    assert r.serialize_type == SerializeType.JSON  # held answers are JSON even to a binary client


async def test_client_timeout_shorter_than_hold_fails() -> None:
    timing = Timing.fast(held_pull_check_interval=0.5, pull_timeout=3.0)
    async with EmbeddedCluster(timing=timing) as cluster, RawClient(cluster.brokers[0].addr) as c:
        await cluster.create_topic("HoldT")
        # suspend 0.3 s, but the answer waits for the next check (up to 0.5 s later)
        pending = asyncio.ensure_future(
            c.pull("lp", "HoldT", 0, 0, sys_flag=6, subscription="*", suspend_ms=300)
        )
        done, _ = await asyncio.wait([pending], timeout=0.31)
        assert not done
        r = await asyncio.wait_for(pending, 2)
        assert r.code == 19


async def test_closed_connection_drops_held_pull(cluster: EmbeddedCluster, topic: str) -> None:
    await cluster.create_topic(topic)
    async with RawClient(cluster.brokers[0].addr) as c:
        held = asyncio.ensure_future(c.pull("lp", topic, 0, 0, sys_flag=6, subscription="*", suspend_ms=5000))
        await asyncio.sleep(0.05)
        assert cluster.brokers[0].holds.table
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        await held
    await asyncio.sleep(0.05)
    assert cluster.brokers[0].holds.table == {}
