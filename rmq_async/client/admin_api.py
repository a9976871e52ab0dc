"""The admin RPCs (Java ``MQClientAPIImpl``'s admin half, as ``DefaultMQAdminExt`` and mqadmin use it).

One typed coroutine per request, on the same path as :class:`~rmq_async.client.api.MQClientAPI` (it
is one, sharing the client's pool and :class:`RequestSettings`: serialize type, language, version,
``ReqT``; the pool signs). Header fields and bodies follow the mqadmin captures in
``wire/admin-ops.jsonl`` (ADMIN-TX-NOTES.md): which requests carry no ``extFields`` at all (28, 106,
200, 206), which answers are strict JSON and which fastjson maps keyed by MessageQueue (202, 208,
222), and the answers that mean "offline" rather than failure (206 CONSUMER_NOT_ONLINE to 203 and
222). Where no capture shows a frame (222 for one queue, 5.x), the Java source is followed field by
field and the docstring says so.
"""

from __future__ import annotations

import dataclasses

from ..errors import ProtocolError
from ..protocol import headers as H
from ..protocol.bodies import (
    ClusterInfo,
    ConsumeMessageDirectlyResult,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    KVTable,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    TopicList,
    TopicStatsTable,
)
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.fastjson import java_map_order
from ..protocol.mq import MessageQueue
from .api import MQClientAPI

__all__ = ["MQAdminAPI"]


class MQAdminAPI(MQClientAPI):
    """The admin requests, beside the client's own. :meth:`sharing` builds one over a client
    instance's API, so both write every request the same way."""

    @classmethod
    def sharing(cls, api: MQClientAPI, *, stream: bool | None = None) -> MQAdminAPI:
        """An admin API on ``api``'s pool with ``api``'s request settings (``stream``: as a stream
        client's, ``ReqT`` on every request, or not, whatever ``api`` does)."""
        out = cls(api.pool)
        out.settings = api.settings if stream is None else dataclasses.replace(api.settings, stream=stream)
        return out

    # -- name server -----------------------------------------------------------------------------

    async def get_broker_cluster_info(self, namesrv: str, timeout: float) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106), no ``extFields``: brokers and clusters."""
        resp = await self._expect_ok(namesrv, self._cmd(RequestCode.GET_BROKER_CLUSTER_INFO, None), timeout)
        return ClusterInfo.decode(resp.body or b"{}")

    async def get_all_topic_list(self, namesrv: str, timeout: float) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), no ``extFields``."""
        cmd = self._cmd(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None)
        resp = await self._expect_ok(namesrv, cmd, timeout)
        return list(TopicList.decode(resp.body or b"{}").topic_list)

    async def delete_topic_in_namesrv(self, namesrv: str, topic: str, cluster: str, timeout: float) -> None:
        """DELETE_TOPIC_IN_NAMESRV (216) ``{topic, clusterName}``."""
        ext = java_map_order({"topic": topic, "clusterName": cluster})
        await self._expect_ok(namesrv, self._cmd(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext), timeout)

    async def put_kv_config(self, namesrv: str, namespace: str, key: str, value: str, timeout: float) -> None:
        """PUT_KV_CONFIG (100) ``{namespace, key, value}`` (``putKVConfigValue``; the caller asks
        every name server, as Java does)."""
        h = H.PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        await self._expect_ok(namesrv, self._cmd(RequestCode.PUT_KV_CONFIG, h.to_ext_fields()), timeout)

    async def get_kv_config(self, namesrv: str, namespace: str, key: str, timeout: float) -> str | None:
        """GET_KV_CONFIG (101) ``{namespace, key}``: the value, None when the name server answers 22
        QUERY_NOT_FOUND (it has none)."""
        cmd = self._cmd(
            RequestCode.GET_KV_CONFIG,
            H.GetKVConfigRequestHeader(namespace=namespace, key=key).to_ext_fields(),
        )
        resp = await self._call(namesrv, cmd, timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, namesrv)
        return H.GetKVConfigResponseHeader.from_ext_fields(resp.ext_fields).value

    # -- brokers: runtime, topics ------------------------------------------------------------------

    async def get_broker_runtime_info(self, addr: str, timeout: float) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28), no ``extFields``: the ``table`` of string figures."""
        resp = await self._expect_ok(addr, self._cmd(RequestCode.GET_BROKER_RUNTIME_INFO, None), timeout)
        return dict(KVTable.decode(resp.body or b"{}").table)

    async def update_and_create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queues: int,
        write_queues: int,
        perm: int,
        order: bool,
        timeout: float,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) with mqadmin updateTopic's fields (``CreateTopicRequestHeader``)."""
        ext = java_map_order(
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": str(read_queues),
                "writeQueueNums": str(write_queues),
                "perm": str(perm),
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "true" if order else "false",
            }
        )
        await self._expect_ok(addr, self._cmd(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), timeout)

    async def delete_topic_in_broker(self, addr: str, topic: str, timeout: float) -> None:
        """DELETE_TOPIC_IN_BROKER (215) ``{topic}``."""
        await self._expect_ok(addr, self._cmd(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}), timeout)

    async def get_topic_stats(self, addr: str, topic: str, timeout: float) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO (202) ``{topic}``: min/max offset and last store time per queue."""
        cmd = self._cmd(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        resp = await self._expect_ok(addr, cmd, timeout)
        return TopicStatsTable.decode(resp.body or b"{}")

    async def query_topic_consume_by_who(self, addr: str, topic: str, timeout: float) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300) ``{topic}``: the groups with offsets on the topic there."""
        cmd = self._cmd(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        resp = await self._expect_ok(addr, cmd, timeout)
        return list(GroupList.decode(resp.body or b"{}").group_list)

    # -- brokers: groups ---------------------------------------------------------------------------

    async def create_subscription_group(
        self, addr: str, config: SubscriptionGroupConfig, timeout: float
    ) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): no ``extFields``, the config as a JSON body."""
        cmd = self._cmd(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, config.encode())
        await self._expect_ok(addr, cmd, timeout)

    async def delete_subscription_group(
        self, addr: str, group: str, remove_offset: bool, timeout: float
    ) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207) ``{groupName, removeOffset}``."""
        ext = java_map_order({"groupName": group, "removeOffset": "true" if remove_offset else "false"})
        await self._expect_ok(addr, self._cmd(RequestCode.DELETE_SUBSCRIPTIONGROUP, ext), timeout)

    async def get_consumer_connection_list(
        self, addr: str, group: str, timeout: float
    ) -> ConsumerConnection | None:
        """GET_CONSUMER_CONNECTION_LIST (203) ``{consumerGroup}``; None when the broker answers 206
        CONSUMER_NOT_ONLINE (``the consumer group[g] not online``)."""
        cmd = self._cmd(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        resp = await self._call(addr, cmd, timeout)
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return ConsumerConnection.decode(resp.body or b"{}")

    async def get_consume_stats(
        self, addr: str, group: str, timeout: float, *, topic: str | None = None
    ) -> ConsumeStats:
        """GET_CONSUME_STATS (208) ``{consumerGroup[, topic]}``: broker and consumer offsets per queue."""
        ext = (
            {"consumerGroup": group}
            if topic is None
            else java_map_order({"consumerGroup": group, "topic": topic})
        )
        resp = await self._expect_ok(addr, self._cmd(RequestCode.GET_CONSUME_STATS, ext), timeout)
        return ConsumeStats.decode(resp.body or b"{}")

    # -- offsets ---------------------------------------------------------------------------------

    async def invoke_broker_to_reset_offset(
        self, addr: str, topic: str, group: str, timestamp: int, force: bool, timeout: float
    ) -> dict[MessageQueue, int] | None:
        """INVOKE_BROKER_TO_RESET_OFFSET (222) ``{topic, group, timestamp, isForce}`` (4.9.8
        ``invokeBrokerToResetOffset``; timestamp -1: the queues' max offsets): the broker sends
        RESET_CONSUMER_CLIENT_OFFSET (220) to the group's members and answers the new offsets;
        None when it answers 206 CONSUMER_NOT_ONLINE (the caller commits the offsets itself)."""
        h = H.ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp, is_force=force)
        return await self._reset(addr, h, timeout)

    async def reset_queue_offset(
        self, addr: str, mq: MessageQueue, group: str, offset: int, timeout: float
    ) -> dict[MessageQueue, int] | None:
        """222 for one queue (5.x ``invokeBrokerToResetOffset(addr, topic, group, 0, queueId, offset)``,
        not in a capture: ``queueId`` and ``offset`` set, ``timestamp`` 0, ``isForce`` false, the
        primitive's default). A 5.x broker resets that queue only; a 4.x one reads the timestamp and
        moves every queue to its earliest offset, so callers send it to 5.x brokers only."""
        h = H.ResetOffsetRequestHeader(
            topic=mq.topic, group=group, timestamp=0, is_force=False, queue_id=mq.queue_id, offset=offset
        )
        return await self._reset(addr, h, timeout)

    async def _reset(
        self, addr: str, h: H.ResetOffsetRequestHeader, timeout: float
    ) -> dict[MessageQueue, int] | None:
        cmd = self._cmd(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h.to_ext_fields())
        resp = await self._call(addr, cmd, timeout)
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return dict(ResetOffsetBody.decode(resp.body).offset_table) if resp.body else {}

    async def commit_offset(
        self, addr: str, header: H.UpdateConsumerOffsetRequestHeader, timeout: float
    ) -> int:
        """A sync UPDATE_CONSUMER_OFFSET (15), as mqadmin's offline reset sends it; returns the
        ``version`` of the broker's answer (its MQVersion), which tells a 5.x broker."""
        cmd = self._cmd(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())
        resp = await self._expect_ok(addr, cmd, timeout)
        return resp.version

    # -- members, through the broker ------------------------------------------------------------------

    async def consume_message_directly(
        self, addr: str, group: str, client_id: str, msg_id: str, timeout: float
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY (309) ``{consumerGroup, clientId, msgId}`` (4.9.8: no topic) to the
        broker storing the message (``msg_id`` its offset id), which hands it to the member."""
        h = H.ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=client_id, msg_id=msg_id
        )
        cmd = self._cmd(RequestCode.CONSUME_MESSAGE_DIRECTLY, h.to_ext_fields())
        resp = await self._expect_ok(addr, cmd, timeout)
        if not resp.body:
            raise ProtocolError(f"consume-directly answer of {client_id} from {addr} has no body")
        return ConsumeMessageDirectlyResult.decode(resp.body)
