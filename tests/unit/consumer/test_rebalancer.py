"""Rebalancer and StartOffsets on their own, against a stub client: allocation among the listed
members, the diff applied through the queue table, a refused orderly lock, the start-offset rule
(Java's computePullFromWhereWithException, the same for push and lite pull) and the rebalanced event."""

from __future__ import annotations

import time
from typing import cast

import anyio
import pytest
from support.consumer_context import MemoryStore, make_context

from rmq_async.client.instance import ClientInstance
from rmq_async.consumer.allocate import strategy_by_name
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.queues import QueueTable
from rmq_async.consumer.rebalance import StabilityWindow
from rmq_async.consumer.rebalancer import Rebalancer, RebalanceSettings, RebalanceSignals, StartOffsets
from rmq_async.protocol.mq import MessageQueue

TOPIC = "T"
MQS = [MessageQueue(TOPIC, "b", i) for i in range(4)]


class _BrokerData:
    broker_addrs = {0: "127.0.0.1:10911"}


class _Route:
    broker_datas = [_BrokerData()]


class _Api:
    def __init__(self) -> None:
        self.cids = ["a@1", "b@2"]
        self.max_offsets = {mq: 100 + mq.queue_id for mq in MQS}
        self.searched: list[int] = []

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float) -> list[str]:
        return list(self.cids)

    async def get_max_offset(self, addr: str, mq: MessageQueue, timeout: float) -> int:
        return self.max_offsets.get(mq, 7)

    async def search_offset(self, addr: str, mq: MessageQueue, ts: int, timeout: float) -> int:
        self.searched.append(ts)
        return 50


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api
        self.client_id = "a@1"
        self.routes = {TOPIC: _Route()}
        self.heartbeats = 0

    async def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return list(MQS)

    async def send_heartbeat_to_all_brokers(self) -> bool:
        self.heartbeats += 1
        return True

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str:
        return "127.0.0.1:10911"


class _Service:
    """The queue side of a consume service: locks granted except for ``refuse``."""

    gates_pulls = False
    sync_drop = False

    def __init__(self) -> None:
        self.refuse: set[MessageQueue] = set()

    async def lock_new(self, pq: ProcessQueue) -> bool:
        return pq.mq not in self.refuse

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        pq.drop()
        return True

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        return None


def _rig(
    where: str = "CONSUME_FROM_LAST_OFFSET", ts: str | int | None = None
) -> tuple[Rebalancer, _Client, _Service]:
    ctx: ConsumerContext = make_context(store=MemoryStore())
    client = _Client(_Api())
    ctx.attach(cast(ClientInstance, client), ctx.offset_store)
    ctx.subscriptions.put(TOPIC, "*")
    service = _Service()
    table = QueueTable(ctx, service)
    settings = RebalanceSettings(strategy_by_name("AVG"), StartOffsets(where, ts))
    started: list[ProcessQueue] = []
    rb = Rebalancer(
        ctx,
        table,
        settings,
        RebalanceSignals(),
        StabilityWindow(0.0),
        start_pull=started.append,
        locks=service,
    )
    return rb, client, service


async def test_allocation_among_members_and_the_diff_applied() -> None:
    rb, client, _ = _rig()
    ctx = rb.ctx
    async with anyio.create_task_group() as tg:
        ctx.set_task_group(tg)
        await rb._apply(TOPIC, set(MQS[:2]))  # as if owned before
        beats = client.heartbeats
        await rb.do_rebalance()
    # AVG over 4 queues and two members: a@1 takes the first two (the retry topic has no route here)
    assert set(rb.table.pqs) == set(MQS[:2]) and client.heartbeats == beats
    client.api.cids = ["a@1"]
    async with anyio.create_task_group() as tg:
        ctx.set_task_group(tg)
        await rb.do_rebalance()
    assert set(rb.table.pqs) == set(MQS)
    assert {pq.next_offset for pq in rb.table.pqs.values()} == {100, 101, 102, 103}  # LAST: max offsets
    assert client.heartbeats == beats + 1  # the change was announced before the new queues pulled
    ctx.subscriptions.remove(TOPIC)
    await rb.do_rebalance()
    assert rb.table.pqs == {}  # a topic no longer subscribed: its queues are dropped


async def test_a_refused_lock_leaves_the_queue_for_a_later_rebalance() -> None:
    rb, client, service = _rig()
    client.api.cids = ["a@1"]
    service.refuse = {MQS[3]}
    async with anyio.create_task_group() as tg:
        rb.ctx.set_task_group(tg)
        assert not await rb._apply(TOPIC, set(MQS))
    assert set(rb.table.pqs) == set(MQS[:3])


async def test_wait_rebalanced_returns_after_the_next_round_and_wake_starts_one() -> None:
    rb, _, _ = _rig()
    rounds: list[int] = []
    real = rb.do_rebalance

    async def counted() -> None:
        rounds.append(len(rounds))
        await real()

    rb.do_rebalance = counted  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        rb.ctx.set_task_group(tg)
        tg.start_soon(rb.run)
        await rb.signals.wait_rebalanced()
        rb.wake()
        with anyio.fail_after(5):  # long before the 20 s interval
            await rb.signals.wait_rebalanced()
        tg.cancel_scope.cancel()
    assert len(rounds) == 2


@pytest.mark.parametrize(
    ("where", "topic", "expected"),
    [
        ("CONSUME_FROM_FIRST_OFFSET", TOPIC, 0),
        ("CONSUME_FROM_LAST_OFFSET", TOPIC, 7),
        ("CONSUME_FROM_TIMESTAMP", TOPIC, 50),
        ("CONSUME_FROM_FIRST_OFFSET", "%RETRY%g", 0),
        ("CONSUME_FROM_LAST_OFFSET", "%RETRY%g", 0),  # a retry topic consumed from its start
        ("CONSUME_FROM_TIMESTAMP", "%RETRY%g", 7),  # ... or, by timestamp, from its end
    ],
)
async def test_start_offsets_without_a_committed_offset(where: str, topic: str, expected: int) -> None:
    rb, client, _ = _rig(where)
    client.api.max_offsets = {}
    assert await rb.compute_pull_from_where(MessageQueue(topic, "b", 0)) == expected


async def test_a_committed_offset_comes_first() -> None:
    rb, _, _ = _rig("CONSUME_FROM_FIRST_OFFSET")
    rb.ctx.offset_store.update(MQS[1], 12, increase_only=False)
    assert await rb.compute_pull_from_where(MQS[1]) == 12


def test_the_consume_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    made = time.time()
    default = StartOffsets("CONSUME_FROM_TIMESTAMP", None)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200.0)
    assert abs(default.timestamp_ms() - (made - 1800) * 1000) < 1000  # fixed when made
    assert StartOffsets("CONSUME_FROM_TIMESTAMP", 1234).timestamp_ms() == 1234
    text = StartOffsets("CONSUME_FROM_TIMESTAMP", "20240102030405").timestamp_ms()
    assert text == int(time.mktime(time.strptime("20240102030405", "%Y%m%d%H%M%S")) * 1000)
