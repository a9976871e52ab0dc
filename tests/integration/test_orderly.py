"""Orderly consumption on the embedded cluster (fast timing): per-queue order with concurrency across
queues, exclusivity between members (joins, leaves, a stalled member), SUSPEND and the DLQ, unlock at
shutdown, broadcasting without locks, the delivery API, the CLI and the example."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import child_env

from rmq_async import Message, MessageExt, OrderlyContext, OrderlyResult, Producer, PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.codes import RequestCode

ROOT = Path(__file__).resolve().parents[2]

Interval = tuple[str, int, float, float, int]  # member, queue id, start, end, offset


async def send_ordered(namesrv: str, topic: str, n: int, orders: int, start: int = 0) -> dict[int, list[int]]:
    """Send messages ``start..start+n`` keyed ``o<order>-<i>`` with a queue selector by order id;
    return the send indexes per queue id, in send order."""
    per_queue: dict[int, list[int]] = defaultdict(list)
    async with Producer("it_orderly_producer", namesrv_addr=namesrv) as p:
        for i in range(start, start + n):
            order = i % orders
            msg = Message(topic, f"body-{i}".encode(), keys=f"o{order}-{i}")
            res = await p.send(msg, selector=select_by_key_hash, arg=order)
            per_queue[res.message_queue.queue_id].append(i)
    return per_queue


def index_of(m: MessageExt) -> int:
    return int((m.keys or "").rsplit("-", 1)[1])


class Recorder:
    """Records every handler call as an interval per member and queue, and what it consumed."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.intervals: list[Interval] = []
        self.consumed: dict[int, list[int]] = defaultdict(list)
        self.by_member: dict[str, int] = defaultdict(int)
        self.active: set[int] = set()
        self.max_parallel_queues = 0
        self._changed = anyio.Event()

    def handler(self, member: str) -> Any:
        async def handle(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            qid = ctx.mq.queue_id
            start = time.monotonic()
            self.active.add(qid)
            self.max_parallel_queues = max(self.max_parallel_queues, len(self.active))
            try:
                if self.hold:
                    await anyio.sleep(self.hold)
            finally:
                self.active.discard(qid)
            for m in msgs:
                self.consumed[qid].append(index_of(m))
                self.intervals.append((member, qid, start, time.monotonic(), m.queue_offset))
            self.by_member[member] += len(msgs)
            self._changed.set()
            self._changed = anyio.Event()
            return OrderlyResult.SUCCESS

        return handle

    def total(self) -> int:
        return sum(len(v) for v in self.consumed.values())

    async def wait_total(self, n: int, timeout: float = 20.0) -> None:
        with anyio.fail_after(timeout):
            while self.total() < n:
                await self._changed.wait()


def assert_no_overlap(intervals: list[Interval]) -> None:
    """Per queue, no interval of one member overlaps an interval of another."""
    by_queue: dict[int, list[Interval]] = defaultdict(list)
    for iv in intervals:
        by_queue[iv[1]].append(iv)
    for qid, ivs in by_queue.items():
        ivs.sort(key=lambda iv: iv[2])
        for a, b in itertools.pairwise(ivs):
            if a[0] != b[0]:
                assert b[2] >= a[3], (
                    f"queue {qid}: {b[0]} started at {b[2]:.4f} before {a[0]} ended at {a[3]:.4f}"
                )


def orderly_consumer(
    cluster: EmbeddedCluster, group: str, topic: str, handler: Any, timing: Timing, **kw: Any
) -> PushConsumer:
    kw.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    kw.setdefault("namesrv_addr", cluster.namesrv_addr)
    return PushConsumer(
        group,
        handler=handler,
        subscriptions={topic: "*"},
        timing=timing,
        orderly=True,
        **kw,
    )


@asynccontextmanager
async def running(*consumers: PushConsumer) -> AsyncIterator[None]:
    try:
        for c in consumers:
            await c.start()
        yield
    finally:
        for c in consumers:
            await c.stop()


async def test_per_queue_order_with_queues_in_parallel(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await send_ordered(cluster.namesrv_addr, topic, 80, orders=8)
    assert len(sent) == 4
    rec = Recorder(hold=0.003)
    async with running(orderly_consumer(cluster, group, topic, rec.handler("a"), timing)):
        await rec.wait_total(80)
    assert dict(rec.consumed) == dict(sent)  # exactly the send order, per queue, no duplicates
    assert rec.max_parallel_queues >= 2  # queues progress at the same time


async def test_members_never_consume_a_queue_at_once_while_joining_and_leaving(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    rec = Recorder(hold=0.002)
    a = orderly_consumer(cluster, group, topic, rec.handler("a"), timing, instance_name="ord-a")
    b = orderly_consumer(cluster, group, topic, rec.handler("b"), timing, instance_name="ord-b")
    sent_total = 0
    await cluster.create_topic(topic, 4)
    try:
        await a.start()
        for _ in range(6):  # a alone, then b joins, then a leaves, while messages keep coming
            await send_ordered(cluster.namesrv_addr, topic, 40, orders=8, start=sent_total)
            sent_total += 40
            if sent_total == 80:
                await b.start()
            if sent_total == 160:
                await a.stop()
            await anyio.sleep(timing.rebalance_interval / 2)
        await rec.wait_total(sent_total, timeout=30)
    finally:
        await a.stop()
        await b.stop()
    assert_no_overlap(rec.intervals)
    assert rec.by_member["a"] > 0 and rec.by_member["b"] > 0
    consumed = sorted(i for v in rec.consumed.values() for i in v)
    assert set(consumed) == set(range(sent_total))
    for qid, seq in rec.consumed.items():  # handed over at the committed offset: order kept, no gap
        assert seq == sorted(set(seq)), f"queue {qid} went back: {seq}"


async def test_suspend_retries_the_same_batch_in_place(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    await send_ordered(cluster.namesrv_addr, topic, 9, orders=1)
    calls: list[tuple[list[int], float]] = []
    suspended: set[int] = set()
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        batch = [index_of(m) for m in msgs]
        calls.append((batch, time.monotonic()))
        if batch[0] not in suspended:
            suspended.add(batch[0])
            ctx.suspend_time = 0.2  # per-call override of suspend_current_queue
            msgs.clear()  # the handler's own list: the batch put back is the consumer's
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if batch[-1] == 8:
            done.set()
        return OrderlyResult.SUCCESS

    c = orderly_consumer(cluster, group, topic, handler, timing, consume_batch_max_size=3)
    async with running(c):
        with anyio.fail_after(20):
            await done.wait()
    assert [b for b, _ in calls] == [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5], [6, 7, 8], [6, 7, 8]]
    for i in (0, 2, 4):
        assert calls[i + 1][1] - calls[i][1] >= 0.2


async def test_past_max_reconsume_times_only_that_message_goes_to_the_dlq(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    await send_ordered(cluster.namesrv_addr, topic, 6, orders=1)
    seen: list[tuple[int, int]] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        m = msgs[0]
        seen.append((index_of(m), m.reconsume_times))
        if index_of(m) == 2:
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if index_of(m) == 5:
            done.set()
        return OrderlyResult.SUCCESS

    c = orderly_consumer(cluster, group, topic, handler, timing, max_reconsume_times=2)
    async with running(c):
        with anyio.fail_after(20):
            await done.wait()
        assert c.max_reconsume_times == 2
    assert seen == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0), (5, 0)]
    store = cluster.brokers[0].store
    assert store is not None
    dlq = f"%DLQ%{group}"
    with anyio.fail_after(10):
        while store.max_offset(dlq, 0) < 1:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    await anyio.sleep(0.2)
    assert store.max_offset(dlq, 0) == 1  # only that message


def test_orderly_default_max_reconsume_times_is_unbounded() -> None:
    c = PushConsumer("g_unbounded", namesrv_addr="127.0.0.1:1", orderly=True, subscriptions={"T": "*"})
    assert c.max_reconsume_times == 2**31 - 1
    assert PushConsumer("g2", namesrv_addr="127.0.0.1:1", subscriptions={"T": "*"}).max_reconsume_times == 16


async def test_shutdown_unlocks_so_another_member_takes_over_at_once(names: tuple[str, str]) -> None:
    topic, group = names
    timing = Timing.fast(broker_lock_expiry=30.0)  # without the unlock, b would wait 30 s
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        rec = Recorder()
        a = orderly_consumer(cluster, group, topic, rec.handler("a"), timing, instance_name="ord-a")
        b = orderly_consumer(cluster, group, topic, rec.handler("b"), timing, instance_name="ord-b")
        await send_ordered(cluster.namesrv_addr, topic, 8, orders=8)
        async with running(b):
            async with running(a):
                await rec.wait_total(8)
                with anyio.fail_after(10):
                    while len([mq for mq in a.assignment() if mq.topic == topic]) != 2:
                        await a.wait_rebalanced()
                a_id = a.client_id
            locks = cluster.brokers[0].locks
            held = [mq for mq, e in locks.table.get(group, {}).items() if e.client_id == a_id]
            assert held == []  # the sync 42 at shutdown released everything
            t0 = time.monotonic()
            await send_ordered(cluster.namesrv_addr, topic, 8, orders=8, start=8)
            await rec.wait_total(16, timeout=10)
            assert time.monotonic() - t0 < 5.0
        assert rec.by_member["b"] >= 8


async def test_broadcasting_orderly_keeps_order_without_locks(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, tmp_path: Path
) -> None:
    topic, group = names
    sent = await send_ordered(cluster.namesrv_addr, topic, 40, orders=4)
    r1, r2 = Recorder(), Recorder()
    kw: dict[str, Any] = {"message_model": "BROADCASTING", "offset_store_dir": str(tmp_path)}
    c1 = orderly_consumer(cluster, group, topic, r1.handler("1"), timing, instance_name="bc-1", **kw)
    c2 = orderly_consumer(cluster, group, topic, r2.handler("2"), timing, instance_name="bc-2", **kw)
    async with running(c1, c2):
        await r1.wait_total(40)
        await r2.wait_total(40)
        assert cluster.brokers[0].locks.table.get(group, {}) == {}
        assert not any(pq.locked for pq in internals(c1).queues.values())
    assert dict(r1.consumed) == dict(sent) == dict(r2.consumed)


async def test_deliveries_hand_out_one_message_per_queue_at_a_time(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await send_ordered(cluster.namesrv_addr, topic, 40, orders=4)
    got: dict[int, list[int]] = defaultdict(list)
    outstanding: dict[int, Any] = {}
    retried = False
    c = orderly_consumer(cluster, group, topic, None, timing)
    async with running(c), c.deliveries() as stream, anyio.create_task_group() as tg:

        async def settle_later(d: Any, retry: bool) -> None:
            await anyio.sleep(0.005)
            del outstanding[d.message.queue_id]
            await (d.retry() if retry else d.ack())

        with anyio.fail_after(20):
            async for d in stream:
                qid = d.message.queue_id
                assert qid not in outstanding, "a second delivery of a queue before the first was settled"
                outstanding[qid] = d
                idx = index_of(d.message)
                retry = idx == 5 and not retried
                retried = retried or retry
                if not retry:
                    got[qid].append(idx)
                tg.start_soon(settle_later, d, retry)
                if sum(len(v) for v in got.values()) == 40:
                    break
    assert dict(got) == dict(sent)  # the retried message came back in place, before its successors


async def test_partitioned_member_stops_at_its_lease_and_is_replaced_after_the_broker_lock_expires(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Member a is cut off from the broker while its handler is stuck: it cannot renew its locks, so its
    lease runs out and the stuck handler is cancelled; b gets a's queues only once the broker lock has
    expired, and no consume intervals overlap. a reaches the broker through a frame proxy (its name
    server's routes name the proxy), which the partition cuts."""
    topic, group = names
    await cluster.create_topic(topic, 4)
    await send_ordered(cluster.namesrv_addr, topic, 8, orders=8)
    intervals: list[Interval] = []
    stuck: list[tuple[int, int]] = []
    stuck_event = anyio.Event()
    b_took_stuck = anyio.Event()

    def handler(member: str) -> Any:
        async def handle(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            start = time.monotonic()
            try:
                await anyio.sleep(0.002)
                if member == "a" and index_of(msgs[0]) >= 8 and not stuck:
                    stuck.append((ctx.mq.queue_id, msgs[0].queue_offset))
                    stuck_event.set()
                    await anyio.Event().wait()  # stuck until its lease ends
            finally:
                for m in msgs:
                    intervals.append((member, ctx.mq.queue_id, start, time.monotonic(), m.queue_offset))
                    if member == "b" and stuck and (ctx.mq.queue_id, m.queue_offset) == stuck[0]:
                        b_took_stuck.set()
            return OrderlyResult.SUCCESS

        return handle

    async with (
        FrameProxy(cluster.brokers[0].addr, lambda cmd: cmd) as link,
        FrameProxy(cluster.namesrv_addr, route_rewriter(lambda _: {"0": link.addr})) as a_namesrv,
    ):
        a = orderly_consumer(
            cluster, group, topic, handler("a"), timing, instance_name="ord-a", namesrv_addr=a_namesrv.addr
        )
        b = orderly_consumer(cluster, group, topic, handler("b"), timing, instance_name="ord-b")
        async with running(a, b):
            with anyio.fail_after(10):
                while len([mq for mq in b.assignment() if mq.topic == topic]) < 2:
                    await b.wait_rebalanced()
            await send_ordered(cluster.namesrv_addr, topic, 8, orders=8, start=8)
            with anyio.fail_after(10):
                await stuck_event.wait()
            qid, offset = stuck[0]
            a_pq = next(
                pq for mq, pq in internals(a).queues.items() if mq.topic == topic and mq.queue_id == qid
            )
            # the partition: a's connection to the broker closes (the broker drops a from the group and
            # tells b at once), and every connection a opens again is closed at once
            assert link.requests[RequestCode.LOCK_BATCH_MQ] > 0  # a's locks went through the link
            link.cut()
            a_last_lock = a_pq.last_lock_time
            with anyio.fail_after(15):
                await b_took_stuck.wait()
            link.heal()  # healed before a shuts down
    assert_no_overlap(intervals)
    a_stuck = next(iv for iv in intervals if iv[0] == "a" and iv[1] == qid and iv[4] == offset)
    b_start = min(iv[2] for iv in intervals if iv[0] == "b" and iv[1] == qid and iv[4] == offset)
    # a stopped consuming when its lease ended (its stuck handler was cancelled, its batch not committed)
    assert a_stuck[3] <= a_last_lock + timing.lock_lease + 0.25
    # b got the queue only after the broker lock (taken no earlier than a_last_lock) had expired
    assert b_start >= a_last_lock + timing.broker_lock_expiry


async def test_cli_consume_orderly_reports_no_order_violations(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    topic, group = names
    await send_ordered(cluster.namesrv_addr, topic, 60, orders=6)
    args = [
        sys.executable,
        "-m",
        "rmq_async.cli",
        "--no-uvloop",
        "consume",
        "--namesrv",
        cluster.namesrv_addr,
    ]
    args += ["--group", group, "--topic", topic, "--orderly", "--count", "60", "--idle-exit", "5"]
    out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["consumed"] == summary["unique_keys"] == 60
    assert summary["order_violations"] == 0


def test_orderly_example_runs_on_the_embedded_cluster() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "orderly.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["orders"] == 10 and summary["events"] == 50
    assert summary["out_of_order"] == 0


async def test_a_queue_back_before_its_old_handler_ends_waits_for_that_handler(
    names: tuple[str, str],
) -> None:
    """A rebalance takes a queue away while its handler runs: it waits ``orderly_drop_wait``, drops the
    queue and keeps the broker lock until the handler ends. When the queue comes back to the same
    consumer before that (the other member left), the broker lock is the consumer's again at once (it
    is per client), and the new process queue starts from the committed offset. It must not consume
    the queue beside the old handler: one handler of a queue at a time in a process, as Java's
    ``MessageQueueLock``. (Seen in the soak: a member consumed offset 3226 of a queue twice at once,
    the old call ending after the new one had gone on to 3290.)"""
    topic, group = names
    # leases long enough that nothing here ends by expiry: the old handler runs until released
    timing = Timing(**{**Timing.fast().model_dump(), "lock_lease": 20.0, "broker_lock_expiry": 40.0})
    async with EmbeddedCluster(timing=timing) as cluster:
        await cluster.create_topic(topic, 1)
        await send_ordered(cluster.namesrv_addr, topic, 3, orders=1)
        release, first_blocked, second_started, all_done = (anyio.Event() for _ in range(4))
        revoked, assigned_again = anyio.Event(), anyio.Event()
        assigned = 0
        calls: list[tuple[int, float, float]] = []  # offset, start, end (member a)

        async def handle_a(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            start = time.monotonic()
            if not first_blocked.is_set():
                first_blocked.set()
                await release.wait()
            else:
                second_started.set()
            calls.append((msgs[0].queue_offset, start, time.monotonic()))
            if len({off for off, _, _ in calls}) == 3:
                all_done.set()
            return OrderlyResult.SUCCESS

        async def handle_b(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
            raise AssertionError("b never holds the broker lock of the queue")

        def on_assigned(t: str, mqs: set[Any]) -> None:
            nonlocal assigned
            if t == topic:
                assigned += 1
                if assigned == 2:
                    assigned_again.set()

        def on_revoked(t: str, mqs: set[Any]) -> None:
            if t == topic:
                revoked.set()

        # b sorts before a: with one queue, b is allocated it while both are members
        a = orderly_consumer(
            cluster, group, topic, handle_a, timing, instance_name="ord-z", orderly_drop_wait=0.2,
            on_assigned=on_assigned, on_revoked=on_revoked,
        )  # fmt: skip
        b = orderly_consumer(cluster, group, topic, handle_b, timing, instance_name="ord-a")
        async with running(a):
            with anyio.fail_after(10):
                await first_blocked.wait()
            await b.start()
            with anyio.fail_after(10):  # a drops the queue, its handler still blocked
                await revoked.wait()
            await b.stop()
            with anyio.fail_after(10):  # the queue is a's again, in a new process queue
                await assigned_again.wait()
            # before the fix a second handler call started within a pull of this
            with anyio.move_on_after(1.5):
                await second_started.wait()
            assert not second_started.is_set(), "the queue was consumed beside its running handler"
            release.set()
            with anyio.fail_after(10):
                await all_done.wait()
    calls.sort(key=lambda c: c[1])
    for (o1, _, e1), (o2, s2, _) in itertools.pairwise(calls):
        assert s2 >= e1, f"offset {o2} started at {s2:.3f} before offset {o1}'s call ended at {e1:.3f}"
