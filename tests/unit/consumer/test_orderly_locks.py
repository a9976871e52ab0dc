"""LockKeeper against a stub broker that records LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) in the
order the broker would apply them: a queue dropped while a lock request for it is in flight must not
stay locked for this member on the broker."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import anyio
from support.consumer_context import make_context

from rmq_async.consumer.orderly_locks import LockKeeper
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.mq import MessageQueue

MQS = [MessageQueue("T", "b", i) for i in range(3)]


class _Broker:
    """Applies 41 and 42 to a lock table in arrival order; a 41 answers once ``gate`` is set."""

    def __init__(self) -> None:
        self.holder: dict[MessageQueue, str] = {}
        self.gate: anyio.Event | None = None
        self.in_flight = anyio.Event()
        self.log: list[tuple[str, list[MessageQueue]]] = []

    async def lock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: list[MessageQueue], timeout: float
    ) -> set[MessageQueue]:
        self.in_flight.set()
        if self.gate is not None:
            await self.gate.wait()  # the request is on its way: the broker applies it later
        self.log.append(("lock", list(mqs)))
        granted = set()
        for mq in mqs:
            if self.holder.setdefault(mq, client_id) == client_id:
                granted.add(mq)
        return granted

    async def unlock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: list[MessageQueue], timeout: float, *, oneway: bool
    ) -> None:
        self.log.append(("unlock", list(mqs)))
        for mq in mqs:
            if self.holder.get(mq) == client_id:
                del self.holder[mq]


class _Owned:
    """The queue table's side the keeper reads: the owned process queues."""

    def __init__(self) -> None:
        self.pqs: dict[MessageQueue, ProcessQueue] = {}


def _keeper(broker: _Broker) -> tuple[_Owned, LockKeeper]:
    c = _Owned()
    ctx = make_context(api=broker, orderly=True, client_id="cid")
    return c, LockKeeper(ctx, c.pqs, on_locked=lambda pq: None, on_lost=lambda pq: None)


async def _drop_while_locking(broker: _Broker, c: _Owned, pq: ProcessQueue, lock: Awaitable[Any]) -> object:
    """Run ``lock`` (a coroutine), and while its request is in flight drop ``pq`` and unlock it, as a
    rebalance does (the oneway 42 overtakes the 41)."""
    broker.gate = anyio.Event()
    result: list[object] = []

    async def run() -> None:
        result.append(await lock)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await broker.in_flight.wait()
        del c.pqs[pq.mq]
        pq.drop()
        await broker.unlock_batch_mq("a", "g", "cid", [pq.mq], 3.0, oneway=True)
        broker.gate.set()
    return result[0] if result else None


async def test_renewal_in_flight_when_a_queue_is_dropped_does_not_leave_it_locked() -> None:
    broker = _Broker()
    c, keeper = _keeper(broker)
    pqs = [ProcessQueue(mq) for mq in MQS]
    for pq in pqs:
        c.pqs[pq.mq] = pq
        assert await keeper.lock(pq)
    broker.log.clear()
    await _drop_while_locking(broker, c, pqs[1], keeper.lock_all(list(c.pqs.values())))
    assert broker.log[0] == ("unlock", [MQS[1]]) and broker.log[1] == ("lock", MQS)
    assert MQS[1] not in broker.holder, f"the broker keeps {MQS[1]} locked for a member that dropped it"
    assert broker.holder == {MQS[0]: "cid", MQS[2]: "cid"}
    assert pqs[0].locked and pqs[2].locked


async def test_a_first_lock_in_flight_when_the_queue_is_dropped_is_released_and_refused() -> None:
    broker = _Broker()
    c, keeper = _keeper(broker)
    pq = ProcessQueue(MQS[0])
    c.pqs[pq.mq] = pq
    granted = await _drop_while_locking(broker, c, pq, keeper.lock(pq))
    assert granted is False and not pq.locked
    assert MQS[0] not in broker.holder


async def test_a_queue_owned_again_keeps_the_lock_its_new_process_queue_took() -> None:
    broker = _Broker()
    c, keeper = _keeper(broker)
    old = ProcessQueue(MQS[0])
    c.pqs[old.mq] = old
    assert await keeper.lock(old)
    old.drop()
    new = c.pqs[old.mq] = ProcessQueue(MQS[0])  # dropped and assigned again (a flapping rebalance)
    assert await keeper.lock(new)
    await keeper._release_stale([old])
    assert broker.holder == {MQS[0]: "cid"} and ("unlock", [MQS[0]]) not in broker.log
