"""POP consumption: PushConsumer(client_rebalance=False) on the embedded 5.x cluster."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import pytest
from support.integration import Collector, consumer, produce, until

from rmq_async import (
    ConfigError,
    ConsumeContext,
    ConsumeResult,
    MessageExt,
    MessageQueue,
    PushConsumer,
    Timing,
)
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.pop import pop_state
from rmq_async.internals import internals


@pytest.fixture
async def cluster5(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, flavour=5) as c:
        yield c


def by_topic(col: Collector) -> Counter[str]:
    return Counter(m.topic for m in col.msgs)


async def _pop_mode(cluster: EmbeddedCluster, topic: str, group: str, share: int = 0) -> None:
    await cluster.create_topic(topic, 4)
    answers = await set_consume_mode(topic, group, "POP", share, namesrv_addr=cluster.namesrv_addr)
    assert answers and all(code == 0 for code, _ in answers.values()), answers


async def test_pop_consumes_everything_and_acks(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await _pop_mode(cluster5, topic, group)
    await produce(cluster5.namesrv_addr, topic, 100)
    col = Collector()
    async with consumer(cluster5, group, topic, col, timing, client_rebalance=False) as c:
        await col.wait_unique(100)
        pop = internals(c).pop
        assert pop is not None
        with anyio.fail_after(10):
            await until(lambda: pop.stats.acked >= 100)
        # the topic is popped (queue id -1), the retry topic pulled as before; no POP queue owned
        assert {mq.queue_id for mq in pop.queues} == {-1}
        assert {mq.topic for mq in c.assignment()} == {f"%RETRY%{group}"}
        # health: ready although the popped topic owns no queue; the POP counters
        health = c.health()
        assert health.ready, health.reasons
        assert health.pop["popped"] == 100 and health.pop["acked"] == 100
        assert health.pop["invisible_changed"] == 0 and list(health.pop["queues"]) == [
            str(mq) for mq in pop.queues
        ]
        assert health.as_dict()["pop"]["acked"] == 100
        props = internals(c).admin.running_info().properties  # what mqadmin consumerStatus reads
        assert props["clientRebalance"] == "false" and props["pop.acked"] == "100"
        assert props["popInvisibleTime"] == str(int(timing.pop_invisible_time * 1000))
    assert col.duplicates == 0
    ps = pop_state(cluster5.brokers[0].context)
    assert not any(ck.pending for ck in ps.cks.values())  # every handle acked on the broker


async def test_sixteen_consumers_on_four_queues_all_receive(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await _pop_mode(cluster5, topic, group)
    per: list[Collector] = [Collector() for _ in range(16)]
    members: list[PushConsumer] = []
    async with AsyncExitStack() as stack:
        for i, col in enumerate(per):
            c = consumer(cluster5, group, topic, col, timing, client_rebalance=False, instance_name=f"pop{i}")
            members.append(await stack.enter_async_context(c))
        with anyio.fail_after(15):  # every member pops (each has its pop loops)
            await until(lambda: all((p := internals(m).pop) is not None and p.queues for m in members))
        total = 0
        with anyio.fail_after(30):
            while not all(col.unique for col in per):
                await produce(cluster5.namesrv_addr, topic, 16, start=total)
                total += 16
                await anyio.sleep(0.05)
        with anyio.fail_after(15):
            await until(lambda: len({k for col in per for k in col.seen}) >= total)
        seen = Counter(k for col in per for k in col.seen.elements())
    assert set(seen) == {f"k-{i}" for i in range(total)}
    assert all(col.unique for col in per), [col.unique for col in per]


async def test_failures_come_back_with_the_pop_backoff(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await _pop_mode(cluster5, topic, group)
    await produce(cluster5.namesrv_addr, topic, 6)
    first: dict[str, float] = {}
    again: dict[str, tuple[float, int, str | None]] = {}
    third: dict[str, tuple[float, int]] = {}

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        m = msgs[0]
        key = m.keys or ""
        if key not in first:
            first[key] = time.monotonic()
            if key in ("k-1", "k-4"):
                return ConsumeResult.RECONSUME_LATER
        elif key not in again:
            again[key] = (time.monotonic(), m.reconsume_times, m.get_property("POP_CK"))
            if key == "k-4":
                return ConsumeResult.RECONSUME_LATER  # fails again: the second level
        elif key == "k-4" and key not in third:
            third[key] = (time.monotonic(), m.reconsume_times)
        return ConsumeResult.SUCCESS

    async with consumer(cluster5, group, topic, handler, timing, client_rebalance=False) as c:
        with anyio.fail_after(20):
            await until(lambda: set(again) == {"k-1", "k-4"} and "k-4" in third)
        assert (pop := internals(c).pop) is not None and pop.stats.invisible_changed == 3
        # nothing else comes back: every popped message is acked on the broker (no checkpoint holds
        # one that could be revived)
        ps = pop_state(cluster5.brokers[0].context)
        with anyio.fail_after(10):
            await until(lambda: not any(ck.pending for ck in ps.cks.values()))
        assert pop.stats.invisible_changed == 3
    first_level = timing.pop_delay_seconds[0]  # popDelayLevel[reconsumeTimes 0]
    for key in ("k-1", "k-4"):
        t, reconsume, handle = again[key]
        assert t - first[key] >= first_level * 0.9
        assert reconsume == 1
        assert handle is not None and handle.split(" ")[4] == "1"  # from the pop retry topic (v1)
    assert set(again) == {"k-1", "k-4"}
    # the second failure waits the second level (reconsume times 1), and comes back with 2
    t3, reconsume3 = third["k-4"]
    assert t3 - again["k-4"][0] >= timing.pop_delay_seconds[1] * 0.9 and reconsume3 == 2


async def test_a_handler_slower_than_the_invisible_time_is_redelivered(names: tuple[str, str]) -> None:
    timing = Timing.fast(pop_invisible_time=0.6)
    topic, group = names
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, flavour=5) as cluster:
        await _pop_mode(cluster, topic, group)
        await produce(cluster.namesrv_addr, topic, 4)
        seen: Counter[str] = Counter()
        redelivered = anyio.Event()

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            key = msgs[0].keys or ""
            seen[key] += 1
            if key == "k-2" and seen[key] == 1:
                with anyio.fail_after(10):
                    await redelivered.wait()  # longer than the invisible time: it came back meanwhile
            elif key == "k-2":
                redelivered.set()

        async with consumer(cluster, group, topic, handler, timing, client_rebalance=False) as c:
            with anyio.fail_after(15):
                await until(lambda: seen["k-2"] >= 2 and len(seen) >= 4)
            pop = internals(c).pop
            assert pop is not None
            with anyio.fail_after(5):
                await until(lambda: pop.stats.late >= 1)
            assert pop.stats.revived_seen >= 1
    assert set(seen) == {f"k-{i}" for i in range(4)}
    assert seen["k-2"] >= 2


async def test_members_join_leave_and_crash_nothing_lost(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """A member that dies without acking (its task group cancelled, as a kill) leaves its popped
    messages to the invisible time: they come back to the others."""
    topic, group = names
    await _pop_mode(cluster5, topic, group)
    seen: Counter[str] = Counter()
    hold = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for m in msgs:
            seen[m.keys or ""] += 1

    async def stuck(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        await hold.wait()  # never acks

    a = consumer(cluster5, group, topic, handler, timing, client_rebalance=False, instance_name="a")
    crash = consumer(cluster5, group, topic, stuck, timing, client_rebalance=False, instance_name="crash")
    async with a:
        async with anyio.create_task_group() as tg:
            tg.start_soon(crash.start)
            with anyio.fail_after(15):  # the crashing member pops
                await until(
                    lambda: crash.running and (p := internals(crash).pop) is not None and bool(p.queues)
                )
            await produce(cluster5.namesrv_addr, topic, 40)
            b = consumer(cluster5, group, topic, handler, timing, client_rebalance=False, instance_name="b")
            async with b:  # joins, pops, then leaves
                await produce(cluster5.namesrv_addr, topic, 40, start=40)
                with anyio.fail_after(15):
                    await until(lambda: (p := internals(b).pop) is not None and bool(p.queues))
            await produce(cluster5.namesrv_addr, topic, 40, start=80)
            tg.cancel_scope.cancel()
        # the crashed member: its connections cut without a goodbye, no acks
        ended = internals(crash).ended
        if ended is not None:
            ended.cancel()
        with anyio.fail_after(30):
            await until(lambda: len(seen) >= 120)
    assert set(seen) == {f"k-{i}" for i in range(120)}
    assert pop_state(cluster5.brokers[0].context).revived > 0  # the crashed member's, popped again


async def popped_queues(c: PushConsumer, topic: str) -> list[MessageQueue]:
    """The pop queues of ``topic`` once the consumer pops it."""
    pop = internals(c).pop
    assert pop is not None
    with anyio.fail_after(15):
        await until(lambda: any(mq.topic == topic for mq in pop.queues))
    return sorted(mq for mq in pop.queues if mq.topic == topic)


async def pops_parked(c: PushConsumer, mqs: list[MessageQueue]) -> None:
    """Every pop loop of ``mqs`` waits (a pop out when paused answered first)."""
    pop = internals(c).pop
    assert pop is not None
    with anyio.fail_after(10):
        for mq in mqs:
            await pop.queues[mq].wait_parked()


async def test_a_paused_pop_topic_is_not_popped_while_another_flows_and_resume_loses_nothing(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    held, flowing = f"{topic}H", f"{topic}F"
    await _pop_mode(cluster5, held, group)
    await _pop_mode(cluster5, flowing, group)
    col = Collector()
    c = consumer(cluster5, group, held, col, timing, client_rebalance=False)
    c.subscribe(flowing)
    c.pause(held)  # before start: its pop loops start paused
    await produce(cluster5.namesrv_addr, held, 20)
    await produce(cluster5.namesrv_addr, flowing, 20, start=100)
    async with c:
        hq = await popped_queues(c, held)
        fq = await popped_queues(c, flowing)
        await col.wait_until(lambda: by_topic(col)[flowing] == 20)
        assert by_topic(col)[held] == 0
        await pops_parked(c, hq)
        pop = internals(c).pop
        assert pop is not None and all(pop.queues[mq].paused for mq in hq)
        c.resume(held)
        await col.wait_until(lambda: by_topic(col)[held] == 20)
        # paused while running, a long poll out: what it brings is consumed, then no pop
        c.pause(flowing)
        await pops_parked(c, fq)
        before = by_topic(col)[flowing]
        await produce(cluster5.namesrv_addr, flowing, 10, start=200)
        await produce(cluster5.namesrv_addr, held, 10, start=300)
        await col.wait_until(lambda: by_topic(col)[held] == 30)
        assert by_topic(col)[flowing] == before == 20
        # the broker pops the queue of each pop itself (queue id -1): one queue cannot be paused alone
        with pytest.raises(ConfigError, match="pause the topic"):
            c.pause(MessageQueue(flowing, fq[0].broker_name, 0))
        c.resume(flowing)
        await col.wait_until(lambda: by_topic(col)[flowing] == 30)
        with anyio.fail_after(10):
            await until(lambda: pop.stats.acked >= 60)
    assert col.unique == 60 and col.duplicates == 0


async def test_a_4x_broker_falls_back_to_client_side_rebalance(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """A broker without QUERY_ASSIGNMENT (4.x answers 3): the topic is allocated and pulled here,
    as Java's tryQueryAssignment falls back."""
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing, client_rebalance=False) as c:
        await col.wait_unique(40)
        assert (pop := internals(c).pop) is not None and not pop.queues
        assert {mq.topic for mq in c.assignment()} == {topic, f"%RETRY%{group}"}
        assert c.health().ready


async def test_pop_requests_follow_the_client_config(
    cluster5: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Every POP request (QUERY_ASSIGNMENT 400, POP_MESSAGE 200050, ACK_MESSAGE 200051,
    CHANGE_MESSAGE_INVISIBLETIME 200053) goes through the client's RPC layer and so carries the client's
    settings, as pulls and heartbeats do: with ``serialize_type="ROCKETMQ"`` and ``language="JAVA"`` they
    went out JSON and PYTHON (built outside it). The codes from 200000 on do not fit the binary header's
    16-bit code (Java truncates them: 200050 arrives as 3442), so those go out as JSON, as JAVA."""
    from rmq_async import ClientConfig
    from rmq_async.protocol.codes import RequestCode, SerializeType

    topic, group = names
    await _pop_mode(cluster5, topic, group)
    await produce(cluster5.namesrv_addr, topic, 20)
    cfg = ClientConfig(
        namesrv_addr=cluster5.namesrv_addr, timing=timing, serialize_type="ROCKETMQ", language="JAVA"
    )
    failed_once: set[str] = set()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        if msgs[0].keys == "k-3" and "k-3" not in failed_once:
            failed_once.add("k-3")
            return ConsumeResult.RECONSUME_LATER  # its invisible time is changed (200053)
        return ConsumeResult.SUCCESS

    pop_codes = {
        RequestCode.QUERY_ASSIGNMENT,
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    }
    with cluster5.brokers[0].faults.recording() as seen:
        async with PushConsumer(
            group,
            client_config=cfg,
            handler=handler,
            subscriptions={topic: "*"},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            client_rebalance=False,
            consume_batch_max_size=1,
        ) as c:
            pop = internals(c).pop
            assert pop is not None
            with anyio.fail_after(20):
                await until(lambda: pop.stats.acked >= 20)
    pops = [cmd for cmd in seen if cmd.code in pop_codes]
    assert {cmd.code for cmd in pops} == pop_codes, sorted({cmd.code for cmd in seen})

    def expected(code: int) -> SerializeType:
        return SerializeType.ROCKETMQ if code <= 0x7FFF else SerializeType.JSON

    wrong = {(cmd.code, cmd.serialize_type, cmd.language) for cmd in pops} - {
        (code, expected(code), "JAVA") for code in pop_codes
    }
    assert not wrong, wrong
    others = {(cmd.code, cmd.serialize_type, cmd.language) for cmd in seen if cmd.code not in pop_codes}
    assert {(s, lang) for _, s, lang in others} == {(SerializeType.ROCKETMQ, "JAVA")}, others
