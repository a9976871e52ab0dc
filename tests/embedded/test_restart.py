"""A broker restarted on the same data directory serves the same messages, ids and offsets."""

from __future__ import annotations

import os
from pathlib import Path

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.store import SEGMENT_SIZE, MessageStore, host_bytes

from .rawclient import RawClient, decode_messages


async def test_restart_keeps_messages_ids_offsets(tmp_path: Path) -> None:
    timing = Timing.fast()
    async with EmbeddedCluster(timing=timing, data_dir=tmp_path) as c:
        await c.create_topic("Durable")
        port = c.brokers[0].port
        async with RawClient(c.brokers[0].addr) as b:
            ids = [
                (await b.send("Durable", f"d{i}".encode(), queue_id=i % 2, tags="T")).ext_fields["msgId"]
                for i in range(6)
            ]
            await b.request(
                15, {"consumerGroup": "dg", "topic": "Durable", "queueId": "1", "commitOffset": "2"}
            )
            await b.send("Durable", b"late", queue_id=0, props={"DELAY": "5"})  # 3 s: still scheduled at stop
    assert (tmp_path / "broker-a" / "commitlog").exists()
    async with EmbeddedCluster(timing=timing, data_dir=tmp_path) as c:
        assert c.brokers[0].port == port  # the store host inside msg ids must not change
        async with RawClient(c.brokers[0].addr) as b:
            r = await b.pull("dg", "Durable", 0, 0, sys_flag=4, subscription="*")
            got = [m.msg_id for m in decode_messages(r.body)]
            r = await b.pull("dg", "Durable", 1, 0, sys_flag=4, subscription="T")
            got += [m.msg_id for m in decode_messages(r.body)]
            assert sorted(got) == sorted(ids)
            q = await b.request(14, {"consumerGroup": "dg", "topic": "Durable", "queueId": "1"})
            assert q.ext_fields == {"offset": "2"}
            r = await b.send("Durable", b"after", queue_id=0)
            assert r.ext_fields["queueOffset"] == "3"
            assert c.brokers[0].store.max_offset("SCHEDULE_TOPIC_XXXX", 4) == 1
        async with RawClient(c.namesrv_addr) as ns:
            assert (await ns.request(105, {"topic": "Durable"})).code == 0


async def test_stop_start_broker_in_cluster(tmp_path: Path) -> None:
    async with EmbeddedCluster(brokers=2, timing=Timing.fast(), data_dir=tmp_path) as c:
        await c.create_topic("Two")
        b0 = c.brokers[0]
        async with RawClient(b0.addr) as b:
            mid = (await b.send("Two", b"x")).ext_fields["msgId"]
        await c.stop_broker(0)
        async with RawClient(c.namesrv_addr) as ns:
            route = await ns.request(105, {"topic": "Two"})
            assert b"broker-a" not in route.body and b"broker-b" in route.body
        await c.start_broker(0)
        assert c.brokers[0].addr == b0.addr
        async with RawClient(c.brokers[0].addr) as b:
            r = await b.pull("g", "Two", 0, 0, sys_flag=4, subscription="*")
            assert [m.msg_id for m in decode_messages(r.body)] == [mid]


async def test_broker_advertises_another_address_from_its_restart(tmp_path: Path) -> None:
    """``EmbeddedCluster.advertise``: the restarted broker registers the given address (a proxy in
    front of it) with the name server and listens where it did; None gives back its own address."""
    async with EmbeddedCluster(timing=Timing.fast(), data_dir=tmp_path) as c:
        await c.create_topic("Adv")
        own = c.brokers[0].addr
        c.advertise(0, "127.0.0.1:1")
        async with RawClient(c.namesrv_addr) as ns:
            assert own.encode() in (await ns.request(105, {"topic": "Adv"})).body  # not before a restart
            await c.stop_broker(0)
            await c.start_broker(0)
            body = (await ns.request(105, {"topic": "Adv"})).body
            assert b"127.0.0.1:1" in body and own.encode() not in body
            assert c.brokers[0].addr == own and c.brokers[0].registered_addr == "127.0.0.1:1"
            c.advertise(0, None)
            await c.stop_broker(0)  # unregisters the advertised address
            await c.start_broker(0)
            body = (await ns.request(105, {"topic": "Adv"})).body
            assert own.encode() in body and b"127.0.0.1:1" not in body


def test_store_recovery_cuts_torn_tail(tmp_path: Path) -> None:
    host = host_bytes("127.0.0.1", 10911)
    s = MessageStore(host, tmp_path)
    s.open(lambda t, p, ts: 0)
    offs = [s.put("T", 0, b"x" * 100, 0, "TAGS\x01A", 5, 0, 1, host).phys_offset for _ in range(3)]
    s.close()
    path = tmp_path / "commitlog"
    size = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b"\x00\x00\x01\x00garbage")  # a torn write
    s2 = MessageStore(host, tmp_path)
    assert s2.open(lambda t, p, ts: 7) == 3
    assert path.stat().st_size == size
    assert s2.max_offset("T", 0) == 3 and list(s2.cqs[("T", 0)].tags) == [7, 7, 7]
    assert s2.put("T", 0, b"y", 0, "", 0, 0, 1, host).phys_offset == size
    assert s2.lookup(offs[1]) is not None and s2.lookup(offs[1] + 1) is None
    s2.close()


def test_store_segment_roll(tmp_path: Path) -> None:
    host = host_bytes("127.0.0.1", 1)
    s = MessageStore(host, tmp_path)
    s.open(lambda t, p, ts: 0)
    body = os.urandom(1 << 20)
    offs = [s.put("Big", 0, body, 0, "", 0, 0, 1, host).phys_offset for _ in range(20)]
    assert any(o >= SEGMENT_SIZE for o in offs)
    assert all(o // SEGMENT_SIZE == (o + (1 << 20)) // SEGMENT_SIZE for o in offs)  # never spans segments
    s.close()
    s2 = MessageStore(host, tmp_path)
    assert s2.open(lambda t, p, ts: 0) == 20
    res = s2.get("Big", 0, 15, 32, None)
    assert res.status == "FOUND" and res.count == 1  # over 256 KiB: one message per pull, as in Java
    assert bytes(res.parts[0]).find(body) > 0
    assert s2.lookup(offs[-1]).body == body  # type: ignore[union-attr]
    s2.close()
