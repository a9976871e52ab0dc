"""The Spark source reads LZ4, ZSTD and zlib bodies interleaved on one queue, in order,
through a real Spark session: a 5.x-flavoured embedded cluster in a child process, producers of each
compression type taking turns on queue 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from support.spark_cluster import ClusterHandle, cluster_in_portal

from rmq_async import Message, Producer, Timing
from rmq_async.config import ProducerConfig
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.message import CompressionType, compression_flag
from rmq_async.protocol.stored import MessageExt

pytestmark = pytest.mark.spark

N = 30


def body_of(i: int) -> bytes:
    if i % 4 == 3:
        return f"small-{i}".encode()  # under the compression threshold: sent as is
    return (f"body-{i}-" * 1000).encode()[: 4096 + 37 * i]


def kind_of(i: int) -> CompressionType:
    return ("LZ4", "ZSTD", "ZLIB")[i % 3]


@pytest.fixture(scope="module")
def rmq5() -> Iterator[ClusterHandle]:
    with cluster_in_portal(brokers=1, queues=1, timing=Timing.fast(), flavour=5) as handle:
        yield handle


def test_interleaved_compression_types_read_in_order(spark: Any, rmq5: ClusterHandle) -> None:
    topic = "SparkCompressed"
    rmq5.create_topic(topic, queues=1)

    async def produce() -> str:
        kinds: tuple[CompressionType, ...] = ("LZ4", "ZSTD", "ZLIB")
        producers = {
            k: Producer(
                f"spark_pg_{k.lower()}",
                namesrv_addr=rmq5.namesrv,
                config=ProducerConfig(group=f"spark_pg_{k.lower()}", compress_type=k),
            )
            for k in kinds
        }
        async with producers["LZ4"], producers["ZSTD"], producers["ZLIB"]:
            mq = (await producers["LZ4"].queues(topic))[0]
            for i in range(N):
                res = await producers[kind_of(i)].send(Message(topic, body_of(i), keys=f"k-{i}"), queue=mq)
                assert res.queue_offset == i
        # what the broker stores: each body compressed with its producer's type (the raw pull keeps
        # the sys flag the producer set)
        async with LitePullConsumer("spark_compressed_check", namesrv_addr=rmq5.namesrv) as lc:
            await lc.assign([mq])
            await lc.seek(mq, 0)
            seen: list[MessageExt] = []
            with anyio.fail_after(30):
                while len(seen) < N:
                    seen.extend(await lc.poll(5.0, max_messages=N))
        for i, m in enumerate(seen):
            if i % 4 != 3:
                assert (
                    m.sys_flag & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
                    == compression_flag(kind_of(i)) - 1
                )
        return mq.broker_name

    broker = rmq5.portal.call(produce)
    rows = (
        spark.read.format("rocketmq")
        .option("namesrv", rmq5.namesrv)
        .option("topic", topic)
        .option("endingOffsets", json.dumps({broker: {"0": N}}))
        .load()
        .orderBy("queue_offset")
        .collect()
    )
    assert [r.queue_offset for r in rows] == list(range(N))
    assert [r.keys for r in rows] == [f"k-{i}" for i in range(N)]
    assert [bytes(r.body) for r in rows] == [body_of(i) for i in range(N)]
