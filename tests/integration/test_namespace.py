"""A namespace (Java's ``withNamespace``) on the embedded cluster: the group and topics go on the wire
as ``ns%name``, handlers and senders use the plain names, retries come back under the plain name."""

from __future__ import annotations

from collections import Counter

import anyio
from support.broker_admin import query_offset
from support.integration import Collector, alive_until, produce, until

from rmq_async import (
    ClientConfig,
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    Timing,
)
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster


async def test_namespaced_producer_and_consumer_round_trip_with_a_retry(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(f"ns1%{topic}", queues=2)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns1", timing=timing)
    seen: Counter[str] = Counter()
    topics: set[str] = set()
    retried: dict[str, int] = {}

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        m = msgs[0]
        key = m.keys or ""
        seen[key] += 1
        topics.add(m.topic)
        if seen[key] == 2:
            retried[key] = m.reconsume_times
        return ConsumeResult.RECONSUME_LATER if key == "k-3" and seen[key] == 1 else ConsumeResult.SUCCESS

    c = PushConsumer(
        group,
        client_config=cfg,
        handler=handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    assert c.group == f"ns1%{group}" and c.retry_topic == f"%RETRY%ns1%{group}"
    assert c.subscriptions == {f"ns1%{topic}": "*"}
    async with c:
        async with Producer("ns_producer", config=None, client_config=cfg) as p:
            assert p.group == "ns1%ns_producer"
            assert {mq.topic for mq in await p.queues(topic)} == {f"ns1%{topic}"}
            for i in range(5):
                res = await p.send(Message(topic, b"x", keys=f"k-{i}"))
                assert res.message_queue.topic == f"ns1%{topic}"
        # a sender without the namespace reaches the same topic by its full name
        await produce(cluster.namesrv_addr, f"ns1%{topic}", 1, start=5)
        await alive_until(c, lambda: until(lambda: len(seen) == 6 and "k-3" in retried))
    assert topics == {topic}, "handlers see the topic without the namespace, retries included"
    assert retried == {"k-3": 1}
    # every topic and retry topic on the broker carries the namespace: nothing went to the plain names
    made = [t for t in cluster.brokers[0].state.topics if t.endswith((topic, group))]
    assert sorted(made) == sorted([f"ns1%{topic}", f"%RETRY%ns1%{group}"]), made


async def test_namespaced_lite_pull_takes_and_returns_plain_names(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(f"ns2%{topic}", queues=2)
    await produce(cluster.namesrv_addr, f"ns2%{topic}", 6)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns2", timing=timing)
    async with LitePullConsumer(
        group, client_config=cfg, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as c:
        assert c.group == f"ns2%{group}"
        queues = await c.fetch_queues(topic)
        assert {mq.topic for mq in queues} == {topic}
        await c.assign(queues)
        assert c.assignment() == set(queues)
        got: list[MessageExt] = []
        with anyio.fail_after(10):
            while len(got) < 6:
                got += await c.poll(timeout=1.0)
        assert {m.topic for m in got} == {topic}
        await c.commit(sync=True)
        committed = {mq.queue_id: await c.committed(mq) for mq in queues}
        assert sum(v or 0 for v in committed.values()) == 6, committed
        await c.seek_to_begin(queues[0])
        assert c.position(queues[0]) == 0
    # the offsets are the namespaced group's, on the namespaced topic
    for mq in queues:
        assert await query_offset(cluster.brokers[0].addr, f"ns2%{group}", f"ns2%{topic}", mq.queue_id) >= 0


# -- ClientConfig.namespace is accepted and ignored ---------------------------------------------------


def test_namespace_wraps_the_group_and_topics_as_java_does() -> None:
    """Java ``DefaultMQPushConsumer`` with a namespace registers and pulls as ``ns%group`` /
    ``ns%topic`` / ``%RETRY%ns%group`` (``NamespaceUtil.wrapNamespace`` in ``start()`` and
    ``subscribe()``). rmq_async has ``ClientConfig.namespace`` and ``with_namespace`` but nothing calls
    them: a member configured like its Java peers joins another group on other topics (or gets
    TOPIC_NOT_EXIST), silently."""
    c = PushConsumer(
        "review_ns_group",
        client_config=ClientConfig(namesrv_addr="127.0.0.1:9876", namespace="ns"),
        handler=Collector(),
        subscriptions={"ReviewNs": "*"},
    )
    data = c._consumer_data()
    topics = sorted(s.topic for s in data.subscription_data_set)
    assert (data.group_name, topics) == (
        "ns%review_ns_group",
        ["%RETRY%ns%review_ns_group", "ns%ReviewNs"],
    ), f"namespace 'ns' configured, but the heartbeat registers group {data.group_name!r} with {topics}"
