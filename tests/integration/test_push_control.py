"""PushConsumer control on the embedded cluster: pause/resume (concurrent and orderly), seek while
consuming, committed/position/end_offsets, and manual commit across a restart."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from support.integration import Collector, consumer, produce, until_rebalanced

from rmq_async import (
    ClientError,
    ConfigError,
    ConsumeContext,
    ConsumeResult,
    MessageExt,
    MessageQueue,
    PushConsumer,
    Timing,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals

pytestmark = pytest.mark.timeout(60)


def by_topic(col: Collector) -> Counter[str]:
    return Counter(m.topic for m in col.msgs)


def queues_of(c: PushConsumer, topic: str) -> list[MessageQueue]:
    return sorted(mq for mq in c.assignment() if mq.topic == topic)


async def owns_all(c: PushConsumer, *topics: str) -> None:
    with anyio.fail_after(15):
        await until_rebalanced([c], lambda: all(len(queues_of(c, t)) == 4 for t in topics))


async def parked(c: PushConsumer, mqs: list[MessageQueue]) -> None:
    """Every queue of ``mqs`` has its pull loop waiting (a pull out when paused answered first)."""
    with anyio.fail_after(10):
        for mq in mqs:
            await internals(c).queues[mq].wait_parked()


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_a_paused_topic_is_not_pulled_while_another_flows_and_resume_loses_nothing(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, orderly: bool
) -> None:
    topic, group = names
    held, flowing = f"{topic}H", f"{topic}F"
    col = Collector()
    c = consumer(cluster, group, held, col, timing, orderly=orderly)
    c.subscribe(flowing)
    c.pause(held)  # before start: the queues assigned for it start paused
    assert c.paused() == {held}
    await produce(cluster.namesrv_addr, held, 20)
    await produce(cluster.namesrv_addr, flowing, 20, start=100)
    async with c:
        await owns_all(c, held, flowing)
        hq = queues_of(c, held)
        assert all(internals(c).queues[mq].paused for mq in hq)
        await col.wait_until(lambda: by_topic(col)[flowing] == 20)
        await parked(c, hq)
        assert by_topic(col)[held] == 0
        # the lag grows: everything sent is still ahead of the paused queues' positions
        ends = await c.end_offsets(hq)
        assert sum(ends.values()) - sum(c.position(mq) for mq in hq) == 20
        c.resume([held])
        assert c.paused() == set()
        await col.wait_until(lambda: by_topic(col)[held] == 20)
        # paused while running, a long poll out: what it brings is not applied, nothing is lost
        fq = queues_of(c, flowing)
        c.pause(fq)
        assert c.paused() == set(fq)
        await produce(cluster.namesrv_addr, flowing, 10, start=200)
        await produce(cluster.namesrv_addr, held, 10, start=300)
        await col.wait_until(lambda: by_topic(col)[held] == 30)
        await parked(c, fq)
        assert by_topic(col)[flowing] == 20
        with pytest.raises(ConfigError, match="resume the topic"):
            c.pause(flowing)
            c.resume([fq[0]])
        c.resume(flowing)  # the topic and its queues paused one by one
        await col.wait_until(lambda: by_topic(col)[flowing] == 30)
    assert col.unique == 60 and col.duplicates == 0


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_seek_while_consuming_rewinds_and_skips(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, orderly: bool
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 20)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing, orderly=orderly) as c:
        await col.wait_unique(20)
        await owns_all(c, topic)
        mq = Counter(r.message_queue for r in sent).most_common(1)[0][0]
        n = sum(1 for r in sent if r.message_queue == mq)
        keys = {str(m.keys) for m in col.msgs if m.queue_id == mq.queue_id}
        c.pause(topic)
        await parked(c, queues_of(c, topic))
        await c.seek(mq, 0)
        # committed to the broker at once, and the queue goes on from there
        assert await c.committed(mq) == 0 and c.position(mq) == 0
        c.resume(topic)
        await col.wait_until(lambda: all(col.seen[k] == 2 for k in keys))
        assert sum(col.seen.values()) == 20 + n  # only that queue again
        # to the end: what was sent while paused is passed over
        c.pause(topic)
        await parked(c, queues_of(c, topic))
        await produce(cluster.namesrv_addr, topic, 8, start=100)
        await c.seek_to_end(topic)
        ends = await c.end_offsets(queues_of(c, topic))
        assert {q: c.position(q) for q in ends} == ends
        assert {q: await c.committed(q) for q in ends} == ends
        c.resume(topic)
        await produce(cluster.namesrv_addr, topic, 4, start=200)
        await col.wait_until(lambda: sum(1 for m in col.msgs if int(str(m.keys)[2:]) >= 200) == 4)
        assert not any(100 <= int(str(m.keys)[2:]) < 200 for m in col.msgs)
        with pytest.raises(ConfigError, match="outside the queue's range"):
            await c.seek(mq, 10_000)
        with pytest.raises(ClientError, match="not assigned"):
            await c.seek(MessageQueue(topic, mq.broker_name, 99), 0)
        with pytest.raises(ClientError, match="not assigned"):
            c.position(MessageQueue(topic, mq.broker_name, 99))


async def test_manual_commit_and_a_restart_resume_exactly_after_the_last_commit(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 10)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing, auto_commit=False) as c:
        await col.wait_unique(10)
        await internals(c).service.wait_idle()
        mqs = queues_of(c, topic)
        ends = await c.end_offsets(mqs)
        await c.wait_rebalanced()  # a second of persist timers and pulls: none commits
        # (nothing committed: the broker answers 0 for a queue whose first message it still has)
        assert [await c.committed(mq) for mq in mqs] == [0] * 4
        assert all(ends[mq] > 0 for mq in mqs)
        await c.commit()
        assert {mq: await c.committed(mq) for mq in mqs} == ends
        await produce(cluster.namesrv_addr, topic, 5, start=10)
        await col.wait_unique(15)
        await internals(c).service.wait_idle()
        await c.wait_rebalanced()
        assert {mq: await c.committed(mq) for mq in mqs} == ends
    # stop() committed nothing: the group resumes after the last commit()
    again = Collector()
    async with consumer(cluster, group, topic, again, timing) as c2:
        await again.wait_unique(5)
        await c2.wait_rebalanced()  # (a later delivery would be a message before the commit)
    assert sorted(again.seen) == [f"k-{i}" for i in range(10, 15)] and again.duplicates == 0


async def test_handlers_running_at_a_seek_do_not_commit_over_it(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 12)
    mq = sent[0].message_queue
    n = sum(1 for r in sent if r.message_queue == mq)
    release, holding = anyio.Event(), anyio.Event()
    col = Collector()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        if ctx.mq == mq and not release.is_set():
            holding.set()
            await release.wait()  # a handler of the old process queue, held past the seek
        return await col(msgs, ctx)

    async with consumer(cluster, group, topic, handler, timing) as c:
        await col.wait_unique(12 - n)
        with anyio.fail_after(10):
            await holding.wait()
        c.pause([mq])  # the new process queue waits: what the broker has is the seek's
        await c.seek(mq, 0)
        release.set()  # the held one succeeds, on a dropped queue: committed nowhere
        await col.wait_until(lambda: sum(col.seen.values()) == 12 - n + 1)
        await c.wait_rebalanced()  # persist timers ran meanwhile
        assert await c.committed(mq) == 0 and c.position(mq) == 0
        c.resume([mq])
        await col.wait_unique(12)  # the whole queue again from 0
        await c.wait_rebalanced()
        assert sum(col.seen.values()) == 12 + 1  # (the held one twice)
