"""PushConsumer against the embedded cluster (fast timing profile)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from support.integration import Collector, consumer, produce, until_rebalanced

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer, Timing
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals


async def test_every_message_consumed_once_with_one_consumer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 200)
    assert len({r.message_queue.queue_id for r in sent}) == 4
    col = Collector()
    async with consumer(cluster, group, topic, col, timing) as c:
        await col.wait_unique(200)
        assert {mq for mq in c.assignment() if mq.topic == topic} == {r.message_queue for r in sent}
        health = c.health()
        assert health.running and health.ready and health.reasons == ()
        assert len(health.queues) == 4 and len(health.retry_queues) == 1  # the retry queue apart
        assert health.lag == 0 and all(q.last_pull is not None for q in health.queues)
    assert col.duplicates == 0
    # bodies, keys and msg ids come back as sent
    by_key = {m.keys: m for m in col.msgs}
    for i, r in enumerate(sent):
        m = by_key[f"k-{i}"]
        assert m.msg_id == r.msg_id and m.body.startswith(f"body-{i}-".encode())


async def test_tag_filter_on_broker_and_client(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 60, tags=["TagA", "TagB", "TagC"])
    col = Collector()
    async with consumer(cluster, group, topic, col, timing, expr="TagA || TagC"):
        await col.wait_unique(40)
        await anyio.sleep(timing.rebalance_interval)  # give a wrong delivery the chance to show up
    assert {m.tags for m in col.msgs} == {"TagA", "TagC"}
    assert col.unique == 40


async def test_offsets_survive_a_consumer_restart(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 50)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(50)
    # graceful stop committed everything: a new member of the group sees only the new messages
    await produce(cluster.namesrv_addr, topic, 20, start=50)
    col2 = Collector()
    async with consumer(cluster, group, topic, col2, timing):
        await col2.wait_unique(20)
        await anyio.sleep(timing.rebalance_interval)
    assert set(col2.seen) == {f"k-{i}" for i in range(50, 70)}


async def test_reconsume_later_goes_to_retry_then_dlq(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 3)
    deliveries: dict[str, list[int]] = {}
    done = anyio.Event()
    max_reconsume = 2

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        for m in msgs:
            deliveries.setdefault(m.keys or "", []).append(m.reconsume_times)
            assert m.topic == topic  # retry copies are shown under the original topic
        if sum(len(v) for v in deliveries.values()) >= 3 * (max_reconsume + 1):
            done.set()
        ctx.delay_level = 1
        return ConsumeResult.RECONSUME_LATER

    async with consumer(cluster, group, topic, handler, timing, max_reconsume_times=max_reconsume):
        with anyio.fail_after(30):
            await done.wait()
    assert {k: v for k, v in deliveries.items()} == {f"k-{i}": [0, 1, 2] for i in range(3)}
    # after max_reconsume_times the broker moved them to the DLQ
    dlq = f"%DLQ%{group}"

    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
        route = await ci.update_route(dlq)
        bname = route.broker_datas[0].broker_name
        addr = route.broker_datas[0].broker_addrs[0]
        from rmq_async import MessageQueue

        with anyio.fail_after(10):
            while await ci.api.get_max_offset(addr, MessageQueue(dlq, bname, 0), 3) < 3:  # noqa: ASYNC110
                await anyio.sleep(0.05)


async def test_ack_index_on_success_sends_back_only_the_tail(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 8)
    first_round: dict[str, int] = {}
    retried: list[str] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        if msgs[0].reconsume_times > 0:
            retried.extend(m.keys or "" for m in msgs)
            if len(retried) >= expected_retries:
                done.set()
            return ConsumeResult.SUCCESS
        for m in msgs:
            first_round[m.keys or ""] = len(msgs)
        if len(msgs) > 1:
            # Java's meaning: SUCCESS up to ack_index, the rest failed (RECONSUME_LATER: all failed)
            ctx.ack_index = 0  # the first message is done, the rest failed
            ctx.delay_level = 1
            return ConsumeResult.SUCCESS
        return ConsumeResult.SUCCESS

    # all 8 in one queue so batches form
    q0 = sent[0].message_queue
    expected_retries = 0
    from rmq_async import Message, Producer

    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(100, 108):
            await p.send(Message(topic, b"x", keys=f"b-{i}"), queue=q0)
    expected_retries = 1  # at least one tail comes back
    async with consumer(cluster, group, topic, handler, timing, consume_batch_max_size=4):
        with anyio.fail_after(20):
            await done.wait()
    batched_heads = {k for k, n in first_round.items() if n > 1}
    assert batched_heads, "some batches had more than one message"
    # the retried messages are tails of batches: never the first message of a batch that failed
    assert retried and all(first_round.get(k, 1) > 1 for k in retried)


async def test_handler_that_raises_is_retried(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    calls: list[int] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            raise RuntimeError("boom")
        done.set()
        return ConsumeResult.SUCCESS

    async with consumer(cluster, group, topic, handler, timing):
        with anyio.fail_after(20):
            await done.wait()
    assert calls[:2] == [0, 1]


async def test_hung_handler_is_cancelled_and_message_sent_back(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    attempts: list[int] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        attempts.append(msgs[0].reconsume_times)
        if len(attempts) == 1:
            await anyio.sleep(3600)  # hangs: cancelled at the consume timeout
        done.set()
        return ConsumeResult.SUCCESS

    async with consumer(cluster, group, topic, handler, timing) as c:
        c.set_consume_timeout(0.3)
        with anyio.fail_after(20):
            await done.wait()
        health = c.health()
    assert attempts[0] == 0 and attempts[-1] >= 1
    assert all(q.cached == 0 for q in health.queues)


async def test_hung_handlers_inside_one_pulled_batch_on_one_worker(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # one worker (concurrency 1) consumes pulled batches; three first deliveries of one batch hang:
    # each is cut at the timeout and sent back, and the worker goes on with the rest of the batch
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 12)
    hang = {"k-2", "k-5", "k-6"}
    seen: dict[str, list[int]] = {}
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        key = msgs[0].keys or ""
        seen.setdefault(key, []).append(msgs[0].reconsume_times)
        if key in hang and msgs[0].reconsume_times == 0:
            await anyio.sleep(3600)  # cut by the consume timeout
        if len(seen) == 12 and all(len(seen[k]) >= 2 for k in hang):
            done.set()

    async with consumer(cluster, group, topic, handler, timing, concurrency=1) as c:
        c.set_consume_timeout(0.3)
        with anyio.fail_after(30):
            await done.wait()
        health = c.health()
    assert sorted(seen) == sorted(f"k-{i}" for i in range(12))
    for k in hang:
        assert seen[k][0] == 0 and seen[k][1] >= 1
    assert all(q.cached == 0 for q in health.queues)


async def test_shorter_timeout_applies_to_running_handlers(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # handlers already hanging under the default 15 min timeout are cut once it is shortened
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 3)
    started: list[str] = []
    retried: set[str] = set()
    all_hanging, all_retried = anyio.Event(), anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        key = msgs[0].keys or ""
        if msgs[0].reconsume_times == 0:
            started.append(key)
            if len(started) == 3:
                all_hanging.set()
            await anyio.sleep(3600)
        retried.add(key)
        if len(retried) == 3:
            all_retried.set()

    async with consumer(cluster, group, topic, handler, timing) as c:
        with anyio.fail_after(20):
            await all_hanging.wait()
        c.set_consume_timeout(0.2)
        with anyio.fail_after(20):
            await all_retried.wait()
    assert sorted(retried) == ["k-0", "k-1", "k-2"]


async def test_flow_control_bounds_the_cache(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 400)
    gate = anyio.Event()
    peak = {"count": 0}
    col = Collector()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        await gate.wait()
        return await col(msgs, ctx)  # type: ignore[return-value]

    async with consumer(
        cluster, group, topic, handler, timing, pull_threshold_for_queue=20, pull_batch_size=8
    ) as c:
        with anyio.fail_after(10):
            while len(pqs := [pq for mq, pq in internals(c).queues.items() if mq.topic == topic]) < 4:
                await c.wait_rebalanced()
            for pq in pqs:  # every queue's pull waits for room: its cache is over the threshold
                await pq.wait_parked()
        await anyio.sleep(timing.suspend_timeout)  # parked pulls stay parked: nothing more comes
        for pq in internals(c).queues.values():
            peak["count"] = max(peak["count"], pq.count)
        gate.set()
        await col.wait_unique(400)
    # thresholds are checked before a pull: at most one batch over
    assert peak["count"] <= 20 + 8


async def test_deliveries_api(cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 20)
    acked: set[str] = set()
    retried_once: set[str] = set()
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    async with c, c.deliveries() as stream:
        with anyio.fail_after(20):
            async for d in stream:
                key = d.message.keys or ""
                if key == "k-3" and key not in retried_once:
                    retried_once.add(key)
                    await d.retry(delay_level=1)
                    continue
                acked.add(key)
                await d.ack()
                if len(acked) == 20:
                    break
    assert acked == {f"k-{i}" for i in range(20)}


async def test_deliveries_unsettled_hold_the_offset_expire_and_are_retried_when_the_loop_is_left(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # the async-for contract: an unsettled delivery holds its queue's committed offset back; it is
    # sent back once the consume timeout passes (and comes again, reconsume times 1); a delivery
    # still unsettled when the loop is left is retried, so another member of the group gets it
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 8)
    k0 = sent[0]
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    first: set[str] = set()
    held_back: list[int] = []
    redelivered: list[int] = []
    async with c, c.deliveries() as stream:
        c.set_consume_timeout(0.5)
        with anyio.fail_after(20):
            async for d in stream:
                key = d.message.keys or ""
                if d.message.reconsume_times == 0:
                    first.add(key)
                    if key != "k-0":
                        await d.ack()
                    if len(first) == 8:  # every first delivery seen, all but k-0 acked
                        held_back.append(internals(c).ctx.offset_store.read_memory(k0.message_queue))
                    continue
                assert key == "k-0"  # only k-0 was left unsettled, and its timeout sent it back
                redelivered.append(d.message.reconsume_times)
                break  # leave the loop with the redelivery unsettled
    assert first == {f"k-{i}" for i in range(8)}
    assert held_back == [k0.queue_offset]  # the committed offset stopped at the unsettled k-0
    assert redelivered == [1]
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(1)
    assert [(m.keys, m.reconsume_times) for m in col.msgs] == [("k-0", 2)]


async def test_three_consumers_share_and_take_over(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=8)
    col = Collector()
    members = [consumer(cluster, group, topic, col, timing) for _ in range(3)]
    await members[0].start()
    await produce(cluster.namesrv_addr, topic, 100)
    await col.wait_unique(100)
    await members[1].start()
    await members[2].start()

    async def settled(ms: list[PushConsumer], total: int = 8) -> None:
        def each_queue_once() -> bool:
            # every member owns some queue: a member that has not rebalanced yet (just started) owns
            # none while the others still split the queues between themselves
            owned = [{mq for mq in m.assignment() if mq.topic == topic} for m in ms]
            return all(owned) and len(set().union(*owned)) == total and sum(len(o) for o in owned) == total

        with anyio.fail_after(15):
            await until_rebalanced(ms, each_queue_once)

    await settled(members)
    assert sorted(len([q for q in m.assignment() if q.topic == topic]) for m in members) == [2, 3, 3]  # 3/3/2
    await produce(cluster.namesrv_addr, topic, 100, start=100)
    await col.wait_unique(200)
    await members[0].stop()  # graceful: unregister -> the broker's notice -> the others rebalance at once
    t0 = anyio.current_time()
    await settled(members[1:])
    assert anyio.current_time() - t0 < timing.rebalance_interval  # driven by the notice, not the timer
    await produce(cluster.namesrv_addr, topic, 100, start=200)
    await col.wait_unique(300)
    for m in members[1:]:
        await m.stop()
    assert col.unique == 300


@pytest.mark.parametrize("model", ["BROADCASTING"])
async def test_broadcasting_every_member_gets_everything(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, model: str, tmp_path: object
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 30)
    cols = [Collector(), Collector()]
    ms = [
        consumer(
            cluster,
            group,
            topic,
            cols[i],
            timing,
            message_model=model,
            offset_store_dir=str(tmp_path),
            instance_name=f"bc-{i}",
        )
        for i in range(2)
    ]
    for m in ms:
        await m.start()
    try:
        for col in cols:
            await col.wait_unique(30)
    finally:
        for m in ms:
            await m.stop()


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


async def test_stopped_cleanly_says_whether_stop_gave_up_on_a_running_handler(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # stop() waits Timing.shutdown_timeout for running handlers: a handler still running then is
    # cancelled and stopped_cleanly is False (the CLI exits 128 + signal on it)
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    entered = anyio.Event()

    async def stuck(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        entered.set()
        await anyio.sleep_forever()
        return ConsumeResult.SUCCESS

    short = timing.model_copy(update={"shutdown_timeout": 0.3})
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=stuck, subscriptions={topic: "*"}, timing=short
    )
    assert c.stopped_cleanly
    await c.start()
    with anyio.fail_after(20):
        await entered.wait()
        await c.stop()
    assert not c.stopped_cleanly
    quick = PushConsumer(
        f"{group}_q", namesrv_addr=cluster.namesrv_addr, handler=stuck, subscriptions={f"{topic}_none": "*"},
        timing=short,
    )  # fmt: skip
    async with quick:  # nothing in flight at the stop
        pass
    assert quick.stopped_cleanly
