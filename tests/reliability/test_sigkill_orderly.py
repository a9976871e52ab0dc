"""Orderly consumer processes killed with SIGKILL and restarted, repeatedly, three members.

Strategy: three ``child_consumer.py ... orderly`` processes (started by exec, ``Timing.fast()``: broker
lock expiry 3 s) consume one topic of 6 queues; messages are sent with a queue selector by key
(``select_by_key_hash`` on an order id), and each key carries the send index (``o<order>-<index>``).
Every round the parent waits until the victim member has just renewed its broker locks (the members
reach the broker through a frame proxy, which sets an event when a LOCK_BATCH_MQ answer gives the
victim a queue: no polling, nothing patched), starts sending a chunk, and as soon as the
victim consumes some of it (mid-stream, its latest offsets not yet persisted) notes which queues it
holds and kills it with SIGKILL; then it sends one more message per order id (so every queue, the dead
member's included, has work) and starts a replacement under a new instance name (a new client id: it
cannot reuse the dead member's locks).
The dead member's locks outlive it: nobody may consume its queues until they expire on the broker.

Figures (README columns):

* *order violations per queue*: per queue id, the number of messages that some member process
  consumed with a send index lower than the previous message that same process consumed from that
  queue (handler calls taken in the order the process made them; only completed calls are printed).
  Counting within one process is what leaves out the redelivery at a take-over: the new holder starts
  at the broker's committed offset, below what the dead member had consumed but not yet committed,
  and those messages come again (*duplicates*, and ``replayed_at_takeover`` in the notes); within
  the new holder they are still in increasing order. A process that loses a queue to a rebalance
  persists its offset before unlocking, so if it gets the queue back it resumes above where it
  stopped: any decrease inside one process is a real violation. Must be 0 for every queue.
* *hand-over*: per kill, from the SIGKILL to the start of the first handler call by another member
  on a queue the dead member held. The kill follows a lock renewal within milliseconds, so this must
  be at least the broker lock expiry (minus a small margin): the locks outlived the dead member.
  Also asserted: no two members ran handler calls on one queue at overlapping times.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from support.frame_proxy import FrameProxy

from rmq_async import Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.bodies import LockBatchRequestBody, LockBatchResponseBody
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand

from .scenario import SCALE, Ledger, n_msgs

# slow (a kill-and-restart scenario of 7-14 s): the default run stays within its time budget;
# .ci/run's `-m slow` step runs it
pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("child_consumer.py")
QUEUES = 6
ORDERS = 24  # order ids; the selector maps them onto the queues
MARGIN = 0.25  # s: the kill lands within milliseconds of the renewal that set the lock's time


@dataclass(slots=True)
class Call:
    """One completed handler call of one member process on one queue."""

    member: str
    qid: int
    start: float
    end: float
    indexes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Member:
    name: str
    proc: asyncio.subprocess.Process
    reader: asyncio.Task[None]


class OrderlyRun:
    """What the members printed, as handler calls; sent indexes per queue."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.calls: dict[tuple[str, int], Call] = {}  # (member, call no) -> call, in print order
        self.sent_per_queue: dict[int, list[int]] = defaultdict(list)

    def line(self, member: str, text: str) -> None:
        _, msg_id, qid, keys, no, start, end = text.split()
        call = self.calls.get((member, int(no)))
        if call is None:
            call = self.calls[(member, int(no))] = Call(member, int(qid), float(start), float(end))
        call.indexes.append(int(keys.rsplit("-", 1)[1]))
        self.ledger.saw(msg_id)

    def first_other_call(self, qids: set[int], victim: str, after: float) -> float | None:
        starts = [
            c.start for c in self.calls.values() if c.qid in qids and c.member != victim and c.start > after
        ]
        return min(starts, default=None)

    def consumed_by(self, member: str, *, after: float) -> Callable[[], bool]:
        """A predicate: ``member`` started a handler call after ``after``."""
        return lambda: any(c.member == member and c.start > after for c in self.calls.values())

    def taken_over(self, qids: set[int], victim: str, *, after: float) -> Callable[[], bool]:
        """A predicate: another member than ``victim`` consumed one of ``qids`` after ``after``."""
        return lambda: self.first_other_call(qids, victim, after) is not None

    def order_violations(self) -> dict[int, int]:
        """Per queue id: messages with a lower send index than the previous one of the same process."""
        out = dict.fromkeys(range(QUEUES), 0)
        last: dict[tuple[str, int], int] = {}
        for c in self.calls.values():
            for i in c.indexes:
                prev = last.get((c.member, c.qid))
                if prev is not None and i < prev:
                    out[c.qid] += 1
                last[(c.member, c.qid)] = i
        return out

    def overlaps(self) -> int:
        """Handler calls of different members on one queue that ran at overlapping times."""
        n = 0
        by_queue: dict[int, list[Call]] = defaultdict(list)
        for c in self.calls.values():
            by_queue[c.qid].append(c)
        for calls in by_queue.values():
            calls.sort(key=lambda c: c.start)
            for a, b in itertools.pairwise(calls):
                n += a.member != b.member and b.start < a.end
        return n

    def replayed(self, victim: str, qids: set[int], after: float) -> int:
        """Messages of ``qids`` the victim consumed that another member consumed again after ``after``."""
        mine = {i for c in self.calls.values() if c.member == victim and c.qid in qids for i in c.indexes}
        again = {
            i
            for c in self.calls.values()
            if c.member != victim and c.qid in qids and c.start > after
            for i in c.indexes
        }
        return len(mine & again)


async def start_member(ns: str, group: str, topic: str, name: str, run: OrderlyRun) -> Member:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        ns,
        group,
        topic,
        name,
        "orderly",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    ready = asyncio.Event()

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            text = raw.decode().strip()
            if text.startswith("OSEEN "):
                run.line(name, text)
            elif text == "READY":
                ready.set()

    reader = asyncio.create_task(read())
    with anyio.fail_after(30):
        await ready.wait()
    return Member(name, proc, reader)


async def stop_member(m: Member, *, kill: bool) -> None:
    if kill:
        m.proc.send_signal(signal.SIGKILL)
    else:
        assert m.proc.stdin is not None
        m.proc.stdin.close()
    with anyio.fail_after(30):
        await m.proc.wait()
        await m.reader


def lock_renewals(waiters: dict[str, anyio.Event]) -> Callable[[RemotingCommand, RemotingCommand], None]:
    """A frame proxy's ``on_answer``: wakes the waiter of an instance name (popped from ``waiters``)
    when a LOCK_BATCH_MQ of that client was answered with a queue of a topic (a retry topic's queue
    alone does not count)."""

    def on_answer(req: RemotingCommand, resp: RemotingCommand) -> None:
        if req.code != RequestCode.LOCK_BATCH_MQ or resp.code != 0 or not resp.body:
            return
        got = LockBatchResponseBody.decode(resp.body).lock_ok_mq_set
        if any(not mq.topic.startswith("%RETRY%") for mq in got):
            client_id = LockBatchRequestBody.decode(req.body).client_id
            if (ev := waiters.pop(client_id.rsplit("@", 1)[-1], None)) is not None:
                ev.set()

    return on_answer


async def test_orderly_consumers_killed_and_restarted(names: tuple[str, str], ledger: Ledger) -> None:
    topic, group = names
    timing = Timing.fast()
    expiry = timing.broker_lock_expiry
    chunk = n_msgs(300)
    rounds = 3 * SCALE
    run = OrderlyRun(ledger)
    handovers: list[float] = []
    replayed = 0
    sent = itertools.count()
    waiters: dict[str, anyio.Event] = {}
    async with (
        EmbeddedCluster(brokers=1, queues=QUEUES, timing=timing) as cluster,
        FrameProxy(cluster.brokers[0].addr, lambda cmd: cmd, on_answer=lock_renewals(waiters)) as wire,
    ):
        cluster.advertise(0, wire.addr)  # every client reaches the broker through the proxy
        await cluster.stop_broker(0)
        await cluster.start_broker(0)
        await cluster.create_topic(topic, QUEUES)
        ns = cluster.namesrv_addr
        locks = cluster.brokers[0].locks  # read (the lock table at the kill), never patched
        async with Producer("rel_orderly_producer", namesrv_addr=ns) as producer:

            async def send(n: int) -> None:
                for _ in range(n):
                    i = next(sent)
                    order = i % ORDERS
                    msg = Message(topic, f"body-{i}".encode(), keys=f"o{order}-{i}")
                    r = await producer.send(msg, selector=select_by_key_hash, arg=order)
                    ledger.sent.add(r.msg_id)
                    run.sent_per_queue[r.message_queue.queue_id].append(i)

            await send(chunk)
            members = list(
                await asyncio.gather(*(start_member(ns, group, topic, f"o{k}", run) for k in range(3)))
            )
            try:
                for r in range(rounds):
                    # progress: everything but (at most) half of the last chunk consumed
                    await ledger.wait_count(len(ledger.sent) - chunk // 2, 60)
                    victim = members[r % 3]
                    renewed = waiters[victim.name] = anyio.Event()
                    with anyio.fail_after(3 * timing.lock_renew_interval + 10):
                        await renewed.wait()
                    # right after the renewal, send a chunk and kill the victim once it consumes some of
                    # it: mid-stream, with consumed offsets not yet persisted (every 0.25 s)
                    renewed_at = time.monotonic()
                    sender = asyncio.create_task(send(chunk))
                    await ledger.wait_for(
                        run.consumed_by(victim.name, after=renewed_at),
                        10,
                        f"{victim.name} consumes after its lock renewal",
                    )
                    # no await from the snapshot of its locks to the kill
                    held = {
                        mq[2]: e.last_update
                        for mq, e in locks.table.get(group, {}).items()
                        if mq[0] == topic and e.client_id.rsplit("@", 1)[-1] == victim.name
                    }
                    killed_at = time.monotonic()
                    victim.proc.send_signal(signal.SIGKILL)
                    assert held, f"{victim.name} held no queue of {topic} at its renewal: {locks.table}"
                    assert killed_at - max(held.values()) < MARGIN
                    await stop_member(victim, kill=True)
                    await sender
                    await send(ORDERS)  # one more message per order: every queue has work after the kill
                    members[r % 3] = await start_member(ns, group, topic, f"o{r % 3}r{r}", run)
                    taken = set(held)
                    await ledger.wait_for(
                        run.taken_over(taken, victim.name, after=killed_at),
                        expiry + 20,
                        f"another member consumes {sorted(held)} after {victim.name} was killed",
                    )
                    first = run.first_other_call(taken, victim.name, killed_at)
                    assert first is not None
                    handovers.append(first - killed_at)
                    replayed += run.replayed(victim.name, taken, killed_at)
                ledger.mark_fault_end()
                await ledger.wait_all(60)
            finally:
                for m in members:
                    if m.proc.returncode is None:
                        await stop_member(m, kill=False)
    violations = run.order_violations()
    overlaps = run.overlaps()
    ledger.record(
        order_violations="/".join(str(violations[q]) for q in range(QUEUES)),
        handover_s=f"{min(handovers):.2f}-{max(handovers):.2f}",
        kills=rounds,
        members=3,
        broker_lock_expiry_s=expiry,
        handovers_s="/".join(f"{h:.2f}" for h in handovers),
        replayed_at_takeover=replayed,
        overlapping_calls=overlaps,
    )
    assert sum(violations.values()) == 0, f"order violations per queue: {violations}"
    assert overlaps == 0, f"{overlaps} handler calls of different members overlapped on a queue"
    assert min(handovers) >= expiry - MARGIN, f"hand-over before the dead member's locks expired: {handovers}"
    assert len(run.sent_per_queue) == QUEUES  # the selector spread the orders over every queue


def test_order_violation_count_leaves_out_takeover_redelivery() -> None:
    """The counting itself: a rewind inside one process counts; a new holder's replay does not."""
    run = OrderlyRun(Ledger("counting"))
    lines = [  # member, queue, call no, index, start
        ("a", 0, 0, 1, 1.0),
        ("a", 0, 1, 2, 2.0),
        ("a", 0, 2, 3, 3.0),  # a consumes 1, 2, 3; dies
        ("b", 0, 0, 2, 7.0),
        ("b", 0, 1, 3, 8.0),
        ("b", 0, 2, 4, 9.0),  # b takes over at 2: a replay
        ("c", 1, 0, 5, 1.0),
        ("c", 1, 1, 7, 2.0),
        ("c", 1, 2, 6, 3.0),  # c goes back: one violation
    ]
    for member, qid, no, index, start in lines:
        run.line(member, f"OSEEN id-{member}{no}{index} {qid} o0-{index} {no} {start} {start + 0.5}")
    assert run.order_violations() == {0: 0, 1: 1, 2: 0, 3: 0, 4: 0, 5: 0}
    assert run.replayed("a", {0}, 5.0) == 2
    assert run.first_other_call({0}, "a", 5.0) == 7.0
    assert run.overlaps() == 0
    run.line("d", "OSEEN id-x 1 o0-8 0 3.2 3.4")  # d on queue 1 while c's call 2 ran (3.0-3.5)
    assert run.overlaps() == 1
