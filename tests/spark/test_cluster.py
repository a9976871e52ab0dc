"""The source on Spark with executors in separate processes: ``local-cluster[2,1,1024]`` (two executor
JVMs, each with its own Python workers; it runs from the pip installation of pyspark, so no standalone
master and worker are needed). A batch read and a streaming query restarted on its checkpoint read
exactly the messages sent, none lost and none repeated, with every partition read in another process
than the driver's."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle
from support.spark_pipeline import check_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster_spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    active = SparkSession.getActiveSession()
    if active is not None:  # a local[2] session of another module: one SparkContext per process
        active.stop()
    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("rmq_async-tests-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()


def where_read(df: Any) -> set[tuple[int, int]]:
    """(pid, parent pid) of the Python processes that read ``df``'s partitions (the read and this
    map run in one stage, in the executors' Python workers)."""

    def ids(rows: Iterator[Any]) -> Iterator[tuple[int, int]]:
        n = sum(1 for _ in rows)
        yield (os.getpid(), os.getppid()) if n else (0, 0)

    return {p for p in df.rdd.mapPartitions(ids).collect() if p != (0, 0)}


def test_batch_read_in_executor_processes(cluster_spark: Any, rmq: ClusterHandle) -> None:
    spark = cluster_spark
    topic = "ClusterBatch"
    rmq.create_topic(topic)
    rmq.produce(topic, 240, tags="TagA")
    rmq.produce(topic, 60, start=240, tags="TagB")
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    assert len(infos) == 3, "the driver and two executors"
    reader = (
        spark.read.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("topic", topic)
        .option("minPartitions", "8")
    )
    df = reader.load()
    assert df.rdd.getNumPartitions() >= 8
    keys = [r.keys for r in df.select("keys").collect()]
    assert sorted(keys) == sorted(f"k-{i}" for i in range(300))  # none lost, none repeated
    procs = where_read(df)
    assert procs and all(pid != os.getpid() and ppid != os.getpid() for pid, ppid in procs)
    tagged = reader.option("tags", "TagB").option("includeProperties", "false").load().collect()
    assert sorted(r.keys for r in tagged) == sorted(f"k-{i}" for i in range(240, 300))
    assert all(r.properties is None and r.tags == "TagB" for r in tagged)


def test_stream_restart_in_executor_processes(cluster_spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    spark = cluster_spark
    topic = "ClusterStream"
    rmq.create_topic(topic)
    rmq.produce(topic, 150)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> Any:
        q = (
            spark.readStream.format("rocketmq")
            .option("namesrv", rmq.namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "64")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return q

    q = run()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 150
    rmq.produce(topic, 90, start=150)
    q = run()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 90
    last = q.lastProgress["sources"][0]
    assert last["latestOffset"] is not None  # reportLatestOffset: lag = latestOffset - endOffset
    keys = [r.keys for r in spark.read.parquet(str(out)).select("keys").collect()]
    assert len(keys) == 240 and set(keys) == {f"k-{i}" for i in range(240)}


@pytest.mark.slow
def test_topic_to_topic_in_executor_processes(cluster_spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    """examples/spark_topic_to_topic.py with executors in their own processes: the sink's producers
    live in the executors' Python workers; every event at least once, exactly once by message id."""
    check_pipeline(cluster_spark, rmq, tmp_path, 200)
