"""The start offset of a queue without a committed offset, the same for PushConsumer and
LitePullConsumer (one rule, Java's ``RebalancePushImpl`` / ``RebalanceLitePullImpl``
``computePullFromWhereWithException``): the committed offset, else FIRST -> 0 (no GET_MIN_OFFSET),
LAST -> the max offset, TIMESTAMP -> the offset searched by the consume timestamp, whose default (half
an hour before) is fixed when the consumer is made.

A broker answers QUERY_CONSUMER_OFFSET of a never-committed queue with 0 while the queue's min offset
is 0 and its first message in memory; the consume_from_where cases ask about queues whose head
retention deleted (``EmbeddedCluster.truncate_head``), which it answers with QUERY_NOT_FOUND. Those
queues belong to a second topic the consumer does not pull (its pulls would commit offsets, which win
over consume_from_where)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from support.broker_admin import commit_offset, query_offset
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import Collector, produce

from rmq_async import PushConsumer, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.consumer.rebalancer import Rebalancer
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.mq import MessageQueue

pytestmark = pytest.mark.timeout(40)

KINDS = ["push", "lite"]


@asynccontextmanager
async def started(
    kind: str,
    cluster: EmbeddedCluster,
    group: str,
    topic: str,
    timing: Timing,
    namesrv: str | None = None,
    **kw: object,
) -> AsyncIterator[tuple[Rebalancer, list[MessageQueue]]]:
    """A running consumer (subscribed to an idle topic, rebalanced once): its rebalancer and the queues
    of ``topic``, whose heads retention deleted (min offset 1: the broker has no offset for them)."""
    cluster.truncate_head(topic, 1)
    idle = f"{topic}Idle"
    await produce(cluster.namesrv_addr, idle, 1)
    namesrv = namesrv or cluster.namesrv_addr
    if kind == "push":
        c = PushConsumer(
            group,
            namesrv_addr=namesrv,
            handler=Collector(),
            subscriptions={idle: "*"},
            timing=timing,
            **kw,  # type: ignore[arg-type]
        )
        async with c:
            c.rebalance_now()
            await c.wait_rebalanced()
            yield internals(c).rebalancer, sorted(await internals(c).client.subscribe_queues(topic))
    else:
        lite_kw = dict(kw)
        if "consume_timestamp" in lite_kw:
            lite_kw["consume_timestamp_ms"] = lite_kw.pop("consume_timestamp")
        async with LitePullConsumer(
            group,
            namesrv_addr=namesrv,
            timing=timing,
            **lite_kw,  # type: ignore[arg-type]
        ) as lc:
            await lc.subscribe(idle)
            await lc.wait_rebalanced()
            yield internals(lc).rebalancer, sorted(await internals(lc).client.subscribe_queues(topic))


async def start_offsets(rebalancer: Rebalancer, mqs: list[MessageQueue]) -> dict[int, int]:
    return {mq.queue_id: await rebalancer.compute_pull_from_where(mq) for mq in mqs}


@pytest.mark.parametrize("kind", KINDS)
async def test_first_offset_is_zero_without_asking_the_broker(
    kind: str, cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    broker = cluster.brokers[0].addr
    async with (
        FrameProxy(broker, lambda cmd: cmd) as wire,
        FrameProxy(cluster.namesrv_addr, route_rewriter(lambda _: {"0": wire.addr})) as ns,
        started(
            kind, cluster, group, topic, timing, ns.addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        ) as (rb, mqs),
    ):
        assert [await query_offset(broker, group, topic, q) for q in range(4)] == [-1] * 4  # 22
        asked = wire.requests[RequestCode.QUERY_CONSUMER_OFFSET]
        assert await start_offsets(rb, mqs) == {q: 0 for q in range(4)}
        assert wire.requests[RequestCode.QUERY_CONSUMER_OFFSET] == asked + 4
    assert wire.requests[RequestCode.GET_MIN_OFFSET] == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_last_offset_is_the_max_offset(
    kind: str,
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
) -> None:
    topic, group = names
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
) -> None:
    topic, group = names
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
