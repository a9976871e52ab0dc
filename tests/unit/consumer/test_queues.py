"""QueueTable on its own: making queues with their limits, starting pull loops, dropping queues
(the owner first, then the offset: replaced, persisted, forgotten; then the owner releases it)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from support.consumer_context import MemoryStore, make_context

from rmq_async.config import ConsumerConfig
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.queues import QueueTable
from rmq_async.protocol.mq import MessageQueue

MQS = [MessageQueue("T", "b", i) for i in range(4)]


class Store(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, MessageQueue, object]] = []

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        self.log.append(("update", mq, offset))
        super().update(mq, offset, increase_only=increase_only)

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        self.log.append(("persist", mq, sync))

    def remove(self, mq: MessageQueue) -> None:
        self.log.append(("remove", mq, None))
        super().remove(mq)


class Owner:
    """The consume side and the broker-lock side of a table's queues, recorded in one log."""

    def __init__(self, sync_drop: bool = False) -> None:
        self.sync_drop = sync_drop
        self.log: list[tuple[str, MessageQueue]] = []

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        self.log.append(("drop", pq.mq))
        pq.drop()
        return True

    async def lock_new(self, pq: ProcessQueue) -> bool:
        return True

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        self.log.append(("unlock", pq.mq))


def _table(
    config: ConsumerConfig | None = None,
    orderly: bool = False,
    on_start: Callable[[ProcessQueue], None] | None = None,
) -> tuple[QueueTable, Store, Owner]:
    store = Store()
    owner = Owner(sync_drop=orderly)
    ctx = make_context(store=store, config=config, orderly=orderly)
    table = QueueTable(ctx, owner, locks=owner, on_start=on_start)
    return table, store, owner


def test_queue_limits_per_queue_per_topic_and_no_span_when_orderly() -> None:
    table, _, _ = _table(
        ConsumerConfig(group="g", pull_threshold_for_queue=7, pull_threshold_size_for_queue=3)
    )
    pq = table.make_queue(MQS[0])
    assert (pq.max_count, pq.max_bytes, pq.max_span) == (7, 3 << 20, 2000)
    cfg = ConsumerConfig(group="g", pull_threshold_for_topic=100, pull_threshold_size_for_topic=10)
    table, _, _ = _table(cfg, orderly=True)
    table.pqs[MQS[0]] = table.make_queue(MQS[0])
    second = table.make_queue(MQS[1])  # the topic's limits shared by its two queues
    assert (second.max_count, second.max_bytes, second.max_span) == (50, 5 << 20, None)


async def test_start_owns_the_queue_and_tells_on_start() -> None:
    started: list[ProcessQueue] = []
    table, _, _ = _table(on_start=started.append)
    pq = table.make_queue(MQS[0])
    pq.next_offset = 5
    table.start(pq)
    assert table.pqs == {MQS[0]: pq} and started == [pq] and table.assignment() == {MQS[0]}
    pq.dropped = True
    assert table.assignment() == set()


async def test_a_drop_asks_the_owner_first_then_replaces_persists_and_forgets_the_offset() -> None:
    table, store, owner = _table()
    for mq in MQS[:2]:
        table.pqs[mq] = ProcessQueue(mq)
    await table.drop(MQS[0])
    await table.drop(MQS[1], offset=42)
    await table.drop(MQS[2])  # not owned: nothing happens
    assert owner.log == [("drop", MQS[0]), ("unlock", MQS[0]), ("drop", MQS[1]), ("unlock", MQS[1])]
    assert store.log == [
        ("persist", MQS[0], False),
        ("remove", MQS[0], None),
        ("update", MQS[1], 42),  # after the owner's drop: a finishing handler cannot commit over it
        ("persist", MQS[1], True),  # a replaced offset is persisted synchronously
        ("remove", MQS[1], None),
    ]
    assert table.pqs == {}


async def test_an_orderly_owner_persists_synchronously() -> None:
    table, store, _ = _table(orderly=True)
    table.pqs[MQS[0]] = ProcessQueue(MQS[0])
    await table.drop(MQS[0])
    assert ("persist", MQS[0], True) in store.log


async def test_stop_pulling_cancels_the_loops_and_keeps_the_queues() -> None:
    table, _, _ = _table()
    pq = table.pqs[MQS[0]] = ProcessQueue(MQS[0])
    with anyio.CancelScope() as scope:
        pq.scope = scope
        table.stop_pulling()
        await anyio.sleep_forever()
    assert scope.cancelled_caught and table.pqs == {MQS[0]: pq} and not pq.dropped
    table.drop_all()
    assert pq.dropped


async def test_a_restart_replaces_the_queue_and_the_old_ones_late_results_commit_nowhere() -> None:
    """A seek: the new process queue is owned at once at the new offset, in a fresh offset cell; the
    old one is dropped (its pull loop cancelled first) and what its handlers still commit goes to
    its own, forgotten cell; the broker lock is not released."""
    table, store, owner = _table()
    old = table.make_queue(MQS[0])
    old.next_offset = 10
    table.start(old)
    old.offset.set(10)
    with anyio.CancelScope() as scope:
        old.scope = scope
        new = await table.restart(MQS[0], 3)
    assert scope.cancel_called and old.dropped and not new.dropped
    assert table.pqs == {MQS[0]: new} and new.next_offset == 3
    assert owner.log == [("drop", MQS[0])]  # no unlock: the queue stays this member's
    old.offset.advance(20)  # a handler of the old queue finishing late
    assert store.read_memory(MQS[0]) == 3 and new.offset is not old.offset


async def test_manual_commit_drops_a_queue_without_committing_or_keeping_its_offset() -> None:
    table, store, owner = _table(ConsumerConfig(group="g", auto_commit=False))
    for mq in MQS[:2]:
        table.pqs[mq] = ProcessQueue(mq)
        store.update(mq, 7, increase_only=False)
    await table.drop(MQS[0])
    await table.drop(MQS[1], offset=42)  # a correction (illegal offset, admin reset) still goes out
    assert [e for e in store.log if e[0] == "persist"] == [("persist", MQS[1], True)]
    assert store.read_memory(MQS[0]) == -1 and owner.log[0] == ("drop", MQS[0])
