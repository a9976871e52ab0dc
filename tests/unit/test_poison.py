"""Undecodable messages without a broker (#19): the lite pull buffer's stop at one, the stand-in a
push consumer holds in its process queue, and the record a broken body names."""

from __future__ import annotations

import struct

import anyio
import pytest
from support.helpers_stored import encode_stored

from rmq_async.consumer.poison import HeldMessage
from rmq_async.consumer.poll_buffer import PollBuffer
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import BrokenBodyError, MessageExt, Undecodable, decode_messages

MQ = MessageQueue("T", "b", 0)


def _record(offset: int) -> Undecodable:
    return Undecodable(
        topic="T", queue_id=0, queue_offset=offset, commit_log_offset=1000 + offset, store_size=120,
        sys_flag=MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_LZ4_TYPE, reconsume_times=2,
        offset_msg_id="X", msg_id="U", reason="LZ4 body does not decompress", broker_name="b",
    )  # fmt: skip


def _batch(first: int, n: int) -> list[MessageExt]:
    return [MessageExt("T", b"x", queue_offset=first + k) for k in range(n)]


async def test_a_failed_queue_is_raised_after_its_batches_and_not_pulled_until_then() -> None:
    buf = PollBuffer(max_queue_count=100, max_queue_bytes=1 << 20, max_total=1000, auto_commit=True)
    pq = ProcessQueue(MQ)
    buf.started(pq)
    buf.submit(pq, _batch(0, 3))
    buf.fail(pq, _record(3))
    assert buf.failure() is None  # the messages before it come first
    with anyio.move_on_after(0.05) as scope:
        await buf.before_pull(pq)  # not pulled while stopped there
    assert scope.cancelled_caught
    out: list[MessageExt] = []
    buf.take(out, 10)
    assert [m.queue_offset for m in out] == [0, 1, 2]
    rec = buf.failure()
    assert rec is not None and rec.queue_offset == 3
    assert buf.failure() is None  # handed out once; the queue is pulled from its offset again
    with anyio.fail_after(1):
        assert await buf.before_pull(pq)
    buf.fail(pq, _record(3))
    buf.discard(pq)  # a seek forgets it
    assert buf.failure() is None


def test_the_stand_in_holds_the_committed_offset() -> None:
    pq = ProcessQueue(MQ)
    held = HeldMessage(_record(5))
    assert (held.queue_offset, held.commit_log_offset, held.reconsume_times, held.body) == (5, 1005, 2, b"")
    assert held.broker_name == "b" and held.record.reason.startswith("LZ4")
    pq.put(sorted([*_batch(3, 2), held, *_batch(6, 2)], key=lambda m: m.queue_offset))
    assert pq.committable_offset() == 3
    good = [m for m in pq.messages() if not isinstance(m, HeldMessage)]
    assert pq.remove(good) == 5  # everything else done: the offset waits at the held message
    assert pq.remove([held]) == 8


def test_a_broken_body_names_its_message_when_its_fixed_part_reads() -> None:
    first = encode_stored(topic="T", body=b"a", queue_offset=7, commit_log_offset=700)
    second = bytearray(
        encode_stored(
            topic="T", body=b"b", queue_offset=8, commit_log_offset=800, properties={"UNIQ_KEY": "U8"}
        )
    )
    struct.pack_into(">i", second, 0, len(second) + 1)  # one byte more than its fields
    with pytest.raises(BrokenBodyError) as err:
        decode_messages(first + bytes(second) + b"\0")
    rec = err.value.record
    assert rec is not None and (rec.queue_offset, rec.commit_log_offset, rec.msg_id) == (8, 800, "U8")
    junk = bytearray(second)
    struct.pack_into(">i", junk, 4, 12345)  # not a magic code: nothing to trust
    with pytest.raises(BrokenBodyError) as err2:
        decode_messages(first + bytes(junk))
    assert err2.value.record is None
