"""Offset and admin requests (``ConsumerManageProcessor``, ``AdminBrokerProcessor``,
``QueryMessageProcessor.viewMessageById``; ``queryMessage`` by key is in ``query.py``).

Strategy: small synchronous handlers over the store and the broker state. QUERY_CONSUMER_OFFSET of a
never-committed queue follows ``ConsumerManageProcessor.queryConsumerOffset``: 4.9.8 answers 0 while
the queue's min offset is 0 and offset 0 is not on disk only (never, in this memory-served store), 5.3.3
only while the queue holds its message at offset 0 in memory (an empty queue: 22); a queue whose head
retention deleted (min offset > 0, ``MessageStore.truncate_head``) answers 22 on both. Topic
creation (17) answers only after the broker has re-registered with the name server, as the real
broker does (``registerIncrementBrokerData`` is synchronous), so the route exists when it returns.
"""

from __future__ import annotations

import re

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .context import BrokerContext, HandlerTable
from .fields import opt_int, opt_str, req_int, req_str
from .query import query_message_handler
from .server import Connection, Reply
from .state import TopicConfig

__all__ = ["NOT_SET", "handlers"]

#: the remark of a Java response whose handler set only the code (``createResponseCommand(null)``)
NOT_SET = "not set any response code"

_TOPIC_OK = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def handlers(ctx: BrokerContext) -> HandlerTable:
    def query_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue_id = req_str(cmd, "consumerGroup"), req_str(cmd, "topic"), req_int(cmd, "queueId")
        offset = ctx.state.query_offset(group, topic, queue_id)
        if offset >= 0:
            return ctx.respond(cmd, 0, None, {"offset": str(offset)})
        min_offset = ctx.store.min_offset(topic, queue_id)
        if ctx.settings.flavour == 5:
            if (opt_str(cmd, "setZeroIfNotFound") or "").lower() == "false":
                return ctx.respond(
                    cmd,
                    ResponseCode.QUERY_NOT_FOUND,
                    "Not found, do not set to zero, maybe this group boot first",
                    {},
                )
            # checkInMemByConsumeOffset(topic, queueId, 0, 1): the message at offset 0 is held
            zero = min_offset <= 0 and ctx.store.max_offset(topic, queue_id) > 0
        else:
            # !checkInDiskByConsumeOffset(topic, queueId, 0): this store serves everything from memory
            zero = min_offset <= 0
        if zero:
            return ctx.respond(cmd, 0, None, {"offset": "0"})
        return ctx.respond(
            cmd,
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            {},
        )

    def update_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue_id = req_str(cmd, "consumerGroup"), req_str(cmd, "topic"), req_int(cmd, "queueId")
        offset = req_int(cmd, "commitOffset")
        if ctx.settings.flavour == 5:
            if group not in ctx.state.groups:
                return ctx.respond(
                    cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!", {}
                )
            if topic not in ctx.state.topics:
                return ctx.respond(cmd, ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!", {})
        ctx.state.commit_offset(group, topic, queue_id, offset)
        return ctx.respond(cmd, 0, None, {})

    def search_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = ctx.store.offset_by_time(
            req_str(cmd, "topic"), req_int(cmd, "queueId"), req_int(cmd, "timestamp")
        )
        return ctx.respond(cmd, 0, None, {"offset": str(offset)})

    def max_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = ctx.store.max_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return ctx.respond(cmd, 0, None, {"offset": str(offset)})

    def min_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = ctx.store.min_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return ctx.respond(cmd, 0, None, {"offset": str(offset)})

    def earliest_time(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ts = ctx.store.earliest_time(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return ctx.respond(cmd, 0, None, {"timestamp": str(ts)})

    def view_message(conn: Connection, cmd: RemotingCommand) -> Reply:
        offset = req_int(cmd, "offset")
        view = ctx.store.message_at(offset)
        if view is None:
            return ctx.respond(
                cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return ctx.respond(cmd, 0), (view,)

    def create_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        topic = req_str(cmd, "topic")
        if not topic.strip():
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
        if not _TOPIC_OK.match(topic):
            return ctx.respond(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            )
        if len(topic) > 127:
            return ctx.respond(
                cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is longer than topic max length."
            )
        if topic in ctx.state.system_topics:
            return ctx.respond(
                cmd, ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic."
            )
        tc = TopicConfig(
            topic,
            req_int(cmd, "readQueueNums"),
            req_int(cmd, "writeQueueNums"),
            req_int(cmd, "perm"),
            opt_int(cmd, "topicSysFlag", 0) or 0,
            (opt_str(cmd, "order") or "").lower() == "true",
        )
        ctx.state.put_topic(tc)
        ctx.spawn(_register_then_answer, conn, cmd)
        return None

    async def _register_then_answer(conn: Connection, cmd: RemotingCommand) -> None:
        try:
            await ctx.register()
        except Exception as exc:  # the answer does not depend on the name server
            ctx.register_soon()
            del exc
        if not cmd.is_oneway:
            conn.send(ctx.respond(cmd, 0, NOT_SET))

    return {
        RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset,
        RequestCode.GET_MAX_OFFSET: max_offset,
        RequestCode.GET_MIN_OFFSET: min_offset,
        RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_time,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message,
        RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
        RequestCode.QUERY_MESSAGE: query_message_handler(ctx),  # by key: query.py
    }
