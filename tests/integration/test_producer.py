"""Producer against the embedded cluster: new topics via TBW102, selectors, batches, oneway,
compression, the size limit, and retries on another broker."""

from __future__ import annotations

import sys
import time

import anyio
import pytest
from support.integration import Collector, child_env, until

from rmq_async import ClientConfig, ClientError, Message, Producer, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.errors import InvalidMessageError, RocketMQError
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.message import batch_member_properties, encode_batch_members


async def _consumed(cluster: EmbeddedCluster, group: str, topic: str, timing: Timing, n: int) -> Collector:
    """What a push consumer of ``topic`` from its first offset collects, once ``n`` distinct messages came."""
    col = Collector()
    async with PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=col,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ):
        await col.wait_unique(n)
    return col


async def test_new_topic_selector_batch_oneway_and_compression(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as p:
        first = await p.send(Message(topic, b"first", keys="k-0"))  # unknown topic: TBW102 route
        assert first.message_queue.topic == topic and first.queue_offset == 0
        assert len(await p.queues(topic)) == 4
        by_key = [
            await p.send(Message(topic, b"x", keys=f"k-{i}"), selector=select_by_key_hash, arg=7)
            for i in (1, 2)
        ]
        assert by_key[0].message_queue == by_key[1].message_queue
        batch = await p.send_batch([Message(topic, b"b", keys=f"k-{i}") for i in (3, 4, 5)])
        assert batch.msg_id.count(",") == 2
        await p.send_oneway(Message(topic, b"one", keys="k-6"))
        big = b"0123456789abcdef" * 1024  # 16 KiB: zlib on the wire
        await p.send(Message(topic, big, keys="k-7"))
        with pytest.raises(ClientError, match="exceeds max_message_size"):
            await p.send(Message(topic, b"x" * (4 * 1024 * 1024 + 1)))
    col = await _consumed(cluster, group, topic, timing, 8)
    bodies = {m.keys: m.body for m in col.msgs}
    assert bodies["k-7"] == big and bodies["k-6"] == b"one"


async def test_batch_members_keep_their_own_properties(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Each member of send_batch goes with its own properties as they are (Java's MessageBatch.encode
    writes each message's map): WAIT=false stays false, a UNIQ_KEY set before is the member's id; a
    property changed after the Message checked it is checked again (a separator is refused)."""
    topic, group = names
    quiet = Message(topic, b"q", keys="k-q", wait_store_msg_ok=False)
    mine = Message(topic, b"m", keys="k-m")
    mine.properties["UNIQ_KEY"] = "0A0B0C0D00002A9F0000000000000001"
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as p:
        res = await p.send_batch([quiet, mine, Message(topic, b"n", keys="k-n", tags="T")])
        ids = res.msg_id.split(",")
        assert len(set(ids)) == 3 and ids[1] == "0A0B0C0D00002A9F0000000000000001"
        bad = Message(topic, b"x")
        bad.properties["evil"] = "a\x01b"
        with pytest.raises(InvalidMessageError, match="separator"):
            await p.send_batch([Message(topic, b"ok"), bad])
    col = await _consumed(cluster, group, topic, timing, 3)
    got = {m.keys: m for m in col.msgs}
    assert set(got) == {"k-q", "k-m", "k-n"}  # the refused batch sent nothing
    # (the broker appends the batch request's own properties after each member's: WAIT=true among them)
    assert "WAIT\x01false" in got["k-q"].raw_properties
    assert "WAIT\x01false" not in got["k-m"].raw_properties
    assert got["k-m"].msg_id == ids[1] and got["k-n"].tags == "T"
    assert [got[k].msg_id for k in ("k-q", "k-m", "k-n")] == ids


@pytest.mark.parametrize("code", [ResponseCode.SYSTEM_BUSY, 1500], ids=["SYSTEM_BUSY", "GO_AWAY"])
async def test_retries_on_the_other_broker(names: tuple[str, str], timing: Timing, code: int) -> None:
    # the answers Java 5.3.3 retries (DefaultMQProducer.retryResponseCodes), GO_AWAY among them
    topic, _ = names
    async with EmbeddedCluster(brokers=2, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=2)
        cluster.brokers[0].faults.refuse(RequestCode.SEND_MESSAGE_V2, code, "busy or going away")
        async with Producer("p", namesrv_addr=cluster.namesrv_addr) as p:
            results = [await p.send(Message(topic, b"x")) for _ in range(6)]
        assert {r.message_queue.broker_name for r in results} == {cluster.brokers[1].name}


async def test_a_batch_to_a_retry_topic_is_refused_before_sending(cluster: EmbeddedCluster) -> None:
    # Java's DefaultMQProducer.batch refuses it ("Retry Group is not supported for batching"); the
    # broker would answer 13 MESSAGE_ILLEGAL
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as p:
        with pytest.raises(ClientError, match="retry topic"):
            await p.send_batch([Message("%RETRY%g", b"x"), Message("%RETRY%g", b"y")])


async def test_an_encoded_batch_body_reaches_consumers_in_the_namespace(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """send_batch_body (the Spark sink's send): members built from fields, the topic namespaced as
    send_batch's, each member's UNIQ_KEY its message id; a pinned queue is that queue."""
    topic, group = names
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="nsb", timing=timing)
    ids = [f"{i:032X}" for i in range(5)]
    props = [batch_member_properties(u, f"k-{i}", "TagE" if i % 2 == 0 else None) for i, u in enumerate(ids)]
    body = encode_batch_members([f"b-{i}".encode() for i in range(5)], props)
    async with Producer("p", client_config=cfg) as p:
        queue = (await p.queues(topic))[2]
        res = await p.send_batch_body(topic, body, ids, queue=queue)
        assert res.msg_id == ",".join(ids)
        assert res.message_queue == queue and queue.topic == f"nsb%{topic}"
        with pytest.raises(ClientError, match="illegal characters"):
            await p.send_batch_body("bad topic", body, ids)
    col = Collector()
    async with PushConsumer(
        group, client_config=cfg, handler=col, subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ):  # fmt: skip
        await col.wait_unique(5)
    got = {m.msg_id: (m.keys, m.tags, m.body, m.queue_id) for m in col.msgs}
    assert got == {
        u: (f"k-{i}", "TagE" if i % 2 == 0 else None, f"b-{i}".encode(), 2) for i, u in enumerate(ids)
    }


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", *args]


def _producer(namesrv: str, timing: Timing) -> Producer:
    return Producer("review_pg", client_config=ClientConfig(namesrv_addr=namesrv, timing=timing))


async def test_unknown_topic_without_auto_create_names_the_topic(timing: Timing) -> None:
    # Java (DefaultMQProducerImpl.sendDefaultImpl, 4.9.8 and 5.3.3): the topic's route is 17, the
    # TBW102 route is 17 too (no broker creates TBW102 with autoCreateTopicEnable=false), so the send
    # throws MQClientException "No route info of this topic: <topic>". rmq_async raises the name
    # server's 17 about TBW102, and the CLI says "cannot reach the cluster" although it answered.
    topic = "ReviewNoSuchTopic"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, auto_create_topic=False) as cluster:
        async with _producer(cluster.namesrv_addr, timing) as p:
            with pytest.raises(RocketMQError) as ei:
                await p.send(Message(topic, b"x"))
        t0 = time.monotonic()
        with anyio.fail_after(20):
            out = await anyio.run_process(
                _cli(
                    "produce", "--namesrv", cluster.namesrv_addr, "--topic", topic, "--count", "3", "--quiet"
                ),
                env=child_env(),
                check=False,
            )
        took = time.monotonic() - t0
    err = out.stderr.decode()
    assert out.returncode != 0 and took < 15, (out.returncode, took)  # right: fails fast
    assert topic in str(ei.value), str(ei.value)
    assert topic in err and "cannot reach the cluster" not in err, err


async def test_publish_info_follows_the_route_refresh(timing: Timing) -> None:
    # Java: MQClientInstance.updateTopicRouteInfoFromNameServer (every 30 s) rebuilds the producer's
    # TopicPublishInfo (updateTopicPublishInfo). rmq_async refreshes client.routes but Producer._publish
    # keeps the queues of the first lookup forever: new queues are never used.
    topic = "ReviewGrow"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=2)
        async with _producer(cluster.namesrv_addr, timing) as p:
            await p.send(Message(topic, b"x"))
            assert len(await p.queues(topic)) == 2
            await cluster.create_topic(topic, queues=6)
            with anyio.fail_after(10):
                await until(lambda: [q.write_queue_nums for q in p.client.routes[topic].queue_datas] == [6])
            await anyio.sleep(0.2)
            assert len(await p.queues(topic)) == 6


async def test_selector_sends_after_a_broker_leaves(timing: Timing) -> None:
    # Java: after the route refresh the selector (sendSelectImpl) gets the queue list of the live
    # brokers only, so every key still has a writable queue. rmq_async hands the selector the stale
    # list (both brokers), and keys hashing onto the stopped broker fail forever (no retry on a
    # selector send).
    topic = "ReviewLeave"
    async with EmbeddedCluster(brokers=2, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=4)
        async with _producer(cluster.namesrv_addr, timing) as p:
            assert len(await p.queues(topic)) == 8
            await cluster.stop_broker(1)
            with anyio.fail_after(10):
                await until(lambda: len(p.client.routes[topic].broker_datas) == 1)
            await anyio.sleep(0.2)
            failed = []
            for key in range(8):
                try:
                    await p.send(Message(topic, b"x"), selector=select_by_key_hash, arg=key, timeout=2)
                except RocketMQError as exc:
                    failed.append((key, str(exc)[:80]))
            assert not failed, failed
            assert {q.broker_name for q in await p.queues(topic)} == {"broker-a"}


async def test_a_producer_takes_the_consumers_client_keywords(
    cluster: EmbeddedCluster, timing: Timing
) -> None:
    fast = Timing.fast(request_timeout=1.25)
    async with Producer(
        "kw_producer", namesrv_addr=cluster.namesrv_addr, timing=fast, instance_name="kw_inst"
    ) as p:
        assert p.client.client_id.endswith("@kw_inst")
        assert p.client.config.timing.request_timeout == 1.25
    base = ClientConfig(namesrv_addr=cluster.namesrv_addr)
    async with Producer("kw_producer", client_config=base, timing=fast) as p:  # timing= replaces its own
        assert p.client.config.timing.request_timeout == 1.25


async def test_a_message_the_broker_would_refuse_for_its_size_is_refused_by_the_client(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    # the broker compares the whole stored message (fixed fields, body, topic, properties) with its
    # maxMessageSize (4 MiB): a body of exactly 4 MiB passes Java's body check and is refused (code 13)
    import os

    topic, _ = names
    await cluster.create_topic(topic)
    async with Producer("size_producer", namesrv_addr=cluster.namesrv_addr) as p:
        with pytest.raises(ClientError, match="the broker would refuse"):
            await p.send(Message(topic, os.urandom(4 * 1024 * 1024)))  # random: zlib cannot shrink it
        with pytest.raises(ClientError, match="the broker would refuse"):
            await p.send_oneway(Message(topic, os.urandom(4 * 1024 * 1024)))
        just_under = os.urandom(4 * 1024 * 1024 - 8 * 1024)
        res = await p.send(Message(topic, just_under, properties={"p": "v" * 1000}))
        assert res.queue_offset == 0
