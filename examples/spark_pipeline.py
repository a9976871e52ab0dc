"""A streaming Spark pipeline over RocketMQ: JSON order events -> per-minute, per-customer totals (Parquet).

Run: ``python examples/spark_pipeline.py [OUT_DIR] [--orders N]`` (needs ``pip install -e '.[spark]'``
and Java 17). It starts the embedded cluster in a child process, sends N order events
(``{"order_id", "customer", "amount", "ts"}``, key = customer) to the topic ``Orders``, then runs a
streaming query with ``Trigger.AvailableNow``: each micro-batch is parsed, aggregated per event-time
minute and customer, and appended to ``OUT_DIR/totals`` (Parquet). The query stops by itself once it
has read what was in the topic when it started; the checkpoint in ``OUT_DIR/checkpoint`` lets a rerun
pick up only new orders. Totals over all batches are then read back and printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

from anyio.from_thread import start_blocking_portal

from rmq_async import Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster

TOPIC = "Orders"


async def send_orders(namesrv: str, n: int, seed: int = 7) -> None:
    rnd = random.Random(seed)
    now_ms = int(time.time() * 1000)
    async with Producer("orders_producer", namesrv_addr=namesrv) as p:
        for i in range(n):
            customer = f"c{rnd.randrange(5)}"
            event = {
                "order_id": i,
                "customer": customer,
                "amount": round(rnd.uniform(1, 100), 2),
                "ts": now_ms - rnd.randrange(5 * 60_000),  # within the last 5 minutes
            }
            await p.send(Message(TOPIC, json.dumps(event).encode(), tags="order", keys=customer))


def run_pipeline(spark: Any, namesrv: str, out_dir: str) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    order = StructType(
        [
            StructField("order_id", LongType()),
            StructField("customer", StringType()),
            StructField("amount", DoubleType()),
            StructField("ts", LongType()),
        ]
    )
    totals_path = os.path.join(out_dir, "totals")

    def write_batch(df: Any, batch_id: int) -> None:
        agg = (
            df.groupBy(F.window("event_time", "1 minute").start.alias("minute"), "customer")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
            .withColumn("batch_id", F.lit(batch_id))
        )
        agg.write.mode("append").parquet(totals_path)

    events = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("tags", "order")
        .option("maxRecordsPerTrigger", "500")
        .load()
        .select(F.from_json(F.col("body").cast("string"), order).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    query = (
        events.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", os.path.join(out_dir, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = len(query.recentProgress)
    # the batches wrote partial totals: sum them per minute and customer
    totals = (
        spark.read.parquet(totals_path)
        .groupBy("minute", "customer")
        .agg(F.sum("orders").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
        .orderBy("minute", "customer")
        .collect()
    )
    return {
        "micro_batches": batches,
        "orders": sum(r.orders for r in totals),
        "rows": [
            {"minute": r.minute.isoformat(), "customer": r.customer, "orders": r.orders, "amount": r.amount}
            for r in totals
        ],
        "parquet": totals_path,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=None)
    ap.add_argument("--orders", type=int, default=2000)
    args = ap.parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="rmq_spark_pipeline-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(brokers=1, queues=4, timing=Timing.fast(), process=True)
        with portal.wrap_async_context_manager(cluster):
            portal.call(send_orders, cluster.namesrv_addr, args.orders)
            spark = (
                SparkSession.builder.master("local[2]")
                .appName("rmq_async spark_pipeline")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(RocketMQDataSource)
            try:
                summary = run_pipeline(spark, cluster.namesrv_addr, out_dir)
            finally:
                spark.stop()
    print(json.dumps(summary, indent=1))
    if summary["orders"] != args.orders:
        sys.exit(f"expected {args.orders} orders in the totals, found {summary['orders']}")


if __name__ == "__main__":
    main()
