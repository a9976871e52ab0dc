"""Observability cost (#21): push no-op with the message trace on and with OpenTelemetry on (SDK
configured), as ratios to off in the same round.

One embedded cluster in a child process (``--trace-topic-enable``), ``--messages`` preloaded 1 KiB
messages over 8 queues; every run is a fresh process draining them with a no-op handler and a fresh
group (``rmq_async.bench.scenarios.run_push``):

* ``off``   -- nothing (the baseline of each round);
* ``trace`` -- ``ClientConfig(trace=True)``: a SubBefore and a SubAfter per message queued, batched and
  sent to RMQ_SYS_TRACE_TOPIC by the inner trace producer (a full queue drops: the run prints how many
  contexts were sent and dropped);
* ``otel-metrics`` -- the OpenTelemetry SDK's ``MeterProvider`` set globally before the consumer
  starts, with an in-memory reader (histograms recorded, the observed gauges read once at the end);
* ``otel``  -- that and a ``TracerProvider`` (default sampler: parent-based, always on) with a batch
  span processor exporting to a no-op exporter: a span per handler call of a message picked within the
  root span budget (the messages here carry no traceparent);
* ``off@traced`` / ``otel@traced`` -- off and ``otel`` on a second topic whose messages all carry a
  sampled W3C ``traceparent``, as every message sent by a producer with OpenTelemetry on does: each
  handler call then gets its span (the SDK's own cost per span is the floor there); their ratio is to
  ``off@traced``.

The OpenTelemetry kinds print how many values the histograms recorded (their sample) next to the
counters (every message), and how many spans were exported. ``--histogram-rate`` / ``--root-span-rate``
set ``ClientConfig.otel`` (``OtelConfig``; ``none``: no budget).

In each round each loop runs the kinds back to back, the order rotated round by round. Reported per
loop: median msgs/s per kind, the median and range of the per-round ratios to off, and the client's
CPU per message (median of the per-round ratios to off).

    python benchmarks/bench_observability.py [--rounds 5] [--messages 100000] [--loop both]
        [--kinds off,trace,...] [--histogram-rate N|none] [--root-span-rate N|none]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async.bench.cluster import ChildCluster, create_topic, preload  # noqa: E402

KINDS = ("off", "trace", "otel-metrics", "otel", "off@traced", "otel@traced")
TOPIC, TRACED_TOPIC = "ObsBenchPush", "ObsBenchTraced"

_CHILD = """
import asyncio, json, sys
kind, loop, namesrv, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
hist_rate, span_rate = (None if a == "none" else int(a) for a in sys.argv[6:8])
kind = kind.split("@")[0]
from rmq_async.bench import scenarios
from rmq_async.config import ClientConfig, OtelConfig
made = []
extra = {}
plain = scenarios.PushConsumer
otel_cfg = OtelConfig(histogram_rate=hist_rate, root_span_rate=span_rate)

def configured(group, *, namesrv_addr, **kw):
    cfg = ClientConfig(namesrv_addr=namesrv_addr, trace=kind == "trace", otel=otel_cfg)
    c = plain(group, client_config=cfg, **kw)
    made.append(c)
    return c

scenarios.PushConsumer = configured
spans = [0]
if kind in ("otel", "otel-metrics"):
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, batch):
            spans[0] += len(batch)
            return SpanExportResult.SUCCESS

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if kind == "otel":
        tp = TracerProvider()
        tp.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(tp)
p = {"scenario": "push", "namesrv": namesrv, "topic": topic, "messages": n, "timeout": 300}
coro = scenarios.run_push(p)
if loop == "uvloop":
    import uvloop
    r = uvloop.run(coro)
else:
    r = asyncio.run(coro)
# (the consumer's trace dispatcher: internals, read by this benchmark only)
tracer = made[0]._ctx.observation.tracer if made else None
if tracer is not None:
    d = tracer.dispatcher
    extra = {"trace_sent_msgs": d.sent, "trace_dropped": d.dropped}
if kind.startswith("otel"):
    data = reader.get_metrics_data()
    counts = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                pts = m.data.data_points
                v = sum(getattr(pt, "count", None) or getattr(pt, "value", 0) for pt in pts)
                counts[m.name.replace("rocketmq_", "")] = v
    extra = {k: counts.get(k) for k in ("process_time", "await_time", "delivery_latency", "pull_latency",
                                        "consumer_processed_messages")}
    if kind == "otel":
        tp.shutdown()
        extra["spans"] = spans[0]
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"], **extra}))
"""


class TraceCluster(ChildCluster):
    def args(self) -> list[str]:
        return [*super().args(), "--trace-topic-enable"]


def _run(kind: str, loop: str, namesrv: str, n: int, rates: tuple[str, str]) -> dict[str, object] | None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    topic = TRACED_TOPIC if kind.endswith("@traced") else TOPIC
    cmd = [sys.executable, "-c", _CHILD, kind, loop, namesrv, topic, str(n), *rates]
    proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{kind} run on {loop} failed ({proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


async def preload_traced(namesrv: str, topic: str, n: int, size: int) -> float:
    """``n`` messages each with a sampled W3C ``traceparent`` of its own (what a producer with
    OpenTelemetry on sends), in batches of 32, 16 in flight."""
    import anyio

    from rmq_async import ClientConfig, Message, Producer, ProducerConfig

    body = b"x" * size
    producer = Producer(
        config=ProducerConfig(group=f"bench_preload_traced_{os.getpid()}"),
        client_config=ClientConfig(namesrv_addr=namesrv),
    )
    chunks = iter([min(32, n - i) for i in range(0, n, 32)])

    def traced() -> Message:
        tp = f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-01"
        return Message(topic, body, properties={"traceparent": tp})

    t0 = time.perf_counter()
    async with producer:

        async def sender() -> None:
            for k in chunks:
                await producer.send_batch([traced() for _ in range(k)])

        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(sender)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--histogram-rate", default="200", help="OtelConfig.histogram_rate (none: no budget)")
    ap.add_argument("--root-span-rate", default="100", help="OtelConfig.root_span_rate (none: no budget)")
    args = ap.parse_args()
    loops = ("uvloop", "asyncio") if args.loop == "both" else (args.loop,)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds {sorted(unknown)}")
    rates = (args.histogram_rate, args.root_span_rate)
    rounds: dict[str, list[dict[str, dict[str, object]]]] = {}
    t0 = time.perf_counter()
    with TraceCluster(queues=8) as cluster:
        ns = cluster.namesrv_addr
        asyncio.run(create_topic(ns, TOPIC, 8))
        if not all(k.endswith("@traced") for k in kinds):
            rate = asyncio.run(preload(ns, TOPIC, args.messages, 1024, progress=False))
            print(f"preloaded {args.messages:,} x 1 KiB at {rate:,.0f}/s", file=sys.stderr, flush=True)
        if any(k.endswith("@traced") for k in kinds):
            asyncio.run(create_topic(ns, TRACED_TOPIC, 8))
            rate = asyncio.run(preload_traced(ns, TRACED_TOPIC, args.messages, 1024))
            print(f"preloaded {args.messages:,} traced x 1 KiB at {rate:,.0f}/s", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for loop in loops:
                got = {}
                for kind in order:
                    res = _run(kind, loop, ns, args.messages, rates)
                    if res is None:
                        continue
                    got[kind] = res
                    print(f"round {r + 1} {loop:7} {kind:11}: {json.dumps(res)}", file=sys.stderr, flush=True)
                if len(got) == len(kinds):
                    rounds.setdefault(loop, []).append(got)
    print(f"\n{args.rounds} rounds, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    med = statistics.median
    print("| loop | kind | rounds | msgs/s (median) | ratio to off (median of rounds, range) "
          "| client CPU us/msg (median) | CPU / off (median of rounds) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for loop in loops:
        done = rounds.get(loop, [])
        for kind in kinds:
            if not done:
                continue
            base = "off@traced" if kind.endswith("@traced") else "off"
            if base not in kinds:
                continue
            speed = [float(g[kind]["msgs_per_s"]) for g in done]  # type: ignore[arg-type]
            cpu = [float(g[kind]["cpu_us_per_msg"]) for g in done]  # type: ignore[arg-type]
            rs = [float(g[kind]["msgs_per_s"]) / float(g[base]["msgs_per_s"]) for g in done]  # type: ignore[arg-type]
            cs = [float(g[kind]["cpu_us_per_msg"]) / float(g[base]["cpu_us_per_msg"]) for g in done]  # type: ignore[arg-type]
            off = kind == base
            ratio = "1" if off else f"**{med(rs):.2f}** ({min(rs):.2f}-{max(rs):.2f})"
            print(
                f"| {loop} | {kind} | {len(done)} | {med(speed):,.0f} | {ratio} | {med(cpu):.2f} "
                f"| {'1' if off else f'{med(cs):.2f}'} |"
            )


if __name__ == "__main__":
    main()
