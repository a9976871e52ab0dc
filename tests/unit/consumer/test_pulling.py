"""PullLoop on its own, against a stub client: the request a push and a lite pull consumer send (the
byte-level form is checked against Java captures in tests/embedded/test_client_conformance.py), the
pulled batch handed to the sink, the suggested broker kept on the process queue, tag re-filtering,
and what an illegal offset does for each."""

from __future__ import annotations

import copy
from typing import cast

import anyio
import pytest
from support.consumer_context import MemoryStore, make_context, owned

from rmq_async.client.api import PullResult, PullStatus
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ConsumerConfig, Timing
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.pulling import PullLoop, PullSettings
from rmq_async.consumer.queues import QueueTable
from rmq_async.protocol import headers as H
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt

MQ = MessageQueue("T", "b", 0)
ADDRS = {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}


class _Api:
    def __init__(self, results: list[PullResult]) -> None:
        self.results = results
        self.requests: list[tuple[str, H.PullMessageRequestHeader]] = []
        self.idle = anyio.Event()  # every result answered (or the loop ended)

    async def pull(
        self, addr: str, header: H.PullMessageRequestHeader, timeout: float, *, broker_name: str
    ) -> PullResult:
        self.requests.append((addr, copy.copy(header)))
        if not self.results:
            self.idle.set()
            await anyio.sleep_forever()
        return self.results.pop(0)


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api
        self.client_id = "a@1"
        self.broker_addrs = {"b": dict(ADDRS)}

    def broker_addr(self, broker_name: str, broker_id: int = 0) -> str | None:
        return self.broker_addrs[broker_name].get(broker_id) or self.broker_addrs[broker_name].get(0)

    async def update_route_quietly(self, topics: object) -> None:
        return None


class _Sink:
    """The pull loop's sink, and the queue table's owner of the queue."""

    gates_pulls = False
    sync_drop = False

    def __init__(self) -> None:
        self.batches: list[list[MessageExt]] = []

    async def before_pull(self, pq: ProcessQueue) -> bool:
        return True

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self.batches.append(msgs)

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        pq.drop()
        return True

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        return None


class _Store(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.updates: list[int] = []

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        self.updates.append(offset)
        super().update(mq, offset, increase_only=increase_only)


def _msgs(first: int, tags: list[str]) -> list[MessageExt]:
    return [MessageExt("T", b"x", properties={"TAGS": t}, queue_offset=first + k) for k, t in enumerate(tags)]


def _found(first: int, tags: list[str], suggest: int = 0) -> PullResult:
    return PullResult(PullStatus.FOUND, first + len(tags), 0, first + len(tags), suggest, _msgs(first, tags))


async def _run(
    settings: PullSettings, results: list[PullResult], expr: str | None = "*"
) -> tuple[ConsumerContext, _Api, _Sink, ProcessQueue, QueueTable]:
    config = ConsumerConfig(group="g", pull_batch_size=16)
    ctx = make_context(Timing.fast(), store=_Store(), config=config)
    api = _Api(results)
    ctx.attach(cast(ClientInstance, _Client(api)), ctx.offset_store)
    if expr is not None:
        ctx.subscriptions.put("T", expr)
    sink = _Sink()
    table = QueueTable(ctx, sink)
    loop = PullLoop(ctx, table, sink, settings)
    pq = owned(ctx, ProcessQueue(MQ))  # as table.start() makes it, without starting a loop
    pq.next_offset = 0
    table.pqs[MQ] = pq

    async def pull() -> None:
        try:
            await loop.run(pq)
        finally:
            api.idle.set()

    async with anyio.create_task_group() as tg:
        ctx.set_task_group(tg)
        tg.start_soon(pull)
        with anyio.fail_after(5):
            await api.idle.wait()
        tg.cancel_scope.cancel()
    return ctx, api, sink, pq, table


async def test_push_pulls_with_its_subscription_version_and_the_committed_offset() -> None:
    settings = PullSettings.for_push(ConsumerConfig(group="g", pull_batch_size=16), Timing.fast())
    ctx, api, sink, pq, _ = await _run(
        settings, [_found(0, ["A", "B", "A"], suggest=1), _found(3, ["B"], suggest=1)], "A"
    )
    (addr0, first), (addr1, second), *_ = api.requests
    sub = ctx.subscriptions.get("T")
    assert sub is not None
    assert first.sub_version == sub.sub_version and first.subscription is None and first.max_msg_nums == 16
    assert first.sys_flag == 0b0010  # suspend; no committed offset yet
    assert (addr0, addr1) == (ADDRS[0], ADDRS[1]) and pq.broker_id == 1  # the suggested node, kept
    assert second.queue_offset == 3
    assert [[m.queue_offset for m in b] for b in sink.batches] == [[0, 2]]  # re-filtered by tag
    assert pq.count == 2 and pq.next_offset == 4  # held in the process queue


async def test_lite_pull_request_and_its_buffer_as_the_only_holder() -> None:
    settings = PullSettings.for_lite_pull(10, Timing.fast())
    _, api, sink, pq, _ = await _run(settings, [_found(0, ["A", "B"])], expr=None)
    _, first = api.requests[0]
    assert first.sys_flag == 0b10110 and first.sub_version == 0 and first.subscription == "*"
    assert first.max_msg_nums == 10 and first.suspend_timeout_millis == int(settings.suspend_timeout * 1000)
    assert len(sink.batches) == 1 and pq.count == 0  # assign mode: no subscription, pulled with *


@pytest.mark.parametrize("lite", [False, True])
async def test_an_illegal_offset(lite: bool) -> None:
    moved = PullResult(PullStatus.OFFSET_ILLEGAL, 40, 40, 90, 0, [])
    config = ConsumerConfig(group="g")
    settings = (
        PullSettings.for_lite_pull(10, Timing.fast())
        if lite
        else PullSettings.for_push(config, Timing.fast())
    )
    ctx, api, _, pq, table = await _run(settings, [moved])
    store = ctx.offset_store
    assert isinstance(store, _Store)
    if lite:  # lite pull goes on from the offset the broker proposes
        assert api.requests[-1][1].queue_offset == 40 and pq.next_offset == 40 and not pq.dropped
    else:  # push: the queue is dropped with the corrected offset stored; a rebalance starts it again
        assert len(api.requests) == 1 and store.updates == [40] and pq.dropped and MQ not in table.pqs
