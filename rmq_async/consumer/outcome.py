"""What a handler's answer means: one rule for every consume path (concurrent, POP, consume-directly,
orderly).

A handler returns a :class:`ConsumeResult` (``None`` is SUCCESS) and may set ``ctx.ack_index`` and
``ctx.delay_level``. The meaning is Java's (``ConsumeMessageConcurrentlyService.processConsumeResult``,
``ConsumeMessagePopConcurrentlyService.processConsumeResult``): on SUCCESS the messages up to
``ack_index`` are consumed (default: all of them) and the rest of the batch failed; on
RECONSUME_LATER the whole batch failed, whatever ``ack_index`` says. Failed messages come again
(sent back with ``delay_level``, or their POP invisible time changed).

What Java leaves undefined is settled the safe way, logged as the user's error and never the end of
the consumer: a result that is not a ConsumeResult counts as RECONSUME_LATER; an ``ack_index`` that is
not an int, or below -1, acknowledges nothing; a ``delay_level`` that is not an int lets the broker
choose (0). An orderly handler returns an :class:`OrderlyResult` (``None`` and the concurrent
SUCCESS are SUCCESS, RECONSUME_LATER is SUSPEND_CURRENT_QUEUE_A_MOMENT, anything else is logged and
suspends) and may set ``ctx.suspend_time`` (seconds, clamped to Java's 10 ms .. 30 s; not a number:
logged, the default). Pure functions: the services keep the scheduling and the settlement I/O.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

from ..protocol.stored import MessageExt
from .types import ConsumeContext, ConsumeResult, OrderlyContext, OrderlyResult

__all__ = [
    "Settlement",
    "acked_count",
    "checked_context",
    "checked_orderly_result",
    "checked_result",
    "settle_plan",
    "suspend_seconds",
]

_SUSPEND = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT

log = logging.getLogger("rmq_async.consumer")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_result(result: object, group: str) -> ConsumeResult:
    """A handler's return value as a result: None is SUCCESS; anything else that is not a
    ConsumeResult is logged and counts as RECONSUME_LATER."""
    if result is None:
        return ConsumeResult.SUCCESS
    if isinstance(result, ConsumeResult):
        return result
    log.error("handler of group %s returned %r, not a ConsumeResult: reconsume later", group, result)
    return ConsumeResult.RECONSUME_LATER


def checked_context(ctx: ConsumeContext, group: str) -> tuple[int | None, int]:
    """``ctx.ack_index`` and ``ctx.delay_level`` as the handler left them, checked: a value that is not
    an int (or an ack index below -1) is logged and replaced by the safe choice (nothing acknowledged,
    the broker's delay), so a typo in a handler never stops the consumer nor drops a message."""
    ack_index, delay_level = ctx.ack_index, ctx.delay_level
    if ack_index is not None and not _is_int(ack_index):
        log.error(
            "handler of group %s set ctx.ack_index to %r, not an int: the whole batch is consumed again",
            group,
            ack_index,
        )
        ack_index = -1
    elif ack_index is not None and ack_index < -1:
        log.error(
            "handler of group %s set ctx.ack_index to %d (below -1): the whole batch is consumed again",
            group,
            ack_index,
        )
        ack_index = -1
    if not _is_int(delay_level):
        log.error(
            "handler of group %s set ctx.delay_level to %r, not an int: the broker picks the delay",
            group,
            delay_level,
        )
        delay_level = 0
    return ack_index, delay_level


def acked_count(result: ConsumeResult, ack_index: int | None, n: int) -> int:
    """How many of a batch's ``n`` first messages are consumed (the rest failed): ``ack_index`` as
    :func:`checked_context` returns it."""
    if result is not ConsumeResult.SUCCESS:
        return 0
    if ack_index is None:
        return n
    return max(0, min(ack_index + 1, n))


class Settlement(NamedTuple):
    """What a concurrent, POP or consume-directly batch comes to: the messages consumed, those that
    failed (to come again), and the delay level asked for them (0: the broker's choice)."""

    acked: list[MessageExt]
    failed: list[MessageExt]
    delay_level: int


def settle_plan(
    result: ConsumeResult, ctx: ConsumeContext, batch: list[MessageExt], group: str
) -> Settlement:
    """The one settlement rule: ``result`` (as :func:`checked_result` made it) and what the handler left
    in ``ctx`` (checked by :func:`checked_context`) applied to ``batch``."""
    ack_index, delay_level = checked_context(ctx, group)
    n = acked_count(result, ack_index, len(batch))
    return Settlement(batch[:n], batch[n:], delay_level)


def checked_orderly_result(result: object, group: str) -> OrderlyResult:
    """An orderly handler's return value as a result (see the module docstring)."""
    if result is None or result is OrderlyResult.SUCCESS or result is ConsumeResult.SUCCESS:
        return OrderlyResult.SUCCESS
    if isinstance(result, OrderlyResult):
        return result
    if result is ConsumeResult.RECONSUME_LATER:
        return _SUSPEND
    log.error("orderly handler of group %s returned %r, not an OrderlyResult: suspending", group, result)
    return _SUSPEND


def suspend_seconds(ctx: OrderlyContext, default: float, group: str) -> float:
    """How long a suspended queue waits: ``ctx.suspend_time`` as the handler left it (None: the
    default), checked, and clamped as Java clamps ``suspendCurrentQueueTimeMillis`` (10 ms .. 30 s)."""
    t = ctx.suspend_time
    if t is None:
        t = default
    elif isinstance(t, bool) or not isinstance(t, int | float) or math.isnan(t):
        log.error(
            "orderly handler of group %s set ctx.suspend_time to %r, not a number of seconds: "
            "suspending for the default %.3f s",
            group,
            t,
            default,
        )
        t = default
    return max(0.01, min(float(t), 30.0))
