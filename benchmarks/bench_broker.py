"""Embedded broker throughput and long-poll latency, with the broker in its own process.

    python benchmarks/bench_broker.py [--messages 200000] [--write] [--profile]

* accepted: one producer connection, SEND_MESSAGE_V2 of 1 KiB bodies, ``--inflight`` requests
  pipelined, round-robin over 4 queues (this also preloads the topic);
* served: one puller connection, pipelined PULL_MESSAGE (32 x 1 KiB per pull, several pulls in
  flight per queue over 4 queues); only frames are decoded, not the messages in them;
* wake-up: a held pull (suspend flag) on an empty queue, then one send on another connection; the
  time from writing the send to receiving the pull's answer (median and p99 over ``--tries``).

``--profile`` runs the broker child under cProfile and prints its top functions at the end.
``--write`` replaces the "## Embedded broker" section of benchmarks/history/bench-broker.md (the
log; benchmarks/RESULTS.md quotes the current figures).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.command import FrameDecoder, RemotingCommand

BODY = b"x" * 1024
QUEUES = 4


class Pipe(asyncio.Protocol):
    """A bare client connection: writes frames, decodes answers, resolves futures by opaque."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder(64 << 20)
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.transport: asyncio.Transport | None = None
        self.opaque = 0
        self.bytes_in = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.bytes_in += len(data)
        for cmd in self.decoder.feed(data):
            fut = self.pending.pop(cmd.opaque, None)
            if fut is not None:
                fut.set_result(cmd)

    def call(self, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        self.opaque += 1
        cmd.opaque = self.opaque
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        assert self.transport is not None
        self.transport.write(cmd.encode())
        return fut


async def connect(addr: str) -> Pipe:
    host, _, port = addr.rpartition(":")
    _, proto = await asyncio.get_running_loop().create_connection(Pipe, host, int(port))
    return proto


def send_cmd(topic: str, queue_id: int, i: int) -> RemotingCommand:
    ext = {
        "a": "bench_pg",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": f"UNIQ_KEY\x01B{i:030d}\x02WAIT\x01true\x02TAGS\x01T",
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    return RemotingCommand.request(310, ext, BODY, language="JAVA")


def pull_cmd(topic: str, queue_id: int, offset: int, suspend: bool = False) -> RemotingCommand:
    ext = {
        "consumerGroup": "bench_cg",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "6" if suspend else "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
        "bname": "broker-a",
    }
    return RemotingCommand.request(11, ext, language="JAVA")


async def produce(addr: str, topic: str, total: int, inflight: int) -> float:
    pipe = await connect(addr)
    sem = asyncio.Semaphore(inflight)
    done = 0

    def finished(fut: asyncio.Future[RemotingCommand]) -> None:
        nonlocal done
        sem.release()
        assert fut.result().code == 0, fut.result()
        done += 1
        if done == total:
            all_done.set()

    all_done = asyncio.Event()
    start = time.perf_counter()
    for i in range(total):
        await sem.acquire()
        pipe.call(send_cmd(topic, i % QUEUES, i)).add_done_callback(finished)
    if done < total:
        await all_done.wait()
    elapsed = time.perf_counter() - start
    assert pipe.transport is not None
    pipe.transport.close()
    return total / elapsed


async def serve(addr: str, topic: str, per_queue: int, inflight_per_queue: int) -> tuple[float, float]:
    pipe = await connect(addr)
    start = time.perf_counter()

    # count messages from nextBeginOffset deltas (exact) instead of parsing bodies
    async def counting_worker(q: int) -> int:
        next_offset = 0
        got = 0
        window: list[tuple[int, asyncio.Future[RemotingCommand]]] = []
        while next_offset < per_queue or window:
            while next_offset < per_queue and len(window) < inflight_per_queue:
                window.append((next_offset, pipe.call(pull_cmd(topic, q, next_offset))))
                next_offset += 32
            off, fut = window.pop(0)
            resp = await fut
            assert resp.code == 0, resp
            got += int(resp.ext_fields["nextBeginOffset"]) - off
        return got

    counts = await asyncio.gather(*(counting_worker(q) for q in range(QUEUES)))
    received = sum(counts)
    elapsed = time.perf_counter() - start
    mb = pipe.bytes_in / elapsed / 1e6
    assert pipe.transport is not None
    pipe.transport.close()
    return received / elapsed, mb


async def wakeup_latency(addr: str, tries: int) -> list[float]:
    puller = await connect(addr)
    sender = await connect(addr)
    out = []
    for i in range(tries):
        topic = "BenchWake"
        held = puller.call(pull_cmd(topic, 0, i, suspend=True))
        await asyncio.sleep(0.002)  # let it park
        t0 = time.perf_counter()
        sender.call(send_cmd(topic, 0, i))
        resp = await asyncio.wait_for(held, 5)
        out.append(time.perf_counter() - t0)
        assert resp.code == 0, resp
    for p in (puller, sender):
        assert p.transport is not None
        p.transport.close()
    return out


async def main(args: argparse.Namespace) -> dict[str, float]:
    timing = Timing.fast(held_pull_check_interval=5.0, suspend_timeout=15.0, pull_timeout=25.0)
    prof_dir = tempfile.mkdtemp(prefix="bench_broker_") if args.profile else None
    if prof_dir:
        os.environ["RMQ_EMBEDDED_PROFILE"] = os.path.join(prof_dir, "broker.prof")
    async with EmbeddedCluster(queues=QUEUES, timing=timing, process=True) as cluster:
        addr = cluster.brokers[0].addr
        await cluster.create_topic("BenchTopic", QUEUES)
        await cluster.create_topic("BenchWake", 1)
        accepted = await produce(addr, "BenchTopic", args.messages, args.send_inflight)
        served, mbps = await serve(addr, "BenchTopic", args.messages // QUEUES, args.pull_inflight)
        lat = sorted(await wakeup_latency(addr, args.tries))
    os.environ.pop("RMQ_EMBEDDED_PROFILE", None)
    res = {
        "accepted": accepted,
        "served": served,
        "served_mb": mbps,
        "wake_median_ms": statistics.median(lat) * 1000,
        "wake_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
    }
    if prof_dir:
        import pstats

        stats = pstats.Stats(os.path.join(prof_dir, "broker.prof"))
        stats.sort_stats("tottime").print_stats(15)
    return res


NOTES = """What limits them. A cProfile of the broker child (`--profile`, 200,000 messages; times are
inflated about 2x by the profiler): serving 6,352 pulls cost the broker 0.47 s in `pull_message`
(74 us a pull, 40 us of it the consume-queue loop that collects 32 slices) plus the JSON header
decode and encode of each pull (about 30 us together): 0.66 s for 200,000 messages, about 3 us a
message even under the profiler, so the broker side of the pull path could serve several times the
figure above. The served rate is
bounded by the puller process sharing the 2 cores (it decodes every frame header and copies each
~33 KiB body once in FrameDecoder) and by the loopback copies. The send path is the broker's
expensive one: 74 us a message under the profiler (`send_message`: JSON header decode 22 us,
property parsing and re-serialization in Java HashMap order, the stored-message encode in
`MessageStore.put` 21 us, the response header encode 11 us), i.e. about 30-35 us without it, so one
broker accepts some 30,000 1 KiB messages/s; the Python producer here (one request object, one
JSON encode and one future per message) is the other half of the accepted figure. The long-poll
wake-up is immediate (a put notifies parked pulls synchronously); its latency is two loopback
round trips plus scheduling in both processes."""


def write_results(res: dict[str, float], args: argparse.Namespace) -> None:
    path = Path(__file__).resolve().parent / "history" / "bench-broker.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    env = f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()} Linux)"
    rows = [
        (
            f"accepted: SEND_MESSAGE_V2, 1 KiB, {args.send_inflight} in flight, 4 queues",
            f"{res['accepted']:,.0f} msg/s",
        ),
        (
            f"served: PULL_MESSAGE 32 x 1 KiB, {args.pull_inflight} pulls in flight per queue x 4 queues",
            f"{res['served']:,.0f} msg/s ({res['served_mb']:,.0f} MB/s)",
        ),
        (
            f"long-poll wake-up (held pull answered after a send), median of {args.tries}",
            f"{res['wake_median_ms']:.2f} ms",
        ),
        ("long-poll wake-up, p99", f"{res['wake_p99_ms']:.2f} ms"),
    ]
    table = "\n".join(f"| {a} | {b} |" for a, b in rows)
    section = f"""## Embedded broker

`python benchmarks/bench_broker.py --messages {args.messages} --runs {args.runs} --write`: the embedded
cluster in a child process (`EmbeddedCluster(process=True)`, uvloop), one raw client connection per
role on 127.0.0.1.
{env}; a shared machine, so expect noise (best of several runs is reported).

| measure | result |
|---|---:|
{table}

{NOTES}
"""
    start = text.find("## Embedded broker")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--send-inflight", type=int, default=64)
    p.add_argument("--pull-inflight", type=int, default=4)
    p.add_argument("--tries", type=int, default=200)
    p.add_argument("--write", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--runs", type=int, default=1, help="best of this many runs")
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    runs = [asyncio.run(main(a)) for _ in range(a.runs)]
    best = {k: (min if k.startswith("wake") else max)(run[k] for run in runs) for k in runs[0]}
    r = best
    for k, v in r.items():
        print(f"{k}: {v:,.2f}")
    if a.write:
        write_results(r, a)
