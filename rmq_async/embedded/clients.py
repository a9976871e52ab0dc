"""Client management requests: heartbeat, unregister, consumer list, queue locks, and the admin
requests the broker forwards to a consumer (``ClientManageProcessor``, ``ConsumerManageProcessor``,
``AdminBrokerProcessor.lockBatchMQ/callConsumer``, ``Broker2Client``).

Strategy: bodies are strict JSON from Java clients (heartbeat, lock/unlock) and are read with
``json.loads``; answers are written as fastjson writes them. Forwarded admin calls (307, 309, 223)
need the member's answer, so they are answered from a task in the broker's task group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..errors import RequestTimeout, RocketMQError
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .admin import NOT_SET
from .context import BrokerContext, HandlerTable
from .fields import opt_int, opt_str, req_int, req_str
from .filters import compile_error, is_tag_type
from .groups import ClientChannel, Subscription, mq_keys, mq_list_json
from .jcompat import json_body, mq_hashmap_order, mq_json, object_key_map_json
from .server import Connection, HeaderError
from .state import RETRY_PREFIX

__all__ = ["handlers"]

MQ_VERSION_V3_0_7_SNAPSHOT = 28
MQ_VERSION_V3_1_8_SNAPSHOT = 62
_FORWARD_TIMEOUT = 10.0  # Broker2Client.callClient


def _json(cmd: RemotingCommand) -> dict[str, Any]:
    try:
        obj = json.loads(cmd.body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise HeaderError("request body is not a JSON object")
    return obj


def handlers(ctx: BrokerContext) -> HandlerTable:
    def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = _json(cmd)
        client_id = str(data.get("clientID") or "")
        conn.client_id = client_id
        for cd in data.get("consumerDataSet") or ():
            group = str(cd["groupName"])
            ctx.find_group(group)
            ctx.create_topic_in_back_method(RETRY_PREFIX + group, 1, 6)
            subs = [Subscription.from_json(s) for s in cd.get("subscriptionDataSet") or ()]
            ctx.filters.register(group, subs)  # REGISTER: ConsumerFilterManager.register(group, subList)
            ctx.consumers.register(
                group,
                ClientChannel(conn, client_id, cmd.language, cmd.version),
                str(cd.get("consumeType", "")),
                str(cd.get("messageModel", "")),
                str(cd.get("consumeFromWhere", "")),
                subs,
            )
        for pd in data.get("producerDataSet") or ():
            ctx.producers.register(
                str(pd["groupName"]), ClientChannel(conn, client_id, cmd.language, cmd.version)
            )
        if ctx.settings.flavour == 5:
            return ctx.respond(cmd, 0, None, {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"})
        return ctx.respond(cmd, 0)

    def check_client_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): ``ClientManageProcessor.checkClientConfig``."""
        sub = _json(cmd).get("subscriptionData") if cmd.body else None
        if isinstance(sub, dict):
            etype = sub.get("expressionType")
            if is_tag_type(None if etype is None else str(etype)):
                return ctx.respond(cmd, ResponseCode.SUCCESS)
            if not ctx.settings.enable_property_filter:
                return ctx.respond(
                    cmd,
                    ResponseCode.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {etype}",
                )
            ok, remark = compile_error(str(sub.get("subString") or ""), str(etype), ctx.filters.flavour)
            if not ok:
                return ctx.respond(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark)
        return ctx.respond(cmd, ResponseCode.SUCCESS)

    def unregister(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req_str(cmd, "clientID")
        pgroup = opt_str(cmd, "producerGroup")
        if pgroup is not None:
            ctx.producers.unregister(pgroup, conn)
        cgroup = opt_str(cmd, "consumerGroup")
        if cgroup is not None:
            ctx.find_group(cgroup)
            ctx.consumers.unregister(cgroup, conn)
        return ctx.respond(cmd, 0, None, {})

    def consumer_list(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        g = ctx.consumers.get(group)
        if g is not None and g.channels:
            return ctx.respond(cmd, 0, None, {}, json_body({"consumerIdList": g.client_ids()}))
        return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}", {})

    def lock(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = _json(cmd)
        locked = ctx.locks.try_lock_batch(
            str(body["consumerGroup"]), mq_keys(body.get("mqSet") or ()), str(body["clientId"])
        )
        return ctx.respond(cmd, 0, None, None, json_body({"lockOKMQSet": mq_list_json(locked)}))

    def unlock(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = _json(cmd)
        ctx.locks.unlock_batch(
            str(body["consumerGroup"]), mq_keys(body.get("mqSet") or ()), str(body["clientId"])
        )
        return ctx.respond(cmd, 0)

    def call_consumer(conn: Connection, code: int, cmd: RemotingCommand, group: str, client_id: str) -> None:
        """``callConsumer``: forward to the member's channel, answer with its response."""
        ch = ctx.consumers.find_channel(group, client_id)
        if ch is None:
            remark = f"The Consumer <{group}> <{client_id}> not online"
        elif ch.version < MQ_VERSION_V3_1_8_SNAPSHOT:
            remark = (
                f"The Consumer <{client_id}> Version <{ch.version}> too low to finish, "
                "please upgrade it to V3_1_8_SNAPSHOT"
            )
        else:
            fwd = RemotingCommand.request(
                code, dict(cmd.ext_fields), cmd.body, language="JAVA", version=ctx.settings.version
            )
            ctx.spawn(_forward, conn, ch, fwd, cmd, group, client_id)
            return
        if not cmd.is_oneway:
            conn.send(ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, remark))

    async def _forward(
        conn: Connection, ch: ClientChannel, fwd: RemotingCommand, cmd: RemotingCommand, group: str, cid: str
    ) -> None:
        try:
            resp = await ch.conn.invoke(fwd, _FORWARD_TIMEOUT)
        except RequestTimeout as exc:
            resp = ctx.respond(
                cmd, ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{cid}> Timeout: {exc}"
            )
        except RocketMQError as exc:
            resp = ctx.respond(
                cmd, ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{cid}> Exception: {exc}"
            )
        else:
            resp.opaque = cmd.opaque
            resp.serialize_type = cmd.serialize_type
        if not cmd.is_oneway:
            conn.send(resp)

    def running_info(conn: Connection, cmd: RemotingCommand) -> None:
        group, cid = req_str(cmd, "consumerGroup"), req_str(cmd, "clientId")
        call_consumer(conn, RequestCode.GET_CONSUMER_RUNNING_INFO, cmd, group, cid)

    def consume_directly(conn: Connection, cmd: RemotingCommand) -> None:
        group, cid, msg_id = req_str(cmd, "consumerGroup"), req_str(cmd, "clientId"), req_str(cmd, "msgId")
        cmd.ext_fields["brokerName"] = ctx.settings.name
        try:
            view = ctx.store.message_at(int(msg_id[-16:], 16))
        except ValueError:
            view = None
        cmd.body = bytes(view) if view is not None else b""
        call_consumer(conn, RequestCode.CONSUME_MESSAGE_DIRECTLY, cmd, group, cid)

    def reset_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222): RESET_CONSUMER_CLIENT_OFFSET (220) to each member."""
        topic = req_str(cmd, "topic")
        group = req_str(cmd, "group")
        timestamp = req_int(cmd, "timestamp")
        force = (opt_str(cmd, "isForce") or "false").lower() == "true"
        tc = ctx.state.topics.get(topic)
        queue_id = opt_int(cmd, "queueId")
        if ctx.settings.flavour == 5 and queue_id is not None and queue_id >= 0:
            return reset_queue(cmd, topic, group, queue_id, timestamp)
        if tc is None:
            return ctx.respond(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this ctx. topic={topic}",
            )
        table: list[tuple[dict[str, Any], int]] = []
        for q in range(tc.write):
            current = ctx.state.query_offset(group, topic, q)
            if current == -1:
                return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            if timestamp == -1:
                target = ctx.store.max_offset(topic, q)
            else:
                target = ctx.store.offset_by_time(topic, q, timestamp)
            target = max(target, 0)
            table.append(
                (mq_json(topic, ctx.settings.name, q), target if force or target < current else current)
            )
        body = ('{"offsetTable":' + object_key_map_json(mq_hashmap_order(table)) + "}").encode()
        g = ctx.consumers.get(group)
        if g is None or not g.channels:
            return ctx.respond(
                cmd,
                ResponseCode.CONSUMER_NOT_ONLINE,
                "Consumer not online, so can not reset offset, "
                f"Group: {group} Topic: {topic} Timestamp: {timestamp}",
            )
        for ch in g.channels.values():
            if ch.version < MQ_VERSION_V3_0_7_SNAPSHOT:
                return ctx.respond(
                    cmd, ResponseCode.SYSTEM_ERROR, "the client does not support this feature."
                )
        tell_members(g.channels.values(), topic, group, timestamp, body)
        return ctx.respond(cmd, 0, NOT_SET, None, body)

    def tell_members(
        channels: Iterable[ClientChannel], topic: str, group: str, timestamp: int, body: bytes
    ) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (220), oneway, to each member."""
        for ch in channels:
            ch.conn.oneway(
                RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "false"},
                    body,
                    language="JAVA",
                    version=ctx.settings.version,
                )
            )

    def reset_queue(
        cmd: RemotingCommand, topic: str, group: str, queue_id: int, timestamp: int
    ) -> RemotingCommand:
        """5.x ``resetOffsetInner`` for one queue (``queueId`` >= 0): ``offset`` (in the queue's range)
        or the offset at ``timestamp`` becomes the group's committed offset. The 5.x broker then
        answers the members' pulls from it; this one tells the online members with a 220 of that
        queue, which moves them the same way."""
        if topic not in ctx.state.topics:
            return ctx.respond(cmd, ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if group not in ctx.state.groups:
            return ctx.respond(
                cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist"
            )
        offset = opt_int(cmd, "offset")
        low, high = ctx.store.min_offset(topic, queue_id), ctx.store.max_offset(topic, queue_id)
        if offset is not None and offset != -1:
            if offset < low or offset > high + 1:
                return ctx.respond(
                    cmd,
                    ResponseCode.SYSTEM_ERROR,
                    f"Target offset {offset} not in consume queue range [{low}-{high}]",
                )
        else:
            offset = high if timestamp < 0 else ctx.store.offset_by_time(topic, queue_id, timestamp)
        ctx.state.commit_offset(group, topic, queue_id, offset)
        body = (
            '{"offsetTable":'
            + object_key_map_json([(mq_json(topic, ctx.settings.name, queue_id), offset)])
            + "}"
        ).encode()
        g = ctx.consumers.get(group)
        if g is not None:
            tell_members(g.channels.values(), topic, group, timestamp, body)
        return ctx.respond(cmd, 0, None, None, body)

    def consumer_status(conn: Connection, cmd: RemotingCommand) -> None:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): GET_CONSUMER_STATUS_FROM_CLIENT (221) to members."""
        topic = req_str(cmd, "topic")
        group = req_str(cmd, "group")
        origin = opt_str(cmd, "clientAddr") or ""
        g = ctx.consumers.get(group)
        if g is None or not g.channels:
            conn.send(
                ctx.respond(
                    cmd, ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]"
                )
            )
            return None
        targets = [ch for ch in g.channels.values() if not origin or ch.client_id == origin]
        ctx.spawn(_status, conn, cmd, topic, group, targets)
        return None

    async def _status(
        conn: Connection, cmd: RemotingCommand, topic: str, group: str, targets: list[ClientChannel]
    ) -> None:
        parts = []
        for ch in targets:
            req = RemotingCommand.request(
                RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
                {"topic": topic, "group": group},
                language="JAVA",
                version=ctx.settings.version,
            )
            try:
                resp = await ch.conn.invoke(req, 5.0)
            except RocketMQError:
                continue
            if resp.code == 0 and resp.body:
                text = resp.body.decode("utf-8", "replace")
                start = text.find('"messageQueueTable":')
                table = _balanced(text, start + len('"messageQueueTable":')) if start >= 0 else "{}"
                parts.append(json.dumps(ch.client_id) + ":" + table)
        body = ('{"consumerTable":{' + ",".join(parts) + "}}").encode()
        if not cmd.is_oneway:
            conn.send(ctx.respond(cmd, 0, None, None, body))

    return {
        RequestCode.HEART_BEAT: heartbeat,
        RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
        RequestCode.UNREGISTER_CLIENT: unregister,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
        RequestCode.LOCK_BATCH_MQ: lock,
        RequestCode.UNLOCK_BATCH_MQ: unlock,
        RequestCode.GET_CONSUMER_RUNNING_INFO: running_info,
        RequestCode.CONSUME_MESSAGE_DIRECTLY: consume_directly,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_offset,
        RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: consumer_status,
    }


def _balanced(text: str, start: int) -> str:
    """The brace-balanced value starting at ``start`` (fastjson maps with object keys are not JSON)."""
    depth = 0
    in_str = False
    i = start
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        i += 1
    return "{}"
