"""Paired A/B runs of one scenario (push, push-plain, push-orderly, lite-pull, pop, raw-pull) between
two source trees (e.g. two git worktrees), or between two scenarios in one tree.

On a shared VM consecutive single runs differ by up to 30%, more than most single changes are worth.
This alternates the two trees (ABBA order) so that each pair shares a spell of the machine, and reports
the median of the per-pair ratios of the consumer's CPU per message (``cpu_us_per_msg``), plus the
lowest and lower-quartile runs of each side.

    git worktree add /tmp/base <base-commit>
    python benchmarks/ab.py --a /tmp/base --b .
                            [--scenario push|push-plain|push-orderly|lite-pull|pop|raw-pull]
                            [--pairs 12]
                            [--messages 300000] [--loop uvloop|asyncio]
    python benchmarks/ab.py --a . --b . --a-scenario raw-pull --b-scenario push   # push vs raw

The second form gives the push/raw ratio in consumer CPU per message (the inverse of the B/A ratio)
from runs that alternate, unlike the harness, which runs every push run before every raw one.

Each run is a fresh process with ``PYTHONPATH`` set to its tree, draining ``--messages`` preloaded
1 KiB messages over 8 queues from one embedded cluster in its own process (fresh group, first offset).
``pop``: the cluster answers as 5.3.3, each run's fresh group is switched to POP for the topic
(SET_MESSAGE_REQUEST_MODE, by this process) and a no-op ``PushConsumer(client_rebalance=False)`` pops
it (its code uses the public API only, so it runs on any tree that has POP).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import asyncio, json, sys, time
import anyio
from rmq_async.bench import scenarios
kind, loop, namesrv, topic, n, group = sys.argv[1:7]
p = {"scenario": kind, "namesrv": namesrv, "topic": topic, "messages": int(n), "timeout": 300}


async def pop(p):
    from rmq_async import PushConsumer
    meter = scenarios.Meter(p["messages"])

    async def handler(msgs, ctx):
        meter.add(len(msgs))

    c = PushConsumer(group, namesrv_addr=p["namesrv"], handler=handler, subscriptions={p["topic"]: "*"},
                     client_rebalance=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    meter.started = time.perf_counter()
    async with c:
        with anyio.fail_after(p["timeout"]):
            await meter.done.wait()
    return meter.result()


if kind == "lite-pull":
    from rmq_async.bench.lite import lite_pull as fn
elif kind == "raw-pull":
    fn = scenarios.raw_pull
elif kind == "pop":
    fn = pop
else:  # push, push-orderly
    fn = scenarios.run_push
if loop == "uvloop":
    import uvloop
    r = uvloop.run(fn(p))
else:
    r = asyncio.run(fn(p))
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"]}))
"""


def run(tree: str, scenario: str, args: argparse.Namespace, namesrv: str, topic: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    group = f"ab_pop_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    if scenario == "pop":  # a fresh group, popped: switched to POP before its consumer starts
        from rmq_async.admin import set_consume_mode

        asyncio.run(set_consume_mode(topic, group, "POP", namesrv_addr=namesrv))
    cmd = [sys.executable, "-c", _CHILD, scenario, args.loop, namesrv, topic, str(args.messages), group]
    out = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="base source tree (holds rmq_async/)")
    ap.add_argument("--b", required=True, help="changed source tree")
    kinds = ["push", "push-plain", "push-orderly", "lite-pull", "pop", "raw-pull"]
    ap.add_argument("--scenario", choices=kinds, default="push")
    ap.add_argument("--a-scenario", choices=kinds, help="A's scenario (default: --scenario)")
    ap.add_argument("--b-scenario", choices=kinds, help="B's scenario (default: --scenario)")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = ap.parse_args()
    sa, sb = args.a_scenario or args.scenario, args.b_scenario or args.scenario
    sys.path.insert(0, str(ROOT))
    from rmq_async.bench.cluster import ChildCluster, create_topic, preload

    topic = "ABTopic"
    a_runs: list[dict[str, float]] = []
    b_runs: list[dict[str, float]] = []
    flavour = 5 if "pop" in (sa, sb) else 4
    with ChildCluster(queues=8, flavour=flavour) as cluster:
        ns = cluster.namesrv_addr
        asyncio.run(create_topic(ns, topic, 8))
        asyncio.run(preload(ns, topic, args.messages, 1024))
        for i in range(args.pairs):
            if i % 2 == 0:
                a = run(args.a, sa, args, ns, topic)
                b = run(args.b, sb, args, ns, topic)
            else:
                b = run(args.b, sb, args, ns, topic)
                a = run(args.a, sa, args, ns, topic)
            a_runs.append(a)
            b_runs.append(b)
            print(
                f"pair {i}: A {a['cpu_us_per_msg']:.2f} us ({a['msgs_per_s']:,.0f}/s)  "
                f"B {b['cpu_us_per_msg']:.2f} us ({b['msgs_per_s']:,.0f}/s)  "
                f"B/A {b['cpu_us_per_msg'] / a['cpu_us_per_msg']:.3f}",
                flush=True,
            )
    ca = sorted(r["cpu_us_per_msg"] for r in a_runs)
    cb = sorted(r["cpu_us_per_msg"] for r in b_runs)
    ratio = statistics.median(
        b["cpu_us_per_msg"] / a["cpu_us_per_msg"] for a, b in zip(a_runs, b_runs, strict=True)
    )
    q = len(ca) // 4
    print(
        f"A {sa}, B {sb}, {args.loop}, {args.pairs} pairs of {args.messages:,} messages: "
        f"median paired CPU ratio B/A {ratio:.3f}; median A {statistics.median(ca):.2f} us, "
        f"B {statistics.median(cb):.2f} us; lowest A {ca[0]:.2f}, B {cb[0]:.2f}; "
        f"lower quartile A {ca[q]:.2f}, B {cb[q]:.2f}"
    )


if __name__ == "__main__":
    main()
