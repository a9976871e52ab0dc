"""Send and pull round trips through the raw client, and the pull status edge cases."""

from __future__ import annotations

import asyncio
import json
import struct

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType

from .rawclient import RawClient, decode_messages


async def test_route_and_unknown_topic(cluster: EmbeddedCluster, namesrv: RawClient, topic: str) -> None:
    r = await namesrv.request(105, {"topic": topic})
    assert r.code == 17
    assert r.remark == (
        f"No topic route info in name server for the topic: {topic}\n"
        "See http://rocketmq.apache.org/docs/faq/ for further details."
    )
    assert not r.ext_fields_present
    await cluster.create_topic(topic, 3)
    r = await namesrv.request(105, {"topic": topic})
    assert r.code == 0 and not r.ext_fields_present
    route = json.loads(r.body)
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": cluster.brokers[0].addr}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
    ]
    assert route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0, "writeQueueNums": 3}
    ]
    # an old client (version < V4_9_4) gets fastjson's unquoted integer keys
    r = await namesrv.request(105, {"topic": topic}, version=300)
    assert b'"brokerAddrs":{0:"' in r.body


async def test_send_pull_round_trip(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    sent = []
    for i in range(5):
        r = await broker.send(
            topic, f"body-{i}".encode(), queue_id=1, tags="TagA", keys=f"k-{i}", uniq=f"U{i}"
        )
        assert r.code == 0 and r.remark is None
        assert set(r.ext_fields) == {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
        assert r.ext_fields["queueId"] == "1" and r.ext_fields["queueOffset"] == str(i)
        sent.append(r.ext_fields["msgId"])
    r = await broker.pull("g", topic, 1, 0, sys_flag=4, subscription="*", max_nums=3)
    assert r.code == 0 and r.remark == "FOUND"
    assert r.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "3",
        "maxOffset": "5",
        "minOffset": "0",
    }
    msgs = list(decode_messages(r.body))
    assert [m.body for m in msgs] == [b"body-0", b"body-1", b"body-2"]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert [m.msg_id for m in msgs] == sent[:3]
    assert msgs[0].props == {"KEYS": "k-0", "UNIQ_KEY": "U0", "CLUSTER": "DefaultCluster", "TAGS": "TagA"}
    assert msgs[0].props_text.startswith("KEYS\x01k-0\x02UNIQ_KEY")  # Java HashMap order, WAIT not stored
    assert msgs[0].topic == topic and msgs[0].queue_id == 1
    r = await broker.pull("g", topic, 1, 3, sys_flag=4, subscription="*")
    assert [m.body for m in decode_messages(r.body)] == [b"body-3", b"body-4"]
    # VIEW_MESSAGE_BY_ID: offset part of the msg id
    r = await broker.request(33, {"offset": str(int(sent[4][-16:], 16))})
    assert r.code == 0 and not r.ext_fields_present
    assert [m.body for m in decode_messages(r.body)] == [b"body-4"]


async def test_auto_create_and_queue_selection(
    cluster: EmbeddedCluster, broker: RawClient, topic: str
) -> None:
    r = await broker.send(topic, b"x", queue_id=-1, queues=3)
    assert r.code == 0 and 0 <= int(r.ext_fields["queueId"]) < 3
    async with RawClient(cluster.namesrv_addr) as ns:
        for _ in range(100):  # the broker registers the new topic right after creating it
            route = await ns.request(105, {"topic": topic})
            if route.code == 0:
                break
            await asyncio.sleep(0.02)
    assert json.loads(route.body)["queueDatas"][0]["readQueueNums"] == 3
    r = await broker.send(topic, b"x", queue_id=3)
    assert r.code == 1
    assert r.remark is not None and r.remark.startswith(
        f"request queueId[3] is illegal, TopicConfig [topicName={topic}"
    )


async def test_no_auto_create(timing: Timing) -> None:
    async with (
        EmbeddedCluster(auto_create_topic=False, timing=timing) as c,
        RawClient(c.brokers[0].addr) as b,
    ):
        r = await b.send("Unknown", b"x")
        assert r.code == 17
        assert r.remark == (
            "topic[Unknown] not exist, apply first please!"
            "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
        )
        assert set(r.ext_fields) == {"MSG_REGION", "TRACE_ON"}


async def test_batch_send(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    body = b""
    for i in range(3):
        mb = f"batch-{i}".encode()
        props = f"KEYS\x01kb-{i}\x02UNIQ_KEY\x01B{i}\x02WAIT\x01true\x02TAGS\x01TagBatch".encode()
        total = 20 + len(mb) + 2 + len(props)
        body += struct.pack(">iiiii", total, 0, 0, 0, len(mb)) + mb + struct.pack(">h", len(props)) + props
    ext = {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "0",
        "g": "1",
        "h": "0",
        "i": "WAIT\x01true",
        "j": "0",
        "k": "false",
        "m": "true",
        "n": "broker-a",
    }
    r = await broker.request(320, ext, body)
    assert r.code == 0
    ids = r.ext_fields["msgId"].split(",")
    assert len(ids) == 3 and r.ext_fields["queueOffset"] == "0"
    r = await broker.pull("g", topic, 2, 0, sys_flag=4, subscription="TagBatch")
    msgs = list(decode_messages(r.body))
    assert [m.body for m in msgs] == [b"batch-0", b"batch-1", b"batch-2"]
    assert [m.msg_id for m in msgs] == ids
    assert msgs[1].props["CLUSTER"] == "DefaultCluster" and msgs[1].props["KEYS"] == "kb-1"


async def test_tag_filter_and_no_match(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    for i in range(15):
        await broker.send(topic, f"m{i}".encode(), tags=("TagA", "TagB", "TagC")[i % 3])
    r = await broker.pull("g", topic, 0, 0, sys_flag=4, subscription="TagA || TagC")
    assert r.code == 0 and r.ext_fields["nextBeginOffset"] == "15"
    assert [m.queue_offset for m in decode_messages(r.body)] == [0, 2, 3, 5, 6, 8, 9, 11, 12, 14]
    r = await broker.pull("g", topic, 0, 0, sys_flag=4, subscription="TagX")
    assert (r.code, r.remark, r.body) == (20, "NO_MATCHED_MESSAGE", b"")
    assert r.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "15",
        "maxOffset": "15",
        "minOffset": "0",
    }


async def test_offset_edges(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    """The status -> code mapping of offset-edge.jsonl."""
    await cluster.create_topic(topic)
    for i in range(6):
        await broker.send(topic, f"m{i}".encode())

    async def pull(q: int, off: int) -> tuple[int, str | None, str]:
        r = await broker.pull("edge", topic, q, off, sys_flag=4, subscription="*", suspend_ms=3000)
        return r.code, r.remark, r.ext_fields.get("nextBeginOffset", "")

    assert await pull(0, 6) == (19, "OFFSET_OVERFLOW_ONE", "6")
    for off in (7, 106, 1000000000):
        assert await pull(0, off) == (21, "OFFSET_OVERFLOW_BADLY", "6")
    assert await pull(3, 0) == (19, "NO_MESSAGE_IN_QUEUE", "0")
    assert await pull(3, 5) == (21, "NO_MESSAGE_IN_QUEUE", "0")
    r = await broker.pull("edge", topic, 9, 0, sys_flag=4, subscription="*")
    assert r.code == 1 and r.ext_fields_present and r.ext_fields == {}
    assert r.remark is not None and r.remark.startswith(
        f"queueId[9] is illegal, topic:[{topic}] topicConfig.readQueueNums:[4] consumer:[/127.0.0.1:"
    )


async def test_subscription_checks(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    r = await broker.pull("nogroup", topic, 0, 0, sys_flag=2)
    assert (
        r.code == 24 and r.remark is not None and r.remark.startswith("the consumer's group info not exist")
    )
    await broker.heartbeat("127.0.0.1@c1", "sg", {topic: "*"}, version=5)
    await broker.next_server_request()  # 40
    r = await broker.pull("sg", topic, 0, 0, sys_flag=0, sub_version=6)
    assert (r.code, r.remark, r.ext_fields) == (25, "the consumer's subscription not latest", {})
    r = await broker.pull("sg", "Other" + topic, 0, 0, sys_flag=0)
    assert r.code == 17
    await cluster.create_topic("Other" + topic)
    r = await broker.pull("sg", "Other" + topic, 0, 0, sys_flag=0)
    assert (
        r.code == 24 and r.remark is not None and r.remark.startswith("the consumer's subscription not exist")
    )


async def test_commit_offset_flag(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    await broker.send(topic, b"x")
    r = await broker.pull("cg", topic, 0, 0, sys_flag=5, subscription="*", commit_offset=7)
    assert r.code == 0
    q = await broker.request(14, {"consumerGroup": "cg", "topic": topic, "queueId": "0"})
    assert q.ext_fields == {"offset": "7"}


async def test_binary_serialization(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    r = await broker.send(topic, b"bin", serialize=SerializeType.ROCKETMQ)
    assert r.code == 0 and r.serialize_type == SerializeType.ROCKETMQ
    r = await broker.pull("g", topic, 0, 0, sys_flag=4, subscription="*", serialize=SerializeType.ROCKETMQ)
    assert r.serialize_type == SerializeType.ROCKETMQ and r.code == 0


async def test_unknown_code_bad_header_and_garbage(cluster: EmbeddedCluster, topic: str) -> None:
    await cluster.create_topic(topic)
    async with RawClient(cluster.brokers[0].addr) as a, RawClient(cluster.brokers[0].addr) as b:
        r = await a.request(9999)
        assert (r.code, r.remark, r.ext_fields_present) == (3, " request type 9999 not supported", False)
        _ = (
            await a.pull("g", topic, 0, 0, sys_flag=4, subscription="*", queue_id_override=None)
            if False
            else None
        )
        r = await a.request(
            11,
            {
                "consumerGroup": "g",
                "topic": topic,
                "queueId": "x",
                "queueOffset": "0",
                "maxMsgNums": "1",
                "sysFlag": "4",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
            },
        )
        assert r.code == 1 and r.remark is not None and "queueId" in r.remark
        r = await a.request(30, {"topic": topic})
        assert r.code == 1 and r.remark == "the custom field <queueId> is null"
        b.send_raw(struct.pack(">i", 0x7FFFFFF0) + b"garbage")  # oversize frame: only b is closed
        await asyncio.wait_for(b.closed.wait(), 2)
        r = await a.send(topic, b"still fine")
        assert r.code == 0
