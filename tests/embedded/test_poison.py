"""The embedded broker and undecodable messages: compressed bodies pass through untouched,
CONSUMER_SEND_MSG_BACK's straight-to-DLQ rule as 4.9.8 and 5.x apply it, and the store's fault
injection that spoils one stored message."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.message import compress_body, compression_flag
from rmq_async.protocol.stored import BrokenBodyError, salvage_ids
from rmq_async.protocol.stored import decode_messages as client_decode

from .rawclient import RawClient, StoredMsg, decode_messages


async def _pull(c: RawClient, group: str, topic: str, n: int, queue_id: int = 0) -> list[StoredMsg]:
    deadline = time.monotonic() + 2.0
    while True:
        r = await c.pull(group, topic, queue_id, 0, sys_flag=4, subscription="*")
        msgs = list(decode_messages(r.body)) if r.code == 0 else []
        if len(msgs) >= n or time.monotonic() > deadline:
            return msgs
        await asyncio.sleep(0.03)


async def _send_compressed(c: RawClient, topic: str, body: bytes, sys_flag: int) -> None:
    ext = {
        "a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": str(sys_flag),
        "g": str(int(time.time() * 1000)), "h": "0", "i": "UNIQ_KEY\x01U1\x02WAIT\x01true", "j": "0",
        "k": "false", "m": "false", "n": "broker-a",
    }  # fmt: skip
    r = await c.request(310, ext, body)
    assert r.code == 0, r


@pytest.mark.parametrize("kind", ["LZ4", "ZSTD", "ZLIB"])
async def test_compressed_bodies_are_stored_and_served_as_sent(
    cluster: EmbeddedCluster, broker: RawClient, topic: str, kind: str
) -> None:
    await cluster.create_topic(topic)
    body = compress_body(b"payload " * 1000, 5, kind)  # type: ignore[arg-type]
    await _send_compressed(broker, topic, body, compression_flag(kind))  # type: ignore[arg-type]
    (m,) = await _pull(broker, "g", topic, 1)
    assert m.body == body and m.sys_flag == compression_flag(kind)  # type: ignore[arg-type]
    stored = cluster.brokers[0].store.lookup(m.phys)
    assert stored is not None and stored.body == body


async def _send_back(c: RawClient, offset: int, group: str, topic: str, level: str, max_times: str) -> None:
    ext = {
        "offset": str(offset), "group": group, "delayLevel": level, "originMsgId": "U1", "originTopic": topic,
        "unitMode": "false", "maxReconsumeTimes": max_times, "bname": "broker-a",
    }  # fmt: skip
    r = await c.request(36, ext)
    assert r.code == 0, r


@pytest.mark.parametrize(("level", "max_times"), [("-1", "16"), ("0", "0"), ("3", "0")])
async def test_send_back_straight_to_the_dlq(
    cluster: EmbeddedCluster, broker: RawClient, topic: str, level: str, max_times: str
) -> None:
    """delayLevel < 0, or reconsumeTimes (0) >= maxReconsumeTimes (0 counts: it is not "unset"): the
    copy goes to %DLQ%group with DELAY 0, its stored body and sys flag untouched (not decompressed)."""
    await cluster.create_topic(topic)
    group = f"dlq_{topic}"
    await broker.heartbeat("127.0.0.1@dlq", group, {topic: "*"})
    await broker.next_server_request()
    garbage = b"\xff\xfe not lz4"
    await _send_compressed(broker, topic, garbage, compression_flag("LZ4"))
    (orig,) = await _pull(broker, group, topic, 1)
    await _send_back(broker, orig.phys, group, topic, level, max_times)
    (dlq,) = await _pull(broker, group, f"%DLQ%{group}", 1)
    assert dlq.body == garbage and dlq.sys_flag == compression_flag("LZ4")
    assert dlq.reconsume == 1 and dlq.props["DELAY"] == "0" and dlq.props["RETRY_TOPIC"] == topic
    assert cluster.brokers[0].store.max_offset(f"%RETRY%{group}", 0) == 0  # no retry copy


@pytest.mark.parametrize("how", ["body", "type", "framing"])
async def test_corrupt_one_stored_message(
    cluster: EmbeddedCluster, broker: RawClient, topic: str, how: str
) -> None:
    await cluster.create_topic(topic)
    for i in range(3):
        await broker.send(topic, f"m{i}".encode(), keys=f"k-{i}")
    store = cluster.brokers[0].store
    phys = store.corrupt(topic, 0, 1, how)
    r = await broker.pull("g", topic, 0, 0, sys_flag=4, subscription="*")
    assert r.code == 0
    if how == "framing":
        with pytest.raises(BrokenBodyError) as err:
            client_decode(r.body)
        rec = err.value.record
        assert rec is not None and (rec.queue_offset, rec.commit_log_offset) == (1, phys)
    else:
        msgs = client_decode(r.body)
        assert [m.keys for m in msgs] == ["k-0", "k-2"]
        [rec] = msgs.undecodable
        assert (rec.queue_offset, rec.commit_log_offset, rec.topic) == (1, phys, topic)
        assert ("zlib" if how == "body" else "unknown compression type 7") in rec.reason
    stored = store.lookup(phys)  # the broker still reads it (send-back, recovery)
    assert stored is not None and stored.queue_offset == 1
    with pytest.raises(ValueError, match="no message at offset 9"):
        store.corrupt(topic, 0, 9)


@pytest.mark.parametrize("flavour", [4, 5])
@pytest.mark.parametrize("how", ["magic", "ids"])
async def test_damaged_fixed_part_is_served_as_stored(timing: Timing, flavour: int, how: str) -> None:
    """A bad magic code, or junk over the magic code and ids: pulls serve the stored bytes as they are
    (the consume queue entry is intact), the client refuses the body from that message on, a
    one-message pull of it names it by its fixed fields only when the ids read, and a send-back by
    its commit-log offset is taken by a 4.9.8 broker (its decoder skips the magic code) but refused
    by a 5.x one ("look message by offset failed"), as is any for the junk ids."""
    async with EmbeddedCluster(timing=timing, flavour=flavour) as cluster:
        topic = f"Dmg{flavour}{how}"
        await cluster.create_topic(topic)
        async with RawClient(cluster.brokers[0].addr) as broker:
            for i in range(3):
                await broker.send(topic, f"m{i}".encode(), keys=f"k-{i}")
            store = cluster.brokers[0].store
            phys = store.corrupt(topic, 0, 1, how)
            r = await broker.pull("g", topic, 0, 0, sys_flag=4, subscription="*")
            assert r.code == 0
            with pytest.raises(BrokenBodyError) as err:
                client_decode(r.body)
            assert err.value.index == 1 and err.value.record is None
            one = await broker.pull("g", topic, 0, 1, max_nums=1, sys_flag=4, subscription="*")
            assert one.code == 0 and one.ext_fields["nextBeginOffset"] == "2"
            with pytest.raises(BrokenBodyError):
                client_decode(one.body)
            rec = salvage_ids(one.body, 0, 1, "bad")
            if how == "ids":
                assert rec is None
            else:
                assert rec is not None and (rec.queue_offset, rec.commit_log_offset) == (1, phys)
            ext = {
                "offset": str(phys), "group": "g", "delayLevel": "-1", "originTopic": topic,
                "unitMode": "false", "maxReconsumeTimes": "16", "bname": "broker-a",
            }  # fmt: skip
            back = await broker.request(36, ext)
            if how == "magic" and flavour == 4:
                assert back.code == 0, back
                (dlq,) = await _pull(broker, "g", "%DLQ%g", 1)
                assert dlq.body == b"m1" and dlq.props["RETRY_TOPIC"] == topic
            else:
                assert back.code == 1 and back.remark == f"look message by offset failed, {phys}"


async def test_a_corrupt_body_survives_a_restart(tmp_path: Path) -> None:
    """The body CRC is rewritten with the body, so recovery keeps the message (and those after it)."""
    timing = Timing.fast()
    async with EmbeddedCluster(timing=timing, data_dir=tmp_path) as c:
        await c.create_topic("RestartT")
        async with RawClient(c.brokers[0].addr) as b:
            for i in range(3):
                await b.send("RestartT", f"m{i}".encode(), keys=f"k-{i}")
        c.brokers[0].store.corrupt("RestartT", 0, 1)
    async with EmbeddedCluster(timing=timing, data_dir=tmp_path) as c:
        assert c.brokers[0].store.max_offset("RestartT", 0) == 3
        async with RawClient(c.brokers[0].addr) as b:
            r = await b.pull("g", "RestartT", 0, 0, sys_flag=4, subscription="*")
        msgs = client_decode(r.body)
        assert [m.keys for m in msgs] == ["k-0", "k-2"] and len(msgs.undecodable) == 1


async def test_view_message_of_a_corrupt_one_says_why(
    cluster: EmbeddedCluster, broker: RawClient, topic: str
) -> None:
    """VIEW_MESSAGE_BY_ID (``MQClientAPI.view_message``) raises UndecodableMessageError for a message
    that is there but cannot be decoded, not 'has no message'."""
    from rmq_async import UndecodableMessageError
    from rmq_async.client.instance import ClientInstance
    from rmq_async.config import ClientConfig

    await cluster.create_topic(topic)
    await broker.send(topic, b"m0", keys="k-0")
    phys = cluster.brokers[0].store.corrupt(topic, 0, 0, "type")
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=Timing.fast())) as ci:
        with pytest.raises(UndecodableMessageError, match="unknown compression type 7") as err:
            await ci.api.view_message(cluster.brokers[0].addr, phys, 3.0)
    assert err.value.record.commit_log_offset == phys
