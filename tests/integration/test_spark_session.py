"""The Spark source's driver/executor ``Session`` against the embedded cluster: executors read
from a slave when the master is down, and the driver's offset commit does not join the group."""

from __future__ import annotations

import pytest
from support.broker_admin import query_offset
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import produce

from rmq_async import EmbeddedCluster, Timing
from rmq_async.errors import BrokerError
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
            broker_name = keys[0][0]
            msgs, nxt = await s.read_chunk(Range(broker_name, 0, 0, 2), 0, 100)
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
            for _broker, qid in keys:
                assert await query_offset(addr, group, topic, qid) == 2
