"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): ``ReplyMessageProcessor``.

Strategy, as RocketMQ's processor and ``reply.jsonl`` (4.9.8) have it: the reply's topic must
exist (``<cluster>_REPLY_TOPIC`` does from the start: ``BrokerState``); the broker looks up the
requester named in ``REPLY_TO_CLIENT`` among its producer connections (a requester's heartbeat
registered it) and pushes the reply there as a PUSH_REPLY_MESSAGE_TO_CLIENT (326) request: the
long-named ``ReplyMessageRequestHeader`` with the send's fields, ``bornHost``, ``storeHost``,
``storeTimestamp`` and the properties plus ``PUSH_REPLY_TIME``, the body as sent. It waits for the
requester's answer (in a broker job, so the connection keeps reading), then stores the reply
(``storeReplyMessageEnable``: the header's properties string as it is) and only then answers the
send: the push's outcome decides the code (SYSTEM_ERROR with Java's remark when the requester is
not connected or did not answer 0), the store's the msgId, queueId and queueOffset.
"""

from __future__ import annotations

import logging
import random

from ..errors import RocketMQError
from ..protocol.codes import Prop, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.reply import ReplyMessageRequestHeader
from .context import BrokerContext, HandlerTable
from .fields import opt_bool, opt_int, opt_str, req_int, req_str
from .jcompat import props_decode
from .send import V2_KEYS
from .server import Connection
from .store import StoreError, host_bytes, now_ms

__all__ = ["handlers"]

log = logging.getLogger("rmq_async.embedded")

#: ``Broker2Client.callClient``: how long the broker waits for the requester's answer
_PUSH_TIMEOUT = 10.0


def handlers(ctx: BrokerContext) -> HandlerTable:
    def send_reply(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2:
            cmd.ext_fields = {V2_KEYS.get(k, k): v for k, v in cmd.ext_fields.items()}
        ext = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        topic = req_str(cmd, "topic")
        tc = ctx.state.topics.get(topic)
        if tc is None:
            return ctx.respond(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!", ext
            )
        queue_id = req_int(cmd, "queueId")
        if queue_id >= max(tc.write, tc.read):
            remark = f"request queueId[{queue_id}] is illegal, {tc} Producer: {conn.addr}"
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, remark, ext)
        store_queue = random.randrange(99999999) % max(tc.write, 1) if queue_id < 0 else queue_id
        ctx.spawn(_push_store_answer, ctx, conn, cmd, topic, queue_id, store_queue, ext)
        return None

    return {RequestCode.SEND_REPLY_MESSAGE: send_reply, RequestCode.SEND_REPLY_MESSAGE_V2: send_reply}


async def _push_store_answer(
    ctx: BrokerContext,
    conn: Connection,
    cmd: RemotingCommand,
    topic: str,
    queue_id: int,
    store_queue: int,
    ext: dict[str, str],
) -> None:
    props_str = opt_str(cmd, "properties") or ""
    props = props_decode(props_str)
    remark = await _push(ctx, conn, cmd, topic, queue_id, props)
    born_ts = req_int(cmd, "bornTimestamp")
    flag = req_int(cmd, "flag")
    sys_flag = req_int(cmd, "sysFlag")
    try:
        res = ctx.put(
            topic, store_queue, cmd.body, flag, props_decode(props_str), props_str, sys_flag, born_ts,
            host_bytes(conn.ip, conn.port), opt_int(cmd, "reconsumeTimes", 0) or 0,
        )  # fmt: skip
    except StoreError as exc:
        log.warning("%s: reply message not stored: %s", ctx.settings.name, exc)
    else:
        ext.update(msgId=res.msg_id, queueId=str(store_queue), queueOffset=str(res.queue_offset))
    code = ResponseCode.SUCCESS if remark is None else ResponseCode.SYSTEM_ERROR
    conn.send(ctx.respond(cmd, code, remark, ext))


def _host_text(host: bytes) -> str:
    """A stored host (4 address bytes, a big-endian port) as ``ip:port``."""
    return f"{'.'.join(str(b) for b in host[:4])}:{int.from_bytes(host[4:8], 'big')}"


async def _push(
    ctx: BrokerContext,
    conn: Connection,
    cmd: RemotingCommand,
    topic: str,
    queue_id: int,
    props: dict[str, str],
) -> str | None:
    """``pushReplyMessage``: None once the requester answered 0, else the answer's remark."""
    sender = props.get(Prop.REPLY_TO_CLIENT)
    if sender is None:
        return f"reply message properties[{Prop.REPLY_TO_CLIENT}] is null"
    ch = ctx.producers.find_channel(sender)
    if ch is None:
        return f"push reply message fail, channel of <{sender}> not found."
    props[Prop.PUSH_REPLY_TIME] = str(now_ms())
    header = ReplyMessageRequestHeader(
        producer_group=req_str(cmd, "producerGroup"),
        topic=topic,
        default_topic=req_str(cmd, "defaultTopic"),
        default_topic_queue_nums=req_int(cmd, "defaultTopicQueueNums"),
        queue_id=queue_id,
        sys_flag=req_int(cmd, "sysFlag"),
        born_timestamp=req_int(cmd, "bornTimestamp"),
        flag=req_int(cmd, "flag"),
        born_host=f"{conn.ip}:{conn.port}",
        store_host=_host_text(ctx.store.store_host),
        store_timestamp=now_ms(),
        properties=ctx.encode_props(props),
        reconsume_times=opt_int(cmd, "reconsumeTimes", 0),
        unit_mode=bool(opt_bool(cmd, "unitMode")),
    )
    push = RemotingCommand.request(
        RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
        header.to_ext_fields(),
        cmd.body,
        language="JAVA",
        version=ctx.settings.version,
    )
    try:
        resp = await ch.conn.invoke(push, _PUSH_TIMEOUT)
    except RocketMQError as exc:
        log.warning("%s: push reply message to <%s> fail: %s", ctx.settings.name, sender, exc)
        return f"push reply message to {sender}fail."
    if resp.code != ResponseCode.SUCCESS:
        log.warning("%s: push reply message to <%s> return fail: %s", ctx.settings.name, sender, resp.remark)
        return f"push reply message to {sender}fail."
    return None
