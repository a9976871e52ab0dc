"""The start offset of a queue without a committed offset, the same for PushConsumer and
LitePullConsumer (one rule, Java's ``RebalancePushImpl`` / ``RebalanceLitePullImpl``
``computePullFromWhereWithException``): the committed offset, else FIRST -> 0 (no GET_MIN_OFFSET),
LAST -> the max offset, TIMESTAMP -> the offset searched by the consume timestamp, whose default (half
an hour before) is fixed when the consumer is made.

A broker answers QUERY_CONSUMER_OFFSET of a never-committed queue with 0 while the queue's first
message is still in memory (the embedded one always): the consume_from_where cases see a broker
that has no offset (QUERY_NOT_FOUND), as one whose first message went to disk answers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from support.broker_admin import commit_offset
from support.integration import Collector, produce

from rmq_async import EmbeddedCluster, PushConsumer, Timing
from rmq_async.client.api import MQClientAPI
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.consumer.rebalancer import Rebalancer
from rmq_async.protocol.headers import QueryConsumerOffsetRequestHeader
from rmq_async.protocol.mq import MessageQueue

pytestmark = pytest.mark.timeout(40)

KINDS = ["push", "lite"]


@asynccontextmanager
async def started(
    kind: str, cluster: EmbeddedCluster, group: str, topic: str, timing: Timing, **kw: object
) -> AsyncIterator[tuple[Rebalancer, list[MessageQueue]]]:
    """A running consumer of ``topic`` (subscribed, rebalanced once): its rebalancer and the queues."""
    if kind == "push":
        c = PushConsumer(
            group,
            namesrv_addr=cluster.namesrv_addr,
            handler=Collector(),
            subscriptions={topic: "*"},
            timing=timing,
            **kw,  # type: ignore[arg-type]
        )
        async with c:
            c.rebalance_now()
            await c.wait_rebalanced()
            yield c.rebalancer, sorted(await c.client.subscribe_queues(topic))
    else:
        lite_kw = dict(kw)
        if "consume_timestamp" in lite_kw:
            lite_kw["consume_timestamp_ms"] = lite_kw.pop("consume_timestamp")
        async with LitePullConsumer(
            group,
            namesrv_addr=cluster.namesrv_addr,
            timing=timing,
            **lite_kw,  # type: ignore[arg-type]
        ) as lc:
            await lc.subscribe(topic)
            await lc.wait_rebalanced()
            yield lc.rebalancer, sorted(await lc.client.subscribe_queues(topic))


def no_committed_offsets(monkeypatch: pytest.MonkeyPatch, group: str) -> None:
    real = MQClientAPI.query_consumer_offset

    async def query(
        self: MQClientAPI, addr: str, header: QueryConsumerOffsetRequestHeader, timeout: float
    ) -> int | None:
        if header.consumer_group == group:
            return None  # QUERY_NOT_FOUND
        return await real(self, addr, header, timeout)

    monkeypatch.setattr(MQClientAPI, "query_consumer_offset", query)


async def start_offsets(rebalancer: Rebalancer, mqs: list[MessageQueue]) -> dict[int, int]:
    return {mq.queue_id: await rebalancer.compute_pull_from_where(mq) for mq in mqs}


@pytest.mark.parametrize("kind", KINDS)
async def test_first_offset_is_zero_without_asking_the_broker(
    kind: str,
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    asked: list[MessageQueue] = []
    real = MQClientAPI.get_min_offset

    async def spy(self: MQClientAPI, addr: str, mq: MessageQueue, timeout: float) -> int:
        asked.append(mq)
        return await real(self, addr, mq, timeout)

    monkeypatch.setattr(MQClientAPI, "get_min_offset", spy)
    no_committed_offsets(monkeypatch, group)
    async with started(
        kind, cluster, group, topic, timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as (
        rb,
        mqs,
    ):
        assert await start_offsets(rb, mqs) == {q: 0 for q in range(4)}
    assert asked == []


@pytest.mark.parametrize("kind", KINDS)
async def test_last_offset_is_the_max_offset(
    kind: str,
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = names
    no_committed_offsets(monkeypatch, group)
    sent = await produce(cluster.namesrv_addr, topic, 10)
    per_queue: dict[int, int] = {}
    for r in sent:
        per_queue[r.message_queue.queue_id] = per_queue.get(r.message_queue.queue_id, 0) + 1
    async with started(
        kind, cluster, group, topic, timing, consume_from_where="CONSUME_FROM_LAST_OFFSET"
    ) as (
        rb,
        mqs,
    ):
        assert await start_offsets(rb, mqs) == {q: per_queue.get(q, 0) for q in range(4)}


@pytest.mark.parametrize("kind", KINDS)
async def test_timestamp_is_the_searched_offset(
    kind: str,
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = names
    no_committed_offsets(monkeypatch, group)
    before = await produce(cluster.namesrv_addr, topic, 8)
    # the broker answers the offset whose store time is nearest (a 5.x broker: the first at or after):
    # the second batch is stored right after ts, the first long before
    await anyio.sleep(0.3)
    ts = int(time.time() * 1000)
    await produce(cluster.namesrv_addr, topic, 8, start=8)
    older: dict[int, int] = {}
    for r in before:
        older[r.message_queue.queue_id] = older.get(r.message_queue.queue_id, 0) + 1
    async with started(
        kind, cluster, group, topic, timing, consume_from_where="CONSUME_FROM_TIMESTAMP", consume_timestamp=ts
    ) as (rb, mqs):
        assert await start_offsets(rb, mqs) == {q: older.get(q, 0) for q in range(4)}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_committed_offset_wins_over_consume_from_where(
    kind: str, cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 12)
    await commit_offset(cluster.brokers[0].addr, group, topic, 2, 1)
    async with started(
        kind, cluster, group, topic, timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as (
        rb,
        mqs,
    ):
        offsets = await start_offsets(rb, mqs)
    assert offsets == {0: 0, 1: 0, 2: 1, 3: 0}


@pytest.mark.parametrize("kind", KINDS)
async def test_the_default_timestamp_is_fixed_when_the_consumer_is_made(
    kind: str,
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    made = time.time()
    async with started(kind, cluster, group, topic, timing, consume_from_where="CONSUME_FROM_TIMESTAMP") as (
        rb,
        _,
    ):
        first = rb.settings.start_offsets.timestamp_ms()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 7200.0)  # two hours later
        assert rb.settings.start_offsets.timestamp_ms() == first
    assert abs(first - (made - 1800) * 1000) < 5000
