"""The Spark source's planning calls against a broker a network round trip away.

Every micro-batch the stream reader asks each queue's min and max offsets (``latestOffset``), and with
``commitOffsets`` writes each queue's offset; a batch read's plan asks the bounds once. Here the
embedded cluster runs in this process with the answers to those requests held back ``--rtt`` ms
(its fault injection: the broker processes a request at once and answers it later, as a network
would deliver it), and a ``Session`` (what the driver's ``Bridge`` runs) times ``bounds`` and
``commit`` over a topic of ``--queues`` queues.

    python benchmarks/bench_spark_plan.py [--queues 64] [--rtt 1.0] [--rounds 5]

To compare trees: ``PYTHONPATH=<tree> python benchmarks/bench_spark_plan.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import anyio

import rmq_async
from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode
from rmq_async.spark.bridge import Session
from rmq_async.spark.options import parse_options

HELD = (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET)


async def main(args: argparse.Namespace) -> None:
    topic, group = "BenchSparkPlan", "bench_spark_plan"
    async with EmbeddedCluster(queues=args.queues, timing=Timing()) as cluster:
        await cluster.create_topic(topic, args.queues)
        opts = parse_options(
            {"namesrv": cluster.namesrv_addr, "topic": topic, "group": group, "requestTimeout": "10"},
            streaming=True,
        )
        async with Session(opts) as s:
            keys = await s.queues()
            await s.bounds(keys)  # routes and connections ready: only the requests are timed
            for code in HELD:
                cluster.brokers[0].faults.delay(code, args.rtt / 1000)
            bounds_s, commit_s = [], []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                await s.bounds(keys)
                bounds_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await s.commit({k: 0 for k in keys})
                commit_s.append(time.perf_counter() - t0)
    out = {
        "rmq_async": str(Path(rmq_async.__file__).parent),
        "queues": len(keys),
        "rtt_ms": args.rtt,
        "bounds_ms": statistics.median(bounds_s) * 1000,
        "commit_ms": statistics.median(commit_s) * 1000,
    }
    print(
        f"{len(keys)} queues, answers {args.rtt} ms late: bounds {out['bounds_ms']:.1f} ms, "
        f"commit {out['commit_ms']:.1f} ms (medians of {args.rounds})"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=64)
    ap.add_argument("--rtt", type=float, default=1.0, help="ms each answer is held back")
    ap.add_argument("--rounds", type=int, default=5)
    anyio.run(main, ap.parse_args())
