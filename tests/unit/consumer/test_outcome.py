"""The one rule for what a handler's answer means (``rmq_async.consumer.outcome``), Java's:
SUCCESS consumes up to ``ack_index`` (all by default), RECONSUME_LATER none; undefined values are the
user's error, logged, and consume nothing."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_async import ConsumeContext, ConsumeResult
from rmq_async.consumer.outcome import acked_count, checked_context, checked_result
from rmq_async.protocol.mq import MessageQueue

MQ = MessageQueue("T", "b", 0)


@given(n=st.integers(0, 64), ack_index=st.one_of(st.none(), st.integers(-1, 100)))
def test_success_acks_up_to_the_index_and_reconsume_later_acks_nothing(n: int, ack_index: int | None) -> None:
    acked = acked_count(ConsumeResult.SUCCESS, ack_index, n)
    assert 0 <= acked <= n
    assert acked == (n if ack_index is None else min(ack_index + 1, n))
    assert acked_count(ConsumeResult.RECONSUME_LATER, ack_index, n) == 0


@pytest.mark.parametrize(
    ("value", "expected", "logged"),
    [(None, None, False), (0, 0, False), (-1, -1, False), (5, 5, False), (-2, -1, True), (-(2**40), -1, True),
     ("1", -1, True), (1.0, -1, True), (True, -1, True)],
)  # fmt: skip
def test_ack_index_checked(
    value: object, expected: int | None, logged: bool, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ConsumeContext(MQ)
    ctx.ack_index = value  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"):
        ack_index, delay = checked_context(ctx, "g")
    assert (ack_index, delay) == (expected, 0)
    assert bool(caplog.records) is logged
    assert acked_count(ConsumeResult.SUCCESS, ack_index, 3) == (
        3 if expected is None else max(0, min(expected + 1, 3))
    )


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (3, 3), (-1, -1), (2.5, 0), ("3", 0), (None, 0)])
def test_delay_level_checked(value: object, expected: int) -> None:
    ctx = ConsumeContext(MQ)
    ctx.delay_level = value  # type: ignore[assignment]
    assert checked_context(ctx, "g")[1] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, ConsumeResult.SUCCESS), (ConsumeResult.SUCCESS, ConsumeResult.SUCCESS),
     (ConsumeResult.RECONSUME_LATER, ConsumeResult.RECONSUME_LATER),
     ("SUCCESS", ConsumeResult.RECONSUME_LATER), (True, ConsumeResult.RECONSUME_LATER),
     (0, ConsumeResult.RECONSUME_LATER)],
)  # fmt: skip
def test_result_checked(value: object, expected: ConsumeResult) -> None:
    assert checked_result(value, "g") is expected
