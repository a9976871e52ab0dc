"""Push consumer benchmark: producer preload, push throughput, raw pull ceiling, latency, memory.

Strategy: the embedded name server + broker run in a child process (``EmbeddedCluster(process=True)``,
default ``Timing()``), so the broker does not share this process's event loop. One topic of
``--queues`` queues is preloaded once with ``--messages`` messages of ``--size`` bytes (pipelined
``send_batch`` of 32, several batches in flight). Then, on each event loop (default asyncio and
uvloop, each in its own ``run``), and ``--runs`` times each:

* push: a ``PushConsumer`` with a no-op handler, a fresh group per run, CONSUME_FROM_FIRST_OFFSET,
  timed from the first to the last handler call until all N messages are seen
  (consume_batch_max_size 1 and 32);
* raw: one task per queue doing back-to-back ``client.api.pull`` calls (the header the pull loop
  builds, plus the subscription flag since no heartbeat registers the group), same N messages;
* latency: a fresh topic, a consumer running, the producer paced at ``--rate`` msgs/s for
  ``--duration`` s (same process); per message, handler wall clock minus born / store timestamp;
* memory: a child process (this script with ``--rss-worker``) consumes a ``--rss-messages`` backlog
  with default thresholds and reports VmRSS before the consumer starts and VmHWM after.

``--profile`` adds one cProfile'd push run (asyncio loop, batch size 1). Figures are medians of
``--runs`` with min-max spread. ``--write`` replaces the "## Push consumer" section of
benchmarks/RESULTS.md (text between ``<!-- analysis -->`` and ``<!-- /analysis -->`` is kept).

    python benchmarks/bench_push.py [--messages N] [--size BYTES] [--queues Q] [--runs R]
                                    [--loop asyncio|uvloop|both] [--profile] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import os
import platform
import pstats
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import uvloop  # noqa: E402

from rmq_async.client.instance import ClientInstance  # noqa: E402
from rmq_async.config import ClientConfig, Timing  # noqa: E402
from rmq_async.consumer.concurrently import ConsumeContext  # noqa: E402
from rmq_async.consumer.push import PushConsumer  # noqa: E402
from rmq_async.embedded.cluster import EmbeddedCluster  # noqa: E402
from rmq_async.producer.producer import Producer  # noqa: E402
from rmq_async.protocol import headers as H  # noqa: E402
from rmq_async.protocol.codes import PullSysFlag  # noqa: E402
from rmq_async.protocol.message import Message, MessageExt  # noqa: E402
from rmq_async.protocol.mq import MessageQueue  # noqa: E402

__all__ = ["main"]

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Push consumer"
_group_ids = itertools.count()


def run_on(loop_name: str, fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    if loop_name == "uvloop":
        return uvloop.run(fn())
    return asyncio.run(fn())


def proc_status(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def fresh_group(kind: str) -> str:
    return f"bench_{kind}_{os.getpid()}_{next(_group_ids)}_{time.monotonic_ns() % 1_000_000}"


# -- preload ------------------------------------------------------------------------------------


async def preload(namesrv: str, topic: str, n: int, size: int, batch: int = 32, inflight: int = 16) -> float:
    """Send n messages in batches of ``batch``, ``inflight`` batches in flight; returns msgs/s."""
    body = b"x" * size
    async with Producer("bench_producer", namesrv_addr=namesrv) as p:
        await p.send(Message(topic, body))  # route warm-up (counts towards n)
        left = n - 1
        chunks = [batch] * (left // batch) + ([left % batch] if left % batch else [])
        it = iter(chunks)
        t0 = time.perf_counter()

        async def sender() -> None:
            for k in it:
                await p.send_batch([Message(topic, body) for _ in range(k)])

        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(sender)
        return (n - 1) / (time.perf_counter() - t0)


# -- push throughput -----------------------------------------------------------------------------


STALL = 0.5  # seconds without a handler call that count as a stall, not as consuming time


async def push_run(
    namesrv: str, topic: str, n: int, batch: int, prof: cProfile.Profile | None = None
) -> tuple[float, float, float]:
    """Returns (msgs/s first to last, msgs/s with stalls over STALL s left out, stalled seconds)."""
    done = anyio.Event()
    seen = 0
    first = last = prev = stalled = 0.0

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal seen, first, last, prev, stalled
        now = time.perf_counter()
        if seen == 0:
            first = now
        elif now - prev > STALL:
            stalled += now - prev
        prev = now
        seen += len(msgs)
        if seen >= n:
            last = now
            done.set()
        return None

    consumer = PushConsumer(
        fresh_group("push"),
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_batch_max_size=batch,
    )
    if prof is not None:
        prof.enable()
    try:
        async with consumer:
            with anyio.fail_after(max(60.0, n / 2000)):
                await done.wait()
    finally:
        if prof is not None:
            prof.disable()
    span = last - first
    if span <= 0:
        return float("nan"), float("nan"), stalled
    return (n - 1) / span, (n - 1) / (span - stalled), stalled


# -- raw pull ceiling ---------------------------------------------------------------------------


async def raw_run(namesrv: str, topic: str, n: int, pull_batch: int = 32) -> float:
    timing = Timing()
    group = fresh_group("raw")
    async with ClientInstance(ClientConfig(namesrv_addr=namesrv, timing=timing)) as client:
        client.add_topic(topic)
        await client.update_route(topic)
        mqs: list[MessageQueue] = await client.subscribe_queues(topic)
        seen = 0
        first = last = 0.0
        done = anyio.Event()
        sub_version = int(time.time() * 1000)

        async def loop(mq: MessageQueue) -> None:
            nonlocal seen, first, last
            addr = client.broker_addr(mq.broker_name)
            assert addr is not None
            offset = 0
            while not done.is_set():
                header = H.PullMessageRequestHeader(
                    consumer_group=group,
                    topic=mq.topic,
                    queue_id=mq.queue_id,
                    queue_offset=offset,
                    max_msg_nums=pull_batch,
                    sys_flag=PullSysFlag.build(commit_offset=False, suspend=True, subscription=True),
                    commit_offset=0,
                    suspend_timeout_millis=int(timing.suspend_timeout * 1000),
                    sub_version=sub_version,
                    subscription="*",
                    expression_type="TAG",
                    bname=mq.broker_name,
                )
                res = await client.api.pull(addr, header, timing.pull_timeout, broker_name=mq.broker_name)
                offset = res.next_begin_offset
                if res.messages:
                    if seen == 0:
                        first = time.perf_counter()
                    seen += len(res.messages)
                    if seen >= n:
                        last = time.perf_counter()
                        done.set()

        async with anyio.create_task_group() as tg:
            for mq in mqs:
                tg.start_soon(loop, mq)
            with anyio.fail_after(max(60.0, n / 2000)):
                await done.wait()
            tg.cancel_scope.cancel()
    return (n - 1) / (last - first) if last > first else float("nan")


# -- latency ------------------------------------------------------------------------------------


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def latency_run(
    cluster: EmbeddedCluster, queues: int, size: int, rate: int, duration: float
) -> dict[str, float]:
    topic = f"BenchLat{os.getpid()}x{next(_group_ids)}x{time.monotonic_ns() % 100000}"
    await cluster.create_topic(topic, queues)
    namesrv = cluster.namesrv_addr
    n = int(rate * duration)
    warm_done = False
    born: list[float] = []
    store: list[float] = []
    done = anyio.Event()
    warm = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        now = time.time() * 1000.0
        for m in msgs:
            born.append(now - m.born_timestamp)
            store.append(now - m.store_timestamp)
        if len(born) >= queues:
            warm.set()
        if len(born) >= n and warm_done:
            done.set()
        return None

    body = b"x" * size
    consumer = PushConsumer(
        fresh_group("lat"),
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    async with consumer, Producer("bench_lat_producer", namesrv_addr=namesrv) as p:
        with anyio.fail_after(30):
            while len(consumer.assignment()) < queues:
                await consumer.wait_rebalanced()
        info = await p.publish_info(topic)
        # warm-up: one message per queue, seen before the paced run, so that the start-up stall of
        # the pull loops (see RESULTS.md) is not in the figures
        for mq in info.queues:
            await p.send(Message(topic, body), queue=mq)
        with anyio.fail_after(30):
            await warm.wait()
        warm_stalled = max(born)
        born.clear()
        store.clear()
        warm_done = True
        tick = 0.01  # send rate*tick messages every 10 ms, each send its own task
        per_tick = max(1, round(rate * tick))
        t0 = time.perf_counter()
        sent = 0
        async with anyio.create_task_group() as tg:
            k = 0
            while sent < n:
                target = t0 + k * tick
                delay = target - time.perf_counter()
                if delay > 0:
                    await anyio.sleep(delay)  # pacing the offered load, not polling a condition
                for _ in range(min(per_tick, n - sent)):
                    tg.start_soon(p.send, Message(topic, body))
                    sent += 1
                k += 1
        offered = n / (time.perf_counter() - t0)
        with anyio.fail_after(30):
            await done.wait()
    return {
        "offered": offered,
        "warmup_max_ms": warm_stalled,
        "born_p50": pct(born, 0.50),
        "born_p99": pct(born, 0.99),
        "store_p50": pct(store, 0.50),
        "store_p99": pct(store, 0.99),
    }


# -- memory (child process) ---------------------------------------------------------------------


async def rss_worker(namesrv: str, topic: str, n: int) -> dict[str, Any]:
    before = proc_status("VmRSS")
    hwm_before = proc_status("VmHWM")
    done = anyio.Event()
    seen = 0
    max_cached = 0
    consumer: PushConsumer | None = None

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal seen, max_cached
        seen += len(msgs)
        if seen % 500 == 0 and consumer is not None:
            max_cached = max(max_cached, sum(pq.count for pq in consumer.pqs.values()))
        if seen >= n:
            done.set()
        return None

    consumer = PushConsumer(
        fresh_group("rss"),
        namesrv_addr=namesrv,
        handler=handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    t0 = time.perf_counter()
    async with consumer:
        with anyio.fail_after(max(60.0, n / 1000)):
            await done.wait()
        after_rss = proc_status("VmRSS")
    return {
        "rss_before_kib": before,
        "hwm_before_kib": hwm_before,
        "hwm_after_kib": proc_status("VmHWM"),
        "rss_end_kib": after_rss,
        "max_cached_msgs": max_cached,
        "messages": seen,
        "seconds": time.perf_counter() - t0,
        "threshold_per_queue": consumer.config.pull_threshold_for_queue,
    }


def rss_child(loop_name: str, namesrv: str, topic: str, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--rss-worker",
            "--loop",
            loop_name,
            "--namesrv",
            namesrv,
            "--topic",
            topic,
            "--messages",
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- driver -------------------------------------------------------------------------------------


def med(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def fmt_rate(xs: list[float]) -> str:
    m, lo, hi = med(xs)
    return f"{m:,.0f} ({lo:,.0f}-{hi:,.0f})"


def fmt_ms(xs: list[float]) -> str:
    m, lo, hi = med(xs)
    return f"{m:.1f} ({lo:.1f}-{hi:.1f})"


async def bench_loop(args: argparse.Namespace, namesrv: str, topic: str, loop_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {k: [] for k in ("push1", "push32", "raw", "act1", "act32", "stall1", "stall32")}
    for _ in range(args.runs):
        out["raw"].append(await raw_run(namesrv, topic, args.messages))
        for b in (1, 32):
            rate, active, stalled = await push_run(namesrv, topic, args.messages, b)
            out[f"push{b}"].append(rate)
            out[f"act{b}"].append(active)
            out[f"stall{b}"].append(stalled)
        print(
            f"  {loop_name}: raw {out['raw'][-1]:,.0f}  push(1) {out['push1'][-1]:,.0f} "
            f"[{out['act1'][-1]:,.0f} without {out['stall1'][-1]:.1f}s stalls]  "
            f"push(32) {out['push32'][-1]:,.0f} [{out['act32'][-1]:,.0f} without {out['stall32'][-1]:.1f}s]",
            file=sys.stderr,
            flush=True,
        )
    lat: list[dict[str, float]] = []
    async with EmbeddedCluster(brokers=1, queues=args.queues, process=True) as cluster:
        for _ in range(args.latency_runs):
            lat.append(await latency_run(cluster, args.queues, args.size, args.rate, args.duration))
            print(f"  {loop_name}: latency {lat[-1]}", file=sys.stderr, flush=True)
    out["latency"] = lat
    return out


def profile_run(namesrv: str, topic: str, n: int) -> str:
    prof = cProfile.Profile()
    rate, active, stalled = asyncio.run(push_run(namesrv, topic, n, 1, prof))
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("cumulative").print_stats(14)
    cum = buf.getvalue()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(10)
    tot = buf.getvalue()

    def table(text: str) -> str:
        lines = text.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        body = [ln for ln in lines[start:] if ln.strip()]
        return "\n".join(re.sub(r"/\S*/(rmq_async|anyio|asyncio)/", r"\1/", ln) for ln in body)

    return (
        f"cProfile'd push run (asyncio loop, batch 1, {n:,} msgs): {rate:,.0f} msgs/s first to last, "
        f"{active:,.0f} msgs/s without {stalled:.1f} s of stalls, under the profiler\n\n"
        f"By cumulative time:\n\n```\n{table(cum)}\n```\n\nBy own time (tottime):\n\n```\n{table(tot)}\n```\n"
    )


def machine() -> str:
    vers = ", ".join(f"{p} {version(p)}" for p in ("anyio", "uvloop", "pydantic", "sortedcontainers"))
    return (
        f"Python {platform.python_version()}, {vers}, {os.cpu_count()} CPUs, "
        f"{platform.machine()} {platform.system()} {platform.release()}"
    )


def render(args: argparse.Namespace, res: dict[str, Any], cmd: str) -> str:
    lines = [
        SECTION,
        "",
        f"`{cmd}` (wall time {res['wall_s']:.0f} s). Broker: `EmbeddedCluster(brokers=1, "
        f"queues={args.queues}, process=True)` (name server + broker in a child process on uvloop, "
        "default `Timing()`); the consumer uses default timing and config (pull batch 32, "
        "pullThresholdForQueue 1000, concurrency default).",
        f"{args.messages:,} messages of {args.size} B over {args.queues} queues; each figure is the "
        f"median of {args.runs} runs (min-max in brackets), msgs/s from the first to the last message "
        "seen. Machine: " + machine() + "; a shared machine, so expect noise.",
        "",
        f"Producer preload (send_batch of 32, 16 batches in flight, asyncio loop): "
        f"**{res['preload']:,.0f} msgs/s**.",
        "",
        "| loop | batch | push, first->last | stalled s | push, stalls left out | raw pull ceiling "
        "| push/raw | push/raw, stalls left out |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ln, r in res["loops"].items():
        raw = statistics.median(r["raw"])
        for b in (1, 32):
            p, a = statistics.median(r[f"push{b}"]), statistics.median(r[f"act{b}"])
            lines.append(
                f"| {ln} | {b} | {fmt_rate(r[f'push{b}'])} | {statistics.median(r[f'stall{b}']):.1f} | "
                f"{fmt_rate(r[f'act{b}'])} | {fmt_rate(r['raw'])} | {p / raw:.2f} | {a / raw:.2f} |"
            )
    lines += [
        "",
        f"'Stalls left out' subtracts every gap of more than {STALL} s between two handler calls "
        "(the start-up stall described below); first->last is the plain figure.",
    ]
    lines += [
        "",
        f"End-to-end latency at {args.rate:,} msgs/s offered for {args.duration:g} s "
        f"({args.latency_runs} run(s) per loop; producer and consumer share the benchmark process and "
        "its loop, the broker is in its own process): handler wall clock minus `born_timestamp` "
        "(producer clock) and minus `store_timestamp` (broker clock), ms.",
        "",
        "| loop | offered msgs/s | born->handler p50 | p99 | store->handler p50 | p99 | warm-up max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ln, r in res["loops"].items():
        lat = r["latency"]
        lines.append(
            f"| {ln} | {statistics.median(x['offered'] for x in lat):,.0f} | "
            f"{fmt_ms([x['born_p50'] for x in lat])} | {fmt_ms([x['born_p99'] for x in lat])} | "
            f"{fmt_ms([x['store_p50'] for x in lat])} | {fmt_ms([x['store_p99'] for x in lat])} | "
            f"{max(x['warmup_max_ms'] for x in lat):,.0f} |"
        )
    lines += [
        "",
        f"Consumer memory: a child process consumes a {res['rss_backlog']:,}-message backlog "
        f"({res['rss_backlog'] * args.size / 2**20:.0f} MiB of bodies) with default thresholds "
        f"(pullThresholdForQueue 1000 x {args.queues} queues x {args.size} B ~ "
        f"{1000 * args.queues * args.size / 2**20:.1f} MiB of bodies at most).",
        "",
        "| loop | RSS before consumer start | peak RSS (VmHWM) | growth | max cached msgs seen | consume s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for ln, r in res["rss"].items():
        lines.append(
            f"| {ln} | {r['rss_before_kib'] / 1024:.1f} MiB | {r['hwm_after_kib'] / 1024:.1f} MiB | "
            f"{(r['hwm_after_kib'] - r['rss_before_kib']) / 1024:.1f} MiB | {r['max_cached_msgs']:,} | "
            f"{r['seconds']:.1f} |"
        )
    if res.get("profile"):
        lines += ["", "### Profile", "", res["profile"]]
    lines += ["", "<!-- analysis -->", "<!-- /analysis -->", ""]
    return "\n".join(lines)


def write_section(text: str) -> None:
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    m = pattern.search(old)
    if m:
        keep = re.search(r"<!-- analysis -->\n.*?<!-- /analysis -->", m.group(0), re.S)
        if keep:
            text = text.replace("<!-- analysis -->\n<!-- /analysis -->", keep.group(0))
        new = old[: m.start()] + text + old[m.end() :]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    ap.add_argument("--rate", type=int, default=2000, help="latency test: offered msgs/s")
    ap.add_argument("--duration", type=float, default=10.0, help="latency test: seconds")
    ap.add_argument("--latency-runs", type=int, default=1)
    ap.add_argument("--rss-messages", type=int, default=100_000)
    ap.add_argument("--profile", action="store_true", help="add one cProfile'd push run")
    ap.add_argument("--write", action="store_true", help="replace the section of benchmarks/RESULTS.md")
    ap.add_argument("--rss-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.rss_worker:
        loop_name = "asyncio" if args.loop == "both" else args.loop
        print(json.dumps(run_on(loop_name, lambda: rss_worker(args.namesrv, args.topic, args.messages))))
        return 0

    loops = ["asyncio", "uvloop"] if args.loop == "both" else [args.loop]
    cmd = "python benchmarks/bench_push.py " + " ".join(argv if argv is not None else sys.argv[1:])
    wall0 = time.perf_counter()
    res: dict[str, Any] = {"loops": {}, "rss": {}}
    topic = f"BenchPush{os.getpid()}"
    total = max(args.messages, args.rss_messages)

    # The cluster child outlives the per-loop asyncio.run calls: a loop of its own, kept open (idle)
    # for the whole benchmark, owns the child; each measurement loop talks to it over TCP only.
    holder_loop = asyncio.new_event_loop()
    cluster = EmbeddedCluster(brokers=1, queues=args.queues, process=True)
    holder_loop.run_until_complete(cluster.__aenter__())
    try:
        holder_loop.run_until_complete(cluster.create_topic(topic, args.queues))
        namesrv = cluster.namesrv_addr
        res["preload"] = asyncio.run(preload(namesrv, topic, total, args.size))
        print(f"preload: {total:,} msgs at {res['preload']:,.0f} msgs/s", file=sys.stderr, flush=True)
        for ln in loops:
            res["loops"][ln] = run_on(ln, lambda ln=ln: bench_loop(args, namesrv, topic, ln))  # type: ignore[misc]
        res["rss_backlog"] = total
        for ln in loops:
            res["rss"][ln] = rss_child(ln, namesrv, topic, total)
            print(f"  {ln}: rss {res['rss'][ln]}", file=sys.stderr, flush=True)
        if args.profile:
            res["profile"] = profile_run(namesrv, topic, args.messages)
    finally:
        holder_loop.run_until_complete(cluster.__aexit__(None, None, None))
        holder_loop.close()
    res["wall_s"] = time.perf_counter() - wall0
    text = render(args, res, cmd)
    print(text)
    summary = {
        "preload_msgs_s": round(res["preload"]),
        **{
            f"{ln}_{k}": round(statistics.median(r[k]))
            for ln, r in res["loops"].items()
            for k in ("push1", "push32", "act1", "act32", "raw")
        },
        **{
            f"{ln}_lat_born_p99_ms": round(statistics.median(x["born_p99"] for x in r["latency"]), 1)
            for ln, r in res["loops"].items()
        },
        **{
            f"{ln}_rss_growth_mib": round((r["hwm_after_kib"] - r["rss_before_kib"]) / 1024, 1)
            for ln, r in res["rss"].items()
        },
    }
    print(json.dumps(summary))
    if args.write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
