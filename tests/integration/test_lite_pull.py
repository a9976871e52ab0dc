"""LitePullConsumer on the embedded cluster: assign, poll, seek, commit, rebalance, restart."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from helpers import produce

from rmq_async import ClientError, ConfigError, EmbeddedCluster, MessageExt, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer

pytestmark = pytest.mark.timeout(40)


async def poll_until(c: LitePullConsumer, n: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(out) < n:
            out.extend(await c.poll(1.0, max_messages=100))
    return out


def offsets_by_queue(msgs: list[MessageExt]) -> dict[int, list[int]]:
    by: dict[int, list[int]] = {}
    for m in msgs:
        by.setdefault(m.queue_id, []).append(m.queue_offset)
    return by


async def test_assign_poll_seek_commit(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        assert c.client.client_id.endswith("@STREAM")
        mqs = await c.fetch_queues(topic)
        assert len(mqs) == 4
        q0 = mqs[0]
        await c.assign([q0])
        assert c.assignment() == {q0}
        data = c.consumer_data()
        assert data.consume_type == "CONSUME_ACTIVELY" and data.subscription_data_set == []
        got = await poll_until(c, 10)
        assert [m.queue_offset for m in got] == list(range(10))
        assert {m.queue_id for m in got} == {q0.queue_id}
        assert c.position(q0) == 10
        # seek back into the middle: buffered batches are dropped, reading starts at 5
        await c.seek(q0, 5)
        again = await poll_until(c, 5)
        assert [m.queue_offset for m in again] == list(range(5, 10))
        with pytest.raises(ConfigError, match="outside the queue's range"):
            await c.seek(q0, 11)
        # explicit commit, written synchronously; the broker then reports it
        await c.commit(sync=True)
        assert await c.committed(q0) == 10
        await c.seek_to_begin(q0)
        assert (await poll_until(c, 1))[0].queue_offset == 0
        await c.seek_to_end(q0)
        assert await c.poll(0.3) == []
        assert await c.offset_for_timestamp(q0, 0) == 0
        with pytest.raises(ClientError, match="not assigned"):
            await c.seek(mqs[1], 0)


async def test_pause_resume_and_bounded_buffer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 80)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, pull_batch_size=5,
        pull_threshold_for_queue=5, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        mqs = await c.fetch_queues(topic)
        await c.assign(mqs[:2])
        with anyio.fail_after(5):
            while sum(q.count for q in c.queues.values()) < 10:
                await c._wait_changed()
        with anyio.move_on_after(0.2):  # a pull past the bound would show here
            while True:
                await c._wait_changed()
        assert all(q.count <= 5 for q in c.queues.values())
        c.pause([mqs[0]])
        assert c.paused() == {mqs[0]}
        got = await poll_until(c, 20)
        assert {m.queue_id for m in got} == {mqs[1].queue_id}
        c.resume([mqs[0]])
        more = await poll_until(c, 20)
        assert mqs[0].queue_id in {m.queue_id for m in more}


async def test_subscribe_rebalance_between_two_members(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    seen: Counter[str] = Counter()
    kw = dict(
        namesrv_addr=cluster.namesrv_addr, timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    async with LitePullConsumer(group, instance_name="lite-a", **kw) as a:  # type: ignore[arg-type]
        await a.subscribe(topic, "*")
        with anyio.fail_after(10):
            while len(a.assignment()) < 4:
                await a.wait_rebalanced()
        async with LitePullConsumer(group, instance_name="lite-b", **kw) as b:  # type: ignore[arg-type]
            await b.subscribe(topic, "*")
            with anyio.fail_after(10):
                while not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
                    for m in await a.poll(0.1, max_messages=100) + await b.poll(0.1, max_messages=100):
                        seen[m.keys or ""] += 1
            assert a.assignment().isdisjoint(b.assignment())
            with anyio.fail_after(15):
                while len(seen) < 40:
                    for m in await a.poll(0.1, max_messages=100) + await b.poll(0.1, max_messages=100):
                        seen[m.keys or ""] += 1
    assert set(seen) == {f"k-{i}" for i in range(40)}


async def test_at_least_once_across_restart(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    kw = dict(
        namesrv_addr=cluster.namesrv_addr, timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    processed: set[tuple[int, int]] = set()
    async with LitePullConsumer(group, auto_commit=False, **kw) as c:  # type: ignore[arg-type]
        mq_all = await c.fetch_queues(topic)
        await c.assign(mq_all)
        first = await poll_until(c, 12)
        processed |= {(m.queue_id, m.queue_offset) for m in first}
        await c.commit()  # memory only: the close writes it
        # polled but never committed: must come again after the restart
        uncommitted = await poll_until(c, 1)
    expected = {q: max((o for qq, o in processed if qq == q), default=-1) + 1 for q in range(4)}
    async with LitePullConsumer(group, auto_commit=True, **kw) as c2:  # type: ignore[arg-type]
        for mq in mq_all:
            assert await c2.committed(mq) == expected[mq.queue_id]
        await c2.assign(mq_all)
        rest = await poll_until(c2, 40 - len(processed))
        got = {(m.queue_id, m.queue_offset) for m in rest}
        assert got.isdisjoint(processed)  # nothing committed is delivered again
        assert {(m.queue_id, m.queue_offset) for m in uncommitted} <= got  # the uncommitted ones are
        assert len(processed | got) == 40
