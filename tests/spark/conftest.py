"""Spark fixtures: one local[2] session per module, the embedded cluster in a child process.

The cluster runs in a child (an in-process broker would stall while the test thread blocks in Spark)
and is driven from a blocking portal, the same bridge the source itself uses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from rmq_async import EmbeddedCluster, Message, Producer, SendResult, Timing

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


class ClusterHandle:
    def __init__(self, portal: BlockingPortal, cluster: EmbeddedCluster) -> None:
        self.portal = portal
        self.cluster = cluster
        self.namesrv = cluster.namesrv_addr

    def produce(self, topic: str, n: int, *, start: int = 0, size: int = 16, tags: str | None = None,
                body: Any = None) -> list[SendResult]:  # fmt: skip
        async def run() -> list[SendResult]:
            out = []
            async with Producer("spark_test_producer", namesrv_addr=self.namesrv) as p:
                for i in range(start, start + n):
                    data = body(i) if body else f"body-{i}-".encode().ljust(size, b".")
                    res = await p.send(Message(topic, data, tags=tags, keys=f"k-{i}"))
                    assert res is not None
                    out.append(res)
            return out

        return self.portal.call(run)

    def committed(self, group: str, topic: str) -> dict[int, int | None]:
        """The group's committed offset per queue id, as the broker reports it."""
        from rmq_async.consumer.lite_pull import LitePullConsumer

        async def run() -> dict[int, int | None]:
            async with LitePullConsumer(group, namesrv_addr=self.namesrv, timing=Timing.fast()) as c:
                return {mq.queue_id: await c.committed(mq) for mq in await c.fetch_queues(topic)}

        return self.portal.call(run)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        self.portal.call(self.cluster.create_topic, topic, queues)


@pytest.fixture(scope="module")
def rmq() -> Iterator[ClusterHandle]:
    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(brokers=1, queues=4, timing=Timing.fast(), process=True)
        with portal.wrap_async_context_manager(cluster):
            yield ClusterHandle(portal, cluster)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq_async-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()
