"""The public types of consumption: results, the contexts handlers get, and the handler, hook and
listener signatures (Java ``ConsumeConcurrentlyStatus`` / ``ConsumeConcurrentlyContext`` and
``ConsumeOrderlyStatus`` / ``ConsumeOrderlyContext``). Plain data, imported by every consume module
and re-exported by :mod:`rmq_async`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt

__all__ = [
    "EXPIRED_DELAY_LEVEL",
    "ConsumeContext",
    "ConsumeResult",
    "Handler",
    "Hook",
    "OrderlyContext",
    "OrderlyHandler",
    "OrderlyResult",
    "RebalanceListener",
]

#: the delay level of a message sent back because its handler ran past the consume timeout (Java's
#: ``cleanExpiredMsg`` sends it back with level 3, whatever its reconsume times)
EXPIRED_DELAY_LEVEL = 3


class ConsumeResult(Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(slots=True)
class ConsumeContext:
    """``ConsumeConcurrentlyContext``: set ``ack_index`` and ``delay_level`` to steer the result."""

    mq: MessageQueue
    ack_index: int | None = None
    #: 0: the broker picks (3 + reconsume times); -1: straight to the DLQ; N: delay level N
    delay_level: int = 0


class OrderlyResult(Enum):
    """``ConsumeOrderlyStatus``."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    #: manual-commit mode (``ctx.auto_commit = False``) only
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


@dataclass(slots=True)
class OrderlyContext:
    """``ConsumeOrderlyContext``: ``auto_commit`` and a per-call suspend time (seconds)."""

    mq: MessageQueue
    auto_commit: bool = True
    #: None: ``Timing.suspend_current_queue``
    suspend_time: float | None = None


#: a concurrent handler: ``async def handler(msgs, ctx)``, or a plain function (called inline by the
#: pulling task, without a hand-off to a worker: see the consuming guide)
Handler = Callable[
    [list[MessageExt], ConsumeContext], "Awaitable[ConsumeResult | None] | ConsumeResult | None"
]
#: an orderly handler, async or plain (a plain one is called by the queue's consume task)
OrderlyHandler = Callable[
    [list[MessageExt], OrderlyContext],
    "Awaitable[OrderlyResult | ConsumeResult | None] | OrderlyResult | ConsumeResult | None",
]
#: a before- or after-consume hook: ``(batch, ctx)`` / ``(batch, ctx, result)``, sync or async
Hook = Callable[..., "Awaitable[None] | None"]
#: ``on_assigned`` / ``on_revoked``: ``(topic, queues)``, sync or async
RebalanceListener = Callable[[str, set[MessageQueue]], "Awaitable[None] | None"]
