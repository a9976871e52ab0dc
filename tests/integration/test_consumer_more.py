"""PushConsumer: admin requests forwarded by the broker, flow-control resume latency, offsets across a
broker restart on a data dir, and a smoke subset against the 5.x flavour."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest
from helpers import Collector, consumer, produce

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    EmbeddedCluster,
    MessageExt,
    Timing,
)
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig
from rmq_async.protocol.bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand


async def admin_call(
    cluster: EmbeddedCluster, timing: Timing, code: int, ext: dict[str, str]
) -> RemotingCommand:
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
        return await ci.pool.request(cluster.brokers[0].addr, RemotingCommand.request(code, ext), 5.0)


async def test_running_info_status_and_consume_directly(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing) as c:
        await col.wait_unique(8)
        # 307 through the broker: the Java ConsumerRunningInfo shape mqadmin consumerStatus reads
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": c.client_id},
        )
        assert resp.code == 0, resp.remark
        info = ConsumerRunningInfo.decode(resp.body)
        assert info.properties["consumerGroup"] == group
        assert {mq for mq in info.mq_table if mq.topic == topic} == {r.message_queue for r in sent}
        assert {s.topic for s in info.subscription_set} == {topic, f"%RETRY%{group}"}
        assert sum(pq.cached_msg_count for pq in info.mq_table.values()) == 0
        # 223 -> 221: committed offsets per queue
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
            {"topic": topic, "group": group},
        )
        assert resp.code == 0 and c.client_id.encode() in resp.body
        # 309: the handler consumes one message on demand
        before = col.seen["k-0"]
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "clientId": c.client_id, "msgId": sent[0].offset_msg_id},
        )
        assert resp.code == 0, resp.remark
        assert ConsumeMessageDirectlyResult.decode(resp.body).consume_result == "CR_SUCCESS"
        assert col.seen["k-0"] == before + 1


async def test_reset_offset_by_time_makes_the_group_consume_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 12)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(12)
        await anyio.sleep(timing.persist_interval * 3)  # the broker resets only groups with committed offsets
        with anyio.fail_after(10):
            resp = await admin_call(
                cluster,
                timing,
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"},
            )
        assert resp.code == 0, resp.remark
        await col.wait_until(lambda: all(col.seen[f"k-{i}"] >= 2 for i in range(12)))


async def test_pull_resumes_promptly_when_room_frees(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Flow control awaits the process queue: the parked pull goes out the moment consumption frees
    room (measured here as the time from the freeing removal to the next pulled batch arriving)."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 200)
    release = anyio.Event()
    consumed = 0

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        nonlocal consumed
        await release.wait()
        consumed += len(msgs)
        return ConsumeResult.SUCCESS

    async with consumer(
        cluster, group, topic, handler, timing, pull_threshold_for_queue=40, pull_batch_size=16
    ) as c:
        with anyio.fail_after(10):
            while not any(mq.topic == topic and pq.count > 40 for mq, pq in c.pqs.items()):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        pq = next(p for mq, p in c.pqs.items() if mq.topic == topic)
        parked = pq.count
        await anyio.sleep(timing.suspend_timeout + timing.held_pull_check_interval)
        assert pq.count == parked  # nothing pulled while over the threshold
        t0 = time.perf_counter()
        release.set()
        with anyio.fail_after(5):
            while pq.queue_offset_max < parked + 15:  # noqa: ASYNC110 (the next pulled batch)
                await anyio.sleep(0.001)
        delay = time.perf_counter() - t0
    if out := os.environ.get("RMQ_MEASURE_FILE"):  # figures for benchmarks/RESULTS.md
        with open(out, "a") as fh:  # noqa: ASYNC230 (test-only, tiny)
            fh.write(f"resume_delay_ms {delay * 1000:.2f}\n")
    assert delay < 0.1, f"pull resumed {delay * 1000:.1f} ms after room freed"


async def test_offsets_survive_a_broker_restart_on_a_data_dir(
    tmp_path: Path, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    async with EmbeddedCluster(timing=timing, data_dir=tmp_path) as cluster:
        await produce(cluster.namesrv_addr, topic, 40)
        col = Collector()
        async with consumer(cluster, group, topic, col, timing):
            await col.wait_unique(40)
        await cluster.stop_broker(0)
        await cluster.start_broker(0)
        await produce(cluster.namesrv_addr, topic, 10, start=40)
        col2 = Collector()
        async with consumer(cluster, group, topic, col2, timing):
            await col2.wait_unique(10)
            await anyio.sleep(timing.rebalance_interval)
        assert set(col2.seen) == {f"k-{i}" for i in range(40, 50)}


@pytest.fixture
async def cluster5(timing: Timing):  # type: ignore[no-untyped-def]
    async with EmbeddedCluster(timing=timing, flavour=5) as c:
        yield c


async def test_smoke_on_5x_flavour_consume_retry_and_restart(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """5.x answers 22 for a never-committed retry queue and refuses offsets of unknown groups (26)."""
    topic, group = names
    await produce(cluster5.namesrv_addr, topic, 30)
    failed_once: set[str] = set()
    col = Collector()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        key = msgs[0].keys or ""
        if key in ("k-3", "k-7") and key not in failed_once:
            failed_once.add(key)
            ctx.delay_level = 1
            return ConsumeResult.RECONSUME_LATER
        return await col(msgs, ctx)

    async with consumer(cluster5, group, topic, handler, timing):
        await col.wait_unique(30)
    assert col.seen["k-3"] == 1 and col.seen["k-7"] == 1
    col2 = Collector()
    await produce(cluster5.namesrv_addr, topic, 5, start=30)
    async with consumer(cluster5, group, topic, col2, timing):
        await col2.wait_unique(5)
        await anyio.sleep(timing.rebalance_interval)
    assert set(col2.seen) == {f"k-{i}" for i in range(30, 35)}
