"""What sends and handler calls write to the trace (Java ``SendMessageTraceHookImpl`` and
``ConsumeMessageTraceHookImpl``), as plain synchronous calls that only build a context and queue it.

``SendTracer.before`` / ``after`` wrap one send attempt; ``ConsumeTracer`` observes handler calls
(:mod:`rmq_async.consumer.observe`): it queues a record of the call (its messages and times) and builds the
Java contexts from it only when the dispatcher sends it, so a record dropped by a full queue costs a
counter increment.
"""

from __future__ import annotations

import asyncio
import time
from enum import Enum
from typing import Any

from ...protocol.codes import Prop
from ...protocol.message import Message
from ...protocol.msgid import new_uniq_id
from ...protocol.stored import MessageExt
from .dispatcher import TraceDispatcher
from .encoder import ConsumeReturnType, MessageType, TraceBean, TraceContext

__all__ = ["ConsumeTracer", "SendTracer", "without_namespace"]

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

    def end_transaction(
        self,
        msg: Message | MessageExt,
        topic: str,
        msg_id: str,
        transaction_id: str | None,
        state: str,
        broker_addr: str,
        *,
        from_check: bool,
    ) -> None:
        """``EndTransactionTraceHookImpl.endTransaction``: an ``EndTransaction`` record (type
        Trans_msg_Commit) for each END_TRANSACTION, the send path's and the check-back's alike;
        ``state`` is the ``LocalTransactionState`` name; the region is the message's MSG_REGION."""
        if topic.startswith(self.dispatcher.topic):
            return
        get = msg.properties.get if isinstance(msg, Message) else msg.get_property
        bean = TraceBean(
            topic=without_namespace(topic),
            msg_id=msg_id,
            tags=get(Prop.TAGS),
            keys=get(Prop.KEYS),
            store_host=broker_addr,
            msg_type=MessageType.TRANS_COMMIT,
            transaction_id=transaction_id,
            transaction_state=state,
            from_transaction_check=from_check,
        )
        region = get(Prop.MSG_REGION) or "DefaultRegion"
        self.dispatcher.append(
            TraceContext("EndTransaction", _now_ms(), region, group_name=self.group, beans=[bean])
        )


class _Call:
    """One traced handler call: its messages and times; the beans and request id made when the
    dispatcher encodes its records (never for a call whose records were dropped)."""

    __slots__ = ("beans", "end", "error", "msgs", "region", "request_id", "result", "start")

    def __init__(self, msgs: tuple[MessageExt, ...], start: int) -> None:
        self.msgs = msgs
        self.start = start
        self.end = 0
        self.result: object = None
        self.error: BaseException | None = None
        self.beans: list[TraceBean] | None = None
        self.region: str | None = None
        self.request_id = ""


class _SubRecord:
    """A queued SubBefore (``after`` False) or SubAfter of a call, made into a context when sent."""

    __slots__ = ("after", "call", "tracer")

    def __init__(self, tracer: ConsumeTracer, call: _Call, after: bool) -> None:
        self.tracer = tracer
        self.call = call
        self.after = after

    def context(self) -> TraceContext | None:
        return self.tracer.context(self.call, self.after)


class ConsumeTracer:
    """The push consumer's trace observer (:mod:`rmq_async.consumer.observe`): a ``SubBefore`` before each
    handler call and a ``SubAfter`` after it. The calls only queue (or, the queue full, count) a
    record; what Java's hooks compute is computed when the dispatcher encodes it."""

    __slots__ = ("dispatcher", "group", "timeout_ms")
    #: every call's SubAfter is written (:mod:`rmq_async.consumer.observe`)
    after_optional = False

    def __init__(self, dispatcher: TraceDispatcher, group: str, consume_timeout: float) -> None:
        self.dispatcher = dispatcher
        self.group = without_namespace(group)
        self.timeout_ms = consume_timeout * 1000

    def before(self, batch: list[MessageExt]) -> _Call | None:
        d = self.dispatcher
        if not batch or d.full():
            d.dropped += 1
            return None
        call = _Call(tuple(batch), int(time.time() * 1000))
        d.append_record(_SubRecord(self, call, False))
        return call

    def after(
        self, token: object, batch: list[MessageExt], result: object, error: BaseException | None
    ) -> None:
        d = self.dispatcher
        if not isinstance(token, _Call) or d.full():
            d.dropped += 1
            return
        token.end = int(time.time() * 1000)
        token.result = result
        token.error = error
        d.append_record(_SubRecord(self, token, True))

    def _beans(self, call: _Call) -> list[TraceBean]:
        """``consumeMessageBefore``'s beans: one per message whose ``TRACE_ON`` is not ``false``."""
        beans = call.beans
        if beans is not None:
            return beans
        beans = call.beans = []
        for m in call.msgs:
            if m.get_property(Prop.TRACE_SWITCH) == "false":
                continue
            call.region = m.get_property(Prop.MSG_REGION)
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
        if beans:
            call.request_id = new_uniq_id()
        return beans

    def context(self, call: _Call, after: bool) -> TraceContext | None:
        beans = self._beans(call)
        if not beans:
            return None  # every message said TRACE_ON=false: neither record (as Java)
        if not after:
            return TraceContext(
                "SubBefore", call.start, call.region, self.group, request_id=call.request_id, beans=beans
            )
        took = call.end - call.start
        result, error = call.result, call.error
        name = result.value if isinstance(result, Enum) else ("CONSUME_SUCCESS" if result is None else "")
        if error is not None:
            # the consume deadline cancels a handler (Java's would run on): TIME_OUT; a raise: EXCEPTION
            timed_out = isinstance(error, asyncio.CancelledError) or took >= self.timeout_ms
            code = ConsumeReturnType.TIME_OUT if timed_out else ConsumeReturnType.EXCEPTION
            success = False
        else:
            success = name in _SUCCESS_NAMES
            if took >= self.timeout_ms:
                code = ConsumeReturnType.TIME_OUT
            elif name in _FAILED_NAMES or not name:
                code = ConsumeReturnType.FAILED
            else:
                code = ConsumeReturnType.SUCCESS
        return TraceContext(
            "SubAfter",
            call.end,
            call.region,
            self.group,
            cost_time=took // len(call.msgs),
            success=success,
            request_id=call.request_id,
            context_code=int(code),
            beans=beans,
        )
