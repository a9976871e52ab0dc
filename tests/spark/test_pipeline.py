"""The executor's read path without Spark: ``pipe.pull_range`` (pulls in flight on a blocking
connection, bodies undecoded) then ``build_batch``, against an in-process embedded cluster whose
retention can delete a queue's head: a planned range that now crosses the min offset, tag filtering,
compressed bodies, and the per-process client that every partition of a worker shares."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support.integration import produce
from support.spark_read import pull_chunks

from rmq_async import Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType
from rmq_async.spark import bridge
from rmq_async.spark.bridge import Session, read_range
from rmq_async.spark.columns import build_batch
from rmq_async.spark.offsets import DataLossError, Range
from rmq_async.spark.options import parse_options

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
pytestmark = pytest.mark.timeout(60)


async def read(opts: Any, r: Range, depth: int = 4) -> Any:
    async with Session(opts) as s:
        chunks = await pull_chunks(s, opts, r, depth)
        return build_batch(chunks, r.topic, r.broker_name, tags=s.tags) if chunks else None


async def test_a_planned_range_that_now_crosses_the_min_offset() -> None:
    async with EmbeddedCluster(queues=1, timing=Timing.fast()) as cluster:
        await cluster.create_topic("PipeHead", 1)
        await produce(cluster.namesrv_addr, "PipeHead", 1300)
        broker = cluster.brokers[0].name
        r = Range("PipeHead", broker, 0, 0, 1300)  # planned before retention deleted the head
        cluster.truncate_head("PipeHead", 700)
        opts = parse_options(
            {"namesrv": cluster.namesrv_addr, "topic": "PipeHead", "failOnDataLoss": "false"}, streaming=False
        )
        got = await read(opts, r)
        assert got.column("queue_offset").to_pylist() == list(range(700, 1300))
        assert got.column("keys").to_pylist() == [f"k-{i}" for i in range(700, 1300)]
        strict = parse_options({"namesrv": cluster.namesrv_addr, "topic": "PipeHead"}, streaming=False)
        with pytest.raises(DataLossError, match="below the broker's min offset 700"):
            await read(strict, r)


async def test_tag_filter_and_compressed_bodies() -> None:
    async with EmbeddedCluster(queues=2, timing=Timing.fast()) as cluster:
        await cluster.create_topic("PipeTags", 2)
        want = {}
        async with Producer("pipe_producer", namesrv_addr=cluster.namesrv_addr) as p:
            for i in range(600):
                body = (f"{i}-".encode() * 3000)[: 6000 if i % 3 == 0 else 40]  # >= 4 KiB: zlib
                tag = "A" if i % 5 in (1, 2) else "B"  # both tags in each queue
                await p.send(Message("PipeTags", body, tags=tag, keys=f"k-{i}"))
                if tag == "A":
                    want[f"k-{i}"] = body
        opts = parse_options(
            {"namesrv": cluster.namesrv_addr, "topic": "PipeTags", "tags": "A"}, streaming=False
        )
        rows: dict[str, bytes] = {}
        async with Session(opts) as s:
            bounds = await s.bounds(await s.queues())
        for (t, b, q), (lo, hi) in bounds.items():
            got = await read(opts, Range(t, b, q, lo, hi), depth=3)
            for row in got.to_pylist() if got is not None else []:
                assert row["keys"] not in rows
                rows[row["keys"]] = row["body"]
        assert rows == want


async def test_a_client_writing_binary_headers_pulls_with_binary_frames() -> None:
    """The pulls follow the client's header serialization (``RequestSettings``, as every request of
    the async client): with the ROCKETMQ binary header the frames come from the binary template, the
    broker answers in kind, and the rows are the same."""
    async with EmbeddedCluster(queues=1, timing=Timing.fast()) as cluster:
        await cluster.create_topic("PipeBinary", 1)
        await produce(cluster.namesrv_addr, "PipeBinary", 300)
        r = Range("PipeBinary", cluster.brokers[0].name, 0, 0, 300)
        opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": "PipeBinary"}, streaming=False)
        async with Session(opts) as s:
            api = s.client.api
            api.settings = dataclasses.replace(api.settings, serialize_type=SerializeType.ROCKETMQ)
            assert s.template(r).base.serialize_type == SerializeType.ROCKETMQ
            assert s.template(r).frame(0, 32, 1)[4] == SerializeType.ROCKETMQ  # the header type byte
            chunks = await pull_chunks(s, opts, r)
        got = build_batch(chunks, r.topic, r.broker_name, tags=frozenset())
        assert got.column("queue_offset").to_pylist() == list(range(300))


def test_partitions_of_a_worker_share_one_client() -> None:
    """read_range (the executor's entry) from a plain thread: two partitions, one Session."""
    from anyio.from_thread import start_blocking_portal

    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(queues=2, timing=Timing.fast())
        with portal.wrap_async_context_manager(cluster):
            portal.call(cluster.create_topic, "PipeShare", 2)
            portal.call(lambda: produce(cluster.namesrv_addr, "PipeShare", 80))
            opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": "PipeShare"}, streaming=False)
            broker = cluster.brokers[0].name
            try:
                n = sum(
                    b.num_rows
                    for q in (0, 1)
                    for b in read_range(opts, Range("PipeShare", broker, q, 0, 100))
                )
                worker = bridge._worker
                assert worker is not None and len(worker.sessions) == 1
                # and one broker connection, idle between the partitions
                assert [len(v) for v in worker.idle.values()] == [1]
                # a partition abandoned half way (Spark's limit) leaves the client usable
                gen = read_range(opts, Range("PipeShare", broker, 0, 0, 100))
                next(gen)
                gen.close()  # type: ignore[attr-defined]
                again = sum(b.num_rows for b in read_range(opts, Range("PipeShare", broker, 1, 0, 100)))
            finally:
                bridge._close_worker()
    assert n == 80 and again > 0


def test_a_worker_freezes_its_heap_once_after_its_first_partition() -> None:
    """gcFreeze (on by default): gc.freeze() after a worker's first partition read to its end, once
    per process; not after an abandoned read, and never with gcFreeze=false."""
    import gc

    from anyio.from_thread import start_blocking_portal
    from pyspark.sql.datasource import InputPartition

    from rmq_async.spark.source import RocketMQBatchReader

    def rows(opts: Any, part: InputPartition) -> int:
        return sum(b.num_rows for b in RocketMQBatchReader(opts).read(part))

    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(queues=1, timing=Timing.fast())
        with portal.wrap_async_context_manager(cluster):
            portal.call(cluster.create_topic, "PipeFreeze", 1)
            portal.call(lambda: produce(cluster.namesrv_addr, "PipeFreeze", 40))
            base = {"namesrv": cluster.namesrv_addr, "topic": "PipeFreeze"}
            on = parse_options(base, streaming=False)
            off = parse_options({**base, "gcFreeze": "false"}, streaming=False)
            assert on.gc_freeze and not off.gc_freeze
            part = InputPartition(Range("PipeFreeze", cluster.brokers[0].name, 0, 0, 40))
            before = gc.get_freeze_count()
            try:
                assert rows(off, part) == 40
                assert gc.get_freeze_count() == before
                gen = RocketMQBatchReader(on).read(part)
                next(gen)
                gen.close()  # type: ignore[attr-defined]
                assert gc.get_freeze_count() == before
                assert rows(on, part) == 40
                frozen = gc.get_freeze_count()
                assert frozen > before
                young = [[i] for i in range(5000)]  # a second freeze would take these too
                assert rows(on, part) == 40
                assert gc.get_freeze_count() < frozen + len(young)
            finally:
                gc.unfreeze()
                bridge._frozen_in = None
                bridge._close_worker()
