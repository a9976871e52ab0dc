"""Offset stores hand out one cell per queue: what the consume path writes through ``pq.offset`` is
what the store reads, persists and forgets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rmq_async.consumer.offset_store import (
    UNPERSISTED_TTL,
    LocalFileOffsetStore,
    OffsetCell,
    RemoteOffsetStore,
    _MemoryTable,
)
from rmq_async.protocol.mq import MessageQueue

MQ = MessageQueue("T", "b", 0)


def test_a_cell_moves_forward_or_is_set_never_below_zero() -> None:
    cell = OffsetCell()
    cell.advance(-1)
    assert cell.value == -1
    cell.advance(5)
    cell.advance(3)
    assert cell.value == 5
    cell.set(2)
    cell.set(-1)
    assert cell.value == 2


def test_the_store_and_the_cell_are_one_offset() -> None:
    store = _MemoryTable()
    cell = store.cell(MQ)
    assert store.cell(MQ) is cell and store.read_memory(MQ) == -1 and store.snapshot() == {}
    cell.advance(7)  # the consume path
    assert store.read_memory(MQ) == 7 and store.snapshot() == {MQ: 7}
    store.update(MQ, 4, increase_only=True)
    assert cell.value == 7
    store.update(MQ, 4, increase_only=False)  # a reset
    assert cell.value == 4
    store.remove(MQ)
    cell.advance(9)  # a late write to a forgotten queue's cell stays out of the store
    assert store.read_memory(MQ) == -1 and store.cell(MQ) is not cell


async def test_a_local_file_store_persists_and_loads_the_cells(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path, "127.0.0.1@c", "g")
    store.cell(MQ).advance(11)
    store.cell(MessageQueue("T", "b", 1))  # no offset yet: not written
    await store.persist_all([MQ])
    again = LocalFileOffsetStore(tmp_path, "127.0.0.1@c", "g")
    await again.load()
    assert again.snapshot() == {MQ: 11} and again.cell(MQ).value == 11
    assert await again.read_store(MessageQueue("T", "b", 1)) is None


class _Broker(RemoteOffsetStore):
    """A remote store whose broker answers ``broker`` to every offset query (no network)."""

    def __init__(self, broker: int | None) -> None:
        self.table = {}
        self._persisted = {}
        self._unpersisted = {}
        self.broker = broker

    async def query_store(self, mq: MessageQueue) -> int | None:
        return self.broker


async def test_an_unpersisted_offset_of_a_dropped_queue_is_where_it_resumes() -> None:
    store = _Broker(broker=3)
    store.cell(MQ).advance(10)  # consumed up to 10; the persist at the drop failed
    store.remove(MQ)
    assert await store.read_store(MQ) == 10 and store.read_memory(MQ) == 10
    store.remove(MQ)  # the broker still has 3: 10 is kept again
    store.broker = 12  # someone else went further meanwhile: the larger wins
    assert await store.read_store(MQ) == 12
    store.broker = None  # the broker has none: ours
    store.cell(MQ).advance(14)
    store.remove(MQ)
    assert await store.read_store(MQ) == 14


async def test_a_persisted_or_expired_offset_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _Broker(broker=3)
    assert await store.read_store(MQ) == 3
    store.remove(MQ)  # the broker has what we have: nothing kept
    assert await store.read_store(MQ) == 3
    store.cell(MQ).advance(8)
    store.remove(MQ)
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + UNPERSISTED_TTL + 1)
    assert await store.read_store(MQ) == 3  # too old: the broker's
