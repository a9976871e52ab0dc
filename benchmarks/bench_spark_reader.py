"""The Spark source's executor read path without Spark: CPU per row of ``read_range``.

What a Python worker does for its partitions, minus Spark's own hand-off of the batches to the JVM:
``read_range`` over every queue of a topic, one partition after the other in this process (a worker
reads one partition at a time), the batches counted and dropped. The cluster runs in a child process
(or is ``--namesrv``), so this process's CPU time (every thread of it) is the reader's.

    python benchmarks/bench_spark_reader.py --messages 200000 --rounds 5

Prints one line per round (rows/s, CPU µs a row) and a JSON summary line (medians of the rounds after
the first). To compare two versions, run it with ``PYTHONPATH=<worktree>`` for the other, alternately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import backlog, preload

from rmq_async import EmbeddedCluster, Timing


def read_all(namesrv: str, topic: str, extra: dict[str, str]) -> tuple[int, float, float]:
    from rmq_async.spark import bridge
    from rmq_async.spark.offsets import Range
    from rmq_async.spark.options import parse_options

    opts = parse_options({"namesrv": namesrv, "topic": topic, **extra}, streaming=False)
    b = bridge.Bridge(opts)
    try:
        bounds = b.bounds(b.queues())
    finally:
        b.close()
    rows = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for (broker, q), (lo, hi) in sorted(bounds.items()):
        for batch in bridge.read_range(opts, Range(broker, q, lo, hi)):
            rows += batch.num_rows
    return rows, time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--namesrv", help="a running cluster's name server (default: an embedded cluster)")
    ap.add_argument("--topic", default="BenchSparkReader")
    ap.add_argument("--source-opt", action="append", default=[], metavar="K=V")
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.source_opt)
    results: list[dict[str, Any]] = []

    def rounds(namesrv: str) -> None:
        for rnd in range(1, args.rounds + 1):
            rows, cpu, wall = read_all(namesrv, args.topic, extra)
            res = {"round": rnd, "rows": rows, "rows_s": rows / wall, "cpu_us_row": cpu / rows * 1e6}
            results.append(res)
            print(f"round {rnd}: {rows:,} rows, {rows / wall:,.0f} rows/s, {cpu / rows * 1e6:.2f} CPU-us/row")

    with start_blocking_portal() as portal:
        if args.namesrv:
            rounds(args.namesrv)
        else:
            cluster = EmbeddedCluster(brokers=1, queues=args.queues, timing=Timing(), process=True)
            with portal.wrap_async_context_manager(cluster):
                portal.call(cluster.create_topic, args.topic, args.queues)
                portal.call(preload, cluster.namesrv_addr, args.topic, args.messages, args.size)
                n, _ = portal.call(backlog, cluster.namesrv_addr, args.topic)
                print(f"preloaded {n:,} x {args.size} B")
                rounds(cluster.namesrv_addr)
    rest = results[1:] or results
    import rmq_async

    print(
        json.dumps(
            {
                "rmq_async": str(Path(rmq_async.__file__).parent),
                "rows": rest[0]["rows"],
                "rows_s": statistics.median(r["rows_s"] for r in rest),
                "cpu_us_row": statistics.median(r["cpu_us_row"] for r in rest),
                "source_opts": extra,
            }
        )
    )


if __name__ == "__main__":
    main()
