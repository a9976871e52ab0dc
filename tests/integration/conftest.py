"""Integration fixtures: an embedded cluster on 127.0.0.1 on the fast timing profile."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from rmq_async import EmbeddedCluster, Timing

_ids = itertools.count()


@pytest.fixture
def timing() -> Timing:
    return Timing.fast()


@asynccontextmanager
async def in_own_task(cm: Any) -> AsyncIterator[Any]:
    """Enter and exit ``cm`` in one dedicated task: pytest-asyncio runs a fixture's setup and teardown
    in different tasks, and anyio cancel scopes must be left in the task that entered them."""
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def runner() -> None:
        try:
            async with cm as value:
                ready.set_result(value)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = asyncio.create_task(runner())
    try:
        yield await ready
    finally:
        stop.set()
        await task


@pytest.fixture
async def cluster(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with in_own_task(EmbeddedCluster(brokers=1, queues=4, timing=timing)) as c:
        yield c


@pytest.fixture
def names() -> tuple[str, str]:
    """A fresh (topic, group) pair per test."""
    n = next(_ids)
    return f"ItTopic{n}", f"it_group_{n}"
