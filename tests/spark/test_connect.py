"""The source over Spark Connect: ``SparkSession.builder.remote("local[2]")`` starts a local Connect
server from the pyspark installation; the client registers the data source (pickled to the server)
and reads a batch and an availableNow stream. Needs pyspark's ``connect`` extra (grpcio,
grpcio-status, googleapis-common-protos, pandas); skipped without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.spark_cluster import ClusterHandle

pytest.importorskip("grpc")
pytest.importorskip("pandas")
pytest.importorskip("google.rpc")
pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(180),
]


def test_batch_and_stream_over_spark_connect(rmq: ClusterHandle, tmp_path: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    topic = "ConnectT"
    rmq.create_topic(topic)
    rmq.produce(topic, 60)
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    try:
        assert type(spark).__module__.startswith("pyspark.sql.connect")
        spark.dataSource.register(RocketMQDataSource)
        rows = (
            spark.read.format("rocketmq").option("namesrv", rmq.namesrv).option("topic", topic).load()
        ).collect()
        assert sorted(r.keys for r in rows) == sorted(f"k-{i}" for i in range(60))
        out = tmp_path / "out"
        q = (
            spark.readStream.format("rocketmq")
            .option("namesrv", rmq.namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        assert spark.read.parquet(str(out)).count() == 60
    finally:
        spark.stop()
