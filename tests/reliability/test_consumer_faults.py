"""Consumer-side faults: handlers that raise, hang or crawl, send-back refused, rebalance storms,
offsets at the edges, graceful shutdown under load.

Strategy: one embedded cluster per test (fast profile); the ledger records a message when a handler
finished it successfully, attempts are counted apart; every scenario ends with ``ledger.record()``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
from support.broker_admin import commit_offset, query_offset

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode, ResponseCode

from .scenario import LONG, SCALE, Ledger, consumer, n_msgs, produce


@pytest.fixture
async def cluster(timing: Timing) -> Any:
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as c:
        yield c


async def test_handlers_that_raise_or_hang(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(60)
    await produce(cluster.namesrv_addr, topic, n, ledger)
    attempts: Counter[str] = Counter()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        m = msgs[0]
        attempts[m.msg_id] += 1
        i = int((m.keys or "k-0")[2:])
        if attempts[m.msg_id] == 1 and i % 3 == 1:
            raise RuntimeError("handler bug")
        if attempts[m.msg_id] == 1 and i % 3 == 2:
            await anyio.sleep_forever()  # hangs past the consume timeout
        return await ledger.handler(msgs, ctx)

    async with consumer(cluster.namesrv_addr, group, topic, handler, timing) as c:
        c.set_consume_timeout(0.3)
        await ledger.wait_all(30)
        cached = sum(pq.count for pq in internals(c).queues.values())
    assert cached == 0
    ledger.record(attempts=sum(attempts.values()), raised=n // 3, hung=n // 3)


async def test_slow_handlers_memory_bounded_by_thresholds(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(400)
    threshold, batch = 20, 8
    await produce(cluster.namesrv_addr, topic, n, ledger)
    peak = {"count": 0, "bytes": 0}
    c: PushConsumer | None = None
    never = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        assert c is not None
        with anyio.move_on_after(0.002):
            await never.wait()  # slow: 2 ms per message, 4 at a time
        for pq in internals(c).queues.values():
            peak["count"] = max(peak["count"], pq.count)
        return await ledger.handler(msgs, ctx)

    c = consumer(
        cluster.namesrv_addr,
        group,
        topic,
        handler,
        timing,
        pull_threshold_for_queue=threshold,
        pull_batch_size=batch,
        concurrency=4,
    )
    async with c:
        await ledger.wait_all(60)
    # thresholds are checked before a pull: at most one batch over per queue
    assert peak["count"] <= threshold + batch, peak
    ledger.record(peak_cached_per_queue=peak["count"], threshold=threshold)


@pytest.mark.parametrize("path", ["fallback_send", "local_retry"])
async def test_send_back_refused(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing, path: str
) -> None:
    topic, group = names
    n = n_msgs(20)
    await produce(cluster.namesrv_addr, topic, n, ledger)
    broker = cluster.brokers[0]
    broker.faults.refuse(RequestCode.CONSUMER_SEND_MSG_BACK, ResponseCode.SYSTEM_ERROR, "refused by test")
    if path == "local_retry":  # the fallback send to %RETRY% fails as well
        broker.faults.refuse(RequestCode.SEND_MESSAGE, ResponseCode.SYSTEM_ERROR, "refused by test")
        broker.faults.refuse(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_ERROR, "refused by test")
    attempts: Counter[str] = Counter()
    cleared = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        m = msgs[0]
        attempts[m.msg_id] += 1
        if attempts[m.msg_id] == 1:
            return ConsumeResult.RECONSUME_LATER
        if path == "local_retry" and attempts[m.msg_id] == 2 and not cleared.is_set():
            cleared.set()  # local retries came back: let the broker work again
            broker.faults.clear()
            ledger.mark_fault_end()
        return await ledger.handler(msgs, ctx)

    async with consumer(cluster.namesrv_addr, group, topic, handler, timing):
        await ledger.wait_all(30)
    broker.faults.clear()
    ledger.record(path=path, attempts=sum(attempts.values()))


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
@pytest.mark.parametrize("window", [0.0, 3.0])
async def test_rebalance_storm(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing, window: float
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 8)
    n = n_msgs(600)
    storm_s = 4.0 * SCALE
    await produce(cluster.namesrv_addr, topic, n, ledger)
    never = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        with anyio.move_on_after(0.01):
            await never.wait()  # 10 ms per message: consumption spans the storm
        return await ledger.handler(msgs, ctx)

    def member(i: int) -> PushConsumer:
        return consumer(
            cluster.namesrv_addr,
            group,
            topic,
            handler,
            timing,
            instance_name=f"m{i}",
            concurrency=2,
            rebalance_stability_window=window,
        )

    churns = 0
    async with member(0), member(1):
        with anyio.move_on_after(storm_s):
            i = 2
            while True:  # a member joins, then leaves, every second
                async with member(i):
                    with anyio.move_on_after(0.5):
                        await never.wait()
                churns += 1
                i += 1
                with anyio.move_on_after(0.5):
                    await never.wait()
        ledger.mark_fault_end()
        await ledger.wait_all(60)
    ledger.record(stability_window_s=window, churns=churns)


async def test_committed_offset_beyond_max(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    await produce(cluster.namesrv_addr, topic, 10, ledger)
    await commit_offset(cluster.brokers[0].addr, group, topic, 0, 1000)  # PULL_OFFSET_MOVED
    offsets: dict[str, int] = {}

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        for m in msgs:
            offsets[m.msg_id] = m.queue_offset
        return await ledger.handler(msgs, ctx)

    async with consumer(cluster.namesrv_addr, group, topic, handler, timing):
        await produce(cluster.namesrv_addr, topic, 5, ledger, start=10)
        # the broker moves the consumer to its max offset at the time of the first pull (4.9.8
        # nextOffsetCorrection(offset, maxOffset)): what was stored before that point is skipped by
        # design; everything from the corrected offset on must arrive, in one contiguous run
        await ledger.wait_count(1, 20)
        last = max(offsets.values())
        while last < 14:
            await ledger.wait_count(ledger.unique + 1, 20)
            last = max(offsets.values())
    first = min(offsets.values())
    assert first >= 10 and sorted(offsets.values()) == list(range(first, 15))
    skipped = {k for k in ledger.sent if k not in ledger.seen}
    ledger.sent -= skipped
    ledger.record(corrected_to=first, skipped_by_correction=len(skipped))


async def test_filter_matching_nothing_then_a_match(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    other = Ledger("other")
    from rmq_async import ClientConfig, Message, Producer

    cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
    async with Producer("rel_producer", client_config=cc) as p:
        for i in range(50):
            other.sent.add((await p.send(Message(topic, b"x", tags="Other", keys=f"o-{i}"))).msg_id)
        c = PushConsumer(
            group,
            namesrv_addr=cluster.namesrv_addr,
            handler=ledger.handler,
            subscriptions={topic: "Wanted"},
            timing=timing,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        async with c:
            for i in range(3):
                ledger.sent.add((await p.send(Message(topic, b"y", tags="Wanted", keys=f"w-{i}"))).msg_id)
            await ledger.wait_all(20)
    assert not set(ledger.seen) & other.sent
    assert await query_offset(cluster.brokers[0].addr, group, topic, 0) == 53
    ledger.record(filtered_out=50)


async def test_empty_queue_and_offset_zero(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 2)
    addr = cluster.brokers[0].addr
    await produce(cluster.namesrv_addr, topic, 10, ledger)  # queue 0 and 1 get messages
    for q in (0, 1):
        await commit_offset(addr, group, topic, q, 0)  # 0 is a real offset: from the start
    # CONSUME_FROM_LAST_OFFSET would skip everything if 0 were taken for "no offset"
    async with consumer(
        cluster.namesrv_addr,
        group,
        topic,
        ledger.handler,
        timing,
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
    ):
        await ledger.wait_all(20)
    empty_topic = topic + "_empty"
    await cluster.create_topic(empty_topic, 2)
    e = Ledger("empty")
    async with consumer(cluster.namesrv_addr, group + "_e", empty_topic, e.handler, timing):
        with anyio.move_on_after(2 * timing.suspend_timeout):
            await e.wait_count(1, 60)  # nothing arrives from an empty queue
        assert e.unique == 0
        await produce(cluster.namesrv_addr, empty_topic, 5, e)
        await e.wait_all(20)
        ledger.sent |= e.sent
        ledger.seen.update(e.seen)
    ledger.record()


async def test_restart_right_after_queue_emptied(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    rounds = 3 * SCALE
    for r in range(rounds):
        await produce(cluster.namesrv_addr, topic, 1, ledger, start=r)
        async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
            await ledger.wait_all(20)
        # stopped the moment the queue emptied: the next start must not see that last message again
    async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
        await produce(cluster.namesrv_addr, topic, 1, ledger, start=rounds)
        await ledger.wait_all(20)
    assert ledger.duplicates == 0, ledger.seen
    ledger.record(restarts=rounds)


async def test_graceful_shutdown_mid_stream(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(400)
    concurrency = 8
    await produce(cluster.namesrv_addr, topic, n, ledger)
    never = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        with anyio.move_on_after(0.005):
            await never.wait()
        return await ledger.handler(msgs, ctx)

    stops = 3 if not LONG else 10
    for s in range(stops):
        async with consumer(cluster.namesrv_addr, group, topic, handler, timing, concurrency=concurrency):
            await ledger.wait_count(min(n, (s + 1) * n // (stops + 1)), 30)
    async with consumer(cluster.namesrv_addr, group, topic, handler, timing, concurrency=concurrency):
        await ledger.wait_all(30)
    # each stop lets running handlers finish and persists: duplicates come only from work handed to
    # the workers (the pulled batches they were cutting into consume batches)
    bound = stops * concurrency * 32
    assert ledger.duplicates <= bound, ledger.duplicates
    ledger.record(stops=stops, bound=bound)


async def test_graceful_stop_duplicates_bounded_by_running_handlers(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    concurrency = 8
    await produce(cluster.namesrv_addr, topic, 400, ledger)
    never = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        with anyio.move_on_after(0.005):
            await never.wait()
        return await ledger.handler(msgs, ctx)

    async with consumer(cluster.namesrv_addr, group, topic, handler, timing, concurrency=concurrency):
        await ledger.wait_count(100, 30)
    async with consumer(cluster.namesrv_addr, group, topic, handler, timing, concurrency=concurrency):
        await ledger.wait_all(30)
    assert ledger.duplicates <= concurrency, ledger.duplicates


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
async def test_stability_window_does_not_add_duplicates(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 8)
    await produce(cluster.namesrv_addr, topic, 400, ledger)
    never = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        with anyio.move_on_after(0.01):
            await never.wait()
        return await ledger.handler(msgs, ctx)

    def member(i: int) -> PushConsumer:
        return consumer(
            cluster.namesrv_addr,
            group,
            topic,
            handler,
            timing,
            instance_name=f"w{i}",
            concurrency=2,
            rebalance_stability_window=3.0,
        )

    async with member(0):
        await ledger.wait_count(20, 20)
        async with member(1):  # one member joins and stays
            await ledger.wait_all(60)
    # without a window a join costs at most the joiner's in-flight overlap; with it, no more than that
    assert ledger.duplicates <= 20, ledger.duplicates
