"""Heartbeats, NOTIFY_CONSUMER_IDS_CHANGED, consumer lists, unregister and queue locks."""

from __future__ import annotations

import asyncio
import json

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType

from .rawclient import RawClient


async def _members(c: RawClient, group: str) -> list[str]:
    r = await c.request(38, {"consumerGroup": group})
    return json.loads(r.body)["consumerIdList"] if r.code == 0 else []


async def test_join_leave_close_notify(cluster: EmbeddedCluster, topic: str) -> None:
    addr = cluster.brokers[0].addr
    async with RawClient(addr) as c1, RawClient(addr) as c2:
        r = await c1.heartbeat("127.0.0.1@c1", "grp", {topic: "*"})
        assert r.code == 0 and not r.ext_fields_present
        # the notify was written before the heartbeat response
        n = c1.server_requests.get_nowait()
        assert (n.code, n.ext_fields, n.is_oneway) == (40, {"consumerGroup": "grp"}, True)
        assert n.language == "JAVA" and n.version == 409
        await c2.heartbeat("127.0.0.1@c2", "grp", {topic: "*"})
        assert (await c1.next_server_request()).code == 40
        assert c2.server_requests.get_nowait().code == 40
        assert sorted(await _members(c1, "grp")) == ["127.0.0.1@c1", "127.0.0.1@c2"]
        # a second heartbeat with no change notifies nobody
        await c2.heartbeat("127.0.0.1@c2", "grp", {topic: "*"})
        assert c1.server_requests.empty() and c2.server_requests.empty()
        r = await c2.request(35, {"clientID": "127.0.0.1@c2", "consumerGroup": "grp"})
        assert r.code == 0 and r.ext_fields_present and r.ext_fields == {}
        assert (await c1.next_server_request()).code == 40
        assert await _members(c1, "grp") == ["127.0.0.1@c1"]
        await c2.heartbeat("127.0.0.1@c2", "grp", {topic: "*"})
        await c1.next_server_request()
        await c2.close()
        assert (await c1.next_server_request()).code == 40
        assert await _members(c1, "grp") == ["127.0.0.1@c1"]
    async with RawClient(addr) as c3:
        r = await c3.request(38, {"consumerGroup": "grp"})
        assert (r.code, r.remark, r.ext_fields) == (1, "no consumer for this group, grp", {})


async def test_retry_topic_created_on_heartbeat(
    cluster: EmbeddedCluster, broker: RawClient, namesrv: RawClient
) -> None:
    r = await namesrv.request(105, {"topic": "%RETRY%hbgrp"})
    assert r.code == 17
    await broker.heartbeat("127.0.0.1@c1", "hbgrp", {"T": "*"})
    for _ in range(100):
        r = await namesrv.request(105, {"topic": "%RETRY%hbgrp"})
        if r.code == 0:
            break
        await asyncio.sleep(0.02)
    q = json.loads(r.body)["queueDatas"][0]
    assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (1, 1, 6)


async def test_idle_member_removed() -> None:
    timing = Timing.fast(channel_idle_timeout=0.3)
    async with EmbeddedCluster(timing=timing) as cluster:
        addr = cluster.brokers[0].addr
        async with RawClient(addr) as stay, RawClient(addr) as idle:
            await idle.heartbeat("127.0.0.1@idle", "g", {"T": "*"})
            await stay.heartbeat("127.0.0.1@stay", "g", {"T": "*"})
            await stay.next_server_request()
            for _ in range(4):  # keep 'stay' alive, let 'idle' expire
                await asyncio.sleep(0.15)
                await stay.heartbeat("127.0.0.1@stay", "g", {"T": "*"})
            await asyncio.wait_for(idle.closed.wait(), 2)
            assert (await stay.next_server_request()).code == 40
            assert await _members(stay, "g") == ["127.0.0.1@stay"]


def _lock_body(client: str, group: str, topic: str, qids: list[int]) -> bytes:
    mqs = [{"brokerName": "broker-a", "queueId": q, "topic": topic} for q in qids]
    return json.dumps({"clientId": client, "consumerGroup": group, "mqSet": mqs}).encode()


async def test_locks() -> None:
    timing = Timing.fast(broker_lock_expiry=0.4, lock_lease=0.3, lock_renew_interval=0.2)
    async with EmbeddedCluster(timing=timing) as cluster:
        addr = cluster.brokers[0].addr
        async with RawClient(addr) as a, RawClient(addr) as b:
            r = await a.request(41, None, _lock_body("A", "og", "T", [0, 1]))
            assert r.code == 0 and not r.ext_fields_present
            assert sorted(q["queueId"] for q in json.loads(r.body)["lockOKMQSet"]) == [0, 1]
            r = await b.request(41, None, _lock_body("B", "og", "T", [1, 2]))
            assert [q["queueId"] for q in json.loads(r.body)["lockOKMQSet"]] == [2]
            r = await b.request(41, None, _lock_body("B", "og", "T", [1]))
            assert r.body == b'{"lockOKMQSet":[]}'
            # unlock by A (oneway), then B gets it
            await a.request(42, None, _lock_body("A", "og", "T", [1]), oneway=True)
            await asyncio.sleep(0.05)
            r = await b.request(41, None, _lock_body("B", "og", "T", [1]))
            assert [q["queueId"] for q in json.loads(r.body)["lockOKMQSet"]] == [1]
            r = await a.request(42, None, _lock_body("A", "og", "T", [0]))
            assert r.code == 0 and not r.ext_fields_present and r.body == b""
        # B disconnects; its locks stay until they expire
        async with RawClient(addr) as c:
            r = await c.request(41, None, _lock_body("C", "og", "T", [2]))
            assert json.loads(r.body)["lockOKMQSet"] == []
            await asyncio.sleep(0.45)
            r = await c.request(41, None, _lock_body("C", "og", "T", [2]))
            assert [q["queueId"] for q in json.loads(r.body)["lockOKMQSet"]] == [2]


@pytest.mark.parametrize("serialize", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_notify_is_json(cluster: EmbeddedCluster, serialize: SerializeType) -> None:
    async with RawClient(cluster.brokers[0].addr) as c:
        await c.request(
            34,
            None,
            json.dumps(
                {
                    "clientID": "x@1",
                    "consumerDataSet": [
                        {
                            "groupName": "jg",
                            "consumeType": "CONSUME_PASSIVELY",
                            "messageModel": "CLUSTERING",
                            "consumeFromWhere": "X",
                            "subscriptionDataSet": [],
                            "unitMode": False,
                        }
                    ],
                    "producerDataSet": [],
                }
            ).encode(),
            serialize=serialize,
        )
        n = await c.next_server_request()
        assert n.code == 40 and n.serialize_type == SerializeType.JSON
