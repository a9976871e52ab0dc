"""Where a pushed message's CPU goes: the push no-op scenario and the raw pull ceiling, stage by stage.

Strategy: the embedded name server + broker run in an exec'd child (``rmq_async.bench.cluster``), a
topic of ``--queues`` queues is preloaded with ``--messages`` 1 KiB messages, and each run drains it
in this process with the harness's own scenarios (``run_push`` / ``raw_pull``, fresh group, first
offset). The stages below are wrapped with ``perf_counter`` accumulators (one pair of clock reads
per call: per pulled batch, except the handler-side ones, which are per batch too), so the figures
are wall time inside each stage divided by the messages; "process CPU" is ``time.process_time()``
for the whole run. What the stages do not cover (the pull request's encoding and write, the response
header, task switches, the event loop) is the remainder.

    python benchmarks/bench_breakdown.py [--messages N] [--queues Q] [--runs R] [--loop uvloop|asyncio]
                                         [--plain]

``--plain`` leaves the stages unwrapped: msgs/s and process CPU per message only (how the session-2
steps in RESULTS.md were compared).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async.bench import scenarios  # noqa: E402
from rmq_async.bench.cluster import ChildCluster, create_topic, preload  # noqa: E402
from rmq_async.client import api  # noqa: E402
from rmq_async.consumer.concurrently import ConcurrentConsumeService  # noqa: E402
from rmq_async.consumer.process_queue import ProcessQueue  # noqa: E402
from rmq_async.transport.connection import Connection  # noqa: E402

STAGES = {
    "decode_messages": "pull body -> MessageExt list (both)",
    "frame parse": "Connection.buffer_updated: frames, headers, body copy (both)",
    "ProcessQueue.put": "push only",
    "consume batches": "ConcurrentConsumeService._consume: context, handler, ack grouping (push only)",
    "pulled batch done": "acks: ProcessQueue.remove, offset store, stats (push only)",
}

_T: collections.Counter[str] = collections.Counter()


def _wrap_sync(owner: Any, name: str, stage: str) -> None:
    orig = getattr(owner, name)
    pc = time.perf_counter

    def wrapper(*a: Any, **k: Any) -> Any:
        t = pc()
        try:
            return orig(*a, **k)
        finally:
            _T[stage] += pc() - t

    setattr(owner, name, wrapper)


def _wrap_async(owner: Any, name: str, stage: str) -> None:
    orig = getattr(owner, name)
    pc = time.perf_counter

    async def wrapper(*a: Any, **k: Any) -> Any:
        t = pc()
        try:
            return await orig(*a, **k)
        finally:
            _T[stage] += pc() - t

    setattr(owner, name, wrapper)


def instrument() -> None:
    _wrap_sync(api, "decode_messages", "decode_messages")
    _wrap_sync(Connection, "buffer_updated", "frame parse")
    _wrap_sync(ProcessQueue, "put", "ProcessQueue.put")
    _wrap_async(ConcurrentConsumeService, "_consume", "consume batches")  # the no-op handler never suspends
    _wrap_sync(ConcurrentConsumeService, "_pulled_batch_done", "pulled batch done")


def run_one(kind: str, params: dict[str, Any], loop: str) -> dict[str, float]:
    fn: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] = (
        scenarios.run_push if kind == "push" else scenarios.raw_pull
    )
    _T.clear()
    c0 = time.process_time()
    if loop == "uvloop":
        import uvloop

        res = uvloop.run(fn({**params, "scenario": kind}))
    else:
        res = asyncio.run(fn({**params, "scenario": kind}))
    n = params["messages"]
    out = {"msgs_per_s": res["msgs_per_s"], "process CPU": (time.process_time() - c0) / n * 1e6}
    out.update({stage: _T[stage] / n * 1e6 for stage in STAGES})
    out["remainder"] = out["process CPU"] - sum(out[s] for s in STAGES)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    ap.add_argument("--plain", action="store_true", help="no stage wrappers: msgs/s and CPU only")
    args = ap.parse_args()
    if not args.plain:
        instrument()
    topic = "BreakdownTopic"
    with ChildCluster(queues=args.queues) as cluster:
        ns = cluster.namesrv_addr
        asyncio.run(create_topic(ns, topic, args.queues))
        asyncio.run(preload(ns, topic, args.messages, 1024))
        params = {"namesrv": ns, "topic": topic, "messages": args.messages, "timeout": 300}
        runs: dict[str, list[dict[str, float]]] = {"push": [], "raw-pull": []}
        for _ in range(args.runs):  # interleaved, so a slower spell of the machine hits both
            for kind in runs:
                runs[kind].append(run_one(kind, params, args.loop))
    print(f"{args.messages:,} x 1 KiB over {args.queues} queues, {args.loop}, median of {args.runs} runs")
    print(f"{'us per message':40} {'push':>8} {'raw pull':>9}")
    rows = ["msgs_per_s", "process CPU"] + ([] if args.plain else [*STAGES, "remainder"])
    for row in rows:
        vals = [statistics.median(r[row] for r in runs[k]) for k in runs]
        fmt = "{:>8,.0f} {:>9,.0f}" if row == "msgs_per_s" else "{:>8.2f} {:>9.2f}"
        print(f"{row:40} " + fmt.format(*vals))


if __name__ == "__main__":
    main()
