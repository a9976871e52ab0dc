"""DeliveryStream on its own: settling races between the loop's code and the consume timeout. The
stream runs on a real consumer context (its client a stub recording send-backs) and settles through
a concurrent consume service; the integration tests run the same code against the embedded broker."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from support.consumer_context import StubApi, make_context, owned

from rmq_async.consumer.concurrently import ConcurrentConsumeService
from rmq_async.consumer.context import ConsumerContext
from rmq_async.consumer.delivery import Delivery, DeliveryStream
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.errors import ClientError
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt

MQ = MessageQueue("T", "b", 0)


def _consumer(tg: anyio.abc.TaskGroup, sent_back: list[int]) -> ConsumerContext:
    api = StubApi()
    api.sent_back = sent_back  # commit-log offsets of the messages sent back (= queue offsets here)
    ctx = make_context(api=api)
    ctx.set_task_group(tg)
    return ctx


async def _one_delivery(c: ConsumerContext) -> tuple[DeliveryStream, ProcessQueue, Delivery]:
    stream = ConcurrentConsumeService(c, None).open_deliveries()
    pq = owned(c, ProcessQueue(MQ))
    msgs = [MessageExt("T", b"x", queue_offset=7, commit_log_offset=7)]
    pq.put(msgs)
    stream.submit(pq, msgs)
    return stream, pq, await stream.__anext__()


@pytest.mark.parametrize("settle", ["ack", "retry"])
async def test_settling_a_delivery_whose_timeout_just_passed_does_not_crash_the_consumer(settle: str) -> None:
    # the consume timeout passes (its send-back is scheduled as a task of the consumer's group) and
    # the loop's code settles the delivery before that task runs: the task must see it settled and
    # do nothing; before, it raised "already settled" in the consumer's task group, killing it
    sent_back: list[int] = []
    async with anyio.create_task_group() as tg:
        c = _consumer(tg, sent_back)
        stream, pq, d = await _one_delivery(c)
        stream._expire(d)
        await (d.ack() if settle == "ack" else d.retry())
        await anyio.wait_all_tasks_blocked()
        stream.close()
    assert sent_back == ([] if settle == "ack" else [7])  # settled once, by the loop's code
    assert pq.count == 0 and c.offset_store.read_memory(MQ) == 8
    assert not stream.unsettled


async def test_a_delivery_sent_back_by_its_timeout_cannot_be_acked_afterwards() -> None:
    sent_back: list[int] = []
    async with anyio.create_task_group() as tg:
        c = _consumer(tg, sent_back)
        stream, pq, d = await _one_delivery(c)
        stream._expire(d)
        await anyio.wait_all_tasks_blocked()  # the send-back ran
        with pytest.raises(ClientError, match="already settled"):
            await d.ack()
        stream.close()
    assert sent_back == [7] and pq.count == 0


async def test_retry_with_a_delay_level_not_an_int_raises_at_the_call_and_keeps_the_delivery() -> None:
    sent_back: list[int] = []
    async with anyio.create_task_group() as tg:
        c = _consumer(tg, sent_back)
        stream, pq, d = await _one_delivery(c)
        with pytest.raises(TypeError, match="delay_level"):
            await d.retry(delay_level="3")  # type: ignore[arg-type]
        assert not d.settled and pq.count == 1  # still the caller's to settle
        await d.retry(delay_level=3)
        stream.close()
    assert sent_back == [7] and pq.count == 0
