"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): ``SendMessageProcessor``.

Strategy: the checks of ``msgCheck`` in the Java order (topic name, forbidden system topics, auto
creation from TBW102, queue id range), then the message's properties are re-serialized the way the
broker version does (4.9.8: CLUSTER added, WAIT left out of the stored string; 5.3.3: MSG_REGION,
TRACE_ON and CLUSTER added, WAIT kept, a trailing separator) and the message goes through
``BrokerContext.put`` (delay levels, hold notification). ``handleRetryAndDLQ``: a send to ``%RETRY%<group>``
whose reconsume count reached the maximum goes to ``%DLQ%<group>``. A batch stores each message with
its own properties followed by the batch's. The answer carries msgId (comma-separated for a batch),
queueId, queueOffset, MSG_REGION, TRACE_ON (and transactionId on 5.x). A message with ``TRAN_MSG=true``
is a half message, stored apart by ``transaction.put_half`` (its answer names the half message and
the queue the client asked for).
"""

from __future__ import annotations

import logging
import random
import re
import struct

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .context import BrokerContext, HandlerTable
from .fields import opt_bool, opt_int, opt_str, req_int, req_str
from .jcompat import faq_suffix, java_ext, java_hashmap_capacity, props_decode, tags_code_of
from .server import Connection
from .state import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, TBW102, TopicConfig
from .store import PutResult, StoreError, host_bytes, now_ms
from .timer import TimerRefused, put_timer, recall_handle, timer_out_ms
from .transaction import put_half

__all__ = ["V2_KEYS", "handlers"]

log = logging.getLogger("rmq_async.embedded")

MQ_VERSION_V3_4_9 = 121
_TOPIC_OK = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_NOT_ALLOWED_SEND = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
V2_KEYS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}
_BATCH_ITEM = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_ILLEGAL = (
    "the message is illegal, maybe msg body or properties length not matched. "
    "msg body length limit 4194304B, msg properties length limit 32KB."
)


def handlers(ctx: BrokerContext) -> HandlerTable:
    state, respond = ctx.state, ctx.respond
    flavour = ctx.settings.flavour
    name = ctx.settings.name
    not_exist = faq_suffix(flavour)

    def send_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code != RequestCode.SEND_MESSAGE:
            cmd.ext_fields = {V2_KEYS.get(k, k): v for k, v in cmd.ext_fields.items()}
        ext = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        topic = req_str(cmd, "topic")
        queue_id = req_int(cmd, "queueId")
        born_ts = req_int(cmd, "bornTimestamp")
        sys_flag = req_int(cmd, "sysFlag")
        flag = req_int(cmd, "flag")
        reconsume = opt_int(cmd, "reconsumeTimes", 0) or 0
        if not topic.strip():
            return respond(cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is blank.", ext)
        if not _TOPIC_OK.match(topic):
            return respond(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
                ext,
            )
        if len(topic) > 127:
            return respond(
                cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is longer than topic max length.", ext
            )
        if topic in _NOT_ALLOWED_SEND:
            return respond(
                cmd, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.", ext
            )
        tc = state.topics.get(topic)
        if tc is None:
            tc = _auto_create(
                ctx,
                topic,
                opt_str(cmd, "defaultTopic") or TBW102,
                opt_int(cmd, "defaultTopicQueueNums", 4) or 0,
            )
            if tc is None and topic.startswith(RETRY_PREFIX):
                tc = ctx.create_topic_in_back_method(topic, 1, 6)
            if tc is None:
                return respond(
                    cmd,
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please!{not_exist}",
                    ext,
                )
        if queue_id >= max(tc.write, tc.read):
            return respond(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {tc} Producer: {conn.addr}",
                ext,
            )
        if queue_id < 0:
            queue_id = random.randrange(99999999) % max(tc.write, 1)
        props = props_decode(opt_str(cmd, "properties") or "")
        if flavour == 5 and not props.get("UNIQ_KEY"):
            props["UNIQ_KEY"] = f"{random.getrandbits(128):032X}"
        # a half message (transaction.py), unless a pre-4.6.1 client's retry of one (Java's test)
        half = props.get("TRAN_MSG", "").lower() == "true" and not (reconsume > 0 and "DELAY" in props)
        born_host = host_bytes(conn.ip, conn.port)
        try:
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE or opt_bool(cmd, "batch"):
                results = _put_batch(
                    ctx, topic, queue_id, cmd.body, props, sys_flag, born_ts, born_host, reconsume
                )
            else:
                res = _put_one(
                    ctx, cmd, topic, queue_id, props, sys_flag, flag, born_ts, born_host, reconsume, half, ext
                )
                if isinstance(res, RemotingCommand):
                    res.ext_fields = java_ext({**ext, **res.ext_fields})
                    return res
                results = [res]
        except StoreError as exc:
            log.info("%s: message refused: %s", name, exc)
            return respond(cmd, ResponseCode.MESSAGE_ILLEGAL, _ILLEGAL, ext)
        except TimerRefused as exc:
            return respond(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc), ext)
        ext["msgId"] = ",".join(r.msg_id for r in results)
        ext["queueId"] = str(queue_id)
        ext["queueOffset"] = str(results[0].queue_offset)
        if flavour == 5:
            uniq = props.get("UNIQ_KEY")
            if uniq is not None:
                ext["transactionId"] = uniq
        return respond(cmd, ResponseCode.SUCCESS, None, ext)

    return {
        RequestCode.SEND_MESSAGE: send_message,
        RequestCode.SEND_MESSAGE_V2: send_message,
        RequestCode.SEND_BATCH_MESSAGE: send_message,
    }


def _auto_create(ctx: BrokerContext, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
    """``createTopicInSendMessageMethod``: inherit from TBW102 (when it exists and is inheritable)."""
    base = ctx.state.topics.get(default_topic)
    if base is None or not base.perm & 1:
        return None
    n = max(0, min(queue_nums, base.write))
    tc = TopicConfig(topic, n, n, base.perm & ~1)
    ctx.state.put_topic(tc)
    ctx.register_soon()
    return tc


def _put_one(
    ctx: BrokerContext,
    cmd: RemotingCommand,
    topic: str,
    queue_id: int,
    props: dict[str, str],
    sys_flag: int,
    flag: int,
    born_ts: int,
    born_host: bytes,
    reconsume: int,
    half: bool = False,
    ext: dict[str, str] | None = None,
) -> PutResult | RemotingCommand:
    """One message stored (a half message apart, a 5.x timer message in the timer queue, its
    ``recallHandle`` put in ``ext``), after ``handleRetryAndDLQ``."""
    if topic.startswith(RETRY_PREFIX):  # handleRetryAndDLQ
        group = topic[len(RETRY_PREFIX) :]
        ctx.find_group(group)
        max_times = 16
        if cmd.version >= MQ_VERSION_V3_4_9:
            max_times = opt_int(cmd, "maxReconsumeTimes", 16) or 16
        if reconsume >= max_times:
            topic = DLQ_PREFIX + group
            queue_id = 0
            ctx.create_topic_in_back_method(topic, 1, 6)
    cap = java_hashmap_capacity(len(props) + 1)
    if ctx.settings.flavour == 5:
        # buildMsgContext re-serializes the header properties with MSG_REGION and TRACE_ON, then
        # sendMessage parses that string again and adds CLUSTER (WAIT is kept)
        props["MSG_REGION"] = "DefaultRegion"
        props["TRACE_ON"] = "true"
        props = props_decode(ctx.encode_props(props))
        props["CLUSTER"] = ctx.settings.cluster
        if half:
            return put_half(
                ctx, topic, queue_id, cmd.body, flag, props, sys_flag, born_ts, born_host, reconsume
            )
        s = ctx.settings
        out = timer_out_ms(props, now_ms(), s.timer_precision_ms, s.timer_max_delay_sec)
        if out is not None:
            res = put_timer(
                ctx, topic, queue_id, cmd.body, flag, props, out, sys_flag, born_ts, born_host, reconsume
            )
            if ext is not None and not topic.startswith(RETRY_PREFIX):
                ext["recallHandle"] = recall_handle(topic, s.name, out, props.get("UNIQ_KEY", ""))
            return res
        props_str = ctx.encode_props(props)
        return ctx.put(
            topic, queue_id, cmd.body, flag, props, props_str, sys_flag, born_ts, born_host, reconsume
        )
    props["CLUSTER"] = ctx.settings.cluster
    if "WAIT" in props:
        wait = props.pop("WAIT")
        props_str = ctx.encode_props(props, cap)
        props["WAIT"] = wait  # put back last (it follows PGROUP in their shared bucket)
    else:
        props_str = ctx.encode_props(props)
    if half:  # parseHalfMessageInner writes the whole map again, WAIT included
        return put_half(ctx, topic, queue_id, cmd.body, flag, props, sys_flag, born_ts, born_host, reconsume)
    return ctx.put(topic, queue_id, cmd.body, flag, props, props_str, sys_flag, born_ts, born_host, reconsume)


def _put_batch(
    ctx: BrokerContext,
    topic: str,
    queue_id: int,
    body: bytes,
    batch_props: dict[str, str],
    sys_flag: int,
    born_ts: int,
    born_host: bytes,
    reconsume: int,
) -> list[PutResult]:
    if ctx.settings.flavour == 5:
        batch_props["MSG_REGION"] = "DefaultRegion"
        batch_props["TRACE_ON"] = "true"
        batch_props = props_decode(ctx.encode_props(batch_props))
    batch_props["CLUSTER"] = ctx.settings.cluster
    batch_str = ctx.encode_props(batch_props)
    items: list[tuple[bytes, int, str, dict[str, str]]] = []
    view = memoryview(body)
    pos = 0
    try:
        while pos < len(view):
            _total, _magic, _crc, flag, blen = _BATCH_ITEM.unpack_from(view, pos)
            pos += _BATCH_ITEM.size
            mbody = bytes(view[pos : pos + blen])
            pos += blen
            (plen,) = struct.unpack_from(">h", view, pos)
            pos += 2
            own = str(view[pos : pos + plen], "utf-8")
            pos += plen
            if len(mbody) != blen or pos > len(view):
                raise StoreError("MESSAGE_ILLEGAL", "truncated batch body")
            sep = "\x02" if own and batch_str and not own.endswith("\x02") else ""
            items.append((mbody, flag, own + sep + batch_str, props_decode(own)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise StoreError("MESSAGE_ILLEGAL", f"bad batch body: {exc}") from None
    if not items:
        raise StoreError("MESSAGE_ILLEGAL", "empty batch")
    results = []
    for mbody, flag, props_str, own_props in items:
        res = ctx.store.put(
            topic,
            queue_id,
            mbody,
            flag,
            props_str,
            tags_code_of(own_props),
            sys_flag,
            born_ts,
            born_host,
            reconsume,
        )
        results.append(res)
    ctx.holds.notify(topic, queue_id, results[-1].queue_offset + 1, None)
    return results
