"""Admin requests the broker forwards to a push consumer: GET_CONSUMER_RUNNING_INFO (307),
GET_CONSUMER_STATUS, CONSUME_MESSAGE_DIRECTLY (309) on a normal and a retry message."""

from __future__ import annotations

from typing import Any

from support.integration import Collector, alive_until, consumer, produce, until

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, Timing
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.outbound import Outbound
from rmq_async.protocol.bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand


async def admin_call(
    cluster: EmbeddedCluster, timing: Timing, code: int, ext: dict[str, str]
) -> RemotingCommand:
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
        return await ci.pool.request(cluster.brokers[0].addr, RemotingCommand.request(code, ext), 5.0)


async def test_running_info_status_and_consume_directly(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing) as c:
        await col.wait_unique(8)
        # 307 through the broker: the Java ConsumerRunningInfo shape mqadmin consumerStatus reads
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": c.client_id},
        )
        assert resp.code == 0, resp.remark
        info = ConsumerRunningInfo.decode(resp.body)
        assert info.properties["consumerGroup"] == group
        assert {mq for mq in info.mq_table if mq.topic == topic} == {r.message_queue for r in sent}
        assert {s.topic for s in info.subscription_set} == {topic, f"%RETRY%{group}"}
        assert sum(pq.cached_msg_count for pq in info.mq_table.values()) == 0
        # 223 -> 221: committed offsets per queue
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
            {"topic": topic, "group": group},
        )
        assert resp.code == 0 and c.client_id.encode() in resp.body
        # 309: the handler consumes one message on demand
        before = col.seen["k-0"]
        resp = await admin_call(
            cluster,
            timing,
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "clientId": c.client_id, "msgId": sent[0].offset_msg_id},
        )
        assert resp.code == 0, resp.remark
        assert ConsumeMessageDirectlyResult.decode(resp.body).consume_result == "CR_SUCCESS"
        assert col.seen["k-0"] == before + 1


# -- CONSUME_MESSAGE_DIRECTLY of a retry copy shows the %RETRY% topic -------------------------------


async def test_consume_directly_shows_a_retry_message_under_its_original_topic(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """``mqadmin queryMsgById -g G -d <client>`` (broker -> client CONSUME_MESSAGE_DIRECTLY, 309) on a
    message id of a retry copy: Java ``ConsumeMessageConcurrentlyService.consumeMessageDirectly`` calls
    ``resetRetryAndNamespace`` first, so the listener sees the original topic, as in normal delivery.
    admin.py ``_consume_directly`` hands the handler the stored ``%RETRY%group`` topic."""
    topic, group = names
    broker = cluster.brokers[0]
    await produce(cluster.namesrv_addr, topic, 1)
    retry_copy: list[MessageExt] = []
    direct: list[str] = []
    directly = False

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        m = msgs[0]
        if directly:
            direct.append(m.topic)
            return ConsumeResult.SUCCESS
        if m.reconsume_times == 0:
            return ConsumeResult.RECONSUME_LATER  # sent back: it returns from %RETRY%group
        retry_copy.append(m)
        return ConsumeResult.SUCCESS

    c = consumer(cluster, group, topic, handler, timing)
    async with c:
        await alive_until(c, lambda: until(lambda: bool(retry_copy)))
        assert retry_copy[0].topic == topic  # normal delivery resets the topic
        directly = True
        ext = {"consumerGroup": group, "clientId": c.client_id, "msgId": retry_copy[0].offset_msg_id}
        out = Outbound(broker.addr)
        try:
            req = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, language="JAVA")
            resp: Any = await out.request(req, 10.0)
        finally:
            await out.close()
        assert resp is not None and resp.code == 0, resp
        assert direct == [topic], f"consumed directly under {direct}, normal delivery uses {topic!r}"


# -- CONSUME_MESSAGE_DIRECTLY runs the handler through the same rules, bounded -----------------------


async def test_consume_directly_of_a_hanging_or_odd_handler_answers_in_time(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """A handler that hangs is cut at the consume timeout (CR_LATER with a remark) instead of holding
    the answer for ever; one that returns something that is not a ConsumeResult is the handler's error
    (CR_LATER, logged), as on the consume paths; the consumer goes on."""
    import anyio

    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 2)
    timing = Timing.fast(consume_timeout=0.5)
    mode = {"k-0": "hang", "k-1": "odd"}
    direct = False

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        if not direct:
            return ConsumeResult.SUCCESS
        if mode[msgs[0].keys or ""] == "hang":
            await anyio.sleep_forever()
        return "SUCCESS"  # not a ConsumeResult

    async with consumer(cluster, group, topic, handler, timing) as c:
        await alive_until(c, lambda: until(lambda: c.health().ready))
        direct = True
        answers = {}
        for r, key in zip(sent, ("k-0", "k-1"), strict=True):
            with anyio.fail_after(10):
                resp = await admin_call(
                    cluster,
                    timing,
                    RequestCode.CONSUME_MESSAGE_DIRECTLY,
                    {"consumerGroup": group, "clientId": c.client_id, "msgId": r.offset_msg_id},
                )
            assert resp.code == 0, resp.remark
            answers[key] = ConsumeMessageDirectlyResult.decode(resp.body)
        assert c.health().ready
    assert answers["k-0"].consume_result == "CR_LATER"
    assert "consume timeout" in (answers["k-0"].remark or "")
    assert answers["k-1"].consume_result == "CR_LATER"
