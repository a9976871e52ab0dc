"""Review of LitePullConsumer and the Spark source's driver/executor helpers against the Java
``DefaultLitePullConsumer`` (4.9.8 / 5.3.3) and real brokers. Each test reproduces one discrepancy and
FAILS on the code it was written against; it passes once the discrepancy is fixed.

Real sockets only: the embedded cluster, plus small TCP proxies on 127.0.0.1 that rewrite route or
pull answers the way a real master/slave cluster answers them.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from helpers import produce
from support.broker_admin import query_offset
from support.frame_proxy import FrameProxy, route_rewriter

from rmq_async import EmbeddedCluster, MessageExt, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.errors import BrokerError
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue
from rmq_async.spark.bridge import Session
from rmq_async.spark.offsets import Range
from rmq_async.spark.options import parse_options

pytestmark = pytest.mark.timeout(40)


# -- helpers ---------------------------------------------------------------------------------------------


async def _poll_until(
    c: LitePullConsumer, pred: Callable[[], bool], timeout: float = 10.0
) -> list[MessageExt]:
    out: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while not pred():
            out.extend(await c.poll(0.5, max_messages=100))
    return out


async def _queue(c: LitePullConsumer, topic: str, qid: int) -> MessageQueue:
    return next(mq for mq in await c.fetch_queues(topic) if mq.queue_id == qid)


# -- 1. committed() reads the broker and overwrites the commit not yet persisted ----------------------


async def test_committed_reads_memory_first_and_keeps_the_pending_commit(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``DefaultLitePullConsumerImpl.committed`` reads ``MEMORY_FIRST_THEN_STORE``: after
    ``commitSync()`` (memory only, persisted by the 5 s task) it returns the new offset, and the
    pending commit is persisted later. rmq_async's ``committed`` calls ``RemoteOffsetStore.read_store``,
    which asks the broker AND writes the broker's (older) value into the store's memory: the answer
    is stale and the user's commit is lost (the persist task / close writes the old offset back)."""
    topic, group = names
    broker = cluster.brokers[0].addr
    await produce(cluster.namesrv_addr, topic, 8)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        q0 = await _queue(c, topic, 0)
        await c.assign([q0])
        first = await c.max_offset(q0)
        await _poll_until(c, lambda: c.position(q0) >= first)
        await c.commit(sync=True)  # the broker now holds `first`
        await produce(cluster.namesrv_addr, topic, 8, start=8)
        second = await c.max_offset(q0)
        assert second > first
        await _poll_until(c, lambda: c.position(q0) >= second)
        await c.commit()  # commitSync(): memory only, as Java
        seen = await c.committed(q0)
    persisted = await query_offset(broker, group, topic, 0)
    assert (seen, persisted) == (second, second), (
        f"committed() after commit() returned {seen} and the broker ended with {persisted}; Java returns "
        f"{second} (memory first) and persists {second}"
    )


# -- 2. commit() of a queue this consumer does not own is written to the broker ------------------------


async def test_commit_of_a_queue_not_assigned_is_ignored(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``commit(Map<MessageQueue, Long>, persist)`` only updates queues whose ProcessQueue is
    assigned and not dropped, and ``persistAll`` writes only queues in the offset table: an offset
    for a queue owned by another member (subscribe mode) or never assigned is ignored. rmq_async's
    ``_commit_memory`` stores any queue, and ``commit(..., sync=True)`` writes it to the broker,
    overwriting the offset of the member that owns that queue."""
    topic, group = names
    broker = cluster.brokers[0].addr
    await produce(cluster.namesrv_addr, topic, 8)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        q0 = await _queue(c, topic, 0)
        q1 = await _queue(c, topic, 1)
        await c.assign([q0])
        await c.commit({q1: 5}, sync=True)
    # the broker's answer for a queue nobody committed (0 on a young topic, as a 4.9.8 broker answers;
    # queue 2 was never touched) must be what queue 1 still has
    untouched = await query_offset(broker, group, topic, 2)
    assert await query_offset(broker, group, topic, 1) == untouched != 5, (
        "commit() of an unassigned queue reached the broker; Java ignores it"
    )


# -- 3. the lite pull consumer ignores suggestWhichBrokerId -------------------------------------------


async def test_lite_pull_follows_suggest_which_broker_id(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``PullAPIWrapper.processPullResult`` records the answer's ``suggestWhichBrokerId`` and
    ``pullKernelImpl`` sends the next pull of that queue to ``findBrokerAddressInSubscribe(name,
    suggested, false)``; a real master suggests its slave (id 1, slaveReadEnable) when the data asked
    for is no longer in memory. The lite consumer goes through the same wrapper. rmq_async's
    ``LitePullConsumer._pull_once`` always pulls ``broker_addr(name)`` (the master): catching-up reads
    stay on the busy master (the push consumer's ``pulling.py`` does follow the suggestion)."""
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    real = cluster.brokers[0].addr

    def suggest_slave(cmd: RemotingCommand) -> RemotingCommand:
        if cmd.is_response and "nextBeginOffset" in cmd.ext_fields:
            cmd.ext_fields["suggestWhichBrokerId"] = "1"
        return cmd

    async with (
        FrameProxy(real, suggest_slave) as master,
        FrameProxy(real, lambda cmd: cmd) as slave,
        FrameProxy(cluster.namesrv_addr, route_rewriter(lambda _: {"0": master.addr, "1": slave.addr})) as ns,
    ):
        async with LitePullConsumer(
            group, namesrv_addr=ns.addr, timing=timing, auto_commit=False, pull_batch_size=2,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        ) as c:  # fmt: skip
            q0 = await _queue(c, topic, 0)
            await c.assign([q0])
            top = await c.max_offset(q0)
            await _poll_until(c, lambda: c.position(q0) >= top)
        assert slave.pulls > 0, (
            f"{master.pulls} pulls went to the master, which suggested id 1 each time; none to the slave"
        )


# -- 4. Spark executors read only from a master --------------------------------------------------------


async def test_spark_executor_reads_a_broker_whose_master_is_down(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """With the master of a broker down and its slave registered, the name server's route lists only
    id 1. Java consumers (``findBrokerAddressInSubscribe(name, id, false)`` in ``pullKernelImpl``) and
    rmq_async's own LitePullConsumer (``broker_addr``) pull from the slave. The Spark executor's
    ``Session.read_chunk`` resolves the address with ``master_addr`` (id 0 only): every partition of
    that broker fails with "has no master address", so the whole query fails while data is readable
    (the planning's GET_MIN/MAX_OFFSET via ``Session.bounds`` are master-only too, as Java's
    ``MQAdminImpl``, which is why the range is given here)."""
    topic, _ = names
    await produce(cluster.namesrv_addr, topic, 8)
    async with FrameProxy(
        cluster.namesrv_addr, route_rewriter(lambda a: {"1": a.get("0") or next(iter(a.values()))})
    ) as ns:
        opts = parse_options({"namesrv": ns.addr, "topic": topic, "requestTimeout": "3"}, streaming=False)
        async with Session(opts) as s:
            keys = await s.queues()
            broker_name = keys[0][0]
            msgs, nxt = await s.read_chunk(Range(broker_name, 0, 0, 2), 0, 100)
    assert [m.queue_offset for m in msgs] == [0, 1] and nxt == 2


# -- 5. the Spark driver's commit made it a member of the commit group -------------------------------


@pytest.mark.parametrize("flavour", [4, 5])
async def test_spark_commit_writes_offsets_without_joining_the_group(
    names: tuple[str, str], timing: Timing, flavour: int
) -> None:
    """``commitOffsets`` writes the processed offsets of a stream to ``group``. The driver used to
    register that group in its heartbeats for good: when ``group`` is also a live (Java) push group,
    its members then counted the driver in their allocation and left the driver's share of the queues
    unconsumed. The commit must land (also on a 5.x broker that has never seen the group, which
    refuses offsets of an unknown group with 26) and leave the group's member list as it was."""
    topic, group = names
    async with EmbeddedCluster(queues=2, timing=timing, flavour=flavour) as cluster:
        await produce(cluster.namesrv_addr, topic, 4)
        opts = parse_options(
            {"namesrv": cluster.namesrv_addr, "topic": topic, "group": group, "requestTimeout": "3"},
            streaming=True,
        )
        async with Session(opts) as s:
            keys = await s.queues()
            await s.commit({k: 2 for k in keys})
            addr = cluster.brokers[0].addr
            try:  # a broker answers code 1 "no consumer for this group" when it has no member
                members = await s.client.api.get_consumer_id_list(addr, group, 3.0)
            except BrokerError as exc:
                assert exc.code == 1, exc
                members = []
            assert members == [], f"the Spark driver stayed a member of {group}: {members}"
            for _broker, qid in keys:
                assert await query_offset(addr, group, topic, qid) == 2
