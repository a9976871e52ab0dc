"""Sending around failures on a 2-broker embedded cluster: a broker stopped in the middle of a run
of concurrent sends loses no send its result reported and doubles none beyond the attempts whose
answer was lost; latency fault tolerance then keeps sends off the stopped broker. The accumulator
(``auto_batch``) sends concurrent small messages as batches and still gives each its own result."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import anyio
from support.integration import Collector, consumer, until

from rmq_async import ClientConfig, Message, Producer, ProducerConfig, RocketMQError, SendResult, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals


def _producer(cluster: EmbeddedCluster, timing: Timing, **cfg: object) -> Producer:
    return Producer(
        config=ProducerConfig(group="fail_pg", **cfg),
        client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing),
    )


async def test_a_broker_stopped_mid_run_loses_and_doubles_nothing_the_results_do_not_say(
    tmp_path: Path, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    results: dict[str, SendResult] = {}
    failed: dict[str, RocketMQError] = {}
    n, in_flight = 400, 16
    async with EmbeddedCluster(brokers=2, queues=4, timing=timing, data_dir=tmp_path) as cluster:
        await cluster.create_topic(topic)
        async with _producer(cluster, timing, send_latency_fault_enable=True, send_timeout=3.0) as p:
            await p.publish_info(topic)
            keys = iter(range(n))
            sent = anyio.Event()

            async def sender() -> None:
                for i in keys:
                    key = f"k-{i}"
                    try:
                        results[key] = await p.send(Message(topic, key.encode(), keys=key))
                    except RocketMQError as exc:
                        failed[key] = exc
                    if len(results) + len(failed) == n // 3:
                        sent.set()

            async with anyio.create_task_group() as tg:
                for _ in range(in_flight):
                    tg.start_soon(sender)
                await sent.wait()
                # broker-a stores what comes now but holds its answers; stopped with some in flight,
                # in the middle of the run, it never sends them
                broker_a = cluster.brokers[0]
                with broker_a.faults.recording() as arrived:
                    broker_a.faults.delay(310, 30.0)
                    with anyio.fail_after(10):
                        await until(lambda: sum(1 for c in arrived if c.code == 310) >= 4)
                await cluster.stop_broker(0)
            late = [r for k, r in results.items() if int(k[2:]) >= n // 2]
            assert late and all(r.message_queue.broker_name == "broker-b" for r in late[-50:])
            fault = internals(p).fault  # the failed connections keep broker-a out for 10 s
            assert fault is not None and not fault.is_available("broker-a", time.monotonic())
        await cluster.start_broker(0)
        stored = sum(cluster.brokers[b].store.max_offset(topic, q) for b in range(2) for q in range(4))
        seen = Collector()
        async with consumer(cluster, group, topic, seen, timing):
            await seen.wait_until(lambda: len(seen.msgs) >= stored, timeout=30)
    assert len(results) + len(failed) == n
    assert len(results) >= n - in_flight  # at most the sends in flight at the stop can fail
    at = {(m.broker_name, m.queue_id, m.queue_offset): m.keys for m in seen.msgs}
    for key, res in results.items():  # nothing a result reported is lost: it is where it says
        mq = res.message_queue
        assert at.get((mq.broker_name, mq.queue_id, res.queue_offset)) == key, key
    reported = {
        (r.message_queue.broker_name, r.message_queue.queue_id, r.queue_offset) for r in results.values()
    }
    unreported = [(pos, key) for pos, key in at.items() if pos not in reported]
    # the only copies no result names: attempts on the stopped broker whose answer it never sent
    assert all(pos[0] == "broker-a" for pos, _ in unreported), unreported
    assert len(unreported) <= in_flight
    copies = Counter(m.keys for m in seen.msgs)
    assert all(copies[k] <= 2 for k in copies) and set(copies) <= set(results) | set(failed)
    assert sum(copies.values()) == len(results) + len(unreported)


async def test_the_accumulator_batches_concurrent_sends_and_each_gets_its_own_result(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    handlers = cluster.brokers[0].handlers
    codes: Counter[int] = Counter()
    for code in (310, 320):
        inner = handlers[code]

        def counted(conn: object, cmd: object, inner: object = inner, code: int = code) -> object:
            codes[code] += 1
            return inner(conn, cmd)  # type: ignore[operator]

        handlers[code] = counted
    results: dict[str, SendResult] = {}
    async with _producer(cluster, timing, auto_batch=True, batch_max_delay=0.05) as p:
        queue = (await p.queues(topic))[1]

        async def one(i: int) -> None:
            results[f"k-{i}"] = await p.send(Message(topic, f"b{i}".encode(), keys=f"k-{i}"), queue=queue)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
        await p.send(Message(topic, b"x" * 40_000, keys="big"))  # over batch_max_bytes: on its own
        delayed = await p.send(Message(topic, b"later", keys="lvl", delay_level=1))
    assert codes[320] < 10 and codes[310] == 2, codes
    assert len({r.msg_id for r in results.values()}) == 50
    assert len({r.offset_msg_id for r in results.values()}) == 50
    assert sorted(r.queue_offset for r in results.values()) == list(range(50))
    seen = Collector()
    async with consumer(cluster, group, topic, seen, timing):
        await seen.wait_unique(52)
    by_key = {m.keys: m for m in seen.msgs}
    for key, res in results.items():
        m = by_key[key]
        assert (m.msg_id, m.offset_msg_id, m.queue_id, m.queue_offset) == (
            res.msg_id, res.offset_msg_id, queue.queue_id, res.queue_offset,
        ), key  # fmt: skip
    assert by_key["lvl"].msg_id == delayed.msg_id
