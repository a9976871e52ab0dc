"""Delayed delivery, CONSUMER_SEND_MSG_BACK, retry topics and the DLQ."""

from __future__ import annotations

import asyncio
import time

from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient, StoredMsg, decode_messages


async def _pull_until(c: RawClient, group: str, topic: str, n: int, within: float = 2.0) -> list[StoredMsg]:
    deadline = time.monotonic() + within
    while True:
        r = await c.pull(group, topic, 0, 0, sys_flag=4, subscription="*")
        msgs = list(decode_messages(r.body)) if r.code == 0 else []
        if len(msgs) >= n or time.monotonic() > deadline:
            return msgs
        await asyncio.sleep(0.03)


async def test_delay_property(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    start = time.monotonic()
    r = await broker.send(
        topic, b"later", queue_id=1, props={"DELAY": "2"}, tags="TagD"
    )  # fast level 2: 250 ms
    assert r.code == 0
    r = await broker.pull("g", topic, 1, 0, sys_flag=4, subscription="*")
    assert r.code == 19  # not there yet: it sits in SCHEDULE_TOPIC_XXXX queue 1
    held = await broker.pull("g", topic, 1, 0, sys_flag=6, subscription="TagD", suspend_ms=5000, wait=5)
    took = time.monotonic() - start
    assert held.code == 0 and 0.2 <= took < 1.0
    (m,) = decode_messages(held.body)
    assert m.body == b"later" and m.topic == topic and m.queue_id == 1
    assert m.props["REAL_TOPIC"] == topic and m.props["REAL_QID"] == "1" and m.props["DELAY"] == "2"
    assert m.props["WAIT"] == "true"  # messageTimeup keeps the string it had in the schedule topic


async def test_send_back_retry_then_dlq(cluster: EmbeddedCluster, broker: RawClient, topic: str) -> None:
    await cluster.create_topic(topic)
    group = "sb_cg"
    await broker.heartbeat("127.0.0.1@sb", group, {topic: "*", f"%RETRY%{group}": "*"})
    await broker.next_server_request()
    r = await broker.send(topic, b"payload", tags="TagA", keys="k-0", uniq="UNIQ0")
    orig_id = r.ext_fields["msgId"]
    (orig,) = await _pull_until(broker, group, topic, 1)
    ext = {
        "offset": str(orig.phys),
        "group": group,
        "delayLevel": "1",
        "originMsgId": "UNIQ0",
        "originTopic": topic,
        "unitMode": "false",
        "maxReconsumeTimes": "1",
        "bname": "broker-a",
    }
    r = await broker.request(36, ext)
    assert r.code == 0 and not r.ext_fields_present
    (retry,) = await _pull_until(broker, group, f"%RETRY%{group}", 1)
    assert retry.body == b"payload" and retry.reconsume == 1
    assert retry.props["RETRY_TOPIC"] == topic
    assert retry.props["ORIGIN_MESSAGE_ID"] == orig_id
    assert retry.props["REAL_TOPIC"] == f"%RETRY%{group}" and retry.props["REAL_QID"] == "0"
    assert retry.props["WAIT"] == "false" and retry.props["DELAY"] == "1"
    assert retry.props["TAGS"] == "TagA" and retry.props["UNIQ_KEY"] == "UNIQ0"
    # the copy's reconsume count (1) reaches maxReconsumeTimes (1): to the DLQ, no delay
    r = await broker.request(36, {**ext, "offset": str(retry.phys)})
    assert r.code == 0
    (dlq,) = await _pull_until(broker, group, f"%DLQ%{group}", 1)
    assert dlq.reconsume == 2 and dlq.props["DELAY"] == "0"
    assert dlq.props["ORIGIN_MESSAGE_ID"] == orig_id and dlq.props["RETRY_TOPIC"] == topic
    async with RawClient(cluster.namesrv_addr) as ns:
        route = await ns.request(105, {"topic": f"%DLQ%{group}"})
    assert b'"perm":6,"readQueueNums":1' in route.body


async def test_send_back_default_level_and_bad_offset(
    cluster: EmbeddedCluster, broker: RawClient, topic: str
) -> None:
    await cluster.create_topic(topic)
    await broker.send(topic, b"p")
    (orig,) = await _pull_until(broker, "g", topic, 1)
    ext = {
        "offset": str(orig.phys),
        "group": "g",
        "delayLevel": "0",
        "originMsgId": "x",
        "originTopic": topic,
        "unitMode": "false",
        "maxReconsumeTimes": "16",
    }
    start = time.monotonic()
    assert (await broker.request(36, ext)).code == 0
    (retry,) = await _pull_until(broker, "g", "%RETRY%g", 1, within=3)
    assert retry.props["DELAY"] == "3" and time.monotonic() - start >= 0.45  # fast level 3 = 500 ms
    r = await broker.request(36, {**ext, "offset": "123456789"})
    assert (r.code, r.remark) == (1, "look message by offset failed, 123456789")


async def test_send_to_retry_topic_past_max_goes_to_dlq(cluster: EmbeddedCluster, broker: RawClient) -> None:
    r = await broker.send("%RETRY%rg", b"r", reconsume_times=3, max_reconsume=3)
    assert r.code == 0
    (m,) = await _pull_until(broker, "rg", "%DLQ%rg", 1)
    assert m.body == b"r" and m.reconsume == 3
