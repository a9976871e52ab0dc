"""Message trace end to end on the embedded cluster (``traceTopicEnable``): a traced producer and push
consumer write Pub, SubBefore and SubAfter records to RMQ_SYS_TRACE_TOPIC; QUERY_MESSAGE by the msg id
(what ``mqadmin queryMsgTraceById`` sends) reads them back; a full dispatcher queue drops and counts
without slowing consumption; stopping flushes what is queued."""

from __future__ import annotations

import sys
import time

import anyio
import pytest
from support.integration import Collector, child_env, consumer

from rmq_async import (
    Message,
    MessageExt,
    OrderlyContext,
    OrderlyResult,
    Producer,
    ProducerConfig,
    SendResult,
    Timing,
)
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig, TraceConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.observability.trace import RMQ_SYS_TRACE_TOPIC, decode, query_messages_by_key, query_trace


def _traced(cluster: EmbeddedCluster, timing: Timing, **kw: object) -> ClientConfig:
    trace = TraceConfig(enabled=True, flush_interval=0.05, **kw)
    return ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, trace=trace)


@pytest.mark.parametrize("flavour", [4, 5])
async def test_traced_producer_and_consumer_are_found_by_msg_id(flavour: int, timing: Timing) -> None:
    topic, group = f"TraceT{flavour}", f"trace_cg_{flavour}"
    async with EmbeddedCluster(timing=timing, flavour=flavour, trace_topic_enable=True) as cluster:
        cfg = _traced(cluster, timing)
        async with Producer("trace_pg", client_config=cfg) as p:
            sent = [
                await p.send(Message(topic, b"body-%d" % i, tags="TagA", keys=f"k-{i}")) for i in range(3)
            ]
        seen = Collector()
        async with consumer(cluster, group, topic, seen, timing, client_config=cfg):
            await seen.wait_unique(3)
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as client:
            # the trace messages are in the trace topic, keyed by msg id and the message's own keys
            by_key = await query_messages_by_key(client, RMQ_SYS_TRACE_TOPIC, "k-1")
            assert by_key and all(m.topic == RMQ_SYS_TRACE_TOPIC for m in by_key)
            for res in sent:
                records = await query_trace(client, res.msg_id)
                kinds = [r.trace_type for r in records]
                assert sorted(kinds) == ["Pub", "SubAfter", "SubBefore"], kinds
                pub = next(r for r in records if r.trace_type == "Pub")
                before = next(r for r in records if r.trace_type == "SubBefore")
                after = next(r for r in records if r.trace_type == "SubAfter")
                assert pub.group_name == "trace_pg" and pub.success and pub.region_id == "DefaultRegion"
                assert pub.beans[0].topic == topic and pub.beans[0].tags == "TagA"
                assert pub.beans[0].offset_msg_id == res.offset_msg_id
                assert before.group_name == group and before.request_id == after.request_id
                assert before.region_id == ("DefaultRegion" if flavour == 5 else "null")
                assert after.success and after.context_code == 0 and after.group_name == group


async def test_full_queue_drops_and_counts_without_slowing_consumption(timing: Timing) -> None:
    n = 300
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        async with Producer("trace_pg2", namesrv_addr=cluster.namesrv_addr) as p:
            for i in range(n):
                await p.send(Message("TraceFull", b"x", keys=f"k-{i}"))

        async def rate(cfg: ClientConfig | None, group: str) -> tuple[float, object]:
            seen = Collector()
            c = consumer(cluster, group, "TraceFull", seen, timing, client_config=cfg, pull_batch_size=64)
            async with c:
                t0 = time.perf_counter()
                await seen.wait_unique(n)
                took = time.perf_counter() - t0
                return n / took, internals(c).ctx.observation.tracer

        # a queue of 4 contexts and a flush interval far away: nearly everything is dropped
        cfg = _traced(cluster, timing).model_copy(
            update={"trace": TraceConfig(enabled=True, queue_size=4, flush_interval=30.0)}
        )
        plain, _ = await rate(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing), "trace_off_cg")
        traced, tracer = await rate(cfg, "trace_full_cg")
        assert tracer is not None
        d = tracer.dispatcher  # type: ignore[attr-defined]
        assert d.dropped >= 2 * n - 4 - 40  # SubBefore + SubAfter per message, the queue holds 4
        # within noise: the dropping path costs a counter increment (a generous bound on 2 shared cores)
        assert traced > plain * 0.3, (traced, plain)


async def test_stop_flushes_what_is_queued(timing: Timing) -> None:
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        cfg = _traced(cluster, timing)
        cfg = cfg.model_copy(update={"trace": TraceConfig(enabled=True, flush_interval=60.0)})
        async with Producer("trace_pg3", client_config=cfg) as p:
            res = await p.send(Message("TraceFlush", b"x", keys="kf"))
            tracer = internals(p).tracer
            assert tracer is not None and len(tracer.dispatcher) == 1  # not sent yet: batch not full
        assert tracer.dispatcher.sent == 1 and len(tracer.dispatcher) == 0
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as client:
            with anyio.fail_after(10):
                records = await query_trace(client, res.msg_id)
            assert [r.trace_type for r in records] == ["Pub"]


async def test_cli_produce_and_consume_with_trace_on_a_process_cluster(timing: Timing) -> None:
    # rmq-async embedded --trace-topic-enable (process=True runs it), produce --trace, consume --trace
    async with EmbeddedCluster(timing=timing, process=True, trace_topic_enable=True) as cluster:
        ns = cluster.namesrv_addr
        base = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop"]
        consume_opts = ["--count", "3", "--idle-exit", "2", "--trace", "--quiet"]
        with anyio.fail_after(60):
            out = await anyio.run_process(
                [
                    *base,
                    "produce",
                    "--namesrv",
                    ns,
                    "--topic",
                    "TraceCli",
                    "--count",
                    "3",
                    "--trace",
                    "--quiet",
                ],
                env=child_env(),
                check=False,
            )
            assert out.returncode == 0, out.stderr.decode()[-2000:]
            out = await anyio.run_process(
                [
                    *base,
                    "consume",
                    "--namesrv",
                    ns,
                    "--topic",
                    "TraceCli",
                    "--group",
                    "trace_cli_cg",
                    *consume_opts,
                ],
                env=child_env(),
                check=False,
            )
            assert out.returncode == 0, out.stderr.decode()[-2000:]
        async with ClientInstance(ClientConfig(namesrv_addr=ns, timing=timing)) as client:
            msgs = await query_messages_by_key(client, RMQ_SYS_TRACE_TOPIC, "k-1")
            kinds = {r.trace_type for m in msgs for r in decode(m.body.decode()) if r.beans[0].keys == "k-1"}
            assert kinds == {"Pub", "SubBefore", "SubAfter"}, kinds


async def test_orderly_consumer_and_batch_send_are_traced(timing: Timing) -> None:
    # 4.x flavour: the embedded 5.x broker appends the batch's own UNIQ_KEY to every message of a batch,
    # which then all show that id to consumers (not the per-message ids the send returns)
    async with EmbeddedCluster(timing=timing, flavour=4, trace_topic_enable=True) as cluster:
        cfg = _traced(cluster, timing)
        async with Producer("trace_pg_b", client_config=cfg) as p:
            res = await p.send_batch([Message("TraceOrd", b"x%d" % i, keys=f"b-{i}") for i in range(3)])
        seen = Collector()

        async def orderly(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            await seen(msgs, None)  # type: ignore[arg-type]
            return OrderlyResult.SUCCESS

        async with consumer(
            cluster, "trace_ord_cg", "TraceOrd", orderly, timing, client_config=cfg, orderly=True
        ):
            await seen.wait_unique(3)
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as client:
            # the batch's Pub names every message id, comma-joined (a MessageBatch's msgId), and is found
            # under that key; each consumed message has its SubBefore and SubAfter
            [pub] = await query_trace(client, res.msg_id)
            assert pub.trace_type == "Pub" and pub.beans[0].keys == "null" and pub.success
            for msg_id in res.msg_id.split(","):
                records = await query_trace(client, msg_id)
                after = [r for r in records if r.trace_type == "SubAfter"]
                assert [r.trace_type for r in records if r.trace_type != "SubAfter"] == ["SubBefore"]
                assert after and after[0].success and after[0].context_code == 0


async def test_accumulated_sends_are_traced_as_their_batches(timing: Timing) -> None:
    # as Java's ProduceAccumulator, whose batches go through the send hook as MessageBatch sends: one
    # Pub record per batch sent, naming its messages' ids comma-joined (null tags and keys)
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        cfg = _traced(cluster, timing)
        config = ProducerConfig(group="trace_pg_acc", auto_batch=True, batch_max_delay=0.05)
        results: list[SendResult] = []
        async with Producer(config=config, client_config=cfg) as p:
            queue = (await p.queues("TraceAcc"))[0]

            async def one(i: int) -> None:
                results.append(await p.send(Message("TraceAcc", b"a%d" % i, keys=f"a-{i}"), queue=queue))

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
        store = cluster.brokers[0].store
        records = []
        for q in range(8):
            cq = store.queue(RMQ_SYS_TRACE_TOPIC, q)
            for offset in cq.offsets if cq is not None else ():
                stored = store.lookup(offset)
                assert stored is not None
                records += decode(stored.body.decode())
    pubs = [r for r in records if r.trace_type == "Pub" and r.beans[0].topic == "TraceAcc"]
    assert 1 <= len(pubs) < 20
    named = [i for r in pubs for i in (r.beans[0].msg_id or "").split(",")]
    assert sorted(named) == sorted(r.msg_id for r in results)  # each message in one batch's record
    assert all(r.beans[0].keys == "null" and r.success for r in pubs)
