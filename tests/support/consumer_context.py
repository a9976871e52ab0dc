"""A real :class:`~rmq_async.consumer.context.ConsumerContext` for tests that drive one part of the
consumer on its own (a consume service, the delivery stream, the lock keeper), with the client and
the inner producer replaced by small stubs of the calls those parts make: locks granted (or decided
by a test's broker), send-backs recorded, an offset table in memory."""

from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import Any, cast

import anyio

from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig, ConsumerConfig, Timing
from rmq_async.consumer.context import ConsumerContext, Subscriptions
from rmq_async.consumer.offset_store import OffsetCell, OffsetStore, _MemoryTable
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.producer.producer import Producer
from rmq_async.protocol.message import Message
from rmq_async.protocol.mq import MessageQueue

__all__ = [
    "MemoryStore",
    "RecordingStore",
    "StubApi",
    "StubClient",
    "StubProducer",
    "make_context",
    "owned",
]


def owned(ctx: ConsumerContext, pq: ProcessQueue) -> ProcessQueue:
    """``pq`` with its committed offset in the context's offset store, as the queue table starts a
    queue (``QueueTable.start``)."""
    pq.offset = ctx.offset_store.cell(pq.mq)
    return pq


class MemoryStore(_MemoryTable):
    """An offset store that keeps everything in memory (nothing to load or persist)."""

    async def load(self) -> None:
        return None

    async def read_store(self, mq: MessageQueue) -> int | None:
        off = self.read_memory(mq)
        return off if off >= 0 else None

    async def query_store(self, mq: MessageQueue) -> int | None:
        return await self.read_store(mq)

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        return None

    async def persist_all(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        return None


class RecordingCell(OffsetCell):
    """A committed offset that tells its store about every write."""

    __slots__ = ("_store", "_value")

    def __init__(self, store: RecordingStore) -> None:  # no super().__init__: that would be a write
        self._store = store
        self._value = -1

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, offset: int) -> None:
        self._store.record(offset)
        self._value = offset


class RecordingStore(MemoryStore):
    """The in-memory offset table; records every commit with how many handler calls preceded it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls_before: Sized = []  # set by the test: the handler's call list, by reference
        self.commits: list[tuple[int, int]] = []  # (offset, handler calls made before it)
        self.committed = anyio.Event()

    def cell(self, mq: MessageQueue) -> OffsetCell:
        cell = self.table.get(mq)
        if cell is None:
            cell = self.table[mq] = RecordingCell(self)
        return cell

    def record(self, offset: int) -> None:
        self.commits.append((offset, len(self.calls_before)))
        self.committed.set()


class StubApi:
    """The RPCs the consume path makes: every lock is granted, send-backs are recorded (and fail
    while ``send_back_ok`` is False)."""

    def __init__(self) -> None:
        self.sent_back: list[int] = []  # queue offsets of the messages sent back
        self.sent_back_levels: list[int] = []  # their delay levels
        self.send_back_ok = True

    async def lock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: list[MessageQueue], timeout: float
    ) -> set[MessageQueue]:
        return set(mqs)  # this member holds every lock it asks for

    async def unlock_batch_mq(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def consumer_send_msg_back(self, addr: str, header: Any, timeout: float) -> None:
        self.sent_back.append(int(header.offset))
        self.sent_back_levels.append(int(header.delay_level))
        if not self.send_back_ok:
            from rmq_async.errors import BrokerError

            raise BrokerError(1, "send-back refused by the test")


class StubClient:
    def __init__(self, api: Any, timing: Timing, client_id: str) -> None:
        self.client_id = client_id
        self.api = api
        self.timing = timing

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str:
        return "127.0.0.1:10911"


class StubProducer:
    """The inner producer: records sends, fails them while ``ok`` is False."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.ok = True

    async def send(self, msg: Message) -> None:
        if not self.ok:
            from rmq_async.errors import ClientError

            raise ClientError("send refused by the test")
        self.sent.append(msg)


def make_context(
    timing: Timing | None = None,
    *,
    store: OffsetStore | None = None,
    api: Any = None,
    producer: StubProducer | None = None,
    orderly: bool = False,
    config: ConsumerConfig | None = None,
    client_id: str = "127.0.0.1@test",
) -> ConsumerContext:
    """A started context of group ``g`` (clustering), its client and inner producer stubs."""
    timing = timing or Timing()
    config = config or ConsumerConfig(group="g")
    ctx = ConsumerContext(
        group="g",
        config=config,
        client_config=ClientConfig(namesrv_addr="127.0.0.1:9876", timing=timing),
        subscriptions=Subscriptions("%RETRY%g"),
        orderly=orderly,
    )
    # the test's send-back offsets: the message's commit-log offset is its queue offset here
    client = StubClient(api if api is not None else StubApi(), timing, client_id)
    ctx.attach(
        cast(ClientInstance, client),
        store if store is not None else MemoryStore(),
        cast(Producer, producer if producer is not None else StubProducer()),
    )
    return ctx
