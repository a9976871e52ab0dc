"""PollBuffer on its own: thresholds a pull waits on, round robin between queues, pause and resume,
discarding on a seek, and committing the consume offset when a queue is dropped."""

from __future__ import annotations

import anyio
from support.consumer_context import MemoryStore
from support.helpers_stored import encode_stored

from rmq_async.consumer.poll_buffer import PollBuffer
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt, PulledMessages, decode_messages

MQS = [MessageQueue("T", "b", i) for i in range(2)]


def _batch(first: int, n: int, size: int = 10) -> list[MessageExt]:
    return [MessageExt("T", b"x" * size, queue_offset=first + k) for k in range(n)]


def _buffer(**kw: int) -> PollBuffer:
    args = {"max_queue_count": 100, "max_queue_bytes": 1 << 20, "max_total": 1000} | kw
    return PollBuffer(auto_commit=True, **args)


def _queue(buf: PollBuffer, mq: MessageQueue, offset: int = 0) -> ProcessQueue:
    pq = ProcessQueue(mq)
    pq.next_offset = offset
    buf.started(pq)
    return pq


def test_batches_are_served_round_robin_and_move_the_consume_offset() -> None:
    buf = _buffer()
    a, b = _queue(buf, MQS[0]), _queue(buf, MQS[1], 10)
    buf.submit(a, _batch(0, 2))
    buf.submit(a, _batch(2, 2))
    buf.submit(b, _batch(10, 2))
    out: list[MessageExt] = []
    buf.take(out, None)
    assert [m.queue_offset for m in out] == [0, 1]  # no limit: one whole batch
    buf.take(out, 10)
    assert [m.queue_offset for m in out] == [0, 1, 10, 11, 2, 3]
    assert buf.state(a).consume_offset == 4 and buf.state(b).consume_offset == 12
    assert buf.state(a).count == 0 and buf.state(a).nbytes == 0


def test_a_batch_is_cut_at_the_limit_and_its_rest_is_neither_polled_nor_committable() -> None:
    """poll(max_messages=N) returns at most N: the rest of the batch stays first in its queue, out of
    the consume offset (what auto commit commits), and comes next, in order, counted once."""
    buf = _buffer()
    a, b = _queue(buf, MQS[0]), _queue(buf, MQS[1], 10)
    buf.submit(a, _batch(0, 5, size=10))
    buf.submit(b, _batch(10, 2, size=10))
    out: list[MessageExt] = []
    buf.take(out, 1)
    assert [m.queue_offset for m in out] == [0]
    st = buf.state(a)
    assert st.consume_offset == 1 and st.count == 4 and st.nbytes == 40 and buf._total == 6
    buf.take(out, 4)  # (``out`` counts): round robin, b's batch, then a's rest up to the limit
    assert [m.queue_offset for m in out] == [0, 10, 11, 1]
    out = []
    buf.take(out, 2)
    assert [m.queue_offset for m in out] == [2, 3]
    assert st.consume_offset == 4 and st.count == 1 and st.nbytes == 10
    more: list[MessageExt] = []
    buf.take(more, 10)
    assert [m.queue_offset for m in more] == [4]
    assert st.count == st.nbytes == buf._total == 0 and st.consume_offset == 5


async def test_a_pull_waits_for_room_and_resumes_when_a_poll_frees_it() -> None:
    buf = _buffer(max_queue_count=2, max_total=3)
    a, b = _queue(buf, MQS[0]), _queue(buf, MQS[1])
    buf.submit(a, _batch(0, 2))
    assert await buf.before_pull(b)  # room for b: the total is 2 of 3
    buf.submit(b, _batch(0, 1))
    resumed: list[bool] = []

    async def pull() -> None:
        resumed.append(await buf.before_pull(a))

    async with anyio.create_task_group() as tg:
        tg.start_soon(pull)
        await anyio.wait_all_tasks_blocked()
        assert resumed == []  # a holds 2 of 2
        buf.take([], 1)
    assert resumed == [True]


async def test_a_paused_queue_neither_pulls_nor_polls_until_resumed() -> None:
    buf = _buffer()
    a = _queue(buf, MQS[0])
    buf.submit(a, _batch(0, 2))
    buf.pause(a)
    out: list[MessageExt] = []
    buf.take(out, 10)
    assert out == []
    with anyio.move_on_after(0.05):
        await buf.before_pull(a)
        raise AssertionError("a paused queue pulled")
    buf.resume(a)
    buf.take(out, 10)
    assert [m.queue_offset for m in out] == [0, 1]
    assert await buf.before_pull(a)


async def test_discard_and_drop() -> None:
    buf = _buffer()
    store = MemoryStore()
    a = _queue(buf, MQS[0], 5)
    a.offset = store.cell(MQS[0])  # as the queue table starts a queue
    buf.submit(a, _batch(5, 3))
    buf.discard(a)
    assert buf.state(a).count == 0 and buf._total == 0
    out: list[MessageExt] = []
    buf.take(out, 10)
    assert out == []
    buf.submit(a, _batch(5, 3))
    buf.take(out, 10)
    assert await buf.drop(a, 1.0) and a.dropped
    assert store.read_memory(MQS[0]) == 8  # auto commit: the consume offset
    assert not await buf.before_pull(a)


def test_a_decoded_batch_is_sized_by_the_decoder_and_a_plain_list_by_its_bodies() -> None:
    """The decoder's own sum (a zlib body counted decompressed) holds the queue's byte threshold, as
    the bodies of a plain list do; taking each batch gives back exactly what it added."""
    body = b"".join(
        encode_stored(topic="T", body=b"y" * 300, queue_offset=k, compress=k == 1) for k in range(3)
    )
    decoded = decode_messages(body)
    assert type(decoded) is PulledMessages and decoded.nbytes == 900
    buf = _buffer(max_queue_bytes=1000)
    a = _queue(buf, MQS[0])
    buf.submit(a, decoded)
    assert buf.state(a).nbytes == 900
    buf.submit(a, _batch(3, 2, size=100))
    assert buf.state(a).nbytes == 1100 and not buf._has_room(buf.state(a))
    out: list[MessageExt] = []
    buf.take(out, None)
    assert len(out) == 3 and buf.state(a).nbytes == 200
    buf.take(out, 10)
    assert buf.state(a).nbytes == 0 and buf.state(a).count == 0 and buf._total == 0


async def test_every_waiter_wakes_at_a_change_made_with_nobody_waiting_before() -> None:
    """Changes with nobody waiting wake nothing later; a waiter then wakes at the next change."""
    buf = _buffer()
    a = _queue(buf, MQS[0])
    buf.submit(a, _batch(0, 1))  # nobody waits
    buf.wake()
    woken: list[int] = []

    async def wait(i: int) -> None:
        await buf.wait_changed()
        woken.append(i)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, 1)
        tg.start_soon(wait, 2)
        await anyio.wait_all_tasks_blocked()
        assert woken == []
        out: list[MessageExt] = []
        buf.take(out, 1)  # a poll frees room
        await anyio.wait_all_tasks_blocked()
        assert sorted(woken) == [1, 2]
