"""PULL_MESSAGE (11) and long polling (``PullMessageProcessor``, ``PullRequestHoldService``).

Strategy: :func:`pull_message` follows the Java processor step by step (topic, queue id, the
subscription from the request or from the group's heartbeat, subVersion check, store lookup, status
to code mapping, the piggy-backed commit offset). A suspendable pull that finds nothing is parked in
:class:`HoldService` under (topic, queue). A put on that queue calls :meth:`HoldService.notify` at
once: a parked pull whose offset is now below the queue end and whose tag filter matches the new
message is re-run and answered on the spot. Otherwise the periodic check (every
``held_pull_check_interval``, as the Java hold service's 5 s wait) re-runs the pulls that have new
data or whose ``suspendTimeoutMillis`` has passed. Re-run answers are always JSON, as the real broker's
are (it never copies the request's serialize type on this path).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio

from ..protocol.codes import PullSysFlag, ResponseCode, SerializeType
from ..protocol.command import RemotingCommand
from .fields import opt_int, opt_str, req_int, req_str
from .groups import Subscription, build_subscription
from .namesrv import faq_suffix
from .server import Connection, Reply

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["HeldPull", "HoldService", "pull_message"]

_STATUS_CODE = {
    "FOUND": ResponseCode.SUCCESS,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
    "MESSAGE_WAS_REMOVING": ResponseCode.PULL_RETRY_IMMEDIATELY,
}


class HeldPull:
    __slots__ = ("cmd", "codes", "conn", "deadline", "offset")

    def __init__(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        offset: int,
        timeout_ms: int,
        codes: frozenset[int] | None,
    ):
        self.conn = conn
        self.cmd = cmd
        self.offset = offset
        self.deadline = time.monotonic() + timeout_ms / 1000.0
        self.codes = codes


def pull_message(broker: Broker, conn: Connection, cmd: RemotingCommand, allow_suspend: bool) -> Reply:
    """Process one pull; None when it was parked (answered later) or is oneway."""
    store = broker.store
    assert store is not None
    group = req_str(cmd, "consumerGroup")
    topic = req_str(cmd, "topic")
    queue_id = req_int(cmd, "queueId")
    offset = req_int(cmd, "queueOffset")
    max_nums = req_int(cmd, "maxMsgNums")
    sys_flag = req_int(cmd, "sysFlag")
    commit_offset = req_int(cmd, "commitOffset")
    suspend_ms = req_int(cmd, "suspendTimeoutMillis")
    sub_version = opt_int(cmd, "subVersion", 0) or 0
    has_suspend = bool(sys_flag & PullSysFlag.SUSPEND)
    has_commit = bool(sys_flag & PullSysFlag.COMMIT_OFFSET)
    has_sub = bool(sys_flag & PullSysFlag.SUBSCRIPTION)
    empty: dict[str, str] = {}

    def fail(code: int, remark: str) -> RemotingCommand:
        return broker.respond(cmd, code, remark, empty)

    broker.find_group(group)
    tc = broker.state.topics.get(topic)
    if tc is None:
        return fail(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! {faq_suffix(broker.flavour)}",
        )
    if not tc.perm & 4:
        return fail(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
    if queue_id < 0 or queue_id >= tc.read:
        return fail(
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read}] "
            f"consumer:[/{conn.addr}]",
        )
    sub: Subscription | None
    if has_sub:
        sub = build_subscription(topic, opt_str(cmd, "subscription"), opt_str(cmd, "expressionType"))
    else:
        g = broker.consumers.get(group)
        if g is None:
            return fail(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                "the consumer's group info not exist" + faq_suffix(broker.flavour),
            )
        sub = g.subs.get(topic)
        if sub is None:
            return fail(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                "the consumer's subscription not exist" + faq_suffix(broker.flavour),
            )
        if sub.version < sub_version:
            return fail(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    if sub.expression_type != "TAG":
        return fail(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {sub.expression_type}",
        )
    res = store.get(topic, queue_id, offset, max_nums, sub.codes)
    ext = {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": str(res.next_begin),
        "minOffset": str(res.min_offset),
        "maxOffset": str(res.max_offset),
    }
    if broker.flavour == 5:
        ext["topicSysFlag"] = str(tc.sys_flag)
        ext["groupSysFlag"] = "0"
    status = res.status
    if status in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"):
        code: int = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    else:
        code = _STATUS_CODE[status]
    resp: Reply = broker.respond(cmd, code, status, ext)
    if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
        broker.holds.hold(topic, queue_id, HeldPull(conn, cmd, offset, suspend_ms, sub.codes))
        resp = None
    elif code == ResponseCode.SUCCESS:
        resp = (broker.respond(cmd, code, status, ext), res.parts)  # the body: slices of the commit log
    if allow_suspend and has_commit:
        broker.state.commit_offset(group, topic, queue_id, commit_offset)
    return resp


class HoldService:
    """Parked pulls by (topic, queue id)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.table: dict[tuple[str, int], list[HeldPull]] = {}

    def hold(self, topic: str, queue_id: int, req: HeldPull) -> None:
        self.table.setdefault((topic, queue_id), []).append(req)

    def connection_closed(self, conn: Connection) -> None:
        for key, reqs in list(self.table.items()):
            kept = [r for r in reqs if r.conn is not conn]
            if kept:
                self.table[key] = kept
            else:
                del self.table[key]

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None) -> None:
        """``notifyMessageArriving``: wake the parked pulls that a message (or a check) satisfies."""
        reqs = self.table.get((topic, queue_id))
        if not reqs:
            return
        now = time.monotonic()
        keep: list[HeldPull] = []
        wake: list[HeldPull] = []
        for r in reqs:
            if (
                max_offset > r.offset and (tags_code is None or r.codes is None or tags_code in r.codes)
            ) or now >= r.deadline:
                wake.append(r)
            else:
                keep.append(r)
        if keep:
            self.table[(topic, queue_id)] = keep
        else:
            del self.table[(topic, queue_id)]
        for r in wake:
            self._answer(r)

    def _answer(self, r: HeldPull) -> None:
        if r.conn.closed:
            return
        r.cmd.serialize_type = SerializeType.JSON  # the wake-up path answers in JSON
        resp: Reply
        try:
            resp = pull_message(self.broker, r.conn, r.cmd, False)
        except Exception as exc:  # pragma: no cover - a bad header was refused before parking
            resp = self.broker.respond(r.cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        if resp is not None and not r.cmd.is_oneway:
            answer, parts = resp if isinstance(resp, tuple) else (resp, ())
            r.conn.send(answer, parts)

    def check(self) -> None:
        """``checkHoldRequest``: re-examine every parked pull against its queue's end."""
        store = self.broker.store
        if store is None:
            return
        for topic, queue_id in list(self.table):
            self.notify(topic, queue_id, store.max_offset(topic, queue_id), None)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.broker.timing.held_pull_check_interval)
            self.check()
