"""One lifecycle: a Producer and a LitePullConsumer started in one task and stopped in another, as an
ASGI app's startup and shutdown hooks do (each runs in a task of its own). Before, both entered their
task groups by hand in start() and left them in stop(): ``RuntimeError: Attempted to exit cancel scope
in a different task``. The push consumer already ran a supervisor task; all three behave alike now."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from rmq_async import LitePullConsumer, Message, Producer, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster


async def _in_another_task(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    await asyncio.get_running_loop().create_task(fn())


async def test_producer_started_in_one_task_and_stopped_in_another(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    p = Producer(group, namesrv_addr=cluster.namesrv_addr)
    await _in_another_task(p.start)  # the startup hook
    result = await p.send(Message(topic, b"x"))  # a request handler, in yet another task
    assert result.queue_offset >= 0
    await _in_another_task(p.stop)  # the shutdown hook
    with pytest.raises(Exception, match="not started"):
        await p.send(Message(topic, b"y"))
    await p.start()  # and again, in this task
    await p.send(Message(topic, b"z"))
    await p.stop()
    await p.stop()  # twice: nothing to do


async def test_lite_pull_consumer_started_in_one_task_and_stopped_in_another(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    async with Producer("lc_p", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(5):
            await p.send(Message(topic, b"x", keys=f"k-{i}"))
    c = LitePullConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    await _in_another_task(c.start)
    await c.subscribe(topic)
    got: list[str] = []
    with anyio.fail_after(20):
        while len(got) < 5:
            got += [m.keys or "" for m in await c.poll(1.0)]
    await _in_another_task(c.stop)
    assert sorted(got) == [f"k-{i}" for i in range(5)]


async def test_push_consumer_started_in_one_task_and_stopped_in_another(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)

    async def handler(msgs: object, ctx: object) -> None:
        return None

    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=handler, subscriptions={topic: "*"}, timing=timing
    )
    await _in_another_task(c.start)
    await _in_another_task(c.stop)
