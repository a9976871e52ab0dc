"""POP consumption, broker side (5.x): ``PopMessageProcessor``, ``AckMessageProcessor``,
``ChangeInvisibleTimeProcessor``, ``QueryAssignmentProcessor`` (with SET_MESSAGE_REQUEST_MODE) and
``PopReviveService``.

Strategy: a pop reads each queue from the group's pop offset (its consumer offset, advanced at once and
committed, as the real broker does), scanning the queues from a random start (queue id -1) and, with
``popFromRetryProbability`` (20 %) first or otherwise when the topic had nothing, the pop retry topic
``%RETRY%<group>_<topic>`` (v1 name). Every queue a pop took messages from gets a checkpoint: start
offset, pop time, invisible time, revive queue id and the offsets not acked yet (under a data dir they
are saved with the broker's state, ``config/popCheckpoints.json``, every housekeeping tick and at
shutdown, and read back at start: a restarted broker revives what was popped before). ACK / BATCH_ACK
take offsets out of their checkpoint; CHANGE_MESSAGE_INVISIBLETIME moves one offset to a new checkpoint
of its own (the message's new handle). The revive timer (``pop_revive_interval``) copies what a due
checkpoint still holds into the pop retry topic, reconsume times + 1 and ``1ST_POP_TIME`` kept, and
wakes held pops; a pop that returns a retry message re-encodes it with the original topic and a
broker-made ``POP_CK``. A pop that finds nothing with a poll time is parked in the context's
:class:`~.holds.HoldService` on every queue it could read (and the retry queue), so a put or a revive
wakes it; the periodic hold check answers it with 210 when its poll time is over. The request mode (401)
is kept per topic and group (in ``config/messageRequestMode.json`` under a data dir); QUERY_ASSIGNMENT
answers POP with queue id -1 to every member (one per broker) when ``popShareQueueNum`` is 0 or at least
members - 1, else the member's AVG share of the topic's queues plus its next ``popShareQueueNum``
neighbours' (PULL: AVG), over the queues of every broker as the name server's route lists them (answered
once the route is read).

Each handler is a module-level function of the context, the connection and the command, bound by
:func:`handlers`; what outlives a request (modes, checkpoints, counters, whether the revive timer runs)
is on the context's :class:`PopState`, the stored-message layout in ``protocol/stored.py``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio

from ..protocol.bodies import TopicRouteData
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.commitlog import StoredMessage, stored_queue_offsets
from ..protocol.mq import MessageQueue
from ..protocol.pop import (
    FIRST_POP_TIME,
    POP_CK,
    Assignment,
    ExtraInfo,
    build_offset_info,
    decode_batch_ack,
    decode_query_assignment,
    decode_set_mode,
    encode_assignments,
    pop_retry_topic,
)
from .context import BrokerContext, HandlerTable
from .fields import opt_int, opt_str, req_int, req_str
from .groups import build_subscription
from .holds import HeldPull
from .jcompat import faq_suffix, props_decode
from .pop_state import PopCheckpoint, PopState
from .server import Connection, Reply
from .state import RETRY_PREFIX, load_json, save_json
from .store import now_ms

__all__ = ["PopCheckpoint", "PopState", "handlers", "pop_state"]

log = logging.getLogger("rmq_async.embedded")

POP_FROM_RETRY_PROBABILITY = 20  # BrokerConfig.popFromRetryProbability (percent)


#: under the data dir: the checkpoints not revived yet (the real broker keeps them in its revive topic)
CHECKPOINTS_FILE = ("config", "popCheckpoints.json")


def persist(ctx: BrokerContext) -> None:
    """Save the broker's pending checkpoints under its data dir (the housekeeping timer and shutdown
    call it), so a restarted broker still revives what was popped and not acked before it stopped."""
    data_dir = ctx.settings.data_dir
    ps = ctx.pop
    if data_dir is None or (not ps.cks and ps.saved_empty):
        return
    rows = [
        [ck.group, ck.topic, ck.origin, ck.queue_id, ck.start, ck.pop_time, ck.invisible_time,
         ck.revive_qid, sorted(ck.pending)]
        for ck in ps.cks.values()
    ]  # fmt: skip
    save_json(data_dir.joinpath(*CHECKPOINTS_FILE), {"checkpoints": rows})
    ps.saved_empty = not rows


def pop_state(ctx: BrokerContext) -> PopState:
    """The POP state of the broker with this context (filled by :func:`handlers`)."""
    return ctx.pop


def _avg(n_items: int, cids: list[str], me: str) -> list[int]:
    """``AllocateMessageQueueAveragely`` over item indexes."""
    if me not in cids or not n_items:
        return []
    index, n = cids.index(me), len(cids)
    mod = n_items % n
    size = (n_items // n + (1 if index < mod else 0)) if n_items > n else 1
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [(start + i) % n_items for i in range(min(size, n_items - start))]


def handlers(ctx: BrokerContext) -> HandlerTable:
    """The POP request handlers of a 5.x broker, bound to its context (none for 4.x, which does not
    know these codes), after reading back the request modes and checkpoints under its data dir."""
    if ctx.settings.flavour != 5:
        return {}
    _load(ctx)
    ctx.pop.revive_once = partial(revive_once, ctx)
    return {
        RequestCode.POP_MESSAGE: partial(pop_message, ctx),
        RequestCode.ACK_MESSAGE: partial(ack_message, ctx),
        RequestCode.BATCH_ACK_MESSAGE: partial(batch_ack, ctx),
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: partial(change_invisible, ctx),
        RequestCode.SET_MESSAGE_REQUEST_MODE: partial(set_mode, ctx),
        RequestCode.QUERY_ASSIGNMENT: partial(query_assignment, ctx),
    }


def _modes_file(ctx: BrokerContext) -> Path | None:
    """``MessageRequestModeManager``'s file under the data dir: the modes by topic, then group."""
    data_dir = ctx.settings.data_dir
    return data_dir / "config" / "messageRequestMode.json" if data_dir is not None else None


def _load(ctx: BrokerContext) -> None:
    """Read the request modes and the pending checkpoints a broker saved under its data dir."""
    ps, data_dir, modes_file = ctx.pop, ctx.settings.data_dir, _modes_file(ctx)
    if modes_file is not None:
        for topic, by_group in ((load_json(modes_file) or {}).get("messageRequestModeMap") or {}).items():
            for group, m in by_group.items():
                ps.modes[(topic, group)] = (str(m.get("mode", "PULL")), int(m.get("popShareQueueNum", 0)))
    if data_dir is not None:
        for row in (load_json(data_dir.joinpath(*CHECKPOINTS_FILE)) or {}).get("checkpoints") or []:
            g, t, origin, q, start, pt, inv, rq, pending = row
            ck = PopCheckpoint(g, t, origin, int(q), int(start), int(pt), int(inv), int(rq), set(pending))
            ps.add_ck(ck)
        ps.saved_empty = not ps.cks


# -- POP_MESSAGE -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pop:
    """One POP_MESSAGE request over the queues it reads: what every checkpoint it makes shares, and
    what it gathers (the message slices, and per queue: retry or not, queue id, offsets taken)."""

    group: str
    origin: str  # the topic popped (a retry queue's checkpoints name it as their origin)
    pop_time: int
    invisible: int
    revive_qid: int
    parts: list[bytes | memoryview] = field(default_factory=list)
    info: list[tuple[bool, int, list[int]]] = field(default_factory=list)


def _pop_offset(ctx: BrokerContext, group: str, topic: str, q: int, init_mode: int) -> int:
    """Where the group pops ``topic``:``q`` from: its consumer offset, else by ``init_mode`` (0 min,
    1 max; a retry topic always from its min), never below the queue's min offset."""
    store = ctx.store
    off = ctx.state.query_offset(group, topic, q)
    if off < 0:
        off = (
            store.min_offset(topic, q)
            if init_mode == 0 or topic.startswith(RETRY_PREFIX)
            else (store.max_offset(topic, q))
        )
    return max(off, store.min_offset(topic, q))


def _pop_queue(
    ctx: BrokerContext,
    pop: _Pop,
    topic: str,
    q: int,
    want: int,
    codes: frozenset[int] | None,
    init_mode: int,
) -> tuple[int, int]:
    """Pop up to ``want`` messages of one queue: (count, rest of the queue)."""
    store, state = ctx.store, ctx.state
    group, origin, pop_time = pop.group, pop.origin, pop.pop_time
    offset = _pop_offset(ctx, group, topic, q, init_mode)
    end = store.max_offset(topic, q)
    if want <= 0 or offset >= end:
        return 0, max(0, end - offset)
    res = store.get(topic, q, offset, want, codes)
    if res.status == "OFFSET_TOO_SMALL":
        offset = res.next_begin
        res = store.get(topic, q, offset, want, codes)
    if res.status != "FOUND" and res.status != "NO_MATCHED_MESSAGE":
        return 0, max(0, end - offset)
    state.commit_offset(group, topic, q, res.next_begin)
    if not res.count:
        return 0, max(0, end - res.next_begin)
    retry = topic != origin
    offsets = stored_queue_offsets(res.parts)
    ck = PopCheckpoint(
        group, topic, origin, q, offsets[0], pop_time, pop.invisible, pop.revive_qid, set(offsets)
    )
    ctx.pop.add_ck(ck)
    if retry:
        for p, off in zip(res.parts, offsets, strict=True):
            sm = StoredMessage(bytes(p))
            props = props_decode(sm.props)
            props.setdefault(FIRST_POP_TIME, str(pop_time))
            props[POP_CK] = str(
                ExtraInfo(offsets[0], pop_time, pop.invisible, pop.revive_qid, "1", ctx.settings.name, q, off)
            )
            pop.parts.append(sm.reencode(origin, ctx.encode_props(props)))
    else:
        pop.parts.extend(res.parts)
    pop.info.append((retry, q, offsets))
    return res.count, max(0, end - res.next_begin)


def pop_message(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand, park: bool = True) -> Reply:
    """POP_MESSAGE (200): the retry queue first or last, the topic's queues from a random start; parked
    on every queue read when nothing is found and the poll time is not over (``park`` False: a re-run
    of a parked pop, whose deadline the request carries)."""
    respond, state, ps = ctx.respond, ctx.state, ctx.pop
    group = req_str(cmd, "consumerGroup")
    topic = req_str(cmd, "topic")
    queue_id = req_int(cmd, "queueId")
    max_nums = req_int(cmd, "maxMsgNums")
    invisible = req_int(cmd, "invisibleTime")
    poll_ms = req_int(cmd, "pollTime")
    born = req_int(cmd, "bornTime")
    init_mode = opt_int(cmd, "initMode", 0) or 0
    empty: dict[str, str] = {}
    if max_nums > 32:
        return respond(cmd, ResponseCode.SYSTEM_ERROR, "the broker's maxMsgNums is 32", empty)
    ctx.find_group(group)
    tc = state.topics.get(topic)
    if tc is None:
        return respond(
            cmd,
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! {faq_suffix(ctx.settings.flavour)}",
            empty,
        )
    if not tc.perm & 4:
        return respond(cmd, ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    if queue_id >= tc.read:
        return respond(
            cmd,
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read}] "
            f"consumer:[/{conn.addr}]",
        )
    try:
        sub = build_subscription(topic, opt_str(cmd, "exp") or "*", opt_str(cmd, "expType"))
    except ValueError:
        return respond(
            cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
        )
    pop = _Pop(group, topic, now_ms(), invisible, ps.next_revive_qid())
    retry_topic = pop_retry_topic(topic, group)
    has_retry = retry_topic in state.topics
    want, rest = max_nums, 0
    retry_first = has_retry and random.randrange(100) < POP_FROM_RETRY_PROBABILITY
    if retry_first:
        n, r = _pop_queue(ctx, pop, retry_topic, 0, want, None, 0)
        want, rest = want - n, rest + r
    queues = (
        [queue_id]
        if queue_id >= 0
        else [(s + i) % tc.read for s in [random.randrange(tc.read)] for i in range(tc.read)]
    )
    for q in queues:
        n, r = _pop_queue(ctx, pop, topic, q, want, sub.codes, init_mode)
        want, rest = want - n, rest + r
    if has_retry and not retry_first and want == max_nums:
        n, r = _pop_queue(ctx, pop, retry_topic, 0, want, None, 0)
        want, rest = want - n, rest + r
    start_info, msg_info = build_offset_info(pop.info)
    ext = {
        "popTime": str(pop.pop_time),
        "invisibleTime": str(invisible),
        "reviveQid": str(pop.revive_qid),
        "restNum": str(rest),
        "startOffsetInfo": start_info,
        "msgOffsetInfo": msg_info,
    }
    if ps.cks:  # new ones, or ones a restarted broker read back
        _ensure_reviver(ctx)
    if pop.parts:
        ps.popped += max_nums - want
        return respond(cmd, ResponseCode.SUCCESS, "FOUND", ext), pop.parts
    deadline = born + poll_ms if park else int(cmd.ext_fields.get("_deadline", "0"))
    remaining = deadline - now_ms()
    if poll_ms > 0 and remaining > 0:
        cmd.ext_fields["_deadline"] = str(deadline)
        rerun = partial(_rerun, ctx, _Token())
        for t, q in [(topic, q) for q in queues] + [(retry_topic, 0)]:
            offset = _pop_offset(ctx, group, t, q, init_mode)
            ctx.holds.hold(t, q, HeldPull(conn, cmd, offset, remaining, None, rerun))
        return None
    cmd.ext_fields.pop("_deadline", None)
    return respond(cmd, ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext)


class _Token:
    """One parked pop, registered on several queues: answered once."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


def _rerun(ctx: BrokerContext, token: _Token, conn: Connection, cmd: RemotingCommand) -> Reply:
    """A parked pop run again (its :class:`~.holds.HeldPull`'s rerun), by the first queue that wakes
    it; the others find it answered."""
    if token.done:
        return None
    token.done = True
    try:
        return pop_message(ctx, conn, cmd, False)
    except Exception as exc:  # pragma: no cover - the header was checked before parking
        return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, str(exc))


# -- ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME -----------------------------------


def _check_queue(
    ctx: BrokerContext, conn: Connection, cmd: RemotingCommand, topic: str, q: int, offset: int
) -> RemotingCommand | None:
    """The error response when ``topic``:``q`` does not exist or ``offset`` is outside it, else None."""
    tc = ctx.state.topics.get(topic)
    if tc is None:
        return ctx.respond(
            cmd,
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! {faq_suffix(ctx.settings.flavour)}",
        )
    if q < 0 or q >= tc.read:
        return ctx.respond(
            cmd,
            ResponseCode.MESSAGE_ILLEGAL,
            f"queueId[{q}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read}] "
            f"consumer:[/{conn.addr}]",
        )
    store = ctx.store
    lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
    if offset < lo or offset >= hi:
        return ctx.respond(
            cmd,
            ResponseCode.NO_MESSAGE,
            f"offset is illegal, key:{topic}@{q}, commit:{offset}, store:{lo}~{hi}",
        )
    return None


def ack_message(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand) -> Reply:
    """ACK_MESSAGE (201): the offset out of the checkpoint its handle names."""
    group = req_str(cmd, "consumerGroup")
    topic = req_str(cmd, "topic")
    q = req_int(cmd, "queueId")
    offset = req_int(cmd, "offset")
    info = ExtraInfo.parse(req_str(cmd, "extraInfo"))
    bad = _check_queue(ctx, conn, cmd, topic, q, offset)
    if bad is not None:
        return bad
    ctx.pop.ack(group, topic, q, info.ck_offset, info.pop_time, offset)
    return ctx.respond(cmd, ResponseCode.SUCCESS)


def batch_ack(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand) -> Reply:
    """BATCH_ACK_MESSAGE (200051): every offset of every entry out of its checkpoint."""
    _, acks = decode_batch_ack(cmd.body)
    for a in acks:
        topic = pop_retry_topic(a.topic, a.group, a.retry == "2") if a.retry in ("1", "2") else a.topic
        for off in a.offsets:
            ctx.pop.ack(a.group, topic, a.queue_id, a.start_offset, a.pop_time, off)
    return ctx.respond(cmd, ResponseCode.SUCCESS)


def change_invisible(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand) -> Reply:
    """CHANGE_MESSAGE_INVISIBLETIME (200053): the offset moves to a new checkpoint of its own, whose
    pop time and revive queue are the message's new handle."""
    ps = ctx.pop
    group = req_str(cmd, "consumerGroup")
    topic = req_str(cmd, "topic")
    q = req_int(cmd, "queueId")
    offset = req_int(cmd, "offset")
    invisible = req_int(cmd, "invisibleTime")
    info = ExtraInfo.parse(req_str(cmd, "extraInfo"))
    bad = _check_queue(ctx, conn, cmd, topic, q, offset)
    if bad is not None:
        return bad
    old = ps.cks.get((group, topic, q, info.ck_offset, info.pop_time))
    origin = old.origin if old is not None else topic
    if ps.ack(group, topic, q, info.ck_offset, info.pop_time, offset):
        ps.acked -= 1  # moved to a checkpoint of its own, not acked
    pop_time = now_ms()
    while (group, topic, q, offset, pop_time) in ps.cks:
        pop_time += 1  # a handle names one checkpoint: not the pop's of the same millisecond
    revive_qid = ps.next_revive_qid()
    ps.add_ck(PopCheckpoint(group, topic, origin, q, offset, pop_time, invisible, revive_qid, {offset}))
    ps.changed += 1
    _ensure_reviver(ctx)
    ext = {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": str(revive_qid)}
    return ctx.respond(cmd, ResponseCode.SUCCESS, "not set any response code", ext)


# -- SET_MESSAGE_REQUEST_MODE, QUERY_ASSIGNMENT ------------------------------------------------------


def set_mode(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand) -> Reply:
    """SET_MESSAGE_REQUEST_MODE (401): the topic's and group's mode, saved under the data dir."""
    respond, ps = ctx.respond, ctx.pop
    topic, group, mode, share = decode_set_mode(cmd.body)
    if topic.startswith(RETRY_PREFIX):
        return respond(cmd, ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
    if topic not in ctx.state.topics:
        return respond(cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    ps.modes[(topic, group)] = (mode, share)
    modes_file = _modes_file(ctx)
    if modes_file is not None:
        table: dict[str, dict[str, dict[str, object]]] = {}
        for (t, g), (m, n) in sorted(ps.modes.items()):
            table.setdefault(t, {})[g] = {"consumerGroup": g, "mode": m, "popShareQueueNum": n, "topic": t}
        save_json(modes_file, {"messageRequestModeMap": table})
    return respond(cmd, ResponseCode.SUCCESS)


def _assignments(ctx: BrokerContext, body: dict[str, str], mq_all: list[MessageQueue]) -> list[Assignment]:
    """``QueryAssignmentProcessor.doLoadBalance`` over the topic's queues on every broker."""
    topic, group, me = body["topic"], body["consumerGroup"], body["clientId"]
    g = ctx.consumers.get(group)
    cids = sorted(g.client_ids()) if g is not None else []
    mode, share = ctx.pop.modes.get((topic, group), ("PULL", 0))
    if topic.startswith(RETRY_PREFIX):
        mode = "PULL"
    if body["messageModel"] == "BROADCASTING":
        return [Assignment(mq, mode) for mq in mq_all]
    if mode == "POP" and (share <= 0 or share >= len(cids) - 1):
        return [
            Assignment(MessageQueue(topic, b, -1), "POP") for b in sorted({mq.broker_name for mq in mq_all})
        ]
    if mode == "POP" and me in cids:
        mine: set[int] = set()
        i = cids.index(me)
        for j in range(share + 1):
            mine.update(_avg(len(mq_all), cids, cids[(i + j) % len(cids)]))
        return [Assignment(mq_all[k], "POP") for k in sorted(mine)]
    return [Assignment(mq_all[k], "PULL") for k in _avg(len(mq_all), cids, me)]


def _own_queues(ctx: BrokerContext, topic: str) -> list[MessageQueue]:
    tc = ctx.state.topics.get(topic)
    return [MessageQueue(topic, ctx.settings.name, q) for q in range(tc.read)] if tc is not None else []


async def _route_queues(ctx: BrokerContext, topic: str) -> list[MessageQueue]:
    """The readable queues of ``topic`` on every broker (from the name server), else this one's."""
    settings = ctx.settings
    if ctx.namesrv_request is not None:
        req = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": topic},
            language="JAVA",
            version=settings.version,
        )
        try:
            resp = await ctx.namesrv_request(req, settings.timing.request_timeout)
            if resp is not None and resp.code == ResponseCode.SUCCESS and resp.body:
                route = TopicRouteData.decode(resp.body)
                mqs = [
                    MessageQueue(topic, qd.broker_name, q)
                    for qd in route.queue_datas
                    if qd.perm & 4
                    for q in range(qd.read_queue_nums)
                ]
                if mqs:
                    return sorted(mqs)
        except Exception as exc:  # the name server is away: this broker's queues
            log.debug("query assignment: no route of %s: %s", topic, exc)
    return _own_queues(ctx, topic)


async def _answer_later(
    ctx: BrokerContext, conn: Connection, cmd: RemotingCommand, body: dict[str, str]
) -> None:
    mqs = await _route_queues(ctx, body["topic"])
    if not conn.closed:
        assignments = encode_assignments(_assignments(ctx, body, mqs))
        conn.send(ctx.respond(cmd, ResponseCode.SUCCESS, None, None, assignments))


def query_assignment(ctx: BrokerContext, conn: Connection, cmd: RemotingCommand) -> Reply:
    """QUERY_ASSIGNMENT (400): answered once the topic's route is read (``TopicRouteInfoManager``)."""
    body = decode_query_assignment(cmd.body)
    if body["topic"] not in ctx.state.topics:
        return ctx.respond(cmd, ResponseCode.SUCCESS, None, None, encode_assignments([]))
    ctx.spawn(_answer_later, ctx, conn, cmd, body)
    return None


# -- revive ------------------------------------------------------------------------------------------


def revive_once(ctx: BrokerContext) -> int:
    """Copy what every due checkpoint still holds into its pop retry topic; the number copied."""
    ps, store = ctx.pop, ctx.store
    now = now_ms()
    n = 0
    due = sorted((ck.due, i, key) for i, (key, ck) in enumerate(ps.cks.items()) if ck.due <= now)
    for _, _, key in due:  # the earliest due first (PopReviveService: by revive offset)
        ck = ps.cks.pop(key)
        retry_topic = ck.topic if ck.topic != ck.origin else pop_retry_topic(ck.origin, ck.group)
        ctx.create_topic_in_back_method(retry_topic, 1, 6)
        for off in sorted(ck.pending):
            res = store.get(ck.topic, ck.queue_id, off, 1, None)
            if res.status != "FOUND":
                continue
            sm = StoredMessage(bytes(res.parts[0]))
            props = props_decode(sm.props)
            props.pop(POP_CK, None)
            props.setdefault(FIRST_POP_TIME, str(ck.pop_time))
            ctx.put(
                retry_topic,
                0,
                sm.body,
                sm.flag,
                props,
                ctx.encode_props(props),
                sm.sys_flag,
                sm.born_ts,
                store.store_host,
                sm.reconsume_times + 1,
            )
            n += 1
    ps.revived += n
    return n


async def _revive_loop(ctx: BrokerContext) -> None:
    while True:
        await anyio.sleep(ctx.settings.timing.pop_revive_interval)
        try:
            revive_once(ctx)
        except Exception:  # pragma: no cover - logged, the timer goes on
            log.exception("pop revive failed")


def _ensure_reviver(ctx: BrokerContext) -> None:
    ps = ctx.pop
    if not ps.reviver_started:
        ps.reviver_started = True
        ctx.spawn(_revive_loop, ctx)
