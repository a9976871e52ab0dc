"""Throughput scenarios, run inside a worker process: push (no-op, sleeping, CPU-bound handler),
push orderly, lite pull, the raw pull ceiling and the backlog drain.

Strategy: every scenario consumes the same preloaded topic from its first offset with a fresh group,
so a run sees exactly ``messages`` messages. A :class:`Meter` counts them as the handler sees them
(first and last call give msgs/s) and a sampler task records a time series (consumed, RSS, cached
messages and bytes) at a fixed interval: it measures a clock, it waits for no condition. Each
scenario returns one plain dict (JSON-ready); the harness process aggregates runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import anyio

from ..client.instance import ClientInstance
from ..config import ClientConfig, Timing
from ..consumer.push import PushConsumer
from ..consumer.types import ConsumeContext
from ..protocol import headers as H
from ..protocol.codes import PullSysFlag
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .machine import peak_rss_mb, rss_mb

__all__ = ["Meter", "Skipped", "group_name", "raw_pull", "run_push", "sampler"]


class Skipped(Exception):
    """A scenario that cannot run on this build (the reason is the message)."""


def group_name(kind: str) -> str:
    """A consumer group of its own for each run (so each run starts from offset 0)."""
    return f"bench_{kind}_{os.getpid()}_{time.monotonic_ns() % 10**9}"


class Meter:
    """Counts handled messages; ``done`` is set once ``target`` are seen.

    ``add(n)``, or inline where it runs once a message (the no-op handlers: a method call a message
    would be the harness's cost charged to the consumer, ~570 instructions against ~20 a message in
    the raw loop, which adds once a pull): ``meter.seen += n`` and, once ``seen >= meter.mark``,
    ``meter.passed()``, which stamps the first message and then the last."""

    __slots__ = (
        "cpu_first",
        "cpu_last",
        "done",
        "first",
        "last",
        "mark",
        "seen",
        "started",
        "target",
        "timeline",
    )

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = 0
        self.mark = 1  # the count at which passed() is due next: the first message, then the target
        self.started = time.perf_counter()
        self.first = 0.0
        self.last = 0.0
        self.cpu_first = 0.0  # process CPU time at the first and the last message
        self.cpu_last = 0.0
        self.done = anyio.Event()
        self.timeline: list[list[float]] = []

    def add(self, n: int) -> None:
        self.seen += n
        if self.seen >= self.mark:
            self.passed()

    def passed(self) -> None:
        """``seen`` reached ``mark``: the clocks are read at the first and at the last message only
        (a clock read a message would be counted as push machinery)."""
        if not self.first:
            self.first = self.last = time.perf_counter()
            self.cpu_first = time.process_time()
            self.mark = self.target
        if self.seen >= self.target and not self.done.is_set():
            self.last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.mark = 1 << 62  # (done: nothing more is due)
            self.done.set()

    def rate(self) -> float | None:
        """Messages per second from the first to the last handled message."""
        span = self.last - self.first
        return (self.seen - 1) / span if span > 0 and self.seen > 1 else None

    def cpu_us_per_msg(self) -> float | None:
        """This process's CPU time per message from the first to the last one (the consumer is
        CPU-bound: unlike msgs/s, this does not depend on how fast the broker's process is)."""
        if self.seen < 2 or not self.cpu_last:
            return None
        return (self.cpu_last - self.cpu_first) / (self.seen - 1) * 1e6

    def result(self) -> dict[str, Any]:
        return {
            "msgs_per_s": self.rate(),
            "cpu_us_per_msg": self.cpu_us_per_msg(),
            "messages": self.seen,
            "seconds": self.last - self.first if self.seen else None,
            "startup_s": self.first - self.started if self.seen else None,
            "peak_rss_mb": peak_rss_mb(),
            "timeline": self.timeline,
        }


async def sampler(meter: Meter, cached: Callable[[], tuple[int, int]], interval: float) -> None:
    """Append ``[t, consumed, rss_mb, cached_msgs, cached_bytes]`` every ``interval`` seconds."""
    while True:
        n, b = cached()
        meter.timeline.append(
            [round(time.perf_counter() - meter.started, 3), meter.seen, rss_mb() or 0.0, n, b]
        )
        await anyio.sleep(interval)  # a sampling clock, not a wait for a condition


def _cpu_burn(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def run_push(p: dict[str, Any]) -> dict[str, Any]:
    """push / push-plain / push-sleep / push-cpu / push-orderly / backlog: a PushConsumer drains the
    topic (push-plain: with a plain-function no-op handler, called by the pulling tasks)."""
    scenario = p["scenario"]
    meter = Meter(p["messages"])
    sleep_s = p.get("sleep_ms", 1.0) / 1000
    cpu_us = p.get("cpu_us", 100.0)
    gate = anyio.Event()

    if scenario == "push-sleep":

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            await anyio.sleep(sleep_s)  # the simulated I/O of the handler under test
            meter.add(len(msgs))

    elif scenario == "push-cpu":

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            _cpu_burn(cpu_us * len(msgs))
            meter.add(len(msgs))

    elif scenario == "backlog":
        # the handlers hold for stall_s seconds first, so the pulls fill the process queues up to
        # the flow-control thresholds: the peak RSS then shows what the thresholds allow

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            if not gate.is_set():
                await gate.wait()
            meter.add(len(msgs))

    elif scenario == "push-plain":

        def plain(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            meter.seen += len(msgs)  # Meter.add inline (see Meter): a no-op handler's one cost
            if meter.seen >= meter.mark:
                meter.passed()

        handler = plain  # type: ignore[assignment]

    else:

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            meter.seen += len(msgs)  # Meter.add inline (see Meter): a no-op handler's one cost
            if meter.seen >= meter.mark:
                meter.passed()

    options: dict[str, Any] = {
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "consume_batch_max_size": p.get("batch", 1),
    }
    if scenario == "push-orderly":
        options["orderly"] = True
    try:
        consumer = PushConsumer(
            group_name(scenario.replace("-", "_")),
            namesrv_addr=p["namesrv"],
            handler=handler,
            subscriptions={p["topic"]: "*"},
            **options,
        )
    except Exception as exc:  # the orderly option is refused by builds without it
        if scenario == "push-orderly":
            raise Skipped(f"PushConsumer(..., orderly=True) is not available in this build: {exc}") from exc
        raise

    def cached() -> tuple[int, int]:
        h = consumer.health()
        queues = [*h.queues, *h.retry_queues]
        return sum(q.cached for q in queues), sum(q.cached_bytes for q in queues)

    async def open_gate_later() -> None:
        await anyio.sleep(p.get("stall_s", 2.0))  # the scripted stall of the backlog scenario
        gate.set()

    rss_before = rss_mb()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sampler, meter, cached, p.get("interval", 0.1))
        meter.started = time.perf_counter()
        if scenario == "backlog":
            tg.start_soon(open_gate_later)
        async with consumer:
            with anyio.fail_after(p["timeout"]):
                await meter.done.wait()
        tg.cancel_scope.cancel()
    out = meter.result()
    out["rss_before_mb"] = rss_before
    out["max_cached_msgs"] = max((s[3] for s in meter.timeline), default=0)
    out["max_cached_mb"] = max((s[4] for s in meter.timeline), default=0) / 2**20
    out["stall_s"] = p.get("stall_s", 2.0) if scenario == "backlog" else None
    out["thresholds"] = {
        "pull_threshold_for_queue": consumer.config.pull_threshold_for_queue,
        "pull_threshold_size_for_queue_mb": consumer.config.pull_threshold_size_for_queue,
        "consume_batch_max_size": consumer.config.consume_batch_max_size,
        "concurrency": consumer.config.concurrency,
    }
    return out


async def raw_pull(p: dict[str, Any]) -> dict[str, Any]:
    """The ceiling: one task per queue doing back-to-back pulls (decode only, no process queue)."""
    timing = Timing()
    group = group_name("raw")
    meter = Meter(p["messages"])
    batch = p.get("pull_batch", 32)
    async with ClientInstance(ClientConfig(namesrv_addr=p["namesrv"], timing=timing)) as client:
        client.add_topic(p["topic"])
        await client.update_route(p["topic"])
        mqs: list[MessageQueue] = await client.subscribe_queues(p["topic"])
        sub_version = int(time.time() * 1000)
        flag = PullSysFlag.build(commit_offset=False, suspend=True, subscription=True)

        async def loop(mq: MessageQueue) -> None:
            addr = client.broker_addr(mq.broker_name)
            assert addr is not None
            offset = 0
            while True:
                header = H.PullMessageRequestHeader(
                    consumer_group=group,
                    topic=mq.topic,
                    queue_id=mq.queue_id,
                    queue_offset=offset,
                    max_msg_nums=batch,
                    sys_flag=flag,
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
                    meter.add(len(res.messages))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler, meter, lambda: (0, 0), p.get("interval", 0.1))
            meter.started = time.perf_counter()
            for mq in mqs:
                tg.start_soon(loop, mq)
            with anyio.fail_after(p["timeout"]):
                await meter.done.wait()
            tg.cancel_scope.cancel()
    return meter.result()
