"""User code that misbehaves (a stray CancelledError, a context value of the wrong type) is a failed
consume: the message is consumed again and the consumer goes on. Embedded cluster, fast timing."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from support.integration import alive_until, consumer, produce, until

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, OrderlyContext, OrderlyResult, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals


async def _stray_cancel() -> None:
    fut = asyncio.get_running_loop().create_future()
    fut.cancel()  # cancelled by its owner, not by the consumer
    await fut


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
async def test_a_handler_raising_a_stray_cancelled_error_gets_the_message_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, orderly: bool
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    seen: Counter[str] = Counter()
    reconsumed: dict[str, int] = {}

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext | OrderlyContext) -> object:
        m = msgs[0]
        key = m.keys or ""
        seen[key] += 1
        if seen[key] == 1 and int(key.rsplit("-", 1)[1]) % 3 == 0:
            await _stray_cancel()
        if seen[key] > 1:
            reconsumed[key] = m.reconsume_times
        return OrderlyResult.SUCCESS if orderly else ConsumeResult.SUCCESS

    async with consumer(cluster, group, topic, handler, timing, orderly=orderly) as c:
        await produce(cluster.namesrv_addr, topic, 30)
        await alive_until(c, lambda: until(lambda: len(seen) == 30 and len(reconsumed) == 10), timeout=30)
        assert c.running
    assert set(reconsumed) == {f"k-{i}" for i in range(0, 30, 3)}
    # concurrently: sent back to %RETRY%group (reconsume times 1); orderly: retried in place (1 too)
    assert set(reconsumed.values()) == {1}
    assert all(seen[f"k-{i}"] == 1 for i in range(30) if i % 3)


async def test_an_after_hook_raising_a_stray_cancelled_error_does_not_stop_the_consumer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    keys: list[str] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        keys.extend(m.keys or "" for m in msgs)
        return ConsumeResult.SUCCESS

    async def after(msgs: list[MessageExt], ctx: ConsumeContext, result: ConsumeResult) -> None:
        await _stray_cancel()

    async with consumer(cluster, group, topic, handler, timing) as c:
        c.after_hooks.append(after)
        await produce(cluster.namesrv_addr, topic, 20)
        await alive_until(c, lambda: until(lambda: len(set(keys)) == 20))
        assert c.running


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
async def test_a_stopped_consumer_starts_again_and_goes_on_from_its_committed_offsets(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, orderly: bool
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    seen: Counter[str] = Counter()

    async def handler(msgs: list[MessageExt], ctx: object) -> None:
        seen.update(m.keys or "" for m in msgs)

    c = consumer(cluster, group, topic, handler, timing, orderly=orderly)
    c.set_consume_timeout(42.0)
    await produce(cluster.namesrv_addr, topic, 20)
    async with c:
        await alive_until(c, lambda: until(lambda: len(seen) == 20))
    assert not c.running and not c.assignment()
    await produce(cluster.namesrv_addr, topic, 20, start=20)
    async with c:  # the same object again: a fresh run, the same group and offsets
        assert c.running
        await alive_until(c, lambda: until(lambda: len(seen) == 40))
        assert c.assignment(), "the restarted consumer owns its queues again"
        assert internals(c).ctx.deadlines.timeout == 42.0 and internals(c).service.timeout == 42.0
    # offsets were persisted at the first stop: nothing of the first 20 came again
    assert sum(seen.values()) == 40, {k: n for k, n in seen.items() if n > 1}


async def test_a_stopped_deliveries_consumer_starts_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    c = consumer(cluster, group, topic, None, timing)
    keys: list[str] = []
    for run in range(2):
        await produce(cluster.namesrv_addr, topic, 10, start=10 * run)
        async with c, c.deliveries() as stream:
            async for d in stream:
                keys.append(d.message.keys or "")
                await d.ack()
                if len(keys) == 10 * (run + 1):
                    break
    assert sorted(keys) == sorted(f"k-{i}" for i in range(20))
