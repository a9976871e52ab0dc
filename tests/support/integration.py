"""Helpers for integration tests on the embedded cluster: produce keyed messages, collect what handlers
see, make push consumers, wait on conditions while the consumer is alive."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendResult,
    Timing,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals

ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The environment of a child process running this tree's rmq_async (no NAMESRV_ADDR)."""
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


async def produce(
    namesrv: str,
    topic: str,
    n: int,
    *,
    tags: str | Sequence[str | None] | None = None,
    start: int = 0,
    size: int = 16,
) -> list[SendResult]:
    async with Producer("it_producer", namesrv_addr=namesrv) as p:
        out = []
        for i in range(start, start + n):
            tag = tags if tags is None or isinstance(tags, str) else tags[i % len(tags)]
            body = f"body-{i}-".encode().ljust(size, b".")
            out.append(await p.send(Message(topic, body, tags=tag, keys=f"k-{i}")))
        return out


class Collector:
    """A handler recording every delivery by key; ``wait_unique(n)`` awaits n distinct keys."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.msgs: list[MessageExt] = []
        self._changed = anyio.Event()

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        for m in msgs:
            self.seen[m.keys or m.msg_id] += 1
            self.msgs.append(m)
        self._poke()
        return ConsumeResult.SUCCESS

    def _poke(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def unique(self) -> int:
        return len(self.seen)

    def plain(self) -> PlainCollector:
        """This collector's records, taken by a plain (not async) handler."""
        return PlainCollector(self)

    @property
    def duplicates(self) -> int:
        return sum(self.seen.values()) - len(self.seen)

    async def wait_until(self, pred: object, timeout: float = 20.0) -> None:
        assert callable(pred)
        with anyio.fail_after(timeout):
            while not pred():
                await self._changed.wait()

    async def wait_unique(self, n: int, timeout: float = 20.0) -> None:
        await self.wait_until(lambda: self.unique >= n, timeout)


def consumer(
    cluster: EmbeddedCluster, group: str, topic: str, handler: object, timing: Timing, **kw: Any
) -> PushConsumer:
    """A push consumer of ``topic`` (expression ``expr``, default ``*``) from the first offset."""
    kw.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,  # type: ignore[arg-type]
        subscriptions={topic: kw.pop("expr", "*")},
        timing=timing,
        **kw,
    )


async def alive_until(c: PushConsumer, cond: Callable[[], Awaitable[object]], timeout: float = 20.0) -> None:
    """Await ``cond()``; fail at once (with the escaped exception) if the consumer's task group dies."""
    sup = internals(c).ended
    assert sup is not None, "consumer not started"
    waiter = asyncio.ensure_future(cond())
    try:
        watched: set[asyncio.Future[Any]] = {waiter, sup}
        done, _ = await asyncio.wait(watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiter.done():
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
    if waiter in done:
        waiter.result()
        return
    if sup in done:
        exc = sup.exception() if not sup.cancelled() else None
        pytest.fail(f"the consumer's task group died (running={c.running}): {exc!r}")
    pytest.fail(f"condition not met within {timeout}s (consumer running={c.running})")


async def until_rebalanced(members: Sequence[PushConsumer], pred: Callable[[], bool]) -> None:
    """Await ``pred()``, a condition on the members' assignments: checked now and again after every
    rebalance any member completes (an assignment changes only then). Bound it with a timeout."""
    while True:
        async with anyio.create_task_group() as tg:

            async def rebalanced(m: PushConsumer) -> None:
                await m.wait_rebalanced()
                tg.cancel_scope.cancel()

            for m in members:
                tg.start_soon(rebalanced, m)
            # one turn of the loop: each waiter holds its member's current event before pred() is
            # read, so a rebalance that completes from here on wakes us
            await anyio.lowlevel.checkpoint()
            if pred():
                tg.cancel_scope.cancel()
                return


async def until(pred: Callable[[], bool], step: float = 0.01) -> None:
    while not pred():  # noqa: ASYNC110 (state of the consumer, no event to await)
        await anyio.sleep(step)


class PlainCollector:
    """A plain-function handler feeding a :class:`Collector` (``Collector.plain()``)."""

    def __init__(self, into: Collector) -> None:
        self.into = into

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        col = self.into
        for m in msgs:
            col.seen[m.keys or m.msg_id] += 1
            col.msgs.append(m)
        col._poke()
        return ConsumeResult.SUCCESS
