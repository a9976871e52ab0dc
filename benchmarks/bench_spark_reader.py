"""The Spark source's executor read path without Spark: CPU per row of ``read_range``.

What a Python worker does for its partitions, minus Spark's own hand-off of the batches to the JVM:
``read_range`` over every queue of a topic, one partition after the other in this process (a worker
reads one partition at a time), the batches counted and dropped. The cluster runs in a child process
(or is ``--namesrv``), so this process's CPU time (every thread of it) is the reader's.

    python benchmarks/bench_spark_reader.py --messages 200000 --rounds 5

Prints one line per round (rows/s, CPU µs a row; with the embedded cluster also its CPU per pull, user
and system, from ``/proc``) and a JSON summary line (medians of the rounds after the first). To compare
two versions, run it with ``PYTHONPATH=<worktree>`` for the other, alternately.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import backlog, preload

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster


def children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process's child processes (the embedded cluster; Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == me:
            user += int(fields[11]) / tick
            system += int(fields[12]) / tick
    return user, system


def plan(
    namesrv: str, topic: str, extra: dict[str, str]
) -> tuple[Any, dict[tuple[str, int], tuple[int, int]]]:
    """The source's options, and [min, max) offsets of every queue (as the driver plans them)."""
    from rmq_async.spark import bridge
    from rmq_async.spark.options import parse_options

    opts = parse_options({"namesrv": namesrv, "topic": topic, **extra}, streaming=False)
    b = bridge.Bridge(opts)
    try:
        return opts, b.bounds(b.queues())
    finally:
        b.close()


def read_all(namesrv: str, topic: str, extra: dict[str, str]) -> tuple[int, float, float]:
    from rmq_async.spark import bridge
    from rmq_async.spark.offsets import Range

    opts, bounds = plan(namesrv, topic, extra)
    rows = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for (t, broker, q), (lo, hi) in sorted(bounds.items()):
        for batch in bridge.read_range(opts, Range(t, broker, q, lo, hi)):
            rows += batch.num_rows
    return rows, time.process_time() - c0, time.perf_counter() - t0


def phases(namesrv: str, topic: str, extra: dict[str, str]) -> tuple[int, float, float]:
    """The same reads cut in two: every pull of every queue first (bodies kept), then every Arrow
    batch built from them (4,096 rows each, as ``read_range`` cuts them); CPU seconds of each."""
    import contextlib

    from rmq_async.spark import bridge
    from rmq_async.spark.bridge import ARROW_BATCH_ROWS
    from rmq_async.spark.columns import Chunk, build_batch
    from rmq_async.spark.offsets import Range
    from rmq_async.spark.pipe import pull_range

    opts, bounds = plan(namesrv, topic, extra)
    worker = bridge._this_worker()
    pulled: list[tuple[str, list[Chunk]]] = []
    c0 = time.process_time()
    for (t, broker, q), (lo, hi) in sorted(bounds.items()):
        r = Range(t, broker, q, lo, hi)
        key, session = worker.session(opts)
        addr = worker.portal.call(session._addr, (t, broker, q))
        chunks: list[Chunk] = []
        gen = pull_range(
            lambda: worker.take_socket(key, session, addr), lambda c: worker.give_socket(key, c),  # noqa: B023
            session.template(r), r, depth=opts.pulls_in_flight, batch=opts.pull_batch_size,
            filtered=session.sub_string != "*", fail_on_data_loss=True, warn=print,
        )  # fmt: skip
        with contextlib.closing(gen):
            for got in gen:
                chunks.extend(got)
        pulled.append((broker, chunks))
    pull_cpu = time.process_time() - c0
    rows = 0
    c0 = time.process_time()
    for broker, chunks in pulled:
        pending: list[Chunk] = []
        n = 0
        for c in chunks:
            pending.append(c)
            n += c.hi - c.lo
            if n >= ARROW_BATCH_ROWS:
                rows += build_batch(pending, topic, broker).num_rows
                pending, n = [], 0
        if pending:
            rows += build_batch(pending, topic, broker).num_rows
    return rows, pull_cpu, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--namesrv", help="a running cluster's name server (default: an embedded cluster)")
    ap.add_argument("--topic", default="BenchSparkReader")
    ap.add_argument("--source-opt", action="append", default=[], metavar="K=V")
    ap.add_argument(
        "--phases", action="store_true", help="time the pulls and the batch building apart (pulls first)"
    )
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.source_opt)
    results: list[dict[str, Any]] = []

    def rounds(namesrv: str) -> None:
        for rnd in range(1, args.rounds + 1):
            if args.phases:
                rows, pull_cpu, build_cpu = phases(namesrv, args.topic, extra)
                res = {"round": rnd, "rows": rows, "pull_us_row": pull_cpu / rows * 1e6}
                res["build_us_row"] = build_cpu / rows * 1e6
                results.append(res)
                print(f"round {rnd}: {rows:,} rows, pulls {res['pull_us_row']:.2f} CPU-us/row, "
                      f"batches {res['build_us_row']:.2f} CPU-us/row")  # fmt: skip
                continue
            u0, s0 = children_cpu()
            rows, cpu, wall = read_all(namesrv, args.topic, extra)
            u1, s1 = children_cpu()
            res = {"round": rnd, "rows": rows, "rows_s": rows / wall, "cpu_us_row": cpu / rows * 1e6}
            line = f"round {rnd}: {rows:,} rows, {rows / wall:,.0f} rows/s, {cpu / rows * 1e6:.2f} CPU-us/row"
            if not args.namesrv:  # the cluster is this process's child: its CPU per pull of pullBatchSize
                pulls = rows / int(extra.get("pullBatchSize", 32))
                res["broker_user_us_pull"] = (u1 - u0) / pulls * 1e6
                res["broker_system_us_pull"] = (s1 - s0) / pulls * 1e6
                line += (
                    f"; the broker {res['broker_user_us_pull']:.1f} user + "
                    f"{res['broker_system_us_pull']:.1f} system CPU-us a pull"
                )
            results.append(res)
            print(line)

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

    summary: dict[str, Any] = {"rmq_async": str(Path(rmq_async.__file__).parent), "rows": rest[0]["rows"]}
    for k in (
        "rows_s",
        "cpu_us_row",
        "pull_us_row",
        "build_us_row",
        "broker_user_us_pull",
        "broker_system_us_pull",
    ):
        if k in rest[0]:
            summary[k] = statistics.median(r[k] for r in rest)
    summary["source_opts"] = extra
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
