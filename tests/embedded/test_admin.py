"""Offsets and admin requests, and the requests the broker forwards to a consumer (307, 309, 220, 221)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient, decode_messages


async def test_offsets(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    before = int(time.time() * 1000) - 1000
    for i in range(3):
        await broker.send(topic, f"o{i}".encode(), queue_id=0)
    q = {"topic": topic, "queueId": "0"}
    assert (await broker.request(30, q)).ext_fields == {"offset": "3"}
    assert (await broker.request(31, q)).ext_fields == {"offset": "0"}
    assert (await broker.request(30, {**q, "queueId": "3"})).ext_fields == {"offset": "0"}
    r = await broker.request(29, {**q, "timestamp": str(before)})
    assert r.code == 0 and r.ext_fields == {"offset": "0"}
    r = await broker.request(29, {**q, "timestamp": str(before + 10_000_000)})
    assert r.ext_fields == {"offset": "2"}  # the nearest entry: the last one
    r = await broker.request(32, q)
    assert int(r.ext_fields["timestamp"]) >= before
    assert (await broker.request(32, {**q, "queueId": "2"})).ext_fields == {"timestamp": "-1"}
    # never committed: 4.9.8 answers 0 (not 22)
    cq = {"consumerGroup": "og", "topic": topic, "queueId": "1"}
    r = await broker.request(14, cq)
    assert (r.code, r.ext_fields) == (0, {"offset": "0"})
    r = await broker.request(15, {**cq, "commitOffset": "106"})
    assert r.code == 0 and r.ext_fields_present and r.ext_fields == {}
    await broker.request(15, {**cq, "commitOffset": "107"}, oneway=True)
    await asyncio.sleep(0.05)
    assert (await broker.request(14, cq)).ext_fields == {"offset": "107"}


NOT_FOUND = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


@pytest.mark.parametrize("flavour", [4, 5])
async def test_query_consumer_offset_of_a_never_committed_queue(flavour: int, timing: Timing) -> None:
    """``ConsumerManageProcessor.queryConsumerOffset``: the committed offset; else 0 while the queue's
    min offset is 0 and its first message in memory (4.9.8: offset 0 not on disk only, an empty queue
    included; 5.3.3: the message at offset 0 held); else QUERY_NOT_FOUND (22)."""
    async with (
        EmbeddedCluster(timing=timing, flavour=flavour) as cluster,
        RawClient(cluster.brokers[0].addr, version=479 if flavour == 5 else 409) as broker,
    ):
        topic = f"QcoT{flavour}"
        await cluster.create_topic(topic)
        for i in range(3):
            await broker.send(topic, f"o{i}".encode(), queue_id=0)
        q = {"consumerGroup": "qg", "topic": topic}

        async def query(queue_id: int) -> tuple[int, dict[str, str], str | None]:
            r = await broker.request(14, {**q, "queueId": str(queue_id)})
            return r.code, r.ext_fields, r.remark

        assert await query(0) == (0, {"offset": "0"}, None)
        empty = (0, {"offset": "0"}, None) if flavour == 4 else (22, {}, NOT_FOUND)
        assert await query(1) == empty
        cluster.truncate_head(topic, 1, queue_id=0)  # retention deleted offset 0
        assert await query(0) == (22, {}, NOT_FOUND)
        r = await broker.request(31, {"topic": topic, "queueId": "0"})  # GET_MIN_OFFSET
        assert r.ext_fields == {"offset": "1"}
        await broker.heartbeat("127.0.0.1@qco", "qg", {topic: "*"})  # a 5.x broker commits for known groups
        r = await broker.request(15, {**q, "queueId": "0", "commitOffset": "2"})
        assert r.code == 0
        assert await query(0) == (0, {"offset": "2"}, None)  # a committed offset wins


async def _member(cluster: EmbeddedCluster, group: str, cid: str) -> RawClient:
    c = RawClient(cluster.brokers[0].addr)
    await c.__aenter__()
    await c.heartbeat(cid, group, {"T": "*"})
    await c.next_server_request()
    return c


async def test_running_info_and_consume_directly_forwarded(cluster: EmbeddedCluster, topic: str) -> None:
    await cluster.create_topic(topic)
    member = await _member(cluster, "fg", "127.0.0.1@m1")
    try:
        async with RawClient(cluster.brokers[0].addr) as admin:
            ext = {"consumerGroup": "fg", "clientId": "127.0.0.1@m1", "jstackEnable": "false"}
            fut = asyncio.ensure_future(admin.request(307, ext))
            req = await member.next_server_request()
            assert req.code == 307 and req.ext_fields["clientId"] == "127.0.0.1@m1" and not req.is_oneway
            member.reply(req, 0, b'{"mqTable":{}}', remark="not set any response code")
            r = await asyncio.wait_for(fut, 2)
            assert (r.code, r.body, r.remark) == (0, b'{"mqTable":{}}', "not set any response code")
            mid = (await admin.send(topic, b"direct")).ext_fields["msgId"]
            ext = {"consumerGroup": "fg", "clientId": "127.0.0.1@m1", "msgId": mid}
            fut = asyncio.ensure_future(admin.request(309, ext))
            req = await member.next_server_request()
            assert req.code == 309 and req.ext_fields["brokerName"] == "broker-a"
            assert [m.body for m in decode_messages(req.body)] == [b"direct"]
            member.reply(req, 0, b'{"consumeResult":"CR_SUCCESS"}')
            assert (await asyncio.wait_for(fut, 2)).code == 0
            r = await admin.request(
                307, {"consumerGroup": "fg", "clientId": "nobody", "jstackEnable": "false"}
            )
            assert (r.code, r.remark) == (1, "The Consumer <fg> <nobody> not online")
    finally:
        await member.close()


async def test_reset_offset_and_consumer_status(cluster: EmbeddedCluster) -> None:
    # the capture's topic: a HashMap's order depends on the keys' hashes, so on the topic's name (a
    # numbered fixture topic put q0 first or q1 first depending on which tests ran before)
    topic = "WireAdm"
    await cluster.create_topic(topic, 2)
    member = await _member(cluster, "rg", "127.0.0.1@r1")
    try:
        async with RawClient(cluster.brokers[0].addr) as admin:
            for q in range(2):
                await admin.send(topic, b"m", queue_id=q)
                ext = {"consumerGroup": "rg", "topic": topic, "queueId": str(q), "commitOffset": "1"}
                await admin.request(15, ext)
            r = await admin.request(222, {"topic": topic, "group": "rg", "timestamp": "0", "isForce": "true"})
            # a HashMap<MessageQueue, Long>: q1 before q0, as the capture's q3..q0 (admin-ops 222)
            assert r.code == 0 and r.body.startswith(b'{"offsetTable":{{"brokerName":"broker-a","queueId":1')
            req = await member.next_server_request()
            assert (req.code, req.is_oneway, req.ext_fields["isForce"]) == (220, True, "false")
            assert req.ext_fields["group"] == "rg" and b":0," in req.body
            fut = asyncio.ensure_future(admin.request(223, {"topic": topic, "group": "rg"}))
            req = await member.next_server_request()
            assert req.code == 221 and req.ext_fields == {"topic": topic, "group": "rg"}
            table = b'{"brokerName":"broker-a","queueId":0,"topic":"' + topic.encode() + b'"}:1'
            member.reply(req, 0, b'{"consumerTable":{},"messageQueueTable":{' + table + b"}}")
            r = await asyncio.wait_for(fut, 2)
            assert r.code == 0 and r.body == b'{"consumerTable":{"127.0.0.1@r1":{' + table + b"}}}"
            r = await admin.request(222, {"topic": topic, "group": "nogroup", "timestamp": "0"})
            assert (r.code, r.remark) == (1, "THe consumer group <nogroup> not exist")
    finally:
        await member.close()


async def test_create_topic_validation(cluster: EmbeddedCluster, broker: RawClient) -> None:
    ext = {"topic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    r = await broker.request(17, ext)
    assert (r.code, r.remark) == (1, "The topic[TBW102] is conflict with system topic.")
    r = await broker.request(17, {**ext, "topic": "bad topic!"})
    assert r.code == 1 and r.remark is not None and "illegal characters" in r.remark
    r = await broker.request(17, {**ext, "topic": "GoodTopic"})
    assert r.code == 0 and not r.ext_fields_present
    async with RawClient(cluster.namesrv_addr) as ns:
        route = await ns.request(105, {"topic": "GoodTopic"})
    assert route.code == 0 and json.loads(route.body)["queueDatas"][0]["perm"] == 6
