"""A 5.x broker restarted on its data dir still revives what was popped and not acked (found by the soak).

Strategy: one POP member whose handler hangs on the first delivery of every message (popped, never
acked) and acks redeliveries. Once it holds all of them, the broker is restarted on the same data dir
(clean stop: offsets and state saved). The pop offset had moved past the messages at pop time, so only
the checkpoints can bring them back: before the fix they lived in memory only, and the restart lost
every popped-and-unacked message for good (the soak lost one this way); now they are saved with the
broker's state and revived after their invisible time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio

from rmq_async import Timing
from rmq_async.admin import set_consume_mode
from rmq_async.consumer.push import PushConsumer
from rmq_async.consumer.types import ConsumeContext, ConsumeResult
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.stored import MessageExt

from .scenario import Ledger, produce


async def test_popped_unacked_messages_survive_a_broker_restart(
    names: tuple[str, str], ledger: Ledger, tmp_path: Path
) -> None:
    topic, group = names
    timing = Timing.fast(pop_invisible_time=2.0, shutdown_timeout=0.5)
    first: set[str] = set()
    all_popped = asyncio.Event()
    hang = asyncio.Event()  # never set: first deliveries hang until the consumer stops

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        for m in msgs:
            if m.reconsume_times == 0:
                first.add(m.msg_id)
                if first >= ledger.sent:
                    all_popped.set()
                await hang.wait()
            ledger.saw(m.msg_id)
        return ConsumeResult.SUCCESS

    async with EmbeddedCluster(brokers=1, queues=1, timing=timing, flavour=5, data_dir=tmp_path) as cluster:
        ns = cluster.namesrv_addr
        await cluster.create_topic(topic, 1)
        assert all(c == 0 for c, _ in (await set_consume_mode(topic, group, "POP", namesrv_addr=ns)).values())
        await produce(ns, topic, 10, ledger, timing=timing)
        c = PushConsumer(
            group, namesrv_addr=ns, handler=handler, subscriptions={topic: "*"}, timing=timing,
            client_rebalance=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET", concurrency=20,
        )  # fmt: skip
        async with c:
            with anyio.fail_after(20):
                await all_popped.wait()
            await cluster.stop_broker(0)
            await cluster.start_broker(0)
            ledger.mark_fault_end()
            await ledger.wait_all(30)
    ledger.record(restarts=1, mode="POP")
