"""Consumer processes killed with SIGKILL and restarted, repeatedly, three members, concurrent mode.

Strategy: three ``child_consumer.py`` processes (started by exec) consume one topic; the parent reads
their ``SEEN`` lines into the ledger as they come. Every round one member (in turn) is killed with
SIGKILL once the group has made progress, and a new process takes its place. Whatever a killed member
had consumed but not committed comes again (duplicates); nothing may be lost.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import anyio
import pytest

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster

from .scenario import SCALE, Ledger, n_msgs, produce

CHILD = Path(__file__).with_name("child_consumer.py")


class Member:
    def __init__(self, proc: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> None:
        self.proc, self.reader = proc, reader


async def start_member(namesrv: str, group: str, topic: str, name: str, ledger: Ledger) -> Member:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        namesrv,
        group,
        topic,
        name,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready = asyncio.Event()

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            text = line.decode().strip()
            if text.startswith("SEEN "):
                ledger.saw(text[5:])
            elif text == "READY":
                ready.set()

    reader = asyncio.create_task(read())
    with anyio.fail_after(30):
        await ready.wait()
    return Member(proc, reader)


async def stop_member(m: Member, *, kill: bool) -> None:
    if kill:
        m.proc.send_signal(signal.SIGKILL)
    else:
        assert m.proc.stdin is not None
        m.proc.stdin.close()
    with anyio.fail_after(30):
        await m.proc.wait()
        await m.reader


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
async def test_consumers_killed_and_restarted(names: tuple[str, str], ledger: Ledger) -> None:
    topic, group = names
    timing = Timing.fast()
    n = n_msgs(1500)
    rounds = 3 * SCALE
    async with EmbeddedCluster(brokers=1, queues=6, timing=timing) as cluster:
        await cluster.create_topic(topic, 6)
        await produce(cluster.namesrv_addr, topic, n, ledger)
        ns = cluster.namesrv_addr
        members = [await start_member(ns, group, topic, f"m{i}", ledger) for i in range(3)]
        try:
            for r in range(rounds):
                await ledger.wait_count(min(n - 1, (r + 1) * n // (rounds + 2)), 60)
                victim = r % 3
                await stop_member(members[victim], kill=True)
                members[victim] = await start_member(ns, group, topic, f"m{victim}r{r}", ledger)
            ledger.mark_fault_end()
            await ledger.wait_all(60)
        finally:
            for m in members:
                if m.proc.returncode is None:
                    await stop_member(m, kill=False)
    ledger.record(kills=rounds, members=3)
