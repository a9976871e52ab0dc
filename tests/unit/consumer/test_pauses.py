"""Pauses on their own: topics and queues paused, what a queue's pause covers, and resuming."""

from __future__ import annotations

import anyio
import pytest

from rmq_async import ConfigError
from rmq_async.consumer.pauses import Pauses
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.mq import MessageQueue

A0, A1, B0 = MessageQueue("A", "b", 0), MessageQueue("A", "b", 1), MessageQueue("B", "b", 0)


def test_a_topic_covers_its_queues_and_those_assigned_later() -> None:
    p = Pauses()
    p.pause(["A", B0])
    assert p.covers(A0) and p.covers(A1) and p.covers(B0)
    assert not p.covers(MessageQueue("B", "b", 1))
    assert p.snapshot() == {"A", B0}


def test_resuming_a_topic_resumes_its_queues_and_a_queue_alone_is_refused() -> None:
    p = Pauses()
    p.pause(["A", A1, B0])
    with pytest.raises(ConfigError, match="resume the topic"):
        p.resume([A1])
    assert p.snapshot() == {"A", A1, B0}  # nothing changed
    p.resume(["A"])
    assert p.snapshot() == {B0} and not p.covers(A1)
    p.resume([B0])
    assert p.snapshot() == set()


async def test_a_paused_process_queue_waits_for_room_until_resumed() -> None:
    pq = ProcessQueue(A0)
    pq.set_paused(True)
    assert pq.over_threshold() == "paused"
    async with anyio.create_task_group() as tg:
        tg.start_soon(pq.wait_for_room)
        await pq.wait_parked()
        pq.set_paused(False)
    assert pq.over_threshold() is None
