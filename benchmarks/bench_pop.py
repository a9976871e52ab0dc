"""POP consumption throughput (#23): 1, 4 and 16 POP consumers of one group on an 8-queue topic, next
to the pull-mode push consumer (client-side rebalance) with as many members, on the same data.

Strategy: the embedded 5.x name server + broker run in a child process (``EmbeddedCluster(process=
True, flavour=5)``, default ``Timing()``: invisible time 60 s, poll time 15 s). One topic of 8 queues
gets ``--messages`` messages of 64 bytes per run (batches of 32 per queue). Each run uses a fresh topic,
a fresh group from the first offset, a no-op handler, ``consume_batch_max_size`` 1, and C members in
this process (one client instance each, one event loop): POP runs switch the group to POP first
(SET_MESSAGE_REQUEST_MODE, popShareQueueNum 0: every member pops every queue) and use
``client_rebalance=False``; pull runs use the ordinary consumer (16 members on 8 queues: 8 idle).
The members start and settle (a rebalance each) on the empty topic, then the messages are sent;
timed from the first handler call to the last distinct message handled; the figure is
messages per second over ``--runs`` runs (median). Every POP message is acked one ACK_MESSAGE each,
as the Java push consumer does. ``--write`` replaces the section "## POP consumption (#23)" of
benchmarks/history/bench-pop.md (the log; benchmarks/RESULTS.md quotes it).

    python benchmarks/bench_pop.py [--messages N] [--runs R] [--members 1,4,16] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async.admin import set_consume_mode  # noqa: E402
from rmq_async.config import ClientConfig, ProducerConfig, Timing  # noqa: E402
from rmq_async.consumer.push import PushConsumer  # noqa: E402
from rmq_async.embedded.cluster import EmbeddedCluster  # noqa: E402
from rmq_async.producer.producer import Producer  # noqa: E402
from rmq_async.protocol.message import Message  # noqa: E402
from rmq_async.protocol.stored import MessageExt  # noqa: E402

RESULTS = ROOT / "benchmarks" / "history" / "bench-pop.md"  # the log; RESULTS.md quotes it
QUEUES = 8
TOPIC = "BenchPop"
_groups = itertools.count()


async def preload(namesrv: str, topic: str, n: int) -> None:
    cfg = ProducerConfig(group="bench_pop_producer", default_topic_queue_nums=QUEUES)
    async with Producer(config=cfg, client_config=ClientConfig(namesrv_addr=namesrv)) as p:
        mqs = sorted(await p.queues(topic))
        body = b"x" * 64

        async def lane(q: int) -> None:
            idx = list(range(q, n, len(mqs)))
            for i in range(0, len(idx), 32):
                await p.send_batch(
                    [Message(topic, body, keys=f"k-{j}") for j in idx[i : i + 32]], queue=mqs[q]
                )

        await asyncio.gather(*(lane(q) for q in range(len(mqs))))


async def one_run(cluster: EmbeddedCluster, n: int, members: int, pop: bool) -> float:
    """One run on a fresh topic: the members start and settle on the empty topic, then the messages
    are sent; timed from the first handler call to the last distinct message."""
    namesrv = cluster.namesrv_addr
    k = next(_groups)
    group, topic = f"bench_pop_g{k}", f"{TOPIC}{k}"
    await cluster.create_topic(topic, QUEUES)
    if pop:
        await set_consume_mode(topic, group, "POP", 0, namesrv_addr=namesrv)
    seen: set[str] = set()
    done = asyncio.Event()
    first: list[float] = []

    async def handler(msgs: list[MessageExt], ctx: Any) -> None:
        if not first:
            first.append(time.perf_counter())
        for m in msgs:
            seen.add(m.keys or "")
        if len(seen) >= n:
            done.set()

    consumers = [
        PushConsumer(
            group, handler=handler, subscriptions={topic: "*"}, instance_name=f"b{i}",
            client_config=ClientConfig(namesrv_addr=namesrv, instance_name=f"b{i}", timing=Timing()),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_rebalance=not pop,
        )
        for i in range(members)
    ]  # fmt: skip
    for c in consumers:
        await c.start()
    for c in consumers:  # settled: the last member's arrival rebalanced everybody (pull) or assigned (POP)
        c.rebalance_now()
        await c.wait_rebalanced()
    await preload(namesrv, topic, n)
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - first[0]
    await asyncio.gather(*(c.stop() for c in consumers))
    return n / elapsed


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": args.messages, "runs": args.runs, "rows": []}
    async with EmbeddedCluster(brokers=1, queues=QUEUES, timing=Timing(), flavour=5, process=True) as cluster:
        for members in args.members:
            row: dict[str, Any] = {"members": members}
            for pop in (True, False):
                rates = [await one_run(cluster, args.messages, members, pop) for _ in range(args.runs)]
                key = "pop" if pop else "pull"
                row[key] = (statistics.median(rates), min(rates), max(rates))
                print(f"members={members} {key}: {row[key][0]:.0f} msgs/s", flush=True)
            out["rows"].append(row)
    return out


_LIMITS_TEXT = """
    What limits POP here: the broker. A client profile of the one-member POP run shows the client
    mostly waiting in epoll; every message costs one ACK_MESSAGE request (as the Java push consumer
    sends them: it does not use BATCH_ACK) that the embedded broker, pure Python in its own process
    on the same 2 cores, decodes, handles and answers, against a pull consumer that commits offsets
    every 5 s in one oneway per queue. More members add more pop loops and connections, not broker
    capacity, so the POP rate falls a little with 4 and 16 members while it stays spread over all of
    them (16 members on 8 queues all pop; in pull mode 8 of the 16 sit idle). The figures compare
    the two modes on this broker, not a real 5.x broker, whose ACK path is Java."""
LIMITS = " ".join(_LIMITS_TEXT.split())


def render(res: dict[str, Any], cmd: str) -> str:
    lines = [
        "## POP consumption (#23)",
        "",
        f"`{cmd}` (asyncio loop, Python {platform.python_version()}, {os.cpu_count()} CPUs shared with other "
        "work; embedded 5.x broker in a child process, default `Timing()`; one 8-queue topic of "
        f"{res['messages']} messages of 64 bytes; no-op handler, consume batch size 1; all members in one "
        f"process and event loop, settled before the messages are sent; median of {res['runs']} run(s), "
        "from the first handler call to the last distinct message).",
        "",
        "| members | POP msgs/s | pull-mode push msgs/s | POP / pull |",
        "|---|---|---|---|",
    ]
    for r in res["rows"]:
        pop, pull = r["pop"], r["pull"]
        lines.append(
            f"| {r['members']} | {pop[0]:.0f} ({pop[1]:.0f}-{pop[2]:.0f}) "
            f"| {pull[0]:.0f} ({pull[1]:.0f}-{pull[2]:.0f}) | {pop[0] / pull[0]:.2f}x |"
        )
    lines += [
        "",
        LIMITS,
        "",
    ]
    return "\n".join(lines)


def write(section: str) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# POP benchmark log\n"
    pat = re.compile(r"^## POP consumption \(#23\)\n.*?(?=^## |\Z)", re.S | re.M)
    text = pat.sub(section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--members", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    cmd = "python benchmarks/bench_pop.py " + " ".join(sys.argv[1:])
    section = render(res, cmd.strip())
    print(section)
    if args.write:
        write(section)


if __name__ == "__main__":
    main()
