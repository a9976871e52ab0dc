"""Orderly push consumer: a queue whose lock lease was lost and is locked again restarts from the
committed offset, never moving it back nor re-consuming what another member consumed meanwhile."""

from __future__ import annotations

from support.broker_admin import commit_offset
from support.integration import alive_until, produce, until

from rmq_async import MessageExt, OrderlyContext, OrderlyResult, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.mq import MessageQueue

# -- orderly: re-locking overwrites the committed offset with the broker's older one ---------------


async def _orderly_until_lease_lost(
    cluster: EmbeddedCluster, topic: str, group: str
) -> tuple[PushConsumer, MessageQueue, list[str]]:
    """An orderly consumer of a 1-queue topic that consumed k-0..k-9 (offset 10 in memory); then the
    broker stops answering LOCK_BATCH_MQ (a renewal times out, as on a slow real broker) until the
    client-side lease has run out. Returns the STARTED consumer (the caller stops it)."""
    broker = cluster.brokers[0]
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)
    mq = MessageQueue(topic, broker.name, 0)
    seen: list[str] = []

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        seen.extend(m.keys or "" for m in msgs)
        return OrderlyResult.SUCCESS

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,
        subscriptions={topic: "*"},
        # no periodic persist during the test; lock requests time out quickly
        timing=Timing.fast(persist_interval=60.0, request_timeout=0.5),
        orderly=True,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    await c.start()
    await alive_until(
        c, lambda: until(lambda: len(seen) >= 10 and internals(c).ctx.offset_store.read_memory(mq) == 10)
    )
    broker.faults.drop(RequestCode.LOCK_BATCH_MQ)
    pq = internals(c).queues[mq]
    locks = internals(c).run.locks
    assert locks is not None
    await alive_until(c, lambda: until(lambda: not locks.lease_valid(pq)))

    def gated() -> bool:
        # the pull sent before the lease ran out (held by the broker) has come back and the pull loop
        # waits for a new lock (it marked the offset to be re-read): no pull is sent, and no offset
        # piggy-backed, until the queue is locked again
        st = pq.orderly
        return st is not None and st.refresh_offset

    await alive_until(c, lambda: until(gated))
    return c, mq, seen


async def _relocked(cluster: EmbeddedCluster, c: PushConsumer, mq: MessageQueue) -> None:
    """The broker answers locks again: wait until the queue is locked and its first pull after the
    re-lock has been sent (the re-read of the broker's offset comes before that pull)."""
    broker = cluster.brokers[0]
    with broker.faults.recording() as seen:
        broker.faults.clear()

        def pulled_again() -> bool:
            return any(
                cmd.code == RequestCode.PULL_MESSAGE
                and cmd.ext_fields.get("topic") == mq.topic
                and cmd.ext_fields.get("queueId") == str(mq.queue_id)
                for cmd in seen
            )

        await alive_until(c, lambda: until(pulled_again))


async def test_orderly_relock_does_not_move_the_committed_offset_back(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """orderly.py ``_refresh_offset`` (the first pull after a re-lock) calls
    ``offset_store.read_store``, which OVERWRITES the in-memory offset with the broker's
    (``RemoteOffsetStore.read_store``: ``update(..., increase_only=False)``), and only then compares
    it with ``read_memory``, which is now the same value. The broker's offset lags the memory by up to
    one persist interval (5 s) or one long poll, so a single failed lock renewal moves the committed
    offset back; the persist timer and the piggy-backed pulls then write the old value to the broker,
    and the next owner (or a restart) consumes those messages again. Java re-reads the offset only at
    the first lock (``pullRequest.previouslyLocked``), never after a renewal gap."""
    topic, group = names
    c, mq, _ = await _orderly_until_lease_lost(cluster, topic, group)
    try:
        # the broker has an older offset than ours (the last persist/pull piggy-back was earlier)
        await commit_offset(cluster.brokers[0].addr, group, topic, 0, 5)
        await _relocked(cluster, c, mq)
        memory = internals(c).ctx.offset_store.read_memory(mq)
        assert memory == 10, (
            f"k-0..k-9 consumed (offset 10), but after re-locking the committed offset is {memory}: "
            "the broker's older offset replaced ours and will be persisted"
        )
    finally:
        await c.stop()


async def test_orderly_relock_skips_what_another_member_consumed_meanwhile(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """The same ``_refresh_offset`` is meant to jump to the broker's offset when it is ahead of ours
    ("another member consumed past what we hold"), but the comparison runs after ``read_store``
    overwrote the memory (``stored <= max(local, ...)`` is then always true): the queue goes on from
    its own ``next_offset`` and consumes again what the other member consumed."""
    topic, group = names
    c, mq, seen = await _orderly_until_lease_lost(cluster, topic, group)
    try:
        await produce(cluster.namesrv_addr, topic, 10, start=10)  # offsets 10..19
        # while we had no lease, another member held the queue and consumed 10..14
        await commit_offset(cluster.brokers[0].addr, group, topic, 0, 15)
        await _relocked(cluster, c, mq)
        await alive_until(c, lambda: until(lambda: {f"k-{i}" for i in range(15, 20)} <= set(seen)))
        again = sorted({f"k-{i}" for i in range(10, 15)} & set(seen))
        assert not again, f"the broker's offset was 15 after the re-lock, but {again} were consumed again"
    finally:
        await c.stop()
