"""``health()`` of both consumers tells what is wrong: a dead name server, a topic with no route, no
queue owned; lag None when unknown."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from support.integration import Collector, consumer, produce, until

from rmq_async import LitePullConsumer, MQClientError, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster


async def test_dead_name_server_is_reported_within_one_heartbeat_interval(
    names: tuple[str, str], timing: Timing
) -> None:
    # a readiness probe must not say "ready" for a consumer that reaches nothing
    topic, group = names
    t0 = time.time()
    c = PushConsumer(
        group, namesrv_addr="127.0.0.1:1", handler=Collector(), subscriptions={topic: "*"}, timing=timing
    )
    async with c:
        with anyio.fail_after(timing.heartbeat_interval):
            await until(lambda: not c.health().namesrv_reachable and bool(c.health().namesrvs[0].last_error))
        h = c.health()
        assert h.running and not h.ready
        (ns,) = h.namesrvs
        assert ns.addr == "127.0.0.1:1" and not ns.reachable and ns.last_ok is None
        assert ns.failing_since is not None and t0 <= ns.failing_since <= time.time()
        assert topic in h.unrouted_topics
        assert any("no name server answered" in r for r in h.reasons), h.reasons
        assert h.queues == () and h.lag is None  # not a made-up 0
        json.dumps(h.as_dict())  # a probe can serve it as it is


async def test_missing_topic_and_a_live_one(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    c = consumer(cluster, group, topic, col, timing)
    c.subscribe("NoSuchTopicHere")
    async with c:
        await col.wait_unique(8)
        h = c.health()
        assert h.running and h.namesrv_reachable and not h.ready
        assert list(h.unrouted_topics) == ["NoSuchTopicHere"], h.unrouted_topics
        assert "NoSuchTopicHere" in h.reasons[0] and len(h.reasons) == 1, h.reasons
        assert {q.queue.topic for q in h.queues} == {topic} and len(h.queues) == 4
        assert [q.queue.topic for q in h.retry_queues] == [c.retry_topic]
        assert all(b.reachable and b.last_ok is not None for b in h.brokers) and h.brokers
        assert h.lag == 0 and all(q.last_pull is not None and q.max_offset is not None for q in h.queues)
        assert h.members[topic] == 1
        c.unsubscribe("NoSuchTopicHere")  # and rebalances at once
        await c.wait_rebalanced()
        h = c.health()
        assert h.ready and h.reasons == () and h.unrouted_topics == {}, h.reasons
    assert not c.health().ready and c.health().reasons[0] == "not running"


async def test_a_member_without_queues_is_ready_when_the_group_outnumbers_them(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    a = consumer(cluster, group, topic, Collector(), timing)
    b = consumer(cluster, group, topic, Collector(), timing)
    async with a, b:
        with anyio.fail_after(10):
            while len(a.assignment() | b.assignment()) != 2 or a.health().members.get(topic) != 2:
                a.rebalance_now()
                b.rebalance_now()
                await b.wait_rebalanced()
                await a.wait_rebalanced()
        idle = a if not a.health().queues else b
        h = idle.health()
        assert h.queues == () and h.ready, h.reasons
        assert h.lag is None  # no queue: no lag known


async def test_lite_pull_health(cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    lite = LitePullConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    assert not lite.health().running and not lite.health().ready
    async with lite:
        await lite.subscribe(topic)
        await lite.subscribe("NoSuchLiteTopic")
        got = 0
        with anyio.fail_after(20):
            while got < 8:
                got += len(await lite.poll(1.0))
        h = lite.health()
        assert h.running and h.namesrv_reachable and h.retry_queues == ()
        assert list(h.unrouted_topics) == ["NoSuchLiteTopic"] and not h.ready
        assert len(h.queues) == 4 and all(q.last_pull is not None for q in h.queues)
        await lite.commit()
        assert lite.health().lag == 0
    assert not lite.health().running


async def test_lite_pull_health_against_a_dead_name_server(names: tuple[str, str], timing: Timing) -> None:
    topic, group = names
    async with LitePullConsumer(group, namesrv_addr="127.0.0.1:1", timing=timing) as lite:
        await lite.subscribe(topic)
        with anyio.fail_after(timing.heartbeat_interval):
            await until(lambda: not lite.health().namesrv_reachable)
        h = lite.health()
        assert not h.ready and h.namesrvs[0].last_error and h.lag is None
        assert topic in h.unrouted_topics


async def test_require_namesrv_makes_start_fail_fast(names: tuple[str, str], timing: Timing) -> None:
    # the default keeps retrying in the background (as Java; health() says so); require_namesrv=True
    # is the choice of a producer-like fail-fast start
    topic, group = names
    c = PushConsumer(
        group,
        namesrv_addr="127.0.0.1:1",
        handler=Collector(),
        subscriptions={topic: "*"},
        timing=timing,
        require_namesrv=True,
    )
    with (
        anyio.fail_after(timing.request_timeout * 3),
        pytest.raises(MQClientError, match="no name server answered"),
    ):
        await c.start()
    assert not c.running


async def test_require_namesrv_starts_when_a_name_server_answers(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    _, group = names
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=Collector(),
        subscriptions={"NotCreatedYet": "*"},  # no such topic: the name server answered all the same
        timing=timing,
        require_namesrv=True,
    )
    async with c:
        assert c.running and c.health().namesrv_reachable


async def test_lite_require_namesrv_makes_start_fail_fast(names: tuple[str, str], timing: Timing) -> None:
    _, group = names
    lite = LitePullConsumer(group, namesrv_addr="127.0.0.1:1", timing=timing, require_namesrv=True)
    with (
        anyio.fail_after(timing.request_timeout * 3),
        pytest.raises(MQClientError, match="no name server answered"),
    ):
        await lite.start()
    assert not lite.health().running
