"""Heartbeats of the push consumer: pulls answered SUBSCRIPTION_NOT_EXIST / NOT_LATEST do not
turn into a heartbeat storm."""

from __future__ import annotations

from typing import Any

import anyio
from support.integration import Collector, alive_until, consumer, produce

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode, ResponseCode

# -- every pull answered 24/25 sends a heartbeat and retries within 50 ms ----------------------------


async def test_subscription_not_exist_does_not_become_a_heartbeat_storm(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """pulling.py: on 24 SUBSCRIPTION_NOT_EXIST / 25 NOT_LATEST every pull loop sends a full heartbeat to
    every broker and pulls again after 50 ms, without limit. A real broker answers 24 over and over while
    heartbeats succeed when the group's members subscribe different topics (the broker keeps ONE
    subscription table per group and each heartbeat replaces it, ``ConsumerGroupInfo.updateSubscription``
    removes the topics the heartbeat lacks, and every such change pushes NOTIFY_CONSUMER_IDS_CHANGED to
    all members). Then each queue of this member re-registers ~20 times a second: a heartbeat and
    notify storm, and a Java member of the group (which only retries after 3 s,
    ``pullTimeDelayMillsWhenException``, and heartbeats every 30 s) has its subscription replaced
    within 50 ms every time and starves. Java sends no heartbeat on 24/25."""
    topic, group = names
    broker = cluster.brokers[0]
    col = Collector()
    c = consumer(cluster, group, topic, col, timing)
    await produce(cluster.namesrv_addr, topic, 1)
    async with c:
        await alive_until(c, lambda: col.wait_unique(1))
        api = internals(c).client.api
        real = api.heartbeat
        sent = 0

        async def counting(*args: Any, **kw: Any) -> Any:
            nonlocal sent
            sent += 1
            return await real(*args, **kw)

        api.heartbeat = counting  # type: ignore[method-assign]  # counts, the real request still goes out
        broker.faults.refuse(
            RequestCode.PULL_MESSAGE,
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            "the consumer's subscription not exist",
        )
        await anyio.sleep(2.0)
        broker.faults.clear()
        periodic = int(2.0 / c.timing.heartbeat_interval) + 1
        assert sent <= periodic + 2, (
            f"{sent} heartbeats in 2 s while pulls got 24 (the periodic timer sends {periodic}); each one "
            "re-registers the group's subscription on a real broker and notifies every member"
        )


# -- closing unregisters the inner producer at every broker it knows ---------------------------------


async def test_a_closing_client_unregisters_its_inner_producer_even_where_no_heartbeat_was_answered(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: Any
) -> None:
    """Java's MQClientInstance.shutdown unregisters CLIENT_INNER_PRODUCER at every broker of its
    brokerAddrTable (unregisterClient), whether or not a heartbeat was answered there. Ours sent it only
    after an answered heartbeat, so a member whose heartbeat had failed (under load) closed without it
    (the conformance test's unregister set then differed from Java's). The broker refuses both requests
    here; the refusal of the unregister, logged by the client, shows that it was sent."""
    import logging

    topic, group = names
    await cluster.create_topic(topic)
    broker = cluster.brokers[0]
    broker.faults.refuse(RequestCode.HEART_BEAT, ResponseCode.SYSTEM_ERROR, "no heartbeat today")
    broker.faults.refuse(RequestCode.UNREGISTER_CLIENT, ResponseCode.SYSTEM_ERROR, "unregister seen")
    try:
        with caplog.at_level(logging.WARNING, logger="rmq_async"):
            async with consumer(cluster, group, topic, Collector(), timing):
                pass
    finally:
        broker.faults.clear()
    refused = [r.getMessage() for r in caplog.records if "unregister seen" in r.getMessage()]
    assert any("producer group CLIENT_INNER_PRODUCER" in m for m in refused), refused
    assert any(f"group {group}" in m for m in refused), refused
