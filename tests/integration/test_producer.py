"""Producer against the embedded cluster: new topics via TBW102, selectors, batches, oneway,
compression, the size limit, and retries on another broker."""

from __future__ import annotations

import pytest
from helpers import Collector

from rmq_async import ClientError, EmbeddedCluster, Message, Producer, PushConsumer, Timing
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.codes import RequestCode, ResponseCode


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
    col = Collector()
    async with PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=col,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ):
        await col.wait_unique(8)
    bodies = {m.keys: m.body for m in col.msgs}
    assert bodies["k-7"] == big and bodies["k-6"] == b"one"


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
