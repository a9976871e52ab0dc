"""The one rule for what a handler's answer means (``rmq_async.consumer.outcome``), Java's:
SUCCESS consumes up to ``ack_index`` (all by default), RECONSUME_LATER none; undefined values are the
user's error, logged, and consume nothing."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, OrderlyContext, OrderlyResult
from rmq_async.consumer.outcome import (
    acked_count,
    checked_context,
    checked_orderly_result,
    checked_result,
    settle_plan,
    suspend_seconds,
)
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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, OrderlyResult.SUCCESS),
        (OrderlyResult.SUCCESS, OrderlyResult.SUCCESS),
        (ConsumeResult.SUCCESS, OrderlyResult.SUCCESS),
        (OrderlyResult.COMMIT, OrderlyResult.COMMIT),
        (OrderlyResult.ROLLBACK, OrderlyResult.ROLLBACK),
        (ConsumeResult.RECONSUME_LATER, OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT),
        ("SUCCESS", OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT),
        (0, OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT),
    ],
)
def test_an_orderly_result_is_checked(
    raw: object, expected: OrderlyResult, caplog: pytest.LogCaptureFixture
) -> None:
    assert checked_orderly_result(raw, "g") is expected
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert bool(logged) == isinstance(raw, str | int)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 1.0),
        (0.5, 0.5),
        (0, 0.01),
        (-3, 0.01),
        (60, 30.0),
        (float("nan"), 1.0),
        ("2", 1.0),
        (True, 1.0),
    ],
)
def test_the_suspend_time_is_checked_and_clamped_as_java(value: object, expected: float) -> None:
    ctx = OrderlyContext(MessageQueue("T", "b", 0))
    ctx.suspend_time = value  # type: ignore[assignment]
    assert suspend_seconds(ctx, 1.0, "g") == expected


@given(
    n=st.integers(0, 40),
    result=st.sampled_from([ConsumeResult.SUCCESS, ConsumeResult.RECONSUME_LATER]),
    ack_index=st.one_of(st.none(), st.integers(-5, 50), st.just("1"), st.just(1.5)),
    delay_level=st.one_of(st.integers(-1, 18), st.just("3")),
)
def test_the_settle_plan_splits_every_batch_into_acked_then_failed(
    n: int, result: ConsumeResult, ack_index: object, delay_level: object
) -> None:
    batch = [MessageExt("T", b"x", queue_offset=k) for k in range(n)]
    ctx = ConsumeContext(MQ)
    ctx.ack_index = ack_index  # type: ignore[assignment]
    ctx.delay_level = delay_level  # type: ignore[assignment]
    plan = settle_plan(result, ctx, batch, "g")
    assert plan.acked + plan.failed == batch  # every message once, the acked ones first
    if (
        result is ConsumeResult.RECONSUME_LATER
        or not isinstance(ack_index, int | None)
        or (isinstance(ack_index, int) and ack_index < -1)
    ):
        assert plan.acked == []
    elif ack_index is None:
        assert plan.failed == []
    else:
        assert len(plan.acked) == max(0, min(ack_index + 1, n))
    assert plan.delay_level == (delay_level if isinstance(delay_level, int) else 0)
