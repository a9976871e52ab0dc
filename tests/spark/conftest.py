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
from support.spark_cluster import ClusterHandle, cluster_in_portal

from rmq_async import Timing

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def rmq() -> Iterator[ClusterHandle]:
    with cluster_in_portal(brokers=1, queues=4, timing=Timing.fast()) as handle:
        yield handle


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
