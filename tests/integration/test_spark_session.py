"""The Spark source's driver/executor ``Session`` against the embedded cluster: executors read
from a slave when the master is down, and the driver's offset commit does not join the group."""

from __future__ import annotations

import anyio
import pytest
from support.broker_admin import query_offset
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import produce

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.errors import BrokerError
from rmq_async.protocol.codes import RequestCode
from rmq_async.spark.bridge import Session
from rmq_async.spark.offsets import Range
from rmq_async.spark.options import parse_options

pytestmark = pytest.mark.timeout(40)


# -- Spark executors read only from a master --------------------------------------------------------


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
            broker_name = keys[0][1]
            msgs, nxt = await s.read_chunk(Range(topic, broker_name, 0, 0, 2), 0, 100)
    assert [m.queue_offset for m in msgs] == [0, 1] and nxt == 2


# -- the Spark driver's commit made it a member of the commit group -------------------------------


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
            for _topic, _broker, qid in keys:
                assert await query_offset(addr, group, topic, qid) == 2


# -- the driver's planning requests go out together ------------------------------------------------


async def test_spark_planning_requests_of_all_queues_go_out_together(
    names: tuple[str, str], timing: Timing
) -> None:
    """The bounds of a topic are GET_MIN_OFFSET and GET_MAX_OFFSET of every queue (Java's
    ``MQAdminImpl``), and a commit an UPDATE_CONSUMER_OFFSET per queue, every micro-batch. One at a
    time, a topic of many queues costs that many round trips on a real network; the ``Session`` sends
    them together. Each answer is held back 0.25 s here (the broker processes the request at once):
    16 bounds requests and 8 commits one after the other would take 4 s and 2 s."""
    topic, group = names
    hold = 0.25
    async with EmbeddedCluster(queues=8, timing=timing) as cluster:
        await cluster.create_topic(topic, 8)
        sent = await produce(cluster.namesrv_addr, topic, 24)
        per_queue: dict[int, int] = {}
        for r in sent:
            per_queue[r.message_queue.queue_id] = per_queue.get(r.message_queue.queue_id, 0) + 1
        faults = cluster.brokers[0].faults
        opts = parse_options(
            {"namesrv": cluster.namesrv_addr, "topic": topic, "group": group, "requestTimeout": "5"},
            streaming=True,
        )
        async with Session(opts) as s:
            keys = await s.queues()
            assert len(keys) == 8
            await s.bounds(keys)  # the broker's address known: only the offset requests are timed
            for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
                faults.delay(code, hold)
            t0 = anyio.current_time()
            bounds = await s.bounds(keys)
            took = anyio.current_time() - t0
            assert bounds == {k: (0, per_queue.get(k[2], 0)) for k in keys}
            assert hold <= took < 16 * hold / 2, f"bounds of 8 queues took {took:.2f} s"

            faults.delay(RequestCode.UPDATE_CONSUMER_OFFSET, hold)
            t0 = anyio.current_time()
            await s.commit({k: 1 for k in keys})
            took = anyio.current_time() - t0
            assert hold <= took < 8 * hold / 2, f"a commit of 8 queues took {took:.2f} s"
            faults.clear()
            addr = cluster.brokers[0].addr
            for _topic, _broker, qid in keys:
                assert await query_offset(addr, group, topic, qid) == 1


async def test_a_refused_planning_request_fails_with_its_own_error(
    names: tuple[str, str], timing: Timing
) -> None:
    """Requests sent together still fail as one did: the broker's refusal of one of them is raised as
    the ``BrokerError`` it is (not an exception group), naming its code and remark."""
    topic, _ = names
    async with EmbeddedCluster(queues=4, timing=timing) as cluster:
        await produce(cluster.namesrv_addr, topic, 4)
        opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": topic}, streaming=False)
        async with Session(opts) as s:
            keys = await s.queues()
            cluster.brokers[0].faults.refuse(RequestCode.GET_MAX_OFFSET, 1, "max offset refused here")
            with pytest.raises(BrokerError) as err:
                await s.bounds(keys)
            assert err.value.code == 1 and "max offset refused here" in str(err.value)
            cluster.brokers[0].faults.clear()
            assert set(await s.bounds(keys)) == set(keys)
