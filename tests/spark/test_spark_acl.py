"""The Spark source against an ACL-enforcing cluster: options accessKey/secretKey reach the executors
(the read works), a wrong secret fails the query with the broker's refusal, and the secret shows in
neither the query plan nor the output or logs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle, cluster_in_portal

from rmq_async import ClientConfig, Credentials, Message, Producer, Timing
from rmq_async.embedded.acl import Account, AclConfig

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

SECRET = "sparkSecret-7f3a91"
CONFIG = AclConfig(
    (
        Account("RocketMQ", "12345678", admin=True),
        Account("sparkUser", SECRET, default_topic_perm="DENY", default_group_perm="SUB",
                topic_perms=("SparkAclT=PUB|SUB",)),
    )
)  # fmt: skip


@pytest.fixture(scope="module")
def acl_rmq() -> Iterator[ClusterHandle]:
    with cluster_in_portal(brokers=1, queues=4, timing=Timing.fast(), acl=CONFIG) as handle:
        handle.create_topic("SparkAclT")

        async def produce() -> None:
            creds = Credentials(access_key="sparkUser", secret_key=SECRET)
            cfg = ClientConfig(namesrv_addr=handle.namesrv, credentials=creds)
            async with Producer("spark_acl_pg", client_config=cfg) as p:
                for i in range(10):
                    await p.send(Message("SparkAclT", b"v-%d" % i, keys=f"k-{i}"))

        handle.portal.call(produce)
        yield handle


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq_async-acl-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()


def _reader(spark: Any, rmq: ClusterHandle, secret: str) -> Any:
    return (
        spark.read.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("topic", "SparkAclT")
        .option("accessKey", "sparkUser")
        .option("secretKey", secret)
        .load()
    )


def test_signed_read_and_no_secret_in_plan_or_output(
    spark: Any, acl_rmq: ClusterHandle, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    df = _reader(spark, acl_rmq, SECRET)
    rows = df.select("keys", "body").collect()
    assert sorted(r["keys"] for r in rows) == sorted(f"k-{i}" for i in range(10))
    plan = df._jdf.queryExecution().toString()  # every plan: parsed, analyzed, optimized, physical
    df.explain(True)
    out, err = capfd.readouterr()
    for text in (plan, out, err, caplog.text):
        assert SECRET not in text


def test_wrong_secret_fails_the_query_with_the_refusal(
    spark: Any, acl_rmq: ClusterHandle, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(Exception, match="Check signature failed") as ei:
        _reader(spark, acl_rmq, "wrongSecret99").collect()
    out, err = capfd.readouterr()
    for text in (str(ei.value), out, err):
        assert "wrongSecret99" not in text
