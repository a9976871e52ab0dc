"""Delayed delivery, send-back, retry and DLQ (``ScheduleMessageService``,
``SendMessageProcessor.asyncConsumerSendMsgBack``).

Strategy: a message with DELAY > 0 is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with
REAL_TOPIC/REAL_QID (see ``BrokerContext.put``); its consume-queue tag code is its delivery time, as
in the real store. :class:`ScheduleService` keeps the next offset to deliver per level and sleeps
until the earliest head of any level is due, or until the context's ``delayed`` wake-up says a new
delayed message arrived (no fixed-rate polling). Delivery copies the message to its real topic with
the properties the Java broker writes (``messageTimeup``: the properties string still carries DELAY,
REAL_TOPIC and REAL_QID). Send-back (36) writes a copy to ``%RETRY%<group>`` with delay
``3 + reconsumeTimes`` when the client leaves it to the broker, or straight to ``%DLQ%<group>`` when
the reconsume count reaches the request's ``maxReconsumeTimes`` or its ``delayLevel`` is negative
(4.9.8 ``asyncConsumerSendMsgBack``, 5.x ``consumerSendMsgBack``: the rule a client uses for a
message it cannot decode). The copy keeps the stored body and sys flag as they are: nothing is
decompressed.
"""

from __future__ import annotations

import logging
import random

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .context import BrokerContext, HandlerTable
from .fields import opt_int, opt_str, req_int, req_str
from .jcompat import props_decode
from .server import Connection
from .state import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, load_json, save_json
from .store import StoreError, now_ms

__all__ = ["ScheduleService", "handlers"]

log = logging.getLogger("rmq_async.embedded")

MQ_VERSION_V3_4_9 = 121


class ScheduleService:
    """Delivers due messages from the schedule topic to their real topics."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.offsets: dict[int, int] = {}  # delay level -> next consume-queue offset
        self._dirty = False
        data_dir = ctx.settings.data_dir
        self._file = data_dir / "config" / "delayOffset.json" if data_dir is not None else None

    def load(self) -> None:
        if self._file is None:
            return
        obj = load_json(self._file)
        if obj:
            self.offsets = {int(k): int(v) for k, v in (obj.get("offsetTable") or {}).items()}

    def persist(self) -> None:
        if self._file is None or not self._dirty:
            return
        self._dirty = False
        save_json(self._file, {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})

    def wake(self) -> None:
        self.ctx.delayed.set()

    async def run(self) -> None:
        while True:
            due = self.deliver_due()
            timeout = float("inf") if due is None else max(0.0, (due - now_ms()) / 1000.0)
            await self.ctx.delayed.wait(timeout)

    def deliver_next(self) -> bool:
        """Deliver the one pending delayed message due first, at once, whatever its due time.

        A test hook: a replay can reproduce the order in which delayed messages arrived, one by one,
        without waiting for the delays. Returns False when nothing is pending.
        """
        store = self.ctx.store
        best: tuple[int, int] | None = None  # (due, level)
        for level in range(1, len(self.ctx.settings.delay_ms) + 1):
            cq = store.queue(SCHEDULE_TOPIC, level - 1)
            off = self.offsets.get(level, 0)
            if cq is not None and off < len(cq.offsets) and (best is None or cq.tags[off] < best[0]):
                best = (cq.tags[off], level)
        if best is None:
            return False
        self._deliver(best[1], 1)
        return True

    def deliver_due(self, now: int | None = None) -> int | None:
        """Deliver everything due; returns the earliest future delivery time (ms), if any."""
        store = self.ctx.store
        earliest: int | None = None
        if now is None:
            now = now_ms()
        for level in range(1, len(self.ctx.settings.delay_ms) + 1):
            cq = store.queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            off = start = self.offsets.get(level, 0)
            while off < len(cq.offsets) and cq.tags[off] <= now:
                off += 1
            if off < len(cq.offsets):
                due = cq.tags[off]
                earliest = due if earliest is None else min(earliest, due)
            if off > start:
                self._deliver(level, off - start)
        return earliest

    def _deliver(self, level: int, count: int) -> None:
        """``messageTimeup`` + put for the next ``count`` messages of ``level``."""
        store = self.ctx.store
        cq = store.queue(SCHEDULE_TOPIC, level - 1)
        assert cq is not None
        off = self.offsets.get(level, 0)
        for _ in range(count):
            msg = store.lookup(cq.offsets[off])
            off += 1
            if msg is None:
                continue
            props = props_decode(msg.props)
            props_str = self.ctx.encode_props(props)
            props["WAIT"] = "false"
            props.pop("DELAY", None)
            topic = props.get("REAL_TOPIC")
            try:
                queue_id = int(props.get("REAL_QID", "0"))
            except ValueError:
                queue_id = 0
            if not topic:
                continue
            try:
                self.ctx.put(
                    topic,
                    queue_id,
                    msg.body,
                    msg.flag,
                    props,
                    props_str,
                    msg.sys_flag,
                    msg.born_ts,
                    msg.born_host,
                    msg.reconsume_times,
                )
            except StoreError as exc:  # pragma: no cover - it was stored once already
                log.warning("%s: delayed message dropped: %s", self.ctx.settings.name, exc)
        self.offsets[level] = off
        self._dirty = True


def handlers(ctx: BrokerContext) -> HandlerTable:
    def send_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK (36)."""
        offset = req_int(cmd, "offset")
        group = req_str(cmd, "group")
        level = opt_int(cmd, "delayLevel", 0) or 0
        max_times = 16  # the group's retryMaxTimes
        if cmd.version >= MQ_VERSION_V3_4_9:
            times = opt_int(cmd, "maxReconsumeTimes")
            if times is not None:  # 0 included: every send-back of that request goes to the DLQ
                max_times = times
        opt_str(cmd, "originMsgId")
        ctx.find_group(group)
        topic = RETRY_PREFIX + group
        queue_id = random.randrange(99999999) % 1
        ctx.create_topic_in_back_method(topic, 1, 6)
        # 4.9.8's MessageDecoder skips the magic code; 5.x's refuses a bad one (lookMessageByOffset: null)
        msg = ctx.store.lookup(offset, any_magic=ctx.settings.flavour == 4)
        if msg is None:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = props_decode(msg.props)
        if "RETRY_TOPIC" not in props:
            props["RETRY_TOPIC"] = msg.topic
        props["WAIT"] = "false"
        if msg.reconsume_times >= max_times or level < 0:
            topic = DLQ_PREFIX + group
            queue_id = 0
            ctx.create_topic_in_back_method(topic, 1, 6)
            props["DELAY"] = "0"
        else:
            if level == 0:
                level = 3 + msg.reconsume_times
            props["DELAY"] = str(level)
        origin = props.get("ORIGIN_MESSAGE_ID", "").strip()
        props["ORIGIN_MESSAGE_ID"] = origin or msg.msg_id
        props_str = ctx.encode_props(props)
        try:
            ctx.put(
                topic,
                queue_id,
                msg.body,
                msg.flag,
                props,
                props_str,
                msg.sys_flag,
                msg.born_ts,
                msg.born_host,
                msg.reconsume_times + 1,
            )
        except StoreError as exc:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, exc.status)
        return ctx.respond(cmd, ResponseCode.SUCCESS)

    return {RequestCode.CONSUMER_SEND_MSG_BACK: send_back}
