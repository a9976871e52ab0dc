"""Undecodable messages without a broker: the lite pull buffer's stop at one, the stand-in a
push consumer holds in its process queue, and the record a broken body names."""

from __future__ import annotations

import struct
from typing import Any, cast

import anyio
import pytest
from support.consumer_context import MemoryStore, StubApi, make_context, owned
from support.helpers_stored import encode_stored

from rmq_async.client.api import PullResult, PullStatus
from rmq_async.config import ConsumerConfig, Timing
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.poison import HeldMessage
from rmq_async.consumer.poll_buffer import PollBuffer
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.pulling import PullLoop, PullSettings
from rmq_async.consumer.queues import QueueTable
from rmq_async.errors import BrokerError, ProtocolError
from rmq_async.protocol import headers as H
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


# -- the pull loop and a body refused as a whole (broken framing) ------------------------------------

ADDR = "127.0.0.1:10911"


class _PullApi(StubApi):
    """Pull answers in order: a PullResult, or an exception to raise; then it waits for ever."""

    def __init__(self, answers: list[PullResult | Exception], refusals: int = 0) -> None:
        super().__init__()
        self.answers = answers
        self.requests: list[tuple[int, int]] = []  # (queue offset, max messages)
        self.idle = anyio.Event()
        self.refusals = refusals  # send-backs refused before one is taken
        self.pool = self

    async def close_address(self, addr: str) -> None:
        return None

    async def pull(
        self, addr: str, header: H.PullMessageRequestHeader, timeout: float, *, broker_name: str
    ) -> PullResult:
        self.requests.append((header.queue_offset, header.max_msg_nums))
        if not self.answers:
            self.idle.set()
            await anyio.sleep_forever()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def consumer_send_msg_back(self, addr: str, header: Any, timeout: float) -> None:
        self.sent_back.append(int(header.offset))
        if self.refusals:
            self.refusals -= 1
            raise BrokerError(1, "look message by offset failed")


def _broken(body: bytes, index: int = 0, next_begin: int = -1) -> BrokenBodyError:
    try:
        decode_messages(body)
    except BrokenBodyError as exc:
        exc.index, exc.next_begin_offset = index, next_begin
        return exc
    raise AssertionError("the body decodes")


def _pulled(first: int, n: int) -> PullResult:
    return PullResult(PullStatus.FOUND, first + n, 0, 100, 0, _batch(first, n))


async def _pull_loop(
    answers: list[PullResult | Exception], *, lite: str | None = None, refusals: int = 0
) -> tuple[ConsumerContext, _PullApi, list[list[MessageExt]], ProcessQueue]:
    timing = Timing.fast(pull_error_delay=0.001)
    config = ConsumerConfig(group="g", pull_batch_size=16)
    api = _PullApi(answers, refusals)
    ctx = make_context(timing, store=MemoryStore(), api=api, config=config)
    client: Any = ctx.client
    client.broker_addrs = {"b": {0: ADDR}}
    client.broker_addr = lambda name, broker_id=0: ADDR
    ctx.subscriptions.put("T", "*")
    batches: list[list[MessageExt]] = []

    class Sink:
        gates_pulls = False

        async def before_pull(self, pq: ProcessQueue) -> bool:
            return True

        def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
            batches.append(msgs)
            if not lite:
                pq.offset.advance(pq.remove(msgs))  # consumed at once

    if lite is None:
        settings = PullSettings.for_push(config, timing)
    else:
        settings = PullSettings.for_lite_pull(16, timing, "skip" if lite == "skip" else "fail")
    sink = Sink()
    table = QueueTable(ctx, cast(Any, sink))  # (no queue is dropped here)
    loop = PullLoop(ctx, table, sink, settings)
    pq = owned(ctx, ProcessQueue(MQ))
    pq.next_offset = 3
    async with anyio.create_task_group() as tg:
        ctx.set_task_group(tg)
        tg.start_soon(loop.run, pq)
        with anyio.fail_after(5):
            await api.idle.wait()
            while pq.count:  # noqa: ASYNC110 (a held stand-in: its send-back task has no event)
                await anyio.sleep(0.005)
        tg.cancel_scope.cancel()
    return ctx, api, batches, pq


def _bad_magic(queue_offset: int, *, queue_id: int = 0, phys: int = 7000) -> bytes:
    m = bytearray(encode_stored(topic="T", body=b"x", queue_id=queue_id, queue_offset=queue_offset,
                                commit_log_offset=phys))  # fmt: skip
    m[4:8] = b"\0\0\0\0"
    return bytes(m)


async def test_a_broken_message_nothing_names_is_narrowed_to_then_skipped() -> None:
    """Three refusals at 3 (the broken message is the third of the body): the two before it alone,
    then it alone; its fixed fields name another offset, so a push consumer backs off up to the
    sixth failure at its offset and skips it: pulled on from 6, the committed offset past it."""
    wide = _broken(b"junk", index=2)
    alone = _broken(_bad_magic(9), next_begin=6)  # the ids name offset 9: not the pulled one
    ctx, api, batches, pq = await _pull_loop(
        [wide, wide, wide, _pulled(3, 2), alone, alone, alone, _pulled(6, 2)]
    )
    assert api.requests == [(3, 16)] * 3 + [(3, 2)] + [(5, 1)] * 3 + [(6, 16), (8, 16)]
    assert [[m.queue_offset for m in b] for b in batches] == [[3, 4], [6, 7]]
    assert (ctx.stats.undecodable, ctx.stats.undecodable_skipped, ctx.stats.undecodable_to_dlq) == (1, 1, 0)
    assert api.sent_back == [] and pq.offset.value == 8 and ctx.stats.broken_bodies == 6


async def test_a_broken_message_with_sound_ids_goes_to_the_dlq_by_its_offset() -> None:
    wide = _broken(_bad_magic(3, phys=4321))
    ctx, api, batches, _ = await _pull_loop(
        [wide, wide, wide, _broken(_bad_magic(3, phys=4321), next_begin=4)]
    )
    assert api.requests == [(3, 16)] * 3 + [(3, 1), (4, 16)]
    assert (
        api.sent_back == [4321] and ctx.stats.undecodable_to_dlq == 1 and ctx.stats.undecodable_skipped == 0
    )
    assert batches == []


async def test_a_broken_message_the_broker_keeps_refusing_to_move_is_skipped() -> None:
    one = _broken(_bad_magic(3, phys=55), next_begin=4)
    ctx, api, _, pq = await _pull_loop([one, one, one, one], refusals=99)
    assert api.sent_back == [55] * 5  # BROKEN_REFUSALS, then skipped
    assert (ctx.stats.undecodable, ctx.stats.undecodable_skipped, ctx.stats.undecodable_to_dlq) == (1, 1, 0)
    assert pq.offset.value == 4


async def test_other_protocol_errors_are_only_retried() -> None:
    """Not the body's fault (no BrokenBodyError): nothing is narrowed, named or skipped."""
    err = ProtocolError("a header field is missing")
    ctx, api, _, _ = await _pull_loop([err] * 7)
    assert api.requests == [(3, 16)] * 8 and ctx.stats.undecodable == 0


@pytest.mark.parametrize("mode", ["fail", "skip"])
async def test_lite_pull_fails_or_skips_at_once(mode: str) -> None:
    alone = _broken(b"short", next_begin=4)
    ctx, api, _, _ = await _pull_loop([alone] * 4, lite=mode)
    assert api.requests[:4] == [(3, 16)] * 3 + [(3, 1)]
    assert ctx.stats.undecodable >= 1 and ctx.stats.undecodable_skipped == 0
    if mode == "skip":
        assert api.requests[4:] == [(4, 16)]
