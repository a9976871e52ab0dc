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
* ``otel``  -- that and a ``TracerProvider`` with a batch span processor exporting to a no-op exporter
  (a span per handler call; links extracted from messages that carry a traceparent: none here).

In each round each loop runs the three kinds back to back, the order rotated round by round. Reported
per loop: median msgs/s per kind, the median and range of the per-round ratios to off, and the client's
CPU per message (median of the per-round ratios to off).

    python benchmarks/bench_observability.py [--rounds 5] [--messages 100000] [--loop both]
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
sys.path.insert(0, str(ROOT))

from rmq_async.bench.cluster import ChildCluster, create_topic, preload  # noqa: E402

KINDS = ("off", "trace", "otel-metrics", "otel")

_CHILD = """
import asyncio, json, sys
kind, loop, namesrv, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
from rmq_async.bench import scenarios
made = []
extra = {}
if kind == "trace":
    from rmq_async.config import ClientConfig
    plain = scenarios.PushConsumer

    def traced(group, *, namesrv_addr, **kw):
        c = plain(group, client_config=ClientConfig(namesrv_addr=namesrv_addr, trace=True), **kw)
        made.append(c)
        return c

    scenarios.PushConsumer = traced
elif kind in ("otel", "otel-metrics"):
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
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
if made and made[0].ctx.tracer is not None:
    d = made[0].ctx.tracer.dispatcher
    extra = {"trace_sent_msgs": d.sent, "trace_dropped": d.dropped}
if kind.startswith("otel"):
    data = reader.get_metrics_data()
    extra = {"otel_metrics": sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics
                                     for m in sm.metrics})}
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"], **extra}))
"""


class TraceCluster(ChildCluster):
    def args(self) -> list[str]:
        return [*super().args(), "--trace-topic-enable"]


def _run(kind: str, loop: str, namesrv: str, topic: str, n: int) -> dict[str, object] | None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", _CHILD, kind, loop, namesrv, topic, str(n)]
    proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{kind} run on {loop} failed ({proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    args = ap.parse_args()
    loops = ("uvloop", "asyncio") if args.loop == "both" else (args.loop,)
    rounds: dict[str, list[dict[str, dict[str, object]]]] = {}
    t0 = time.perf_counter()
    with TraceCluster(queues=8) as cluster:
        ns = cluster.namesrv_addr
        asyncio.run(create_topic(ns, "ObsBenchPush", 8))
        rate = asyncio.run(preload(ns, "ObsBenchPush", args.messages, 1024, progress=False))
        print(f"preloaded {args.messages:,} x 1 KiB at {rate:,.0f}/s", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            order = KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]
            for loop in loops:
                got = {}
                for kind in order:
                    res = _run(kind, loop, ns, "ObsBenchPush", args.messages)
                    if res is None:
                        continue
                    got[kind] = res
                    print(f"round {r + 1} {loop:7} {kind:5}: {json.dumps(res)}", file=sys.stderr, flush=True)
                if len(got) == len(KINDS):
                    rounds.setdefault(loop, []).append(got)
    print(f"\n{args.rounds} rounds, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    med = statistics.median
    print("| loop | kind | rounds | msgs/s (median) | ratio to off (median of rounds, range) "
          "| client CPU us/msg (median) | CPU / off (median of rounds) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for loop in loops:
        done = rounds.get(loop, [])
        for kind in KINDS:
            if not done:
                continue
            rate = [float(g[kind]["msgs_per_s"]) for g in done]  # type: ignore[arg-type]
            cpu = [float(g[kind]["cpu_us_per_msg"]) for g in done]  # type: ignore[arg-type]
            rs = [float(g[kind]["msgs_per_s"]) / float(g["off"]["msgs_per_s"]) for g in done]  # type: ignore[arg-type]
            cs = [float(g[kind]["cpu_us_per_msg"]) / float(g["off"]["cpu_us_per_msg"]) for g in done]  # type: ignore[arg-type]
            off = kind == "off"
            ratio = "1" if off else f"**{med(rs):.2f}** ({min(rs):.2f}-{max(rs):.2f})"
            print(
                f"| {loop} | {kind} | {len(done)} | {med(rate):,.0f} | {ratio} | {med(cpu):.2f} "
                f"| {'1' if off else f'{med(cs):.2f}'} |"
            )


if __name__ == "__main__":
    main()
