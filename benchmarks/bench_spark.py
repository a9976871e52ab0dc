"""Spark source vs lite pull consumer on the same data: what Spark costs.

Strategy: the embedded cluster runs in a child process (``EmbeddedCluster(process=True)``, default
``Timing()``), driven through a blocking portal. One topic of ``--queues`` queues is preloaded with
``--messages`` messages of ``--size`` bytes (batches of 32, 16 in flight). Then:

* lite pull: a ``LitePullConsumer`` assigned every queue from the first offset (pull batch 32),
  polling until all N messages are seen; rows/s from assign to the last message;
* spark: a streaming query (``local[2]``) with ``Trigger.AvailableNow`` reading the topic from
  ``earliest`` into the ``noop`` sink; rows/s over the query's wall time (start to termination,
  planning included) and the session start time apart.

``--write`` replaces the "## Lite pull and Spark" section of benchmarks/RESULTS.md.

    python benchmarks/bench_spark.py [--messages 1000000] [--size 1024] [--queues 8] [--write]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from pathlib import Path

import anyio
from anyio.from_thread import start_blocking_portal

from rmq_async import EmbeddedCluster, Message, Producer, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer

TOPIC = "BenchSpark"
RESULTS = Path(__file__).with_name("RESULTS.md")
SECTION = "## Lite pull and Spark"


async def preload(namesrv: str, n: int, size: int, batch: int = 32, inflight: int = 16) -> float:
    body = b"x" * size
    async with Producer("bench_spark_producer", namesrv_addr=namesrv) as p:
        await p.send(Message(TOPIC, body))
        left = n - 1
        it = iter([batch] * (left // batch) + ([left % batch] if left % batch else []))
        t0 = time.perf_counter()

        async def sender() -> None:
            for k in it:
                await p.send_batch([Message(TOPIC, body) for _ in range(k)])

        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(sender)
        return (n - 1) / (time.perf_counter() - t0)


async def lite_pull(namesrv: str, n: int) -> float:
    async with LitePullConsumer(
        f"bench_lite_{time.monotonic_ns()}", namesrv_addr=namesrv, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=32,
    ) as c:  # fmt: skip
        mqs = await c.fetch_queues(TOPIC)
        t0 = time.perf_counter()
        await c.assign(mqs)
        seen = 0
        while seen < n:
            seen += len(await c.poll(5.0, max_messages=4096))
        return n / (time.perf_counter() - t0)


def spark_run(namesrv: str, n: int) -> tuple[float, float, float]:
    """(rows/s over the query, query seconds, session start seconds)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rmq_async bench_spark")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    started = time.perf_counter() - t0
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as ckpt:
            t1 = time.perf_counter()
            q = (
                spark.readStream.format("rocketmq")
                .option("namesrv", namesrv)
                .option("topic", TOPIC)
                .option("startingOffsets", "earliest")
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            secs = time.perf_counter() - t1
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            if rows != n:
                raise SystemExit(f"spark read {rows} rows, expected {n}")
    finally:
        spark.stop()
    return n / secs, secs, started


def write_section(text: str) -> None:
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    pat = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pat.sub(text, old) if pat.search(old) else old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description="Spark source vs lite pull consumer")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    n = args.messages
    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(brokers=1, queues=args.queues, timing=Timing(), process=True)
        with portal.wrap_async_context_manager(cluster):
            portal.call(cluster.create_topic, TOPIC, args.queues)
            t0 = time.perf_counter()
            produce_rate = portal.call(preload, cluster.namesrv_addr, n, args.size)
            print(f"preload: {n} x {args.size} B at {produce_rate:,.0f} msgs/s", flush=True)
            lite = portal.call(lite_pull, cluster.namesrv_addr, n)
            print(f"lite pull: {lite:,.0f} rows/s", flush=True)
            spark_rate, spark_secs, start_secs = spark_run(cluster.namesrv_addr, n)
            print(f"spark: {spark_rate:,.0f} rows/s ({spark_secs:.1f} s; session start {start_secs:.1f} s)")
            wall = time.perf_counter() - t0
    import pyspark

    mib = n * args.size / 2**20
    text = f"""{SECTION}

`python benchmarks/bench_spark.py --messages {n} --write` (wall time {wall:.0f} s). Broker:
`EmbeddedCluster(brokers=1, queues={args.queues}, process=True)`, default `Timing()`;
{n:,} messages of {args.size} B ({mib:,.0f} MiB of bodies) over {args.queues} queues,
preloaded at {produce_rate:,.0f} msgs/s.
One run each; Python {platform.python_version()}, pyspark {pyspark.__version__}, {os.cpu_count()} CPUs,
a shared machine, so expect noise.

| reader | rows/s | ratio to lite pull |
|---|---:|---:|
| `LitePullConsumer` (assign all queues, pull batch 32, poll up to 4096) | {lite:,.0f} | 1.00 |
| Spark streaming, `local[2]`, availableNow, `noop` sink ({spark_secs:.1f} s) \
| {spark_rate:,.0f} | {spark_rate / lite:.2f} |

The Spark figure includes planning (min/max offsets per queue) and Arrow conversion in the Python
workers; the session start ({start_secs:.1f} s) is left out. Executors read their ranges with plain
pulls (no long polling), one input partition per queue.
"""
    if n < 1_000_000:
        text += (
            f"\nMeasured with N = {n:,} to keep the run short here; the full run is "
            "`python benchmarks/bench_spark.py --messages 1000000 --write`.\n"
        )
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
