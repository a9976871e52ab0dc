"""The ``rocketmq`` Spark source in local mode against the embedded cluster (child process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def by_position(sent: list[Any]) -> dict[tuple[int, int], Any]:
    return {(r.message_queue.queue_id, r.queue_offset): r for r in sent}


def test_batch_read_of_an_exact_range(spark: Any, rmq: ClusterHandle) -> None:
    topic = "SparkBatch"
    rmq.create_topic(topic)
    sent = rmq.produce(topic, 40, tags="TagS")
    pos = by_position(sent)
    start = {"broker-a": {"0": 2, "1": 0, "2": 5, "3": -2}}
    end = {"broker-a": {"0": 7, "1": 3, "2": -1, "3": 0}}
    rows = (
        spark.read.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("topic", topic)
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .load()
        .collect()
    )
    maxes = {q: 1 + max(o for qq, o in pos if qq == q) for q in range(4)}
    want = {(0, o) for o in range(2, 7)} | {(1, o) for o in range(3)} | {(2, o) for o in range(5, maxes[2])}
    got = [(r.queue_id, r.queue_offset) for r in rows]
    assert sorted(got) == sorted(want)  # exactly the range, no duplicates
    for r in rows:
        s = pos[(r.queue_id, r.queue_offset)]
        assert r.topic == topic and r.broker_name == "broker-a"
        assert r.msg_id == s.msg_id
        i = int(r.keys.split("-")[1])
        assert r.body == f"body-{i}-".encode().ljust(16, b".")
        assert r.tags == "TagS"
        assert r.properties["KEYS"] == r.keys and r.properties["TAGS"] == "TagS"
        assert r.store_timestamp is not None and r.born_timestamp is not None
        assert r.reconsume_times == 0
    # startingTimestamp: everything stored at or after it
    ts = min(r.store_timestamp for r in rows)
    reader = spark.read.format("rocketmq").option("namesrv", rmq.namesrv).option("topic", topic)
    assert reader.option("startingTimestamp", "0").load().count() == 40
    future = str(int(ts.timestamp() * 1000) + 3_600_000)
    assert reader.option("startingTimestamp", future).load().count() == 0


def run_available_now(spark: Any, opts: dict[str, str], out: Path, ckpt: Path) -> None:
    reader = spark.readStream.format("rocketmq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None


def test_stream_available_now_restart_reads_exactly_the_new_messages(
    spark: Any, rmq: ClusterHandle, tmp_path: Path
) -> None:
    topic = "SparkStream"
    rmq.create_topic(topic)
    first = rmq.produce(topic, 30)
    opts = {"namesrv": rmq.namesrv, "topic": topic, "startingOffsets": "earliest"}
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run_available_now(spark, opts, out, ckpt)
    keys = [r.keys for r in spark.read.parquet(str(out)).collect()]
    assert sorted(keys) == sorted(f"k-{i}" for i in range(30))
    rmq.produce(topic, 20, start=30)
    run_available_now(spark, {**opts, "commitOffsets": "true", "group": "spark_lag_cg"}, out, ckpt)
    keys = [r.keys for r in spark.read.parquet(str(out)).collect()]
    assert len(keys) == 50  # none repeated
    assert set(keys) == {f"k-{i}" for i in range(50)}  # none lost
    # processed offsets are committed to the group, so RocketMQ's tools show its lag; Spark signals a
    # micro-batch done when it plans the next one, so here the restart committed the first run's ends
    ends: dict[int, int] = {}
    for r in first:
        q = r.message_queue.queue_id
        ends[q] = max(ends.get(q, 0), r.queue_offset + 1)
    committed = rmq.committed("spark_lag_cg", topic)
    assert all(committed[q] == end for q, end in ends.items()), (committed, ends)


def test_max_records_per_trigger_bounds_each_micro_batch(
    spark: Any, rmq: ClusterHandle, tmp_path: Path
) -> None:
    topic = "SparkLimit"
    rmq.create_topic(topic)
    rmq.produce(topic, 30)
    sizes: list[int] = []
    keys: list[str] = []

    def each(df: Any, batch_id: int) -> None:
        rows = df.collect()
        sizes.append(len(rows))
        keys.extend(r.keys for r in rows)

    q = (
        spark.readStream.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "7")
        .load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    assert all(0 < n <= 7 for n in sizes if n), sizes
    assert len([n for n in sizes if n]) >= 5
    assert sorted(keys) == sorted(f"k-{i}" for i in range(30))


def test_fail_on_data_loss(spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    """Offsets the broker no longer has (here past its max: the queue was recreated) fail the query
    with failOnDataLoss=true (the default), and are skipped (read from the min offset) with false."""
    topic = "SparkLoss"
    rmq.create_topic(topic)
    rmq.produce(topic, 12)
    gone = json.dumps({"broker-a": {str(q): 1000 for q in range(4)}})
    opts = {"namesrv": rmq.namesrv, "topic": topic, "startingOffsets": gone}
    reader = spark.readStream.format("rocketmq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out1"))
        .option("checkpointLocation", str(tmp_path / "ck1"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="failOnDataLoss"):
        q.awaitTermination(120)
    out = tmp_path / "out2"
    run_available_now(spark, {**opts, "failOnDataLoss": "false"}, out, tmp_path / "ck2")
    keys = [r.keys for r in spark.read.parquet(str(out)).collect()]
    assert sorted(keys) == sorted(f"k-{i}" for i in range(12))


def test_commit_listener_commits_the_latest_completed_batch(
    spark: Any, rmq: ClusterHandle, tmp_path: Path
) -> None:
    """OffsetCommitListener writes each completed micro-batch's end offsets (the last one included,
    which the source's own commit never gets); the lag per queue reads from the query progress."""
    from rmq_async.spark import OffsetCommitListener, queue_lag

    topic = "SparkCommitL"
    rmq.create_topic(topic)
    sent = rmq.produce(topic, 24)
    ends = {
        (topic, "broker-a", q): 1 + max(r.queue_offset for r in sent if r.message_queue.queue_id == q)
        for q in range(4)
    }
    listener = OffsetCommitListener(rmq.namesrv, topic, "spark_listener_cg", query_name="commit_q")
    spark.streams.addListener(listener)
    try:
        q = (
            spark.readStream.format("rocketmq")
            .option("namesrv", rmq.namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "10")
            .load()
            .writeStream.queryName("commit_q")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        assert listener.wait_committed(ends, 30), listener.committed
        assert queue_lag(q.lastProgress["sources"][0]) == {topic: {"broker-a": {str(i): 0 for i in range(4)}}}
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    assert rmq.committed("spark_listener_cg", topic) == {q: off for (_, _, q), off in ends.items()}


@pytest.mark.parametrize(
    ("option", "value"),
    [("maxRecordsPerTrigger", "many"), ("failOnDataLoss", "maybe"), ("startingOffsets", "yesterday")],
)
def test_bad_option_fails_naming_it(spark: Any, rmq: ClusterHandle, option: str, value: str) -> None:
    reader = (
        spark.readStream.format("rocketmq")
        .option("namesrv", rmq.namesrv)
        .option("topic", "SparkBad")
        .option(option, value)
    )
    with pytest.raises(Exception, match=option):
        reader.load()


def test_several_topics_by_list_and_by_pattern(spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    """topic as a list and topicPattern (a whole-name match) read the same rows, each with its topic;
    a pattern stream restarted on its checkpoint picks up a topic made since, from its first message,
    and its offsets are keyed by topic."""
    for t in ("MultiA", "MultiB", "MultiAB-not"):
        rmq.create_topic(t, 2)
    rmq.produce("MultiA", 20)
    rmq.produce("MultiB", 10, start=100)
    rmq.produce("MultiAB-not", 5, start=900)

    def batch(**opts: str) -> list[tuple[str, str]]:
        reader = spark.read.format("rocketmq").option("namesrv", rmq.namesrv)
        for k, v in opts.items():
            reader = reader.option(k, v)
        return sorted((r.topic, r.keys) for r in reader.load().collect())

    want = sorted([("MultiA", f"k-{i}") for i in range(20)] + [("MultiB", f"k-{i}") for i in range(100, 110)])
    assert batch(topic="MultiA, MultiB") == want
    assert batch(topicPattern="Multi[AB]") == want
    # a stream of a pattern: MultiP2 appears between two runs on one checkpoint
    rmq.create_topic("MultiP1", 2)
    rmq.produce("MultiP1", 8)
    opts = {"namesrv": rmq.namesrv, "topicPattern": "MultiP[0-9]", "startingOffsets": "earliest"}
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run_available_now(spark, opts, out, ckpt)
    rmq.create_topic("MultiP2", 2)
    rmq.produce("MultiP2", 6, start=500)
    rmq.produce("MultiP1", 3, start=8)
    run_available_now(spark, opts, out, ckpt)
    got = sorted((r.topic, r.keys) for r in spark.read.parquet(str(out)).select("topic", "keys").collect())
    assert got == sorted(
        [("MultiP1", f"k-{i}") for i in range(11)] + [("MultiP2", f"k-{i}") for i in range(500, 506)]
    )
    last = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    offsets = json.loads(last.read_text().splitlines()[-1])
    assert set(offsets) == {"MultiP1", "MultiP2"} and set(offsets["MultiP2"]) == {"broker-a"}
    assert sum(offsets["MultiP2"]["broker-a"].values()) == 6


def test_namespace_reads_the_namespaced_topics_by_their_names(spark: Any, rmq: ClusterHandle) -> None:
    """Option namespace: the topics and the group go on the wire as ``ns%name`` (where the sink's
    namespace writes), rows and patterns name them without it, and the plain topic of that name is
    another one; the group's commit is the namespaced consumers' offsets."""
    from rmq_async.spark.bridge import Bridge
    from rmq_async.spark.options import parse_options

    for t in ("nsx%NsT", "NsT", "nsx%NsU"):
        rmq.create_topic(t, 2)
    rmq.produce("NsT", 4, start=100)  # outside the namespace
    rmq.produce("nsx%NsU", 3, start=200)
    df = spark.createDataFrame([(f"k-{i}", f"b-{i}".encode()) for i in range(6)], "keys string, body binary")
    w = df.write.format("rocketmq").option("namesrv", rmq.namesrv).option("namespace", "nsx")
    w.option("topic", "NsT").mode("append").save()

    def batch(**opts: str) -> list[tuple[str, str]]:
        reader = spark.read.format("rocketmq").option("namesrv", rmq.namesrv)
        for k, v in opts.items():
            reader = reader.option(k, v)
        return sorted((r.topic, r.keys) for r in reader.load().collect())

    mine = [("NsT", f"k-{i}") for i in range(6)]
    assert batch(topic="NsT", namespace="nsx") == mine
    assert batch(topic="NsT") == [("NsT", f"k-{i}") for i in range(100, 104)]
    assert batch(topicPattern="Ns[TU]", namespace="nsx") == sorted(
        mine + [("NsU", f"k-{i}") for i in (200, 201, 202)]
    )
    opts = {"namesrv": rmq.namesrv, "topic": "NsT", "namespace": "nsx", "group": "ns_cg"}
    bridge = Bridge(parse_options(opts, streaming=True))
    try:
        keys = bridge.queues()
        assert keys == [("NsT", "broker-a", 0), ("NsT", "broker-a", 1)]
        ends = {k: hi for k, (_, hi) in bridge.bounds(keys).items()}
        assert sum(ends.values()) == 6
        bridge.commit(ends)
    finally:
        bridge.close()
    assert rmq.committed("ns_cg", "NsT", namespace="nsx") == {q: off for (_, _, q), off in ends.items()}
    with pytest.raises(Exception, match="option 'namespace'"):
        spark.read.format("rocketmq").option("namesrv", rmq.namesrv).option("topic", "NsT").option(
            "namespace", "bad ns"
        ).load()
