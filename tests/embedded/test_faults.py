"""Fault injection: delay, drop, refuse, cut connections, stop/start of the name server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient


async def test_delay_drop_refuse(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    b = cluster.brokers[0]
    b.faults.delay(30, 0.3)
    start = time.monotonic()
    r = await broker.request(30, {"topic": topic, "queueId": "0"})
    assert r.code == 0 and time.monotonic() - start >= 0.28
    b.faults.drop(30, count=1)
    with pytest.raises(asyncio.TimeoutError):
        await broker.request(30, {"topic": topic, "queueId": "0"}, wait=0.2)
    assert (await broker.request(30, {"topic": topic, "queueId": "0"})).code == 0  # count used up
    b.faults.refuse(310, 2, "[TIMEOUT_CLEAN_QUEUE]broker busy")
    r = await broker.send(topic, b"x")
    assert (r.code, r.remark) == (2, "[TIMEOUT_CLEAN_QUEUE]broker busy")
    b.faults.clear()
    assert (await broker.send(topic, b"x")).code == 0
    assert b.store is not None and b.store.max_offset(topic, 0) == 1  # the refused send was not stored


async def test_cut_connections(cluster: EmbeddedCluster, broker: RawClient) -> None:
    cluster.brokers[0].cut_connections()
    await asyncio.wait_for(broker.closed.wait(), 2)
    async with RawClient(cluster.brokers[0].addr) as again:
        assert (await again.request(30, {"topic": "TBW102", "queueId": "0"})).code == 0


async def test_namesrv_faults_and_restart(cluster: EmbeddedCluster, topic: str) -> None:
    await cluster.create_topic(topic)
    cluster.namesrv_faults.drop(105)
    async with RawClient(cluster.namesrv_addr) as ns:
        with pytest.raises(asyncio.TimeoutError):
            await ns.request(105, {"topic": topic}, wait=0.2)
    cluster.namesrv_faults.clear()
    await cluster.stop_namesrv()
    with pytest.raises(OSError):
        async with RawClient(cluster.namesrv_addr):
            pass
    await cluster.start_namesrv()
    async with RawClient(cluster.namesrv_addr) as ns:
        deadline = time.monotonic() + 5
        while True:  # the broker re-registers at its next interval (1.5 s on the fast profile)
            r = await ns.request(105, {"topic": topic})
            if r.code == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert r.code == 0 and json.loads(r.body)["brokerDatas"][0]["brokerName"] == "broker-a"
