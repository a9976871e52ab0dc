"""A handler that swallows cancellation (``except CancelledError: pass`` in a loop) cannot hold
``stop()``: after the shutdown grace the consumer gives up on it, says so, finishes its stop, and the
batch it held is not committed (at-least-once: another member gets it again). Embedded cluster."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from support.integration import Collector, consumer, produce

from rmq_async import MessageExt, Timing
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster

GRACE = 1.0


@pytest.fixture
def timing() -> Timing:
    return Timing.fast(shutdown_timeout=GRACE)


@pytest.fixture
async def cluster5(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=1, timing=timing, flavour=5) as c:
        yield c


class Stubborn:
    """A handler that swallows every cancellation until released (the test's way out)."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.released = False
        self.cancels = 0

    async def __call__(self, msgs: list[MessageExt], ctx: object) -> None:
        self.entered.set()
        while not self.released:
            try:
                await anyio.sleep(0.05)
            except asyncio.CancelledError:
                self.cancels += 1


@pytest.mark.parametrize("mode", ["concurrently", "orderly", "pop"])
async def test_a_handler_swallowing_cancellation_is_abandoned_after_the_grace(
    cluster5: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = names
    await cluster5.create_topic(topic, 1)
    kw: dict[str, object] = {}
    if mode == "orderly":
        kw["orderly"] = True
    if mode == "pop":
        answers = await set_consume_mode(topic, group, "POP", 0, namesrv_addr=cluster5.namesrv_addr)
        assert answers and all(code == 0 for code, _ in answers.values()), answers
        kw["client_rebalance"] = False
    await produce(cluster5.namesrv_addr, topic, 1)
    stubborn = Stubborn()
    c = consumer(cluster5, group, topic, stubborn, timing, **kw)
    try:
        await c.start()
        with anyio.fail_after(10):
            await stubborn.entered.wait()
        begun = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"), anyio.fail_after(GRACE + 8):
            await c.stop()
        took = time.monotonic() - begun
        assert took < GRACE + 5, took
        assert not c.stopped_cleanly
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(group in e and "swallowed" in e for e in errors), errors
        # the abandoned handler is no longer cancelled over and over (no busy loop)
        before = stubborn.cancels
        await anyio.sleep(0.3)
        assert stubborn.cancels - before <= 1
        # at-least-once: the message it held was not committed, another member of the group gets it
        col = Collector()
        async with consumer(cluster5, group, topic, col, timing, **kw):
            await col.wait_unique(1, timeout=15)
        assert list(col.seen) == ["k-0"]
    finally:
        stubborn.released = True
