"""A queue dropped while its offset could not reach the broker, and given back to the same consumer,
resumes from the consumer's own offset instead of replaying what it consumed (the soak's broker
freeze: broker-b left the name server's route for a moment, every consumer dropped its queues there,
the persist at drop failed, and the queues came back a few seconds later).

Java's ``removeUnnecessaryMessageQueue`` forgets the offset (``removeOffset``) whether the persist
worked or not, and the queue, when it comes back, starts from the broker's older offset: a replay of
everything consumed since the last persist. ``RemoteOffsetStore`` keeps the unpersisted offset for
``UNPERSISTED_TTL`` and starts from the larger of it and the broker's. (Concurrently, the commit
offset its pulls piggy-back has already reached this broker, so the case holds either way; the
orderly consumer, whose persist at drop is a sync request, replays k-0..k-9 without the fix.)"""

from __future__ import annotations

import pytest
from support.integration import alive_until, produce, until

from rmq_async import ConsumeResult, MessageExt, OrderlyResult, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.mq import MessageQueue


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
async def test_a_queue_back_after_a_failed_persist_does_not_replay(
    cluster: EmbeddedCluster, names: tuple[str, str], orderly: bool
) -> None:
    topic, group = names
    broker = cluster.brokers[0]
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)
    mq = MessageQueue(topic, broker.name, 0)
    seen: list[str] = []

    async def handler(msgs: list[MessageExt], ctx: object) -> ConsumeResult | OrderlyResult:
        seen.extend(m.keys or "" for m in msgs)
        return OrderlyResult.SUCCESS if orderly else ConsumeResult.SUCCESS

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,
        subscriptions={topic: "*"},
        # no periodic persist: the offset reaches the broker only at the drop, which fails
        timing=Timing.fast(persist_interval=600.0, request_timeout=0.5),
        orderly=orderly,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    async with c:
        store = internals(c).ctx.offset_store
        await alive_until(c, lambda: until(lambda: len(seen) >= 10 and store.read_memory(mq) == 10))
        # the broker stops taking offsets (its requests go unanswered, as from a broker that left)
        broker.faults.drop(RequestCode.UPDATE_CONSUMER_OFFSET)
        first = internals(c).queues[mq]
        await internals(c).table.drop(mq)  # what a rebalance does when the queue leaves the assignment
        assert first.dropped
        broker.faults.clear()
        # the next rebalance gives the queue back
        await alive_until(
            c, lambda: until(lambda: mq in internals(c).queues and internals(c).queues[mq] is not first)
        )
        await produce(cluster.namesrv_addr, topic, 5, start=10)
        # one queue, pulled in order: a replay of k-0..k-9 would come before k-14
        await alive_until(c, lambda: until(lambda: "k-14" in seen))
    assert seen == [f"k-{i}" for i in range(15)], f"replayed after the queue came back: {seen}"
