"""A Spark pipeline from topic to topic: read ``Events`` with the rocketmq source, transform, write
``Enriched`` with the rocketmq sink; restarted on its checkpoint, with a micro-batch run twice.

Run: ``python examples/spark_topic_to_topic.py [OUT_DIR] [--events N]`` (needs ``pip install -e
'.[spark]'`` and Java 17). It starts the embedded cluster in a child process and sends N JSON events
to ``Events``. A streaming query (``Trigger.AvailableNow``, checkpoint in ``OUT_DIR/checkpoint``)
reads them, adds a field to each body and writes them to ``Enriched``, each with the message id
``<topic>/<broker>/<queue>/<offset>`` of the event it comes from (option ``uniqKeyColumn``). Then N
more events are sent, the checkpoint's last commit is deleted (as if the query had died after writing
its last micro-batch but before recording it) and the query is started again: it runs that
micro-batch again, then the new events. ``Enriched`` then holds every event at least once, some twice
(the sink is at-least-once), and exactly once when deduplicated by message id, which is what the
summary printed as JSON shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal

from rmq_async import Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster

SOURCE, TARGET = "Events", "Enriched"


async def send_events(namesrv: str, first: int, n: int) -> None:
    async with Producer("events_producer", namesrv_addr=namesrv) as p:
        for i in range(first, first + n):
            event = {"id": i, "kind": "click" if i % 3 else "view"}
            await p.send(Message(SOURCE, json.dumps(event).encode(), tags=event["kind"], keys=f"e-{i}"))


def run_query(spark: Any, namesrv: str, checkpoint: str) -> int:
    """One run of the query until what ``Events`` held at its start is written; micro-batches run."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", SOURCE)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "100")
        .load()
    )
    enriched = events.select(
        # the body: the event with the time it was stored in Events
        F.concat(
            F.expr("substring(cast(body as string), 1, length(body) - 1)"),
            F.lit(', "stored": "'),
            F.date_format("store_timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSS"),
            F.lit('"}'),
        ).alias("body"),
        "keys",
        "tags",
        F.create_map(F.lit("source_topic"), F.col("topic")).alias("properties"),
        # the same id whenever this event is written again: consumers drop the repeat
        F.concat_ws("/", "topic", "broker_name", "queue_id", "queue_offset").alias("source_id"),
    )
    query = (
        enriched.writeStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", TARGET)
        .option("uniqKeyColumn", "source_id")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return len(query.recentProgress)


def forget_last_commit(checkpoint: str) -> int | None:
    """Delete the checkpoint's last commit: the next run does that micro-batch again."""
    commits = sorted(
        (p for p in Path(checkpoint, "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not commits:
        return None
    last = commits[-1]
    last.unlink()
    Path(last.parent, f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


def run_pipeline(spark: Any, namesrv: str, portal: Any, out_dir: str, events: int) -> dict[str, Any]:
    """Send, run, send more, forget the last commit, run again; what ``Enriched`` then holds."""
    checkpoint = os.path.join(out_dir, "checkpoint")
    portal.call(send_events, namesrv, 0, events)
    first = run_query(spark, namesrv, checkpoint)
    portal.call(send_events, namesrv, events, events)
    replayed = forget_last_commit(checkpoint)
    second = run_query(spark, namesrv, checkpoint)
    rows = (
        spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", TARGET).load()
        .select("msg_id", "keys", "body", "properties").collect()
    )  # fmt: skip
    ids = {r.msg_id for r in rows}
    bodies = [json.loads(r.body) for r in rows]
    return {
        "events": 2 * events,
        "micro_batches": [first, second],
        "replayed_batch": replayed,
        "enriched_messages": len(rows),
        "enriched_distinct_ids": len(ids),
        "enriched_distinct_keys": len({r.keys for r in rows}),
        "all_stamped": all("stored" in b for b in bodies),
        "from_source_topic": all(r.properties.get("source_topic") == SOURCE for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=None)
    ap.add_argument("--events", type=int, default=500)
    args = ap.parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="rmq_spark_topic_to_topic-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rmq_async.spark import RocketMQDataSource

    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(brokers=1, queues=4, timing=Timing.fast(), process=True)
        with portal.wrap_async_context_manager(cluster):
            portal.call(cluster.create_topic, SOURCE, 4)
            portal.call(cluster.create_topic, TARGET, 4)
            spark = (
                SparkSession.builder.master("local[2]")
                .appName("rmq_async spark_topic_to_topic")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(RocketMQDataSource)
            try:
                summary = run_pipeline(spark, cluster.namesrv_addr, portal, out_dir, args.events)
            finally:
                spark.stop()
    print(json.dumps(summary, indent=1))
    if summary["enriched_distinct_ids"] != summary["events"]:
        found = summary["enriched_distinct_ids"]
        sys.exit(f"expected {summary['events']} distinct messages in {TARGET}, found {found}")


if __name__ == "__main__":
    main()
