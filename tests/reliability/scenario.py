"""Scenario helpers for the reliability suite: profile, the sent/seen ledger, producing, report rows.

Strategy: every scenario sends messages whose identity is the producer's UNIQ_KEY (``msg_id``), records
each handler invocation in a :class:`Ledger`, and ends with ``ledger.record(...)``: lost (sent, never
seen) must be 0, duplicates are counted, recovery time is measured from the end of the fault to the
last new message seen. ``conftest.py`` saves the rows at session end (``report.py`` renders README.md).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from rmq_async import (
    ClientConfig,
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    Timing,
)

__all__ = [
    "LONG",
    "PROFILE",
    "RESULTS",
    "SCALE",
    "Ledger",
    "consumer",
    "n_msgs",
    "produce",
]

PROFILE = os.environ.get("RMQ_RELIABILITY_PROFILE", "short")
LONG = PROFILE == "long"
SCALE = 5 if LONG else 1
README = Path(__file__).with_name("README.md")

RESULTS: list[dict[str, Any]] = []


def n_msgs(short: int) -> int:
    """Message count for this profile."""
    return short * SCALE


class Ledger:
    """Messages sent (by UNIQ_KEY) against what handlers saw; waits on events, never polls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: set[str] = set()
        self.seen: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self.fault_end: float | None = None
        self.last_new: float = 0.0
        self._changed = asyncio.Event()

    def saw(self, msg_id: str) -> None:
        if msg_id not in self.seen:
            self.last_new = time.monotonic()
        self.seen[msg_id] += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def handler(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        for m in msgs:
            self.saw(m.msg_id)
        return ConsumeResult.SUCCESS

    @property
    def lost(self) -> set[str]:
        return self.sent - set(self.seen)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for k, n in self.seen.items() if k in self.sent)

    @property
    def unique(self) -> int:
        return len(self.sent & set(self.seen))

    async def wait_all(self, timeout: float) -> None:
        """Until every sent message was seen (fails with what is missing)."""
        try:
            with anyio.fail_after(timeout):
                while self.lost:
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"{self.name}: {len(self.lost)} of {len(self.sent)} never consumed, e.g. "
                f"{sorted(self.lost)[:5]}"
            ) from None

    async def wait_count(self, n: int, timeout: float) -> None:
        with anyio.fail_after(timeout):
            while self.unique < n:
                await self._changed.wait()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Until ``predicate()`` holds, re-checked on every message seen (fails naming ``what``)."""
        try:
            with anyio.fail_after(timeout):
                while not predicate():
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"{self.name}: not within {timeout}s: {what}") from None

    def mark_fault_end(self) -> None:
        self.fault_end = time.monotonic()

    def record(self, *, order_violations: str = "", handover_s: str = "", **extra: Any) -> dict[str, Any]:
        """Add this scenario's row to the report; asserts nothing was lost.

        ``order_violations`` and ``handover_s`` fill the orderly scenarios' columns (preformatted)."""
        recovery = None
        if self.fault_end is not None:
            recovery = max(0.0, self.last_new - self.fault_end)
        row = {
            "scenario": self.name,
            "sent": len(self.sent),
            "consumed": sum(self.seen[k] for k in self.sent),
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "recovery_s": None if recovery is None else round(recovery, 2),
            "seconds": round(time.monotonic() - self.t0, 1),
            "notes": "; ".join(f"{k}={v}" for k, v in extra.items()),
            "order_violations": order_violations,
            "handover_s": handover_s,
        }
        RESULTS.append(row)
        assert not self.lost, f"{self.name}: lost {sorted(self.lost)[:5]}"
        return row


async def produce(
    namesrv: str,
    topic: str,
    n: int,
    ledger: Ledger,
    *,
    start: int = 0,
    timing: Timing | None = None,
    producer: Producer | None = None,
) -> None:
    """Send ``n`` keyed messages and add their UNIQ_KEYs to the ledger (only sends that succeeded)."""
    if producer is not None:
        for i in range(start, start + n):
            r = await producer.send(Message(topic, f"body-{i}".encode(), keys=f"k-{i}"))
            ledger.sent.add(r.msg_id)
        return
    cc = ClientConfig(namesrv_addr=namesrv, timing=timing or Timing.fast())
    async with Producer("rel_producer", client_config=cc) as p:
        await produce(namesrv, topic, n, ledger, start=start, producer=p)


def consumer(
    namesrv: str, group: str, topic: str, handler: Any, timing: Timing, **options: Any
) -> PushConsumer:
    """A push consumer from the first offset on the fast profile."""
    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return PushConsumer(
        group, namesrv_addr=namesrv, handler=handler, subscriptions={topic: "*"}, timing=timing, **options
    )
