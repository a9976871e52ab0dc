"""LZ4, ZSTD and zlib bodies end to end: producers of each type interleaved on one queue of a
5.x-flavoured embedded cluster, the broker storing the bytes as sent, and every consumer kind reading
them back in order. (The Spark source has its own test: tests/spark/test_compressed.py.)"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    OrderlyContext,
    OrderlyResult,
    Producer,
    PushConsumer,
    Timing,
)
from rmq_async.config import ProducerConfig
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.store import StoredMessage
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.message import COMPRESSION_TYPES, CompressionType, compression_flag
from rmq_async.protocol.mq import MessageQueue

pytestmark = pytest.mark.timeout(60)

N = 60  # 20 of each type, interleaved LZ4, ZSTD, zlib; every fourth body stays under the threshold


@pytest.fixture
async def cluster5(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=1, timing=timing, flavour=5) as c:
        yield c


def body_of(i: int) -> bytes:
    if i % 4 == 3:
        return f"small-{i}".encode()  # under compress_threshold: sent as is
    return (f"body-{i}-" * 1000).encode()[: 4096 + 37 * i]


def kind_of(i: int) -> CompressionType:
    return ("LZ4", "ZSTD", "ZLIB")[i % 3]


async def produce_interleaved(namesrv: str, topic: str) -> MessageQueue:
    producers = {
        t: Producer(
            "pg_" + t.lower(),
            namesrv_addr=namesrv,
            config=ProducerConfig(group="pg_" + t.lower(), compress_type=t),
        )
        for t in COMPRESSION_TYPES
    }
    async with producers["LZ4"], producers["ZSTD"], producers["ZLIB"]:
        mq = (await producers["LZ4"].queues(topic))[0]
        for i in range(N):
            res = await producers[kind_of(i)].send(Message(topic, body_of(i), keys=f"k-{i}"), queue=mq)
            assert res.queue_offset == i
    return mq


def stored_sys_flags(cluster: EmbeddedCluster, topic: str) -> list[int]:
    store = cluster.brokers[0].store
    cq = store.queue(topic, 0)
    assert cq is not None
    return [StoredMessage(bytes(store.message_at(phys))).sys_flag for phys in cq.offsets]


def check(msgs: list[MessageExt]) -> None:
    assert [m.queue_offset for m in msgs] == list(range(N))
    assert [m.keys for m in msgs] == [f"k-{i}" for i in range(N)]
    assert [m.body for m in msgs] == [body_of(i) for i in range(N)]
    for i, m in enumerate(msgs):  # decompressed: COMPRESSED cleared, the type bits kept (as Java)
        assert not m.sys_flag & MessageSysFlag.COMPRESSED_FLAG
        if i % 4 != 3:
            assert m.sys_flag & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR == compression_flag(kind_of(i)) - 1


async def test_interleaved_types_stored_as_sent_and_consumed_in_order(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce_interleaved(cluster5.namesrv_addr, topic)
    # the broker keeps the bytes and the sys flag as the producers sent them (Java's sys flags)
    flags = stored_sys_flags(cluster5, topic)
    assert flags == [0 if i % 4 == 3 else compression_flag(kind_of(i)) for i in range(N)]
    assert {f for f in flags if f} == {257, 513, 769}

    # push, concurrently (one worker, one message a batch: the queue's order is kept)
    got: list[MessageExt] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        got.extend(msgs)
        if len(got) >= N:
            done.set()
        return ConsumeResult.SUCCESS

    async with PushConsumer(
        group + "_c", namesrv_addr=cluster5.namesrv_addr, handler=handler, subscriptions={topic: "*"},
        timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET", concurrency=1,
    ):  # fmt: skip
        with anyio.fail_after(20):
            await done.wait()
    check(got)

    # push, orderly
    ordered: list[MessageExt] = []
    done_o = anyio.Event()

    async def orderly(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        ordered.extend(msgs)
        if len(ordered) >= N:
            done_o.set()
        return OrderlyResult.SUCCESS

    async with PushConsumer(
        group + "_o", namesrv_addr=cluster5.namesrv_addr, handler=orderly, subscriptions={topic: "*"},
        timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET", orderly=True,
    ):  # fmt: skip
        with anyio.fail_after(20):
            await done_o.wait()
    check(ordered)

    # lite pull
    polled: list[MessageExt] = []
    async with LitePullConsumer(
        group + "_l", namesrv_addr=cluster5.namesrv_addr, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as lite:  # fmt: skip
        await lite.assign(await lite.fetch_queues(topic))
        with anyio.fail_after(20):
            while len(polled) < N:
                polled.extend(await lite.poll(1.0, max_messages=100))
        assert lite.stats.undecodable == 0
    check(polled)


async def test_a_4x_cluster_gets_zlib(cluster: EmbeddedCluster, names: tuple[str, str]) -> None:
    """On a 4.x-flavoured cluster the producer compresses with zlib whatever its compress_type, as
    4.x Java does (and 4.x consumers before 4.9.x read only zlib)."""
    topic, _ = names
    cfg = ProducerConfig(group="pg_lz4_on_4x", compress_type="LZ4")
    async with Producer("pg_lz4_on_4x", namesrv_addr=cluster.namesrv_addr, config=cfg) as p:
        mq = (await p.queues(topic))[0]
        await p.send(Message(topic, b"x" * 5000), queue=mq)
    store = cluster.brokers[0].store
    cq = store.queue(topic, mq.queue_id)
    assert cq is not None
    view = store.message_at(cq.offsets[0])
    assert view is not None
    assert StoredMessage(bytes(view)).sys_flag == compression_flag("ZLIB")


async def test_spark_source_read_path(
    cluster5: EmbeddedCluster, names: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The Spark source's executor path (``pipe.pull_range`` then ``build_batch``, without a JVM):
    the interleaved bodies in order; a corrupt one fails the range naming its offset (the source's
    failOnDataLoss-like default)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("numpy")
    from support.spark_read import pull_chunks

    from rmq_async import UndecodableMessageError
    from rmq_async.spark.bridge import Session
    from rmq_async.spark.columns import build_batch
    from rmq_async.spark.offsets import Range
    from rmq_async.spark.options import parse_options

    topic, _ = names
    mq = await produce_interleaved(cluster5.namesrv_addr, topic)
    opts = parse_options({"namesrv": cluster5.namesrv_addr, "topic": topic}, streaming=False)

    async def read(r: Range, *, skip: bool = False) -> Any:
        async with Session(opts) as s:
            chunks = await pull_chunks(s, opts, r, 2)
            return build_batch(chunks, r.topic, r.broker_name, tags=s.tags, skip_undecodable=skip)

    batch = await read(Range(mq.topic, mq.broker_name, mq.queue_id, 0, N))
    assert batch.column("queue_offset").to_pylist() == list(range(N))
    assert batch.column("body").to_pylist() == [body_of(i) for i in range(N)]
    cluster5.brokers[0].store.corrupt(topic, mq.queue_id, 17)
    with pytest.raises(UndecodableMessageError, match="offset 17"):
        await read(Range(mq.topic, mq.broker_name, mq.queue_id, 0, N))
    # onUndecodable=skip: the others in order, the bad one left out with an ERROR record naming it
    with caplog.at_level(logging.ERROR, logger="rmq_async.spark"):
        batch = await read(Range(mq.topic, mq.broker_name, mq.queue_id, 0, N), skip=True)
    assert batch.column("queue_offset").to_pylist() == [i for i in range(N) if i != 17]
    assert batch.column("body").to_pylist() == [body_of(i) for i in range(N) if i != 17]
    assert any(
        "undecodable message skipped" in r.getMessage() and "17" in r.getMessage() for r in caplog.records
    )


def test_spark_on_undecodable_option() -> None:
    from rmq_async.errors import ConfigError
    from rmq_async.spark.options import parse_options

    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    assert parse_options(base, streaming=False).on_undecodable == "fail"
    assert parse_options({**base, "onUndecodable": "skip"}, streaming=False).on_undecodable == "skip"
    with pytest.raises(ConfigError, match="onUndecodable"):
        parse_options({**base, "onUndecodable": "ignore"}, streaming=False)
