"""Offset and admin requests (``ConsumerManageProcessor``, ``AdminBrokerProcessor``,
``QueryMessageProcessor.viewMessageById``).

Strategy: small synchronous handlers over the store and the broker state. The 4.9.8 rule for
QUERY_CONSUMER_OFFSET answers 0 for a never-committed queue whose first message is still in memory
(always, in this store); 5.3.3 answers 22 unless the queue holds a message at offset 0. Topic
creation (17) answers only after the broker has re-registered with the name server, as the real
broker does (``registerIncrementBrokerData`` is synchronous), so the route exists when it returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .fields import opt_int, opt_str, req_int, req_str
from .server import Connection, Reply
from .state import TopicConfig

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["handlers"]

_TOPIC_OK = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def handlers(broker: Broker) -> dict[int, Callable[[Connection, RemotingCommand], Reply]]:
    def query_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue_id = req_str(cmd, "consumerGroup"), req_str(cmd, "topic"), req_int(cmd, "queueId")
        assert broker.store is not None
        offset = broker.state.query_offset(group, topic, queue_id)
        if offset >= 0:
            return broker.respond(cmd, 0, None, {"offset": str(offset)})
        if broker.flavour == 5:
            if (opt_str(cmd, "setZeroIfNotFound") or "").lower() == "false":
                return broker.respond(
                    cmd,
                    ResponseCode.QUERY_NOT_FOUND,
                    "Not found, do not set to zero, maybe this group boot first",
                    {},
                )
            if broker.store.max_offset(topic, queue_id) > 0:
                return broker.respond(cmd, 0, None, {"offset": "0"})
            return broker.respond(
                cmd,
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                {},
            )
        return broker.respond(cmd, 0, None, {"offset": "0"})

    def update_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue_id = req_str(cmd, "consumerGroup"), req_str(cmd, "topic"), req_int(cmd, "queueId")
        offset = req_int(cmd, "commitOffset")
        if broker.flavour == 5:
            if group not in broker.state.groups:
                return broker.respond(
                    cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!", {}
                )
            if topic not in broker.state.topics:
                return broker.respond(cmd, ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!", {})
        broker.state.commit_offset(group, topic, queue_id, offset)
        return broker.respond(cmd, 0, None, {})

    def search_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert broker.store is not None
        offset = broker.store.offset_by_time(
            req_str(cmd, "topic"), req_int(cmd, "queueId"), req_int(cmd, "timestamp")
        )
        return broker.respond(cmd, 0, None, {"offset": str(offset)})

    def max_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert broker.store is not None
        offset = broker.store.max_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return broker.respond(cmd, 0, None, {"offset": str(offset)})

    def min_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert broker.store is not None
        offset = broker.store.min_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return broker.respond(cmd, 0, None, {"offset": str(offset)})

    def earliest_time(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert broker.store is not None
        ts = broker.store.earliest_time(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return broker.respond(cmd, 0, None, {"timestamp": str(ts)})

    def view_message(conn: Connection, cmd: RemotingCommand) -> Reply:
        assert broker.store is not None
        offset = req_int(cmd, "offset")
        view = broker.store.message_at(offset)
        if view is None:
            return broker.respond(
                cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return broker.respond(cmd, 0), (view,)

    def create_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        topic = req_str(cmd, "topic")
        if not topic.strip():
            return broker.respond(cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
        if not _TOPIC_OK.match(topic):
            return broker.respond(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            )
        if len(topic) > 127:
            return broker.respond(
                cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is longer than topic max length."
            )
        if topic in broker.state.system_topics:
            return broker.respond(
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
        broker.state.put_topic(tc)
        broker.spawn(_register_then_answer, conn, cmd)
        return None

    async def _register_then_answer(conn: Connection, cmd: RemotingCommand) -> None:
        try:
            await broker.register()
        except Exception as exc:  # the answer does not depend on the name server
            broker.register_soon()
            del exc
        if not cmd.is_oneway:
            conn.send(broker.respond(cmd, 0))

    return {
        RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset,
        RequestCode.GET_MAX_OFFSET: max_offset,
        RequestCode.GET_MIN_OFFSET: min_offset,
        RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_time,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message,
        RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
    }
