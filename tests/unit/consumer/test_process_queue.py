"""ProcessQueue: committable offsets, thresholds, and flow control that wakes on removal."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from rmq_async.consumer.deadlines import DeadlineTracker
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.rebalance import StabilityWindow, diff
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import PulledMessages

MQ = MessageQueue("T", "broker-a", 0)


@dataclass
class Msg:
    queue_offset: int
    body: bytes = b"x" * 10


def test_committable_offset_is_smallest_in_flight() -> None:
    pq = ProcessQueue(MQ)
    msgs = [Msg(o) for o in range(2101, 2201)]
    assert pq.put(msgs) == 100  # type: ignore[arg-type]
    assert pq.put(msgs[:5]) == 0  # type: ignore[arg-type]  # duplicates are ignored
    # everything but 2101 finished: progress is held at the stuck message (seed 003's example)
    assert pq.remove(msgs[1:]) == 2101  # type: ignore[arg-type]
    assert pq.count == 1 and pq.msg_bytes == 10
    assert pq.remove(msgs[:1]) == 2201  # type: ignore[arg-type]
    assert pq.remove(msgs[:1]) == -1  # type: ignore[arg-type]  # already empty


def test_a_batch_consumed_before_it_was_held_moves_the_offsets_as_put_then_remove() -> None:
    # pass_by (a plain handler's batch, consumed by the pulling task): the same committable offset and
    # largest offset seen as put + remove of it, held messages below still holding progress back
    held, passed = ProcessQueue(MQ), ProcessQueue(MQ)
    first = [Msg(o) for o in range(0, 4)]
    for pq in (held, passed):
        pq.put(first[2:])  # type: ignore[arg-type]  # 2 and 3 are with a worker
    later = [Msg(o) for o in range(4, 8)]
    held.put(later)  # type: ignore[arg-type]
    assert held.remove(later) == passed.pass_by(7) == 2  # type: ignore[arg-type]
    assert held.queue_offset_max == passed.queue_offset_max == 7
    assert held.count == passed.count == 2 and held.msg_bytes == passed.msg_bytes == 20
    assert held.remove(first[2:]) == passed.remove(first[2:]) == 8  # type: ignore[arg-type]
    assert ProcessQueue(MQ).pass_by(9) == 10  # nothing held: past the batch
    # what is put later meets the same largest offset seen (above it: the ordinary path)
    for pq in (held, passed):
        assert pq.put([Msg(8)]) == 1  # type: ignore[list-item]
        assert pq.put([Msg(5)]) == 1  # type: ignore[list-item]  # below it: merged in
        assert pq.committable_offset() == 5


def test_thresholds() -> None:
    pq = ProcessQueue(MQ, max_count=3, max_bytes=1 << 20, max_span=5)
    pq.put([Msg(0), Msg(1), Msg(2)])  # type: ignore[list-item]
    assert pq.over_threshold() is None
    pq.put([Msg(3)])  # type: ignore[list-item]
    assert "count" in (pq.over_threshold() or "")
    pq2 = ProcessQueue(MQ, max_count=100, max_bytes=15, max_span=100)
    pq2.put([Msg(0), Msg(1)])  # type: ignore[list-item]
    assert "size" in (pq2.over_threshold() or "")
    pq3 = ProcessQueue(MQ, max_count=100, max_bytes=1 << 20, max_span=5)
    pq3.put([Msg(0), Msg(6)])  # type: ignore[list-item]
    assert "span" in (pq3.over_threshold() or "")


async def test_wait_for_room_wakes_on_remove() -> None:
    pq = ProcessQueue(MQ, max_count=1)
    msgs = [Msg(0), Msg(1)]
    pq.put(msgs)  # type: ignore[arg-type]
    woke = anyio.Event()

    async def puller() -> None:
        await pq.wait_for_room()
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(puller)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        pq.remove(msgs[:1])  # type: ignore[arg-type]
        with anyio.fail_after(1):
            await woke.wait()


async def test_wait_for_room_returns_when_dropped() -> None:
    pq = ProcessQueue(MQ, max_count=0)
    pq.put([Msg(0)])  # type: ignore[list-item]
    async with anyio.create_task_group() as tg:
        tg.start_soon(pq.wait_for_room)
        await anyio.wait_all_tasks_blocked()
        pq.drop()


async def test_wait_parked_returns_once_a_pull_waits_for_room() -> None:
    pq = ProcessQueue(MQ, max_count=1)
    msgs = [Msg(0), Msg(1)]
    pq.put(msgs)  # type: ignore[arg-type]
    parked = anyio.Event()

    async def watcher() -> None:
        await pq.wait_parked()
        parked.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        await anyio.wait_all_tasks_blocked()
        assert not parked.is_set()  # over the threshold, but no pull waits yet
        tg.start_soon(pq.wait_for_room)
        with anyio.fail_after(1):
            await parked.wait()
        with anyio.fail_after(1):
            await pq.wait_parked()  # at once while the pull waits
        pq.remove(msgs[:1])  # type: ignore[arg-type]  # room: the pull goes on


def test_orderly_take_commit_put_back() -> None:
    pq = ProcessQueue(MQ)
    pq.put([Msg(o) for o in range(5)])  # type: ignore[misc]
    batch = pq.take(2)
    assert [m.queue_offset for m in batch] == [0, 1]
    assert pq.committable_offset() == 2  # msgs has 2..4
    pq.put_back(batch[1:])
    assert pq.commit() == 1  # offset 0 consumed
    assert [m.queue_offset for m in pq.take(10)] == [1, 2, 3, 4]
    assert pq.commit() == 5


def test_diff() -> None:
    a, b, c = (MessageQueue("T", "b", i) for i in range(3))
    other = MessageQueue("U", "b", 0)
    assert diff({a, b, other}, {b, c}, "T") == ({a}, {c})


def test_stability_window_counts_members_after_the_window() -> None:
    w = StabilityWindow(5.0)
    assert w.observe(["c1", "c2"], 0.0, "c1") == []  # nobody counted yet, this member included
    assert w.pending(0.0) == pytest.approx(5.0)
    assert w.observe(["c1", "c2"], 5.0, "c1") == ["c1", "c2"]
    assert w.observe(["c1", "c2", "c3"], 6.0, "c1") == ["c1", "c2"]  # the joiner is not counted yet
    assert w.observe(["c1", "c2"], 7.0, "c1") == ["c1", "c2"]  # it flapped away: forgotten
    assert w.observe(["c1", "c2", "c3"], 8.0, "c1") == ["c1", "c2"]  # back: its window starts again
    assert w.observe(["c1", "c2", "c3"], 12.9, "c1") == ["c1", "c2"]
    assert w.observe(["c1", "c2", "c3"], 13.0, "c1") == ["c1", "c2", "c3"]
    assert w.observe(["c1", "c3"], 14.0, "c1") == ["c1", "c3"]  # a member that leaves drops at once
    assert w.pending(14.0) is None
    # without a window every change applies at once (Java)
    assert StabilityWindow(0).observe(["b", "a"], 0, "a") == ["a", "b"]


async def test_deadline_tracker_fires_in_order_and_applies_new_timeout() -> None:
    fired: list[str] = []
    done = anyio.Event()
    tr = DeadlineTracker(10.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(tr.run)

        def fire_a() -> None:
            fired.append("a")
            done.set()

        tr.add(fire_a)
        k = tr.add(lambda: fired.append("b"))
        tr.discard(k)
        await anyio.wait_all_tasks_blocked()
        assert fired == []
        tr.set_timeout(0.05)  # applies to entries already in flight
        with anyio.fail_after(2):
            await done.wait()
        assert fired == ["a"]
        tg.cancel_scope.cancel()


def test_out_of_order_put_and_put_back_keep_offset_order() -> None:
    pq = ProcessQueue(MQ)
    pq.put([Msg(o) for o in (10, 11, 12)])  # type: ignore[misc]
    pq.put([Msg(o) for o in (5, 6)])  # type: ignore[misc]  # below what is held
    assert pq.committable_offset() == 5 and pq.span == 7
    taken = pq.take(3)
    assert [m.queue_offset for m in taken] == [5, 6, 10]
    pq.put_back(taken[1:])
    assert [m.queue_offset for m in pq.messages()] == [6, 10, 11, 12]
    assert pq.remove([Msg(6), Msg(10)]) == 11  # type: ignore[list-item]
    assert pq.count == 3  # 11, 12 and the consuming 5


def test_put_trusts_what_the_decoder_found() -> None:
    from support.helpers_stored import encode_stored

    from rmq_async.protocol.stored import decode_messages

    def pulled(*offsets: int) -> PulledMessages:
        stored = (encode_stored(topic="T", body=b"abc", queue_offset=o) for o in offsets)
        return decode_messages(b"".join(stored))

    pq = ProcessQueue(MQ)
    batch = pulled(1, 2, 3)
    batch.nbytes = 1000  # the decoder's figure is used as is: no second pass over the bodies
    assert pq.put(batch) == 3 and pq.msg_bytes == 1000 and pq.span == 2
    assert pq.remove(batch) == 4 and pq.msg_bytes == 0
    # offsets that do not ascend take the checked path: kept in offset order, each once
    assert pq.put(pulled(7, 5, 6, 5)) == 3
    assert [m.queue_offset for m in pq.messages()] == [5, 6, 7] and pq.msg_bytes == 9
    assert pq.committable_offset() == 5
    # at or below what was filed: merged, duplicates skipped, bytes counted once
    assert pq.put(pulled(6, 7, 8)) == 1 and pq.count == 4 and pq.msg_bytes == 12


def test_loop_clock_is_the_loops_clock() -> None:
    import asyncio
    import time

    import uvloop

    from rmq_async.consumer.deadlines import loop_clock

    async def check() -> tuple[object, float, float]:
        loop = asyncio.get_running_loop()
        clock = loop_clock()
        return clock, clock(), loop.time()

    clock, ours, theirs = asyncio.run(check())
    assert clock is time.monotonic and abs(ours - theirs) < 0.01  # the default loop: its own time()
    clock, ours, theirs = uvloop.run(check())
    assert clock is not time.monotonic and abs(ours - theirs) < 0.01  # uvloop keeps loop.time


def test_message_queue_hash_is_cached_but_never_pickled() -> None:
    import dataclasses
    import os
    import pickle
    import subprocess
    import sys

    mq = MessageQueue("T", "broker-a", 3)
    assert hash(mq) == hash(MessageQueue("T", "broker-a", 3)) == hash(("T", "broker-a", 3))
    assert dataclasses.astuple(mq) == ("T", "broker-a", 3)  # the cached hash is not a field
    with pytest.raises(dataclasses.FrozenInstanceError):
        mq.topic = "U"  # type: ignore[misc]
    # another process (another string hash seed) finds the unpickled queue in its own dicts
    code = (
        "import pickle, sys; from rmq_async.protocol.mq import MessageQueue as Q; "
        "mq = pickle.loads(sys.stdin.buffer.read()); print({Q('T', 'broker-a', 3): 1}.get(mq))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(mq), capture_output=True, env=env)
    assert out.stdout.strip() == b"1", out.stderr
