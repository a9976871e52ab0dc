"""LitePullConsumer control on the embedded cluster: poll(max_messages) bounds, rebalance listeners,
unsubscribe, seek_to_committed and highwater, and a start again after stop."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from support.integration import produce

from rmq_async import ConfigError, LitePullConsumer, MessageExt, MessageQueue, Timing
from rmq_async.embedded import EmbeddedCluster

pytestmark = pytest.mark.timeout(60)


def lite(cluster: EmbeddedCluster, group: str, timing: Timing, **kw: object) -> LitePullConsumer:
    return LitePullConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **kw,  # type: ignore[arg-type]
    )


async def poll_until(c: LitePullConsumer, n: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(out) < n:
            out.extend(await c.poll(1.0, max_messages=100))
    return out


def keys(msgs: list[MessageExt]) -> list[str]:
    return sorted((str(m.keys) for m in msgs), key=lambda k: int(k[2:]))


async def test_poll_returns_at_most_max_messages_and_commits_only_what_it_returned(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 60)  # 15 a queue
    async with lite(cluster, group, timing, pull_batch_size=10, auto_commit_interval=0.0) as c:
        q = max(await c.fetch_queues(topic), key=lambda mq: mq.queue_id)
        await c.assign([q])
        with pytest.raises(ConfigError, match="max_messages"):
            await c.poll(0.1, max_messages=0)
        got: list[MessageExt] = []
        with anyio.fail_after(15):
            while len(got) < 10:
                batch = await c.poll(1.0, max_messages=1)
                assert len(batch) <= 1
                got += batch
                # auto commit at the start of each poll: what earlier polls returned, never more
                assert await c.committed(q) == len(got) - len(batch)
                assert c.position(q) == len(got)
        assert [m.queue_offset for m in got] == list(range(10))
        three = await c.poll(1.0, max_messages=3)
        assert [m.queue_offset for m in three] == [10, 11, 12]
        assert c.highwater(q) == await c.max_offset(q) == 15
        # back to what was committed: 10, at the start of the last poll
        assert await c.committed(q) == 10
        await c.seek_to_committed(q)
        assert (await poll_until(c, 1))[0].queue_offset == 10


async def test_listeners_see_assignments_in_user_names(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 4)
    seen: list[tuple[str, str, set[MessageQueue]]] = []
    changed = anyio.Event()

    def on_assigned(t: str, qs: set[MessageQueue]) -> None:
        seen.append(("assigned", t, qs))
        changed.set()

    async def on_revoked(t: str, qs: set[MessageQueue]) -> None:
        seen.append(("revoked", t, qs))
        changed.set()

    kw = {"on_assigned": on_assigned, "on_revoked": on_revoked}
    async with lite(cluster, group, timing, instance_name="a", **kw) as a:
        await a.subscribe(topic)
        with anyio.fail_after(10):
            await changed.wait()
        assert seen == [("assigned", topic, set(await a.fetch_queues(topic)))]
        async with lite(cluster, group, timing, instance_name="b") as b:
            await b.subscribe(topic)
            with anyio.fail_after(15):
                while len(a.assignment()) != 2:
                    await a.wait_rebalanced()
            assert [(what, t) for what, t, _ in seen] == [("assigned", topic), ("revoked", topic)]
            assert len(seen[1][2]) == 2 and seen[1][2] == set(await a.fetch_queues(topic)) - a.assignment()
    assert not any(t.startswith("%RETRY%") for _, t, _ in seen)


async def test_unsubscribe_stops_that_topic(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    gone, kept = f"{topic}G", f"{topic}K"
    await produce(cluster.namesrv_addr, gone, 4)
    await produce(cluster.namesrv_addr, kept, 4, start=100)
    async with lite(cluster, group, timing) as c:
        await c.subscribe(gone)
        await c.subscribe(kept, "*")
        assert c.subscriptions == {gone: "*", kept: "*"}
        first = await poll_until(c, 8)
        assert Counter(m.topic for m in first) == {gone: 4, kept: 4}
        await c.unsubscribe(gone)
        assert c.subscriptions == {kept: "*"}
        assert {mq.topic for mq in c.assignment()} == {kept}
        await produce(cluster.namesrv_addr, gone, 4, start=10)
        await produce(cluster.namesrv_addr, kept, 4, start=110)
        later = await poll_until(c, 4)
        await c.wait_rebalanced()  # a rebalance later: still nothing of it
        later += await c.poll(0.5, max_messages=100)
        assert {m.topic for m in later} == {kept} and len(later) == 4
        assert {mq.topic for mq in c.assignment()} == {kept}


async def test_start_again_after_stop_goes_on_from_the_committed_offsets(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 10)
    c = lite(cluster, group, timing)
    await c.start()
    try:
        await c.subscribe(topic)
        assert keys(await poll_until(c, 10)) == [f"k-{i}" for i in range(10)]
    finally:
        await c.stop()  # auto commit: what poll() returned, committed at stop
    await produce(cluster.namesrv_addr, topic, 5, start=10)
    async with c:  # the same consumer again: its subscription taken up, from the committed offsets
        assert c.subscriptions == {topic: "*"}
        again = await poll_until(c, 5)
        assert keys(again) == [f"k-{i}" for i in range(10, 15)]
        assert await c.poll(0.5) == []
    # assign mode too: the same queue again, from its committed offset
    d = lite(cluster, f"{group}_d", timing)
    async with d:
        q = (await d.fetch_queues(topic))[0]
        await d.assign([q])
        end = await d.max_offset(q)
        assert [m.queue_offset for m in await poll_until(d, end)] == list(range(end))
    await produce(cluster.namesrv_addr, topic, 4, start=20)
    async with d:
        assert d.assignment() == {q}
        assert [(m.queue_id, m.queue_offset) for m in await poll_until(d, 1)] == [(q.queue_id, end)]
