"""RESET_CONSUMER_CLIENT_OFFSET forwarded by the broker (mqadmin resetOffsetByTime): the group
consumes again from the reset point, and a running orderly handler does not undo the reset."""

from __future__ import annotations

import anyio
from support.broker_admin import query_offset
from support.integration import Collector, alive_until, consumer, produce, until

from rmq_async import MessageExt, PushConsumer, Timing
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue


async def admin_call(
    cluster: EmbeddedCluster, timing: Timing, code: int, ext: dict[str, str]
) -> RemotingCommand:
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
        return await ci.pool.request(cluster.brokers[0].addr, RemotingCommand.request(code, ext), 5.0)


async def test_reset_offset_by_time_makes_the_group_consume_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 12)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(12)
        await anyio.sleep(timing.persist_interval * 3)  # the broker resets only groups with committed offsets
        with anyio.fail_after(10):
            resp = await admin_call(
                cluster,
                timing,
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"},
            )
        assert resp.code == 0, resp.remark
        await col.wait_until(lambda: all(col.seen[f"k-{i}"] >= 2 for i in range(12)))


# -- orderly: RESET_CONSUMER_CLIENT_OFFSET is overwritten by the handler that was running ----------


async def test_orderly_reset_offset_is_not_undone_by_the_running_handler(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """push.py drop_queue: ``offset_store.update(mq, offset)`` (the reset target) happens BEFORE the
    orderly ``consume_service.drop`` waits for the running handler, and the queue is marked dropped
    only after that wait. The handler that finishes meanwhile commits (orderly ``_settle``:
    ``update(commit, increase_only=False)`` since ``pq.dropped`` is still False), overwriting the
    reset; ``persist(sync=True)`` then stores the handler's offset and the queue restarts there. Java's
    ``resetOffset`` marks the queue dropped first (suppressing that commit) and writes the reset offset
    after the in-flight consumption ended."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)  # offsets 0..9
    broker = cluster.brokers[0]
    mq = MessageQueue(topic, broker.name, 0)
    entered = anyio.Event()
    release = anyio.Event()
    starts: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: object) -> None:
        if msgs[0].keys == "k-1" and not release.is_set():
            entered.set()
            await release.wait()

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        if mq in mqs:
            starts.append(internals(c).queues[mq].next_offset)

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,
        subscriptions={topic: "*"},
        # only the rebalances the consumer asks for itself (no timer between the steps below)
        timing=Timing.fast(rebalance_interval=600.0),
        orderly=True,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        orderly_drop_wait=10.0,
        on_assigned=on_assigned,
    )
    async with c:
        await alive_until(c, entered.wait)  # k-0 committed, the handler of k-1 is running

        async def committed() -> None:  # the broker resets only groups with a committed offset
            while await query_offset(broker.addr, group, topic, 0) < 1:  # noqa: ASYNC110 (broker state)
                await anyio.sleep(0.02)

        await alive_until(c, committed)
        # mqadmin resetOffsetByTime -timestamp -1 (skip to the end): RESET_CONSUMER_CLIENT_OFFSET {q0: 10}
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
            ext = {"topic": topic, "group": group, "timestamp": "-1", "isForce": "true"}
            req = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
            resp = await ci.pool.request(broker.addr, req, 5.0)
        assert resp.code == 0, resp.remark
        await alive_until(
            c, lambda: until(lambda: mq not in internals(c).queues)
        )  # the reset is dropping the queue
        release.set()  # the running handler finishes (successfully) while the drop waits for it
        await alive_until(c, lambda: until(lambda: len(starts) >= 2))  # restarted after the reset
        stored = await query_offset(broker.addr, group, topic, 0)
        assert starts[-1] == 10 and stored >= 10, (
            f"reset to 10, but the queue restarted at {starts[-1]} (broker offset {stored})"
        )
