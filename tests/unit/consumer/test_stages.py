"""The stage recorder: which pulled batches it samples, what the handler observer and the consume
service stamp, and the per-interval percentiles."""

from __future__ import annotations

import pytest

from rmq_async.consumer.observe import observed
from rmq_async.consumer.stages import INTERVALS, StageObserver, StageRecorder, StageSample, summarize
from rmq_async.protocol.stored import MessageExt


def _msgs(n: int, store_ms: int = 1_000) -> list[MessageExt]:
    return [
        MessageExt(topic="T", body=b"x", queue_id=1, queue_offset=i, store_timestamp=store_ms)
        for i in range(n)
    ]


def test_every_nth_batch_with_messages_is_sampled() -> None:
    rec = StageRecorder(3)
    got = [rec.pulled(1, _msgs(2), 10, 20) for _ in range(7)]
    assert [g is not None for g in got] == [False, False, True, False, False, True, False]
    assert rec.pulled(1, [], 10, 20) is None  # an empty batch is never a sample
    s = got[2]
    assert s is not None and (s.queue_id, s.count, s.read, s.decoded) == (1, 2, 10, 20)
    assert rec.samples == [got[2], got[5]]
    with pytest.raises(ValueError):
        StageRecorder(0)


async def test_the_observer_stamps_the_first_and_the_last_message_only() -> None:
    rec = StageRecorder(1)
    msgs = _msgs(3)
    s = rec.pulled(1, msgs, 1, 2)
    assert s is not None
    calls: list[int] = []

    async def handler(batch: list[MessageExt], ctx: object) -> None:
        calls.append(batch[0].queue_offset)

    wrapped = observed(handler, [StageObserver(rec)])
    await wrapped([msgs[1]], None)  # not watched: no stamp
    assert (s.entered, s.returned, s.last_entered) == (0, 0, 0)
    await wrapped([msgs[0]], None)
    assert 0 < s.entered <= s.returned and s.last_entered == 0
    await wrapped([msgs[2]], None)
    assert s.last_entered >= s.returned
    assert calls == [1, 0, 2] and rec.watching_ids == {}
    other = _msgs(1)
    rec.picked(other)  # an unknown batch: nothing happens
    rec.picked(msgs)
    rec.settled(msgs[1:])  # not the batch's first message
    assert s.settled == 0 and s.picked > 0
    rec.settled(msgs)
    assert s.settled >= s.picked


def test_a_single_message_batch_is_first_and_last() -> None:
    rec = StageRecorder(1)
    msgs = _msgs(1)
    s = rec.pulled(1, msgs, 1, 2)
    assert s is not None
    obs = StageObserver(rec)
    token = obs.before(msgs)
    assert token is s and s.entered == s.last_entered > 0
    obs.after(token, msgs, None, None)
    assert s.returned >= s.entered


def test_intervals_and_summary() -> None:
    s = StageSample(0, 1, store_ms=0, read=1_000_000, decoded=3_000_000)
    s.queued, s.picked, s.entered = 4_000_000, 5_000_000, 6_000_000
    got = s.intervals()
    assert got == {
        "read_to_decoded": 2.0,
        "decoded_to_queued": 1.0,
        "queued_to_picked": 1.0,
        "picked_to_entered": 1.0,
        "queued_to_entered": 2.0,
        "read_to_entered": 5.0,
    }  # no store stamp (0), nothing after entered
    s.store_ms = 5_000
    s.wall_offset_ns = 5_000 * 1_000_000 - 500_000  # the store was 0.5 ms before the read
    assert s.intervals()["store_to_read"] == pytest.approx(0.5)
    table = summarize([s])
    assert set(table) == set(INTERVALS)
    assert table["read_to_entered"] == {
        "count": 1,
        "p50": 5.0,
        "p90": 5.0,
        "p99": 5.0,
        "p99.9": 5.0,
        "max": 5.0,
    }
    assert table["handler"] == {"count": 0, "p50": None, "p90": None, "p99": None, "p99.9": None, "max": None}


def test_watched_messages_are_bounded() -> None:
    rec = StageRecorder(1)
    for _ in range(3000):  # never handled: the watch list is cleared past its bound
        rec.pulled(1, _msgs(2), 1, 2)
    assert len(rec.watching_ids) <= 4098 and len(rec.samples) == 3000
    rec.clear()
    assert not rec.samples


def test_the_oldest_samples_are_packed_then_dropped_past_keep() -> None:
    rec = StageRecorder(1, keep=1500)
    made = []
    for i in range(4000):
        s = rec.pulled(i % 8, _msgs(1, store_ms=i + 1), i + 1, i + 2)
        assert s is not None
        s.queued = i + 3
        made.append(s.as_dict())
    kept = rec.samples
    assert len(kept) == 1500  # the newest 1024 as they are, 476 packed before them
    assert [k.as_dict() for k in kept] == made[-1500:]  # oldest first, every stamp kept
    assert kept[0].intervals()["decoded_to_queued"] == pytest.approx(1e-6)
    small = StageRecorder(1, keep=10)
    for i in range(30):
        small.pulled(0, _msgs(1, store_ms=i + 1), 1, 2)
    assert [k.store_ms for k in small.samples] == list(range(21, 31))
