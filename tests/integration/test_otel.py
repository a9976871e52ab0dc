"""OpenTelemetry with the SDK's in-memory reader and exporter (test dependency only): every instrument
reports, consumer spans link to the producer spans across the broker, and nothing is recorded (no
hook, no observer) without a provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from support.integration import consumer

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from rmq_async import (
    ClientConfig,
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    ProducerConfig,
    SendResult,
    Timing,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.observability import otel
from rmq_async.producer.transaction import TransactionProducer, TransactionResult

INSTRUMENTS = {
    "rocketmq_send_cost_time",
    "rocketmq_delivery_latency",
    "rocketmq_await_time",
    "rocketmq_process_time",
    "rocketmq_pull_latency",
    "rocketmq_consumer_cached_messages",
    "rocketmq_consumer_cached_bytes",
    "rocketmq_consumer_lag",
    "rocketmq_consumer_send_backs",
    "rocketmq_consumer_dlq_moves",
    "rocketmq_consumer_decode_failures",
}


@pytest.fixture
def sdk() -> Iterator[tuple[InMemoryMetricReader, InMemorySpanExporter]]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    mp = MeterProvider(metric_readers=[reader])
    otel.use_providers(mp, tp)
    try:
        yield reader, exporter
    finally:
        otel.use_providers()
        mp.shutdown()
        tp.shutdown()


def _points(reader: InMemoryMetricReader) -> dict[str, list[object]]:
    data = reader.get_metrics_data()
    out: dict[str, list[object]] = {}
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


async def test_every_instrument_reports_and_spans_cross_the_broker(
    sdk: tuple[InMemoryMetricReader, InMemorySpanExporter], timing: Timing
) -> None:
    reader, exporter = sdk
    failed: set[str] = set()

    done: set[str] = set()
    all_done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        key = msgs[0].keys or ""
        if key == "k-0" and key not in failed:
            failed.add(key)
            return ConsumeResult.RECONSUME_LATER  # one send-back
        done.add(key)
        if len(done) == 4:
            all_done.set()
        return ConsumeResult.SUCCESS

    async with EmbeddedCluster(timing=timing) as cluster:
        async with Producer("otel_pg", namesrv_addr=cluster.namesrv_addr) as p:
            assert internals(p).otel is not None
            for i in range(4):
                await p.send(Message("OtelT", b"x", keys=f"k-{i}"))
        c = consumer(cluster, "otel_cg", "OtelT", handler, timing)
        async with c:
            with anyio.fail_after(20):
                await all_done.wait()
            assert internals(c).ctx.observation.observer is not None
            points = _points(reader)  # read while the consumer runs (cached messages, lag)
    assert set(points) >= INSTRUMENTS, INSTRUMENTS - set(points)
    send_backs = points["rocketmq_consumer_send_backs"]
    assert any(getattr(pt, "value", 0) >= 1 for pt in send_backs)
    for name, pts in points.items():
        for pt in pts:
            attrs = dict(pt.attributes or {})  # type: ignore[attr-defined]
            assert not any(str(v).startswith("k-") for v in attrs.values()), (name, attrs)  # never a key
            if name not in ("rocketmq_send_cost_time", "rocketmq_producer_sends"):
                assert attrs["consumer_group"] == "otel_cg"
    spans = exporter.get_finished_spans()
    sends = [s for s in spans if s.kind is SpanKind.PRODUCER]
    processes = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert len(sends) == 4 and len(processes) >= 5  # k-0 twice
    send_ids = {s.context.span_id for s in sends}
    for s in processes:
        assert [link.context.span_id for link in s.links] and all(
            link.context.span_id in send_ids for link in s.links
        )
        assert s.links[0].context.trace_id in {x.context.trace_id for x in sends}


async def test_nothing_without_a_provider(timing: Timing) -> None:
    otel.use_providers()
    assert otel.telemetry() is None  # the API's default (proxy) providers only
    async with EmbeddedCluster(timing=timing) as cluster:
        async with Producer("otel_pg2", namesrv_addr=cluster.namesrv_addr) as p:
            assert internals(p).otel is None
            res = await p.send(Message("OtelN", b"x", keys="k"))

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            return None

        c = consumer(cluster, "otel_cg2", "OtelN", handler, timing)
        async with c:
            assert (
                internals(c).ctx.observation.observer is None
                and not internals(c).ctx.before_hooks
                and not internals(c).ctx.after_hooks
            )
    assert res.msg_id


def test_global_providers_are_found_and_the_api_defaults_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    otel.use_providers()
    assert otel.telemetry() is None
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    monkeypatch.setattr("opentelemetry.metrics.get_meter_provider", lambda: mp)
    t = otel.telemetry()
    assert t is not None and t.metrics and t.tracer is None
    assert otel.telemetry() is t  # cached per provider pair
    mp.shutdown()


async def test_budgets_on_the_cluster_sample_histograms_count_everything_and_keep_traced_spans(
    timing: Timing,
) -> None:
    # histograms: 1 value a second at most (a test that fails if every message were recorded); the
    # counters count every message; consumer spans: none for untraced messages (root budget 0), one
    # for each message whose traceparent is sampled, linked to its producer span
    from rmq_async import ClientConfig, OtelConfig

    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    mp = MeterProvider(metric_readers=[reader])
    n = 200
    try:
        async with EmbeddedCluster(timing=timing) as cluster:
            async with Producer("otel_budget_plain", namesrv_addr=cluster.namesrv_addr) as p:
                assert internals(p).otel is None  # started before the providers: untraced messages
                for i in range(n):
                    await p.send(Message("OtelBudget", b"x", keys=f"u-{i}"))
            otel.use_providers(mp, tp)
            async with Producer("otel_budget_traced", namesrv_addr=cluster.namesrv_addr) as p:
                for i in range(n):
                    await p.send(Message("OtelBudget", b"x", keys=f"t-{i}"))
            seen: set[str] = set()
            done = anyio.Event()

            async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
                seen.update(m.keys or "" for m in msgs)
                if len(seen) == 2 * n:
                    done.set()

            cfg = ClientConfig(
                namesrv_addr=cluster.namesrv_addr,
                timing=timing,
                otel=OtelConfig(histogram_rate=1, root_span_rate=0),
            )
            c = consumer(cluster, "otel_budget_cg", "OtelBudget", handler, timing, client_config=cfg)
            async with c:
                t0 = anyio.current_time()
                with anyio.fail_after(20):
                    await done.wait()
                took = anyio.current_time() - t0
                points = _points(reader)
    finally:
        otel.use_providers()
        mp.shutdown()
        tp.shutdown()

    def total(name: str, **attrs: str) -> int:
        out = 0
        for pt in points.get(name, []):
            a = dict(pt.attributes or {})  # type: ignore[attr-defined]
            if a.get("consumer_group") == "otel_budget_cg" and all(a.get(k) == v for k, v in attrs.items()):
                out += pt.count if hasattr(pt, "count") else pt.value  # type: ignore[attr-defined]
        return out

    windows = int(took) + 2  # one-second windows (a budget below 100/s), the first and the last partial
    for name in ("rocketmq_process_time", "rocketmq_await_time", "rocketmq_delivery_latency"):
        assert 1 <= total(name) <= windows < 2 * n, (name, total(name), took)
    assert total("rocketmq_consumer_processed_messages", invocation_status="success") == 2 * n
    assert total("rocketmq_consumer_pulled_messages") == 2 * n
    spans = exporter.get_finished_spans()
    sends = {s.context.span_id for s in spans if s.kind is SpanKind.PRODUCER}
    processes = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert len(sends) == n and len(processes) == n  # the traced ones only, every one of them
    assert sorted(link.context.span_id for s in processes for link in s.links) == sorted(sends)


async def test_a_half_message_is_recorded_as_a_transactional_send(
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    sdk: tuple[InMemoryMetricReader, InMemorySpanExporter],
) -> None:
    # the half send is a send: its cost recorded, its span a PRODUCER span with the message id, and
    # the semantic conventions' message type "transaction"; a plain send of the same producer has none
    reader, exporter = sdk
    topic, group = names

    async def commit(msg: Message, res: SendResult) -> TransactionResult:
        return TransactionResult.COMMIT

    async def check(msg: MessageExt) -> TransactionResult:
        return TransactionResult.COMMIT

    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
    async with TransactionProducer(group, checker=check, client_config=cfg) as p:
        assert internals(p).otel is not None
        half = await p.send_in_transaction(Message(topic, b"tx"), commit)
        plain = await p.send(Message(topic, b"plain"))
    spans = {dict(s.attributes or {}).get("messaging.message.id"): s for s in exporter.get_finished_spans()}
    tx_span, plain_span = spans[half.msg_id], spans[plain.msg_id]
    tx_attrs, plain_attrs = dict(tx_span.attributes or {}), dict(plain_span.attributes or {})
    assert tx_span.kind is SpanKind.PRODUCER and tx_span.name == f"{topic} send"
    assert tx_attrs["messaging.rocketmq.message.type"] == "transaction"
    assert "messaging.rocketmq.message.type" not in plain_attrs
    costs: list[Any] = [
        pt
        for pt in _points(reader)["rocketmq_send_cost_time"]
        if getattr(pt, "attributes", {})["topic"] == topic
    ]
    assert sum(pt.count for pt in costs) == 2


async def test_batches_and_accumulated_sends_record_every_message(
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    sdk: tuple[InMemoryMetricReader, InMemorySpanExporter],
) -> None:
    # a SEND_BATCH_MESSAGE (send_batch, the accumulator's batches) is one PRODUCER span carrying the
    # batch's size, its context in every message; each message counted and its send cost recorded
    reader, exporter = sdk
    topic, group = names
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
    config = ProducerConfig(group=f"{group}_p", auto_batch=True, batch_max_delay=0.05)
    async with Producer(config=config, client_config=cfg) as p:
        queue = (await p.queues(topic))[0]
        await p.send_batch([Message(topic, b"b%d" % i, keys=f"b-{i}") for i in range(3)])

        async def one(i: int) -> None:
            await p.send(Message(topic, b"a%d" % i, keys=f"a-{i}"), queue=queue)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    sizes = [dict(s.attributes or {}).get("messaging.batch.message_count") for s in spans]
    assert sizes[0] == 3 and sum(n for n in sizes if isinstance(n, int)) == 23 and len(spans) < 23
    points = _points(reader)
    sends: list[Any] = [
        pt for pt in points["rocketmq_producer_sends"] if getattr(pt, "attributes", {})["topic"] == topic
    ]
    assert sum(pt.value for pt in sends) == 23
    costs: list[Any] = [
        pt for pt in points["rocketmq_send_cost_time"] if getattr(pt, "attributes", {})["topic"] == topic
    ]
    assert 3 <= sum(pt.count for pt in costs) <= 23  # within the histogram budget (20 a tenth of a second)
    got: list[MessageExt] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        got.extend(msgs)
        if len(got) >= 23:
            done.set()
        return ConsumeResult.SUCCESS

    async with consumer(cluster, group, topic, handler, timing):
        with anyio.fail_after(20):
            await done.wait()
    parents = {int((m.get_property("traceparent") or "-0-")[36:52] or "0", 16) for m in got}
    assert parents == {s.context.span_id for s in spans}  # every message carries its batch's span
