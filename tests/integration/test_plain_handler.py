"""A plain (not async) handler on a push consumer: called by the pulling task itself, with what a
handler's result means unchanged (successes acknowledged, failures sent back and consumed again,
``ack_index``), hooks and observers still applied, and a plain function that returns an awaitable
still awaited. Embedded cluster, fast timing."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from support.integration import Collector, alive_until, consumer, produce, until

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, OrderlyContext, OrderlyResult, Timing
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster


async def test_a_plain_handler_consumes_every_message_once_and_commits(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=4)
    col = Collector()
    tasks: set[asyncio.Task[object] | None] = set()

    def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        tasks.add(asyncio.current_task())
        return col.plain()(msgs, ctx)

    async with consumer(cluster, group, topic, handler, timing) as c:
        await produce(cluster.namesrv_addr, topic, 60)
        await alive_until(c, lambda: col.wait_unique(60))
        assert sum(t.consumed_ok for t in c.stats.topics.values()) >= 60
    assert col.duplicates == 0
    assert None not in tasks and len(tasks) <= 4  # the pulling tasks (one a queue), no worker pool
    # committed: the same group started again gets nothing of them
    again = Collector()
    async with consumer(cluster, group, topic, again.plain(), timing) as c:
        await produce(cluster.namesrv_addr, topic, 1, start=60)
        await alive_until(c, lambda: again.wait_unique(1))
    assert set(again.seen) == {"k-60"}


@pytest.mark.parametrize("batch", [1, 4], ids=["one-a-call", "four-a-call"])
async def test_a_plain_handler_s_failures_are_consumed_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, batch: int
) -> None:
    # k % 5 == 0 raises, k % 5 == 1 asks RECONSUME_LATER, k % 5 == 2 acknowledges only the messages
    # before it (ack_index): each is sent back once, then consumed again with reconsume_times 1
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    seen: Counter[str] = Counter()
    again: dict[str, int] = {}

    def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        for j, m in enumerate(msgs):
            key = m.keys or ""
            seen[key] += 1
            if seen[key] > 1:
                again[key] = m.reconsume_times
                continue
            k = int(key.rsplit("-", 1)[1])
            if k % 5 == 0:
                raise RuntimeError(f"failed on {key}")
            if k % 5 == 1:
                return ConsumeResult.RECONSUME_LATER
            if k % 5 == 2:
                ctx.ack_index = j - 1
                return ConsumeResult.SUCCESS
        return None

    async with consumer(cluster, group, topic, handler, timing, consume_batch_max_size=batch) as c:
        await produce(cluster.namesrv_addr, topic, 40)
        # every failure's retry, not only the raised ones': a raise and the RECONSUME_LATER and
        # ack_index after it are sent back one after the other, and come back in that order
        failing = {f"k-{i}" for i in range(40) if i % 5 in (0, 1, 2)}
        await alive_until(c, lambda: until(lambda: len(seen) == 40 and failing <= set(again)), 30)
        assert c.running
    assert failing <= set(again)  # (with 4 a call, others of a failed batch come back too)
    assert all(again[k] >= 1 for k in failing)
    if batch == 1:
        assert set(again) == failing and set(again.values()) == {1}


async def test_a_plain_function_returning_a_coroutine_is_awaited(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    ran: Counter[str] = Counter()

    async def body(msgs: list[MessageExt]) -> ConsumeResult:
        await asyncio.sleep(0)
        for m in msgs:
            ran[m.keys or ""] += 1
        return ConsumeResult.SUCCESS

    async with consumer(cluster, group, topic, lambda msgs, ctx: body(msgs), timing) as c:
        await produce(cluster.namesrv_addr, topic, 30)
        await alive_until(c, lambda: until(lambda: len(ran) == 30))
    assert all(n == 1 for n in ran.values()), ran  # the coroutine made inline was never started
    assert "returned an awaitable" in caplog.text


async def test_a_plain_handler_with_hooks_gets_them_around_each_call(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    col = Collector()
    before: list[str] = []
    after: list[ConsumeResult] = []

    async def hook(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        before.extend(m.keys or "" for m in msgs)

    async with consumer(cluster, group, topic, col.plain(), timing) as c:
        c.before_hooks.append(hook)
        c.after_hooks.append(lambda msgs, ctx, result: after.append(result))
        await produce(cluster.namesrv_addr, topic, 20)
        await alive_until(c, lambda: col.wait_unique(20))
        await alive_until(c, lambda: until(lambda: len(after) >= 20))
    assert set(before) == set(col.seen) and len(before) >= 20
    assert set(after) == {ConsumeResult.SUCCESS}


async def test_a_plain_orderly_handler_consumes_each_queue_in_order(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    offsets: dict[int, list[int]] = {}

    def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        for m in msgs:
            offsets.setdefault(m.queue_id, []).append(m.queue_offset)
        return OrderlyResult.SUCCESS

    async with consumer(cluster, group, topic, handler, timing, orderly=True) as c:
        await produce(cluster.namesrv_addr, topic, 30)
        await alive_until(c, lambda: until(lambda: sum(map(len, offsets.values())) >= 30))
    for got in offsets.values():
        assert got == sorted(got) and len(set(got)) == len(got)


async def test_a_plain_handler_pops(names: tuple[str, str], timing: Timing) -> None:
    # POP (client_rebalance=False, a 5.x cluster) calls it from its own tasks: every message acked
    topic, group = names
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, flavour=5) as cluster:
        await cluster.create_topic(topic, 4)
        answers = await set_consume_mode(topic, group, "POP", 0, namesrv_addr=cluster.namesrv_addr)
        assert answers and all(code == 0 for code, _ in answers.values()), answers
        await produce(cluster.namesrv_addr, topic, 40)
        col = Collector()
        async with consumer(cluster, group, topic, col.plain(), timing, client_rebalance=False) as c:
            await alive_until(c, lambda: col.wait_unique(40))
            await alive_until(c, lambda: until(lambda: c.health().pop["acked"] >= 40))
    assert col.duplicates == 0
