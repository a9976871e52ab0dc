"""The ``rocketmq`` Spark sink in local mode: a batch write read back exactly, the columns and options
it refuses before any task runs, and a broker stopped mid-write failing the job with a clear error
that reports as sent only what the broker stored."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def read_topic(spark: Any, namesrv: str, topic: str) -> list[Any]:
    rows: list[Any] = (
        spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", topic).load().collect()
    )
    return rows


def test_batch_write_then_read_back_exactly(spark: Any, rmq: ClusterHandle) -> None:
    """Two topics from the topic column, binary bodies (not UTF-8), keys, tags, a property map, and
    the uniq key from a column: every row comes back once, byte for byte, with that message id."""
    from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

    topics = ("SinkA", "SinkB")
    for t in topics:
        rmq.create_topic(t)
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("body", BinaryType()),
            StructField("keys", StringType()),
            StructField("tags", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("id", StringType()),
        ]
    )
    n = 300
    rows = [
        (
            topics[i % 2],
            bytes([i % 256, 0xFF, 0xFE]) + f"-{i}".encode() * (1 + i % 7),
            f"k-{i}",
            "TagEven" if i % 2 == 0 else None,
            {"order": str(i), "region": "eu" if i % 3 else "us"},
            f"{i:032X}",
        )
        for i in range(n)
    ]
    df = spark.createDataFrame(rows, schema).repartition(3)
    (
        df.write.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("uniqKeyColumn", "id")
        .option("batchSize", "16")
        .mode("append")
        .save()
    )
    want = {r[2]: r for r in rows}
    got: dict[str, Any] = {}
    for t in topics:
        for r in read_topic(spark, rmq.namesrv, t):
            assert r.keys not in got, f"{r.keys} read twice"
            got[r.keys] = r
    assert set(got) == set(want)
    for k, r in got.items():
        topic, body, _, tags, props, uid = want[k]
        assert (r.topic, r.body, r.tags, r.msg_id) == (topic, body, tags, uid)
        assert {p: r.properties[p] for p in props} == props
        assert r.properties["UNIQ_KEY"] == uid and r.properties["KEYS"] == k


def test_string_bodies_and_the_topic_option(spark: Any, rmq: ClusterHandle) -> None:
    """The topic option wins over a topic column (as the Kafka sink's); a string body is sent as its
    UTF-8 bytes; delay_level reaches the broker as the DELAY property."""
    rmq.create_topic("SinkText")
    df = spark.createDataFrame(
        [("Elsewhere", f"héllo {i}", f"t-{i}") for i in range(20)], "topic string, body string, keys string"
    )
    df.write.format("rocketmq").option("namesrv", rmq.namesrv).option("topic", "SinkText").mode(
        "append"
    ).save()
    got = sorted((r.keys, r.body) for r in read_topic(spark, rmq.namesrv, "SinkText"))
    assert got == sorted((f"t-{i}", f"héllo {i}".encode()) for i in range(20))


@pytest.mark.parametrize(
    ("ddl", "opts", "needle"),
    [
        ("keys string", {"topic": "T"}, "needs a 'body' column"),
        ("body binary", {}, "no 'topic' column and no 'topic' option"),
        ("body binary, tags int", {"topic": "T"}, "column 'tags': expected string, got int"),
        ("body binary, delay string", {"topic": "T"}, "column 'delay': expected double or float or int"),
        ("body binary, deliver_at timestamp_ntz", {"topic": "T"}, "column 'deliver_at': a timestamp without"),
        ("body binary, deliver_at bigint", {"topic": "T"}, "column 'deliver_at': expected timestamp, got"),
        ("body binary", {"topic": "T", "batchSize": "0"}, "'batchSize'"),
        ("body binary", {"topic": "T", "colour": "red"}, "unknown option"),
        ("body binary", {"topic": "T", "uniqKeyColumn": "nope"}, "'uniqKeyColumn': no such column"),
        ("body binary", {"topic": "bad topic"}, "option 'topic'"),
    ],
)
def test_what_cannot_be_written_fails_before_any_task(
    spark: Any, rmq: ClusterHandle, ddl: str, opts: dict[str, str], needle: str
) -> None:
    df = spark.createDataFrame([], ddl)
    w = df.write.format("rocketmq").option("namesrv", rmq.namesrv).mode("append")
    for k, v in opts.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=needle):
        w.save()


def test_a_broker_stopped_mid_write_fails_the_job(spark: Any, tmp_path: Path) -> None:
    """The broker stops after some thousands of messages: the job fails, naming the rows not sent and
    the sends acknowledged per queue, and the broker (started again on its data) holds at least what
    was reported sent in each queue and nothing past the rows read."""
    from anyio.from_thread import start_blocking_portal

    topic, n = "SinkStop", 40_000
    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(queues=2, timing=Timing.fast(), data_dir=tmp_path / "data")
        with portal.wrap_async_context_manager(cluster):
            portal.call(cluster.create_topic, topic, 2)
            store = cluster.brokers[0].store
            stopped = threading.Event()

            def stop_when_half_way() -> None:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if store.max_offset(topic, 0) + store.max_offset(topic, 1) >= 4000:
                        portal.call(cluster.stop_broker, 0)
                        stopped.set()
                        return
                    time.sleep(0.005)

            stopper = threading.Thread(target=stop_when_half_way, daemon=True)
            stopper.start()
            df = spark.range(n).selectExpr(
                "concat('k-', id) as keys", "cast(repeat('x', 512) as binary) as body"
            )
            with pytest.raises(Exception) as info:
                (
                    df.coalesce(1)
                    .write.format("rocketmq")
                    .option("namesrv", cluster.namesrv_addr)
                    .option("topic", topic)
                    .option("sendTimeout", "1.5")
                    .option("retries", "1")
                    .mode("append")
                    .save()
                )
            stopper.join(10)
            assert stopped.is_set(), "the write ended before the broker was stopped"
            text = str(info.value)
            m = re.search(r"partition 0: (\d+) of the (\d+) rows read were not sent: rows (\d+)", text)
            assert m, text[-3000:]
            unsent, read, first_unsent = (int(g) for g in m.groups())
            assert unsent > 0 and read <= n and first_unsent < read
            sent = {int(q): int(c) for q, c in re.findall(rf"{topic}/broker-a/(\d+): (\d+)", text)}
            assert "SinkSendError" in text and "first failure" in text
            portal.call(cluster.start_broker, 0)
            stored = {q: cluster.brokers[0].store.max_offset(topic, q) for q in (0, 1)}
        for q, count in sent.items():
            assert stored[q] >= count, (q, stored, sent)  # nothing reported sent that was not stored
        assert sum(sent.values()) + unsent == read  # every row read is either sent or named
        assert sum(stored.values()) <= read
