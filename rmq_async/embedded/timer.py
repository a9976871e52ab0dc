"""5.x timer messages (``HookUtils.checkIfTimerMessage`` / ``transformTimerMessage``, the timer
wheel of ``TimerMessageStore``), as ``v5-timer.jsonl`` (5.3.3) shows them.

Strategy. A send to a 5.x broker carrying ``TIMER_DELIVER_MS`` (absolute), ``TIMER_DELAY_SEC`` or
``TIMER_DELAY_MS`` (relative to the broker's clock) and no delay level (a level wins and the
TIMER_* keys are dropped, as Java does) has a delivery time; one already past is stored as an
ordinary message; one further than ``timer_max_delay_sec`` ahead, or unreadable, is refused with
MESSAGE_ILLEGAL and Java's remark. Otherwise the time is cut to the wheel's precision
(``TIMER_OUT_MS``: rounded down, one slot earlier when exact), ``REAL_TOPIC``/``REAL_QID`` are
added and the message goes to ``rmq_sys_wheel_timer`` queue 0, its consume-queue tag code the
moment it is due: one slot after ``TIMER_OUT_MS`` (the real wheel fires a slot's messages when the
slot has passed, 1.0-1.05 s after ``TIMER_OUT_MS`` in the capture), so never before the time asked.
The send answer then carries the timer queue's offset and a ``recallHandle``.

:class:`TimerService` keeps the pending timers in a heap by due time, fed from the timer queue
(everything above the first pending offset on load), and sleeps until the first is due or a new
timer arrives (the context's ``timed`` wake-up). Delivery writes the message to its real topic and
queue with ``TIMER_ENQUEUE_MS`` (its store time, rounded down) and ``TIMER_DEQUEUE_MS`` (now) added,
``TIMER_OUT_MS`` and ``REAL_*`` kept. The delivered offsets are persisted with a data directory.
A 4.x broker has none of this: the TIMER_* keys are ordinary properties (delivered at once).
"""

from __future__ import annotations

import base64
import heapq
import logging

from ..protocol.codes import Prop
from .context import BrokerContext
from .jcompat import props_decode
from .state import TIMER_TOPIC, load_json, save_json
from .store import PutResult, StoreError, now_ms

__all__ = ["TIMER_TOPIC", "TimerRefused", "TimerService", "put_timer", "recall_handle", "timer_out_ms"]

log = logging.getLogger("rmq_async.embedded")


class TimerRefused(Exception):
    """``WHEEL_TIMER_MSG_ILLEGAL``: the remark of the MESSAGE_ILLEGAL answer."""


def _illegal(max_delay_sec: int) -> TimerRefused:
    return TimerRefused(
        f"timer message illegal, the delay time should not be bigger than the max delay "
        f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than the current time"
    )


def timer_out_ms(props: dict[str, str], now: int, precision_ms: int, max_delay_sec: int) -> int | None:
    """The ``TIMER_OUT_MS`` of a message with ``props`` sent at ``now``, or None when it is not a
    timer message (none asked, a delay level set: the TIMER_* keys are then removed, or the time is
    already past). Raises :class:`TimerRefused` for an unreadable or too distant time."""
    if Prop.TIMER_OUT_MS in props:
        return None  # double check, as Java: already transformed
    if int(props.get(Prop.DELAY_TIME_LEVEL, "0") or 0) > 0:
        for key in (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS):
            props.pop(key, None)
        return None
    try:
        if Prop.TIMER_DELAY_SEC in props:
            deliver = now + int(props[Prop.TIMER_DELAY_SEC]) * 1000
        elif Prop.TIMER_DELAY_MS in props:
            deliver = now + int(props[Prop.TIMER_DELAY_MS])
        elif Prop.TIMER_DELIVER_MS in props:
            deliver = int(props[Prop.TIMER_DELIVER_MS])
        else:
            return None
    except ValueError:
        raise _illegal(max_delay_sec) from None
    if deliver <= now:
        return None
    if deliver - now > max_delay_sec * 1000:
        raise _illegal(max_delay_sec)
    return deliver - precision_ms if deliver % precision_ms == 0 else deliver // precision_ms * precision_ms


def recall_handle(topic: str, broker: str, out_ms: int, uniq: str) -> str:
    """``RecallMessageHandle.HandleV1.buildHandle`` (``attachRecallHandle``: the time + 1, "consider
    of floor"): URL-safe base64 of ``v1 <topic> <broker> <ms> <uniq key>``."""
    raw = " ".join(("v1", topic, broker, str(out_ms + 1), uniq))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def put_timer(
    ctx: BrokerContext,
    topic: str,
    queue_id: int,
    body: bytes,
    flag: int,
    props: dict[str, str],
    out_ms: int,
    sys_flag: int,
    born_ts: int,
    born_host: bytes,
    reconsume: int,
) -> PutResult:
    """The message, parked in the timer queue until one slot after ``out_ms``."""
    props[Prop.TIMER_OUT_MS] = str(out_ms)
    props[Prop.REAL_TOPIC] = topic
    props[Prop.REAL_QUEUE_ID] = str(queue_id)
    res = ctx.store.put(
        TIMER_TOPIC,
        0,
        body,
        flag,
        ctx.encode_props(props),
        out_ms + ctx.settings.timer_precision_ms,
        sys_flag,
        born_ts,
        born_host,
        reconsume,
    )
    ctx.timed.set()
    return res


class TimerService:
    """Delivers due timer messages to their real topics."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._heap: list[tuple[int, int]] = []  # (due ms, timer-queue offset)
        self._fed = 0  # timer-queue offsets below this are in the heap or delivered
        self._delivered: set[int] = set()  # delivered offsets at or above the first pending one
        self._dirty = False
        data_dir = ctx.settings.data_dir
        self._file = data_dir / "config" / "timerCheckpoint.json" if data_dir is not None else None

    @property
    def pending(self) -> int:
        """Timer messages not delivered yet (of those seen so far)."""
        self._feed()
        return len(self._heap)

    def load(self) -> None:
        if self._file is None:
            return
        obj = load_json(self._file) or {}
        self._fed = int(obj.get("floor", 0))
        self._delivered = {int(o) for o in obj.get("delivered", ())}

    def persist(self) -> None:
        if self._file is None or not self._dirty:
            return
        self._dirty = False
        floor = min((off for _, off in self._heap), default=self._fed)
        delivered = sorted(o for o in self._delivered if o >= floor)
        save_json(self._file, {"floor": floor, "delivered": delivered})

    async def run(self) -> None:
        while True:
            due = self.deliver_due()
            timeout = float("inf") if due is None else max(0.0, (due - now_ms()) / 1000.0)
            await self.ctx.timed.wait(timeout)

    def _feed(self) -> None:
        """Take the timer queue's new entries into the heap."""
        cq = self.ctx.store.queue(TIMER_TOPIC, 0)
        if cq is None:
            return
        start = max(self._fed, cq.head)
        for off in range(start, len(cq.offsets)):
            if off not in self._delivered:
                heapq.heappush(self._heap, (cq.tags[off], off))
        self._fed = len(cq.offsets)

    def deliver_due(self, now: int | None = None) -> int | None:
        """Deliver every timer due at ``now``; the next due time (ms), if any."""
        self._feed()
        if now is None:
            now = now_ms()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, off = heapq.heappop(heap)
            self._deliver(off)
        return heap[0][0] if heap else None

    def _deliver(self, off: int) -> None:
        ctx = self.ctx
        cq = ctx.store.queue(TIMER_TOPIC, 0)
        assert cq is not None
        self._delivered.add(off)
        self._dirty = True
        msg = ctx.store.lookup(cq.offsets[off])
        if msg is None:
            return
        props = props_decode(msg.props)
        topic = props.get(Prop.REAL_TOPIC)
        if not topic:
            return
        queue_id = int(props.get(Prop.REAL_QUEUE_ID, "0") or 0)
        precision = ctx.settings.timer_precision_ms
        props[Prop.TIMER_ENQUEUE_MS] = str(msg.store_ts // precision * precision)
        props[Prop.TIMER_DEQUEUE_MS] = str(now_ms())
        try:
            ctx.put(
                topic, queue_id, msg.body, msg.flag, props, ctx.encode_props(props), msg.sys_flag,
                msg.born_ts, msg.born_host, msg.reconsume_times,
            )  # fmt: skip
        except StoreError as exc:  # pragma: no cover - it was stored once already
            log.warning("%s: timer message dropped: %s", ctx.settings.name, exc)
