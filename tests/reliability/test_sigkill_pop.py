"""POP consumer processes killed with SIGKILL and restarted, repeatedly, four members.

Strategy: four ``child_consumer.py ... pop`` processes (``client_rebalance=False``, ``Timing.fast()``:
invisible time 3 s) consume one 4-queue topic that the group pops (SET_MESSAGE_REQUEST_MODE, POP,
every member reads every queue) on an embedded 5.x broker; the parent reads their ``SEEN`` lines
into the ledger. Every round, once the group has made progress, one member (in turn) is killed with
SIGKILL mid-stream and a new process takes its place under a new instance name. What a killed member
had popped and not acked stays invisible until its invisible time ends; then the broker revives it
through the pop retry topic and another member pops it: nothing may be lost; the redeliveries are the
duplicates, and ``revived`` in the notes counts the messages the broker copied to the retry topic.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
from pathlib import Path

import anyio
import pytest

from rmq_async import Timing
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.pop import pop_state

from .scenario import SCALE, Ledger, n_msgs, produce

# slow (a kill-and-restart scenario of 7-14 s): the default run stays within its time budget;
# .ci/run's `-m slow` step runs it
pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("child_consumer.py")
MEMBERS = 4


class Member:
    def __init__(self, proc: asyncio.subprocess.Process, seen: list[asyncio.Event]) -> None:
        self.proc = proc
        self.reader: asyncio.Task[None] | None = None
        self.seen = seen  # [event]: set at the member's next SEEN line (replaced to re-arm)


async def start_member(namesrv: str, group: str, topic: str, name: str, ledger: Ledger) -> Member:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), namesrv, group, topic, name, "pop",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    ready = asyncio.Event()
    member = Member(proc, [asyncio.Event()])

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            text = line.decode().strip()
            if text.startswith("SEEN "):
                ledger.saw(text[5:])
                member.seen[0].set()
            elif text == "READY":
                ready.set()

    member.reader = asyncio.create_task(read())
    with anyio.fail_after(30):
        await ready.wait()
    return member


async def stop_member(m: Member, *, kill: bool) -> None:
    if kill:
        m.proc.send_signal(signal.SIGKILL)
    else:
        assert m.proc.stdin is not None
        m.proc.stdin.close()
    with anyio.fail_after(30):
        await m.proc.wait()
        if m.reader is not None:
            await m.reader


async def test_pop_consumers_killed_and_restarted(names: tuple[str, str], ledger: Ledger) -> None:
    topic, group = names
    timing = Timing.fast()
    n = n_msgs(1500)
    rounds = 3 * SCALE
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, flavour=5) as cluster:
        await cluster.create_topic(topic, 4)
        ns = cluster.namesrv_addr
        assert all(c == 0 for c, _ in (await set_consume_mode(topic, group, "POP", namesrv_addr=ns)).values())
        members = [await start_member(ns, group, topic, f"p{i}", ledger) for i in range(MEMBERS)]
        chunk = n // rounds
        try:
            for r in range(rounds):
                victim = r % MEMBERS
                members[victim].seen[0] = asyncio.Event()
                # a chunk per round; the victim dies at its first message of the chunk, with the rest
                # of its pop (up to 32 messages) popped and not acked
                count = chunk if r < rounds - 1 else n - chunk * r
                async with anyio.create_task_group() as tg:
                    tg.start_soon(functools.partial(produce, ns, topic, count, ledger, start=chunk * r))
                    with anyio.fail_after(30):
                        await members[victim].seen[0].wait()
                    await stop_member(members[victim], kill=True)
                members[victim] = await start_member(ns, group, topic, f"p{victim}r{r}", ledger)
            ledger.mark_fault_end()
            await ledger.wait_all(60)
        finally:
            for m in members:
                if m.proc.returncode is None:
                    await stop_member(m, kill=False)
        revived = pop_state(cluster.brokers[0].context).revived
    ledger.record(kills=rounds, members=MEMBERS, mode="POP", revived=revived)
    assert revived > 0  # the killed members' popped and unacked messages came back by revive
