"""Consume offsets when a broker's master is absent: the offset query falls back to the slave."""

from __future__ import annotations

import pytest
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import Collector, alive_until, produce, until

from rmq_async import PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster

# -- helpers ---------------------------------------------------------------------------------------------


# -- offsets are read only from a master: a broker whose master is down is never consumed ----------


async def test_offset_query_falls_back_to_the_slave_when_the_master_is_absent(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``RemoteBrokerOffsetStore.fetchConsumeOffsetFromBroker`` (4.9.8 and 5.3.3) looks the broker
    up with ``findBrokerAddressInSubscribe(name, MASTER_ID, true)``, refreshes the route, then asks
    again with ``onlyThisBroker=false``: with the master down it reads the offset from the slave, and
    ``pullKernelImpl`` pulls from the slave too, so consumption goes on. rmq_async's
    ``RemoteOffsetStore.read_store`` uses ``master_addr`` (only id 0, both times): every
    ``compute_pull_from_where`` raises, no queue of that broker is ever started, nothing is consumed
    until the master comes back (a restarted or rebalanced member stalls)."""
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    # the name server's routes list every broker under id 1 only: what a real 4.x master/slave name
    # server answers while the master is down and the slave is registered (the embedded broker plays
    # the slave: it answers everything)
    slave_only = route_rewriter(lambda a: {"1": a.get("0") or next(iter(a.values()))})
    async with FrameProxy(cluster.namesrv_addr, slave_only) as ns:
        c = PushConsumer(
            group,
            namesrv_addr=ns.addr,
            handler=col,
            subscriptions={topic: "*"},
            timing=timing,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        async with c:
            try:
                await alive_until(c, lambda: until(lambda: col.unique >= 8), timeout=8.0)
            except pytest.fail.Exception:
                pytest.fail(
                    f"master down, slave registered: consumed "
                    f"{col.unique}/8, owned queues {sorted(map(str, c.assignment()))}; Java reads the "
                    "offset from the slave and consumes"
                )
