"""The message trace and OpenTelemetry on the consumption paths beside the push handler, on the
embedded cluster with ``traceTopicEnable``; the records are read back by msg id through QUERY_MESSAGE,
as ``mqadmin queryMsgTraceById`` does:

* lite pull: as Java's ``DefaultLitePullConsumerImpl.poll`` (``ConsumeMessageTraceHookImpl`` registered
  by ``DefaultLitePullConsumer``): a SubBefore and at once a SubAfter (CONSUME_SUCCESS) per poll;
* ``deliveries()`` (no Java counterpart): a handler call of one message, from its hand-out to its
  settling (``ack``: SUCCESS, ``retry``: FAILED);
* POP: as Java's ``ConsumeMessagePopConcurrentlyService`` (the push consumer's hooks).

OpenTelemetry is on in each (SDK in-memory reader and exporter, no budget): the traced producer's
messages carry a sampled ``traceparent``, so every consumption gets its span linked to the producer's;
the histograms record every message; the processed-messages counter counts them exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from support.integration import Collector, consumer, until

pytest.importorskip("opentelemetry.sdk")

from support.otel_sdk import InMemorySDK

from rmq_async import (
    ClientConfig,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendResult,
    Timing,
)
from rmq_async.admin import set_consume_mode
from rmq_async.client.instance import ClientInstance
from rmq_async.config import OtelConfig, TraceConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.observability import otel
from rmq_async.observability.trace import ConsumeReturnType, TraceContext, query_trace


@pytest.fixture
def sdk() -> Iterator[InMemorySDK]:
    s = InMemorySDK()
    otel.use_providers(s.mp, s.tp)
    try:
        yield s
    finally:
        otel.use_providers()
        s.shutdown()


def _cfg(cluster: EmbeddedCluster, timing: Timing) -> ClientConfig:
    return ClientConfig(
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        trace=TraceConfig(enabled=True, flush_interval=0.05),
        otel=OtelConfig(histogram_rate=None, root_span_rate=0),
    )


async def _send(cfg: ClientConfig, topic: str, n: int) -> list[SendResult]:
    async with Producer("trace_paths_pg", client_config=cfg) as p:
        return [await p.send(Message(topic, b"body-%d" % i, tags="TagA", keys=f"k-{i}")) for i in range(n)]


async def _records(cluster: EmbeddedCluster, timing: Timing, msg_id: str, n: int) -> list[TraceContext]:
    """The trace records of ``msg_id`` once there are ``n`` of them (the dispatchers flush at stop)."""
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as client:
        with anyio.fail_after(10):
            while True:
                records = await query_trace(client, msg_id)
                if len(records) >= n:
                    return records
                await anyio.sleep(0.05)  # the broker's index is read again (no event to await)


def _pairs(records: list[TraceContext], group: str) -> list[tuple[TraceContext, TraceContext]]:
    before = [r for r in records if r.trace_type == "SubBefore"]
    after = {r.request_id: r for r in records if r.trace_type == "SubAfter"}
    assert len(after) == len(before) and all(r.group_name == group for r in before)
    return [(b, after[b.request_id]) for b in before]


def _spans_link_to_producers(sdk: InMemorySDK, n: int, op: str) -> None:
    spans = sdk.consumer_spans()
    assert len(spans) == n, [s.name for s in spans]
    sends = sdk.producer_span_ids()
    for s in spans:
        assert s.name.endswith(f" {op}") and s.attributes["messaging.operation.type"] == op
        assert [link.context.span_id for link in s.links] and all(
            link.context.span_id in sends for link in s.links
        )


async def test_lite_pull_polls_are_traced_as_java(sdk: InMemorySDK, timing: Timing) -> None:
    topic, group = "TraceLite", "trace_lite_cg"
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        cfg = _cfg(cluster, timing)
        sent = await _send(cfg, topic, 3)
        got: list[MessageExt] = []
        async with LitePullConsumer(
            group, client_config=cfg, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        ) as c:
            await c.subscribe(topic)
            with anyio.fail_after(20):
                while len(got) < 3:
                    got += await c.poll(1.0, max_messages=10)
            counts = sdk.counts(group)
        for i, res in enumerate(sent):
            records = await _records(cluster, timing, res.msg_id, 3)
            assert sorted(r.trace_type for r in records) == ["Pub", "SubAfter", "SubBefore"]
            [(before, after)] = _pairs(records, group)
            # (a SubBefore carries no topic: Java's encoder writes msg id, retry times and keys)
            assert before.beans[0].msg_id == res.msg_id and before.beans[0].keys == f"k-{i}"
            assert after.success and after.context_code == ConsumeReturnType.SUCCESS
    assert counts["rocketmq_consumer_processed_messages"] == 3
    assert counts["rocketmq_await_time"] == 3 and counts["rocketmq_delivery_latency"] == 3
    assert "rocketmq_process_time" not in counts  # what the application does after poll() is not seen
    spans = sdk.consumer_spans()
    assert spans and sum(len(s.links) for s in spans) == 3  # a receive span per poll, a link per message
    _spans_link_to_producers(sdk, len(spans), "receive")


async def test_deliveries_are_traced_from_hand_out_to_settling(sdk: InMemorySDK, timing: Timing) -> None:
    topic, group = "TraceDeliveries", "trace_deliveries_cg"
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        cfg = _cfg(cluster, timing)
        sent = await _send(cfg, topic, 3)
        c = PushConsumer(
            group,
            client_config=cfg,
            subscriptions={topic: "*"},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        acked: set[str] = set()
        retried = False
        async with c, c.deliveries() as stream:
            with anyio.fail_after(20):
                async for d in stream:
                    if d.message.keys == "k-1" and not retried:
                        retried = True
                        await d.retry(delay_level=1)
                        continue
                    acked.add(d.message.keys or "")
                    await d.ack()
                    if len(acked) == 3:
                        break
            counts = sdk.counts(group)
        assert acked == {"k-0", "k-1", "k-2"}
        for res in sent:
            retried_one = res.msg_id == sent[1].msg_id
            records = await _records(cluster, timing, res.msg_id, 5 if retried_one else 3)
            pairs = _pairs(records, group)
            assert len(pairs) == (2 if retried_one else 1)
            codes = sorted((a.success, a.context_code) for _, a in pairs)
            expected = [(False, ConsumeReturnType.FAILED), (True, 0)] if retried_one else [(True, 0)]
            assert codes == expected, codes
            assert all(b.beans[0].keys == f"k-{sent.index(res)}" for b, _ in pairs)  # the retried copy too
            if retried_one:
                assert sorted(b.beans[0].retry_times for b, _ in pairs) == [0, 1]
    assert counts["rocketmq_consumer_processed_messages"] == 4
    assert counts["rocketmq_process_time"] == 4 and counts["rocketmq_await_time"] == 4
    _spans_link_to_producers(sdk, 4, "process")


async def test_pop_consumption_is_traced_as_java(sdk: InMemorySDK, timing: Timing) -> None:
    topic, group = "TracePop", "trace_pop_cg"
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True, flavour=5, queues=4) as cluster:
        await cluster.create_topic(topic, 4)
        answers = await set_consume_mode(topic, group, "POP", 0, namesrv_addr=cluster.namesrv_addr)
        assert answers and all(code == 0 for code, _ in answers.values()), answers
        cfg = _cfg(cluster, timing)
        sent = await _send(cfg, topic, 3)
        seen = Collector()
        async with consumer(
            cluster, group, topic, seen, timing, client_config=cfg, client_rebalance=False
        ) as c:
            await seen.wait_unique(3)
            pop = internals(c).pop
            assert pop is not None and pop.stats.popped >= 3
            with anyio.fail_after(10):
                await until(lambda: pop.stats.acked >= 3)
            counts = sdk.counts(group)
        for res in sent:
            records = await _records(cluster, timing, res.msg_id, 3)
            [(before, after)] = _pairs(records, group)
            assert before.beans[0].keys and before.region_id == "DefaultRegion"
            assert after.success and after.context_code == ConsumeReturnType.SUCCESS
    assert counts["rocketmq_consumer_processed_messages"] == 3
    assert counts["rocketmq_process_time"] == 3 and counts["rocketmq_delivery_latency"] == 3
    assert counts["rocketmq_consumer_pulled_messages"] == 3
    _spans_link_to_producers(sdk, 3, "process")
