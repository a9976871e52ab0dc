"""The broker's answers to mqadmin (``AdminBrokerProcessor``): runtime info (28), topic stats (202),
consume stats (208), topic deletion (215), subscription groups (200, 207), who consumes a topic
(300) and a group's connections (203).

Strategy: small synchronous handlers over the state, the store and the consumer table, answering in
the shapes of ``wire/admin-ops.jsonl``: 28 and 203 strict JSON, 300 a Java ``HashSet`` of names,
202 and 208 fastjson maps keyed by MessageQueue (object keys, not strict JSON) in ``HashMap`` order.
Two figures are not kept here: 208's ``consumeTps`` is 0.0 (the broker's per-minute statistics) and
28's table holds only what this broker knows (versions, boot time, commit-log extent, messages
stored), not the thread-pool and latency figures.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.fastjson import java_double
from .context import BrokerContext, HandlerTable
from .fields import opt_bool, opt_str, req_str
from .groups import ConsumerGroup, Subscription
from .jcompat import java_hashmap_order, json_body, mq_hashmap_order, mq_json, object_key_map_json
from .server import Connection

__all__ = ["handlers"]


def _offset_table(entries: list[tuple[dict[str, Any], dict[str, Any]]]) -> bytes:
    """``{"offsetTable":{{mq}:{...},...}}`` as fastjson writes a ``HashMap<MessageQueue, V>``."""
    return ('{"offsetTable":' + object_key_map_json(mq_hashmap_order(entries)) + "}").encode()


def _subscription_json(s: Subscription) -> dict[str, Any]:
    """A SubscriptionData bean as 4.9.8 writes it (the tags and codes of a TAG expression)."""
    tags = (
        [] if s.codes is None or s.expression_type != "TAG" else [t.strip() for t in s.sub_string.split("||")]
    )
    return {
        "classFilterMode": False,
        "codeSet": sorted(s.codes) if s.codes is not None else [],
        "expressionType": s.expression_type,
        "subString": s.sub_string,
        "subVersion": s.version,
        "tagsSet": [t for t in tags if t],
        "topic": s.topic,
    }


def _connections_json(g: ConsumerGroup) -> dict[str, Any]:
    """ConsumerConnection (``getConsumerConnectionList``), keys in fastjson's order."""
    return {
        "connectionSet": [
            {
                "clientAddr": ch.conn.addr,
                "clientId": ch.client_id,
                "language": ch.language,
                "version": ch.version,
            }
            for ch in g.channels.values()
        ],
        "consumeFromWhere": g.consume_from_where,
        "consumeType": g.consume_type,
        "messageModel": g.message_model,
        "subscriptionTable": {t: _subscription_json(s) for t, s in g.subs.items()},
    }


def handlers(ctx: BrokerContext) -> HandlerTable:
    boot_ms = int(time.time() * 1000)
    store, state = ctx.store, ctx.state

    def runtime_info(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        days, rest = divmod(int(time.time()) - boot_ms // 1000, 86400)
        hours, rest = divmod(rest, 3600)
        stored = sum(len(cq) for cq in store.cqs.values())
        table = {
            "bootTimestamp": str(boot_ms),
            "brokerVersion": str(ctx.settings.version),
            "brokerVersionDesc": "V5_3_3" if ctx.settings.flavour == 5 else "V4_9_8",
            "commitLogMaxOffset": str(store.write_pos),
            "commitLogMinOffset": "0",
            "msgPutTotalTodayNow": str(stored),
            "runtime": f"[ {days} days, {hours} hours, {rest // 60} minutes, {rest % 60} seconds ]",
        }
        ordered = {k: table[k] for k in java_hashmap_order(table)}
        return ctx.respond(cmd, 0, None, None, json_body({"table": ordered}))

    def topic_stats(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        tc = state.topics.get(topic)
        if tc is None:
            return ctx.respond(cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        entries: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for q in range(tc.write):
            high = max(store.max_offset(topic, q), 0)
            last = store.store_time(topic, q, high - 1) if high > 0 else 0
            value = {
                "lastUpdateTimestamp": max(last, 0),
                "maxOffset": high,
                "minOffset": store.min_offset(topic, q),
            }
            entries.append((mq_json(topic, ctx.settings.name, q), value))
        return ctx.respond(cmd, 0, None, None, _offset_table(entries))

    def consume_stats(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        asked = opt_str(cmd, "topic")
        # whichTopicByConsumer: a HashSet, iterated in its order (the table's insertion order)
        topics = [asked] if asked else java_hashmap_order({t for t, g in state.offsets if g == group})
        online = ctx.consumers.get(group)
        entries: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for topic in topics:
            tc = state.topics.get(topic)
            if tc is None or (online is not None and online.subs and topic not in online.subs):
                continue  # no such topic; a group online that does not subscribe it
            for q in range(tc.read):
                high = max(store.max_offset(topic, q), 0)
                consumer = max(state.query_offset(group, topic, q), 0)
                last = store.store_time(topic, q, consumer - 1) if consumer > 0 else 0
                value = {"brokerOffset": high, "consumerOffset": consumer, "lastTimestamp": max(last, 0)}
                entries.append((mq_json(topic, ctx.settings.name, q), value))
        body = b'{"consumeTps":' + java_double(0.0).encode() + b"," + _offset_table(entries)[1:]
        return ctx.respond(cmd, 0, None, None, body)

    def delete_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        if not topic.strip():
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
        state.delete_topic(topic)
        store.drop_topic(topic)
        ctx.register_soon()
        return ctx.respond(cmd, 0)

    def create_group(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            config = json.loads(cmd.body) if cmd.body else None
        except ValueError:
            config = None
        if isinstance(config, dict) and config.get("groupName"):
            state.put_group_config(config)
        return ctx.respond(cmd, 0)

    def delete_group(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        state.delete_group(req_str(cmd, "groupName"), remove_offset=bool(opt_bool(cmd, "removeOffset")))
        return ctx.respond(cmd, 0)

    def consumed_by(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        groups = {name for name, g in ctx.consumers.groups.items() if topic in g.subs}
        groups |= {g for t, g in state.offsets if t == topic}
        return ctx.respond(cmd, 0, None, None, json_body({"groupList": java_hashmap_order(groups)}))

    def connections(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        g = ctx.consumers.get(group)
        if g is None:
            return ctx.respond(
                cmd, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        return ctx.respond(cmd, 0, None, None, json_body(_connections_json(g)))

    return {
        RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
        RequestCode.GET_TOPIC_STATS_INFO: topic_stats,
        RequestCode.GET_CONSUME_STATS: consume_stats,
        RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create_group,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_group,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: consumed_by,
        RequestCode.GET_CONSUMER_CONNECTION_LIST: connections,
    }
