"""What sends and handler calls write to the trace (Java ``SendMessageTraceHookImpl`` and
``ConsumeMessageTraceHookImpl``), as plain synchronous calls that only build a context and queue it.

``SendTracer.before`` / ``after`` wrap one send attempt; ``ConsumeTracer.before`` / ``after`` are the
consumer's before- and after-consume hooks (``(batch, ctx)`` / ``(batch, ctx, result)``). The
``SubBefore`` of a handler call is found again by its first message (the same object reaches both
hooks); a call whose after-hook never runs (a cancelled orderly batch) is forgotten past a bound.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from ..protocol.codes import Prop
from ..protocol.message import Message
from ..protocol.msgid import new_uniq_id
from ..protocol.stored import MessageExt
from .dispatcher import TraceDispatcher
from .encoder import ConsumeReturnType, MessageType, TraceBean, TraceContext

__all__ = ["ConsumeTracer", "SendTracer", "without_namespace"]

_PENDING_MAX = 65536
_SUCCESS_NAMES = frozenset({"CONSUME_SUCCESS", "SUCCESS", "COMMIT"})
_FAILED_NAMES = frozenset({"RECONSUME_LATER", "SUSPEND_CURRENT_QUEUE_A_MOMENT"})


def without_namespace(name: str) -> str:
    """``NamespaceUtil.withoutNamespace`` for the common cases: ``ns%topic`` -> ``topic``, the retry and
    DLQ prefixes kept."""
    for prefix in ("%RETRY%", "%DLQ%"):
        if name.startswith(prefix):
            return prefix + without_namespace(name[len(prefix) :])
    ns, sep, rest = name.partition("%")
    return rest if sep and ns and rest else name


def _now_ms() -> int:
    return int(time.time() * 1000)


class SendTracer:
    """The producer's trace hook: a ``Pub`` record per answered send (not oneway, not failed)."""

    __slots__ = ("dispatcher", "group")

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self.dispatcher = dispatcher
        self.group = without_namespace(group)

    def before(
        self, msg: Message | None, topic: str, body_length: int, broker_addr: str
    ) -> TraceContext | None:
        """``sendMessageBefore``: ``msg`` None for a batch (its tags and keys are null, as a
        ``MessageBatch``'s); sends to the trace topic itself are not traced."""
        if topic.startswith(self.dispatcher.topic):
            return None
        msg_type = MessageType.NORMAL
        tags: str | None = None
        keys: str | None = None
        if msg is not None:
            props = msg.properties
            tags, keys = props.get(Prop.TAGS), props.get(Prop.KEYS)
            if props.get(Prop.TRANSACTION_PREPARED) == "true":
                msg_type = MessageType.TRANS_HALF
            if "__STARTDELIVERTIME" in props or Prop.DELAY_TIME_LEVEL in props:
                msg_type = MessageType.DELAY
        bean = TraceBean(
            topic=without_namespace(topic),
            tags=tags,
            keys=keys,
            store_host=broker_addr,
            body_length=body_length,
            msg_type=msg_type,
        )
        return TraceContext("Pub", _now_ms(), group_name=self.group, beans=[bean])

    def after(self, tc: TraceContext | None, result: Any) -> None:
        """``sendMessageAfter`` with the send's result (``SendResult``): skipped when the broker said
        trace off (``TRACE_ON=false``) or named no region."""
        if tc is None or result is None:
            return
        if result.region_id is None or not getattr(result, "trace_on", True):
            return
        bean = tc.beans[0]
        cost = (_now_ms() - tc.timestamp) // len(tc.beans)
        tc.cost_time = cost
        tc.success = result.status.name == "SEND_OK"
        tc.region_id = result.region_id
        bean.msg_id = result.msg_id
        bean.offset_msg_id = result.offset_msg_id
        bean.store_time = tc.timestamp + cost // 2
        self.dispatcher.append(tc)


class ConsumeTracer:
    """The push consumer's trace hooks: ``SubBefore`` before each handler call, ``SubAfter`` after."""

    __slots__ = ("_pending", "dispatcher", "group", "timeout_ms")

    def __init__(self, dispatcher: TraceDispatcher, group: str, consume_timeout: float) -> None:
        self.dispatcher = dispatcher
        self.group = without_namespace(group)
        self.timeout_ms = consume_timeout * 1000
        self._pending: dict[int, tuple[MessageExt, TraceContext]] = {}

    def before(self, batch: list[MessageExt], ctx: object = None) -> None:
        """``consumeMessageBefore``: a bean per message whose ``TRACE_ON`` is not ``false``."""
        if not batch:
            return
        beans: list[TraceBean] = []
        region: str | None = None
        for m in batch:
            if m.get_property(Prop.TRACE_SWITCH) == "false":
                continue
            region = m.get_property(Prop.MSG_REGION)
            beans.append(
                TraceBean(
                    topic=without_namespace(m.topic),
                    msg_id=m.msg_id,
                    tags=m.tags,
                    keys=m.keys,
                    store_time=m.store_timestamp,
                    body_length=m.store_size,
                    retry_times=m.reconsume_times,
                )
            )
        if not beans:
            return
        tc = TraceContext("SubBefore", _now_ms(), region, self.group, request_id=new_uniq_id(), beans=beans)
        self.dispatcher.append(tc)
        pending = self._pending
        if len(pending) >= _PENDING_MAX:
            del pending[next(iter(pending))]
        pending[id(batch[0])] = (batch[0], tc)

    def after(self, batch: list[MessageExt], ctx: object = None, result: object = None) -> None:
        """``consumeMessageAfter``: cost per message, success, and the return type's ordinal (a call at
        or past the consume timeout is ``TIME_OUT``, a failure ``FAILED``)."""
        if not batch:
            return
        entry = self._pending.pop(id(batch[0]), None)
        if entry is None or entry[0] is not batch[0]:
            return
        before = entry[1]
        now = _now_ms()
        name = result.value if isinstance(result, Enum) else "CONSUME_SUCCESS"
        success = name in _SUCCESS_NAMES
        if now - before.timestamp >= self.timeout_ms:
            code = ConsumeReturnType.TIME_OUT
        elif name in _FAILED_NAMES:
            code = ConsumeReturnType.FAILED
        else:
            code = ConsumeReturnType.SUCCESS
        tc = TraceContext(
            "SubAfter",
            now,
            before.region_id,
            before.group_name,
            cost_time=(now - before.timestamp) // len(batch),
            success=success,
            request_id=before.request_id,
            context_code=int(code),
            beans=before.beans,
        )
        self.dispatcher.append(tc)
