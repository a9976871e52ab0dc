"""The embedded broker's Python cost of one PULL_MESSAGE, without sockets, step by step.

The cluster runs in this process; a :class:`~rmq_async.embedded.server.Connection` of its broker gets
a transport that only counts what it is given, and ``data_received`` is fed the frames a Spark reader
writes (its :class:`~rmq_async.spark.pipe.PullTemplate`, 32 messages a pull, ``--per-read`` frames
arriving together). What is left of a pull's CPU with real sockets is the kernel's and the event
loop's (``bench_spark_reader.py`` prints the broker's user and system CPU per pull).

    python benchmarks/bench_broker_pull.py [--messages 40000] [--repeat 7]

Prints µs a pull for the whole ``data_received`` path and for its steps (``timeit``, medians).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import preload

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.fields import opt_int, opt_str, req_int, req_str
from rmq_async.embedded.groups import build_subscription
from rmq_async.embedded.server import Connection
from rmq_async.protocol import headers as H
from rmq_async.protocol.codes import PullSysFlag, RequestCode
from rmq_async.protocol.command import RemotingCommand, parse_command
from rmq_async.spark.pipe import PullTemplate

TOPIC = "BenchBrokerPull"
QUEUES = 8
BATCH = 32


class CountingTransport:
    """What the server's connection writes to, counted and dropped."""

    def __init__(self) -> None:
        self.writes = 0
        self.nbytes = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def writelines(self, data: list[bytes | memoryview]) -> None:
        self.writes += 1
        self.nbytes += sum(len(d) for d in data)

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.nbytes += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def template(broker_name: str, queue_id: int) -> PullTemplate:
    """The pull a Spark reader writes for one queue (what ``Session.template`` makes)."""
    header = H.PullMessageRequestHeader(
        consumer_group="bench_broker_pull", topic=TOPIC, queue_id=queue_id, queue_offset=0, max_msg_nums=1,
        sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
        commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*",
        expression_type="TAG", bname=broker_name,
    )  # fmt: skip
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields(), language="PYTHON")
    return PullTemplate(cmd)


def per_call(fn: Callable[[], object], number: int = 20_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6


async def main(args: argparse.Namespace) -> None:
    async with EmbeddedCluster(brokers=1, queues=QUEUES, timing=Timing()) as cluster:
        await cluster.create_topic(TOPIC, QUEUES)
        await preload(cluster.namesrv_addr, TOPIC, args.messages, 1024)
        broker = cluster.brokers[0]
        per_queue = args.messages // QUEUES // BATCH * BATCH
        templates = [template(broker.name, q) for q in range(QUEUES)]
        conn = Connection(broker.server)
        transport = CountingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        whole: list[float] = []
        for rnd in range(args.repeat):
            frames = [
                t.frame(offset, BATCH, i * per_queue + offset + 1)
                for i, t in enumerate(templates)
                for offset in range(0, per_queue, BATCH)
            ]
            reads = [b"".join(frames[i : i + args.per_read]) for i in range(0, len(frames), args.per_read)]
            sent = transport.nbytes
            c0 = time.process_time()
            for data in reads:
                conn.data_received(data)
            us = (time.process_time() - c0) / len(frames) * 1e6
            answered = (transport.nbytes - sent) / len(frames)
            print(f"round {rnd + 1}: {len(frames):,} pulls, {us:.2f} µs a pull, {answered:,.0f} B an answer")
            if rnd:
                whole.append(us)
        # the steps of one pull
        frame = templates[0].frame(BATCH, BATCH, 7)
        header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        cmd = parse_command(frame[8:], 0, header_len)
        ctx = broker._ctx
        answer, parts = broker.handle(conn, cmd)
        store = ctx.store
        got = store.get(TOPIC, 0, BATCH, BATCH, None, runs=True)

        def fields() -> None:
            for name in ("consumerGroup", "topic"):
                req_str(cmd, name)
            for name in (
                "queueId",
                "queueOffset",
                "maxMsgNums",
                "sysFlag",
                "commitOffset",
                "suspendTimeoutMillis",
            ):
                req_int(cmd, name)
            opt_int(cmd, "subVersion", 0)

        def respond() -> None:
            ext = {
                "suggestWhichBrokerId": "0", "nextBeginOffset": str(got.next_begin),
                "minOffset": str(got.min_offset), "maxOffset": str(got.max_offset),
            }  # fmt: skip
            ctx.respond(cmd, 0, "FOUND", ext)

        steps = {
            "decode the request (parse_command)": lambda: parse_command(frame[8:], 0, header_len),
            "the pull handler (broker.handle), of it": lambda: broker.handle(conn, cmd),
            "  header fields": fields,
            "  subscription": lambda: build_subscription(
                TOPIC, opt_str(cmd, "subscription"), opt_str(cmd, "expressionType")
            ),
            "  store lookup (MessageStore.get)": lambda: store.get(TOPIC, 0, BATCH, BATCH, None, runs=True),
            "  response command": respond,
            "encode and queue the answer (Connection.send)": lambda: conn.send(answer, parts),
        }  # fmt: skip
        print(
            f"data_received, {args.per_read} pulls a read: {statistics.median(whole):.2f} µs a pull (median)"
        )
        for name, fn in steps.items():
            print(f"  {name}: {per_call(fn):.2f} µs")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--per-read", type=int, default=4, help="pull frames arriving in one read")
    asyncio.run(main(ap.parse_args()))
