"""``rmq_async.admin.Admin`` against the embedded cluster: every call, as mqadmin would use it.

Waits are on events (deliveries counted per key by the Collector, a consumer's rebalance), never on
fixed sleeps, except where the group's committed offsets must reach the broker (the persist timer)."""

from __future__ import annotations

import time

import anyio
import pytest
from support.integration import Collector, consumer, produce

from rmq_async import ClientConfig, ConsumeResult, Message, MessageExt, Producer, Timing
from rmq_async.admin import Admin
from rmq_async.config import TraceConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.errors import BrokerError, ClientError, ConfigError, MQClientError, TopicNotExist
from rmq_async.protocol.mq import MessageQueue


def _admin(cluster: EmbeddedCluster, timing: Timing) -> Admin:
    return Admin(client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing))


async def _committed(admin: Admin, group: str, topic: str, want: int) -> None:
    """Until the broker has ``want`` committed in total on ``topic`` (the group's persist timer)."""
    with anyio.fail_after(20):
        while True:
            p = await admin.progress(group, topic)
            if sum(q.consumer_offset for q in p.queues if q.mq.topic == topic) == want:
                return
            await anyio.sleep(0.05)


async def test_cluster_lists_every_broker_with_its_runtime_table(
    cluster: EmbeddedCluster, timing: Timing
) -> None:
    async with _admin(cluster, timing) as admin:
        info = await admin.cluster()
    broker = cluster.brokers[0]
    assert [(b.name, b.broker_id, b.addr) for b in info.brokers] == [(broker.name, 0, broker.registered_addr)]
    assert info.clusters == {"DefaultCluster": (broker.name,)}
    stats = info.brokers[0].stats
    assert stats is not None and stats["brokerVersionDesc"] == "V4_9_8" and int(stats["bootTimestamp"]) > 0


async def test_topic_create_list_route_status_delete(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, _ = names
    async with _admin(cluster, timing) as admin:
        written = await admin.create_topic(topic, read_queues=3, write_queues=3)
        assert written == [cluster.brokers[0].registered_addr]
        assert topic in await admin.topics()
        route = await admin.route(topic)
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(3, 3, 6)]
        await produce(cluster.namesrv_addr, topic, 7)
        status = await admin.topic_status(topic)
        assert [q.mq.queue_id for q in status] == [0, 1, 2]
        assert sum(q.max_offset for q in status) == 7 and all(q.min_offset == 0 for q in status)
        assert all(q.last_update_timestamp > 0 for q in status if q.max_offset)
        await admin.delete_topic(topic)
        assert topic not in await admin.topics()
        with pytest.raises(TopicNotExist):
            await admin.route(topic)
        assert topic not in cluster.brokers[0].state.topics


async def test_progress_of_a_group_that_consumed_part_of_a_topic(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 2)
    await produce(cluster.namesrv_addr, topic, 6)
    col = Collector()
    async with _admin(cluster, timing) as admin:
        async with consumer(cluster, group, topic, col, timing):
            await col.wait_unique(6)
            await _committed(admin, group, topic, 6)
            conns = await admin.connections(group)
            assert conns.online and conns.message_model == "CLUSTERING"
            assert conns.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
            assert conns.subscriptions[topic] == "*" and len(conns.clients) == 1
            (member,) = conns.clients
            assert member.language == "PYTHON" and member.client_addr.startswith("127.0.0.1:")
            assert group in await admin.who_consumes(topic)
            assert group in await admin.groups()
        await produce(cluster.namesrv_addr, topic, 5, start=6)
        progress = await admin.progress(group, topic)
        mine = [q for q in progress.queues if q.mq.topic == topic]
        assert len(mine) == 2 and sum(q.lag for q in mine) == 5 == progress.total_lag
        assert all(q.broker_offset - q.consumer_offset == q.lag for q in mine)
        assert all(q.last_timestamp > 0 for q in mine if q.consumer_offset)
        offline = await admin.connections(group)
        assert not offline.online and offline.clients == ()
        assert (await admin.connections("never_seen_group")).clients == ()


async def test_reset_of_a_running_group_to_earliest_consumes_again(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 2)
    await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    async with _admin(cluster, timing) as admin, consumer(cluster, group, topic, col, timing):
        await col.wait_unique(8)
        await _committed(admin, group, topic, 8)
        moved = await admin.reset_offset(group, topic, to="earliest")
        assert moved == {MessageQueue(topic, cluster.brokers[0].name, q): 0 for q in range(2)}
        await col.wait_until(lambda: all(col.seen[f"k-{i}"] == 2 for i in range(8)))


async def test_reset_of_a_stopped_group_then_restart_starts_there(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    sent = await produce(cluster.namesrv_addr, topic, 6)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(6)
    broker = cluster.brokers[0]
    async with _admin(cluster, timing) as admin:
        assert not (await admin.connections(group)).online
        third = await admin.message_at(MessageQueue(topic, broker.name, 0), 3)
        assert third is not None and third.keys == "k-3"
        moved = await admin.reset_offset(group, topic, timestamp=third.store_timestamp)
        mq = MessageQueue(topic, broker.name, 0)
        start = moved[mq]  # a message stored at that ms (several may share it)
        assert broker.state.query_offset(group, topic, 0) == start
        at_start = await admin.message_at(mq, start)
        assert at_start is not None and at_start.store_timestamp == third.store_timestamp
        again = Collector()
        async with consumer(cluster, group, topic, again, timing):
            await again.wait_unique(6 - start)
        assert sorted(again.seen) == sorted(f"k-{i}" for i in range(start, 6))
        # explicit offsets of a stopped group: committed as given (sync 15)
        assert await admin.reset_offset(group, topic, offsets={mq: 5}) == {mq: 5}
        assert broker.state.query_offset(group, topic, 0) == 5
        assert len(sent) == 6


async def test_reset_arguments_are_checked(cluster: EmbeddedCluster, timing: Timing) -> None:
    async with _admin(cluster, timing) as admin:
        with pytest.raises(ConfigError, match="exactly one"):
            await admin.reset_offset("g", "T", timestamp=1, to="earliest")
        with pytest.raises(ConfigError, match="exactly one"):
            await admin.reset_offset("g", "T")
        with pytest.raises(ConfigError, match="earliest"):
            await admin.reset_offset("g", "T", to="yesterday")
        with pytest.raises(ConfigError):
            await admin.reset_offset("g", "T", offsets={MessageQueue("T", "b", 0): -1})


async def test_messages_by_key_by_both_ids_and_at_an_offset(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, _ = names
    await cluster.create_topic(topic, 2)
    sent = await produce(cluster.namesrv_addr, topic, 4)
    async with _admin(cluster, timing) as admin:
        by_key = await admin.query_by_key(topic, "k-2")
        assert [m.keys for m in by_key] == ["k-2"] and by_key[0].msg_id == sent[2].msg_id
        by_offset_id = await admin.message_by_id(sent[1].offset_msg_id)
        assert by_offset_id.keys == "k-1" and by_offset_id.offset_msg_id == sent[1].offset_msg_id
        by_uniq = await admin.message_by_id(sent[3].msg_id, topic=topic)
        assert by_uniq.keys == "k-3"
        with pytest.raises(ConfigError, match="topic"):
            await admin.message_by_id(sent[3].msg_id)
        mq = sent[0].message_queue
        at = await admin.message_at(mq, sent[0].queue_offset)
        assert at is not None and at.keys == "k-0"
        assert await admin.message_at(mq, 1000) is None
        assert await admin.query_by_key(topic, "no-such-key") == []


async def test_trace_records_of_a_traced_message(timing: Timing) -> None:
    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        trace = TraceConfig(enabled=True, flush_interval=0.05)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, trace=trace)
        async with Producer("adm_trace_pg", client_config=cfg) as p:
            res = await p.send(Message("AdmTraceT", b"traced", tags="TagA", keys="tk"))
        col = Collector()
        async with consumer(cluster, "adm_trace_cg", "AdmTraceT", col, timing, client_config=cfg):
            await col.wait_unique(1)
        async with _admin(cluster, timing) as admin:
            with anyio.fail_after(10):
                # the consumer's SubAfter record is flushed after its handler returned: no event of ours
                while len(records := await admin.message_trace(res.msg_id)) < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
    kinds = sorted(r.trace_type for r in records)
    assert kinds == ["Pub", "SubAfter", "SubBefore"], kinds
    pub = next(r for r in records if r.trace_type == "Pub")
    assert pub.group == "adm_trace_pg" and pub.topic == "AdmTraceT" and pub.tags == "TagA" and pub.success
    assert pub.offset_msg_id == res.offset_msg_id
    assert {r.group for r in records if r.trace_type != "Pub"} == {"adm_trace_cg"}


async def test_consume_directly_and_running_info_of_a_live_member(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    sent = await produce(cluster.namesrv_addr, topic, 2)
    col = Collector()
    async with _admin(cluster, timing) as admin, consumer(cluster, group, topic, col, timing):
        await col.wait_unique(2)
        (client,) = (await admin.connections(group)).clients
        result = await admin.consume_directly(group, client.client_id, sent[1].msg_id, topic=topic)
        assert result.consume_result == "CR_SUCCESS"
        await col.wait_until(lambda: col.seen["k-1"] == 2)
        info = await admin.running_info(group, client.client_id)
        assert any(s.topic == topic for s in info.subscription_set)
        with pytest.raises(BrokerError):
            await admin.running_info(group, "127.0.0.1@nobody")


async def test_groups_create_and_delete(cluster: EmbeddedCluster, timing: Timing) -> None:
    broker = cluster.brokers[0]
    async with _admin(cluster, timing) as admin:
        await admin.create_group("adm_new_g", retry_max_times=3, consume_broadcast=True)
        assert broker.state.group_configs["adm_new_g"]["retryMaxTimes"] == 3
        assert broker.state.group_configs["adm_new_g"]["consumeBroadcastEnable"] is True
        await admin.delete_group("adm_new_g")
        assert "adm_new_g" not in broker.state.groups


async def test_set_consume_mode_lives_on_the_admin(timing: Timing) -> None:
    async with EmbeddedCluster(timing=timing, flavour=5) as cluster:
        await cluster.create_topic("AdmPopT", 2)
        async with _admin(cluster, timing) as admin:
            answers = await admin.set_consume_mode("AdmPopT", "adm_pop_g", "POP", 1)
            assert answers == {cluster.brokers[0].registered_addr: (0, None)}
            with pytest.raises(ConfigError):
                await admin.set_consume_mode("AdmPopT", "adm_pop_g", "PUSH")


async def test_lifecycle_errors_and_an_unreachable_name_server() -> None:
    admin = Admin("127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(ClientError, match="not started"):
        await admin.topics()
    await admin.start()
    await admin.start()  # idempotent
    try:
        started = time.monotonic()
        with pytest.raises(MQClientError):
            await admin.topics()
        assert time.monotonic() - started < 10
    finally:
        await admin.stop()
        await admin.stop()
    with pytest.raises(ConfigError):
        Admin("not-an-address")


async def test_a_handler_that_fails_is_reported_by_consume_directly(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 1)
    sent = await produce(cluster.namesrv_addr, topic, 1)
    seen = anyio.Event()

    async def later(msgs: list[MessageExt], ctx: object) -> ConsumeResult:
        seen.set()
        return ConsumeResult.RECONSUME_LATER

    async with _admin(cluster, timing) as admin, consumer(cluster, group, topic, later, timing):
        with anyio.fail_after(10):
            await seen.wait()
        (client,) = (await admin.connections(group)).clients
        result = await admin.consume_directly(group, client.client_id, sent[0].offset_msg_id)
        assert result.consume_result == "CR_LATER"


async def test_explicit_offsets_move_a_running_group_on_a_5x_broker(
    names: tuple[str, str], timing: Timing
) -> None:
    """5.x: a sync 15, then the queue-level 222 (``resetOffsetByQueueId``), which moves the members."""
    topic, group = names
    async with EmbeddedCluster(timing=timing, flavour=5, queues=2) as cluster:
        await cluster.create_topic(topic, 2)
        await produce(cluster.namesrv_addr, topic, 6)
        col = Collector()
        broker = cluster.brokers[0]
        async with _admin(cluster, timing) as admin, consumer(cluster, group, topic, col, timing):
            await col.wait_unique(6)
            await _committed(admin, group, topic, 6)
            mq = MessageQueue(topic, broker.name, 0)
            assert await admin.reset_offset(group, topic, offsets={mq: 0}) == {mq: 0}
            on_q0 = sorted(k for k in col.seen if any(m.keys == k and m.queue_id == 0 for m in col.msgs))
            await col.wait_until(lambda: all(col.seen[k] == 2 for k in on_q0))
            assert on_q0
            assert all(col.seen[k] == 1 for k in col.seen if k not in on_q0)  # queue 1 stayed where it was


async def test_an_order_topic_writes_the_name_servers_order_config(
    names: tuple[str, str], timing: Timing
) -> None:
    """``updateTopic -o true``: PUT_KV_CONFIG (100) of ``ORDER_TOPIC_CONFIG``/topic, the cluster's
    brokers in Java's HashSet order (bucket 8 "broker-b" before bucket 11 "broker-a"); ``-b`` merges
    one broker's entry into what GET_KV_CONFIG (101) answers; a name server with orderMessageEnable
    puts it in the route."""
    topic, _ = names
    async with EmbeddedCluster(brokers=2, timing=timing, order_message_enable=True) as cluster:
        assert cluster.namesrv is not None
        async with _admin(cluster, timing) as admin:
            with cluster.namesrv_faults.recording() as seen:
                await admin.create_topic(topic, read_queues=4, write_queues=4, order=True)
            puts = [c for c in seen if c.code == 100]
            assert [list(c.ext_fields.items()) for c in puts] == [
                [("namespace", "ORDER_TOPIC_CONFIG"), ("value", "broker-b:4;broker-a:4"), ("key", topic)]
            ]  # the keys in the HashMap order Java writes them
            assert (await admin.route(topic)).order_topic_conf == "broker-b:4;broker-a:4"
            b = cluster.brokers[1]
            with cluster.namesrv_faults.recording() as seen:
                await admin.create_topic(topic, write_queues=2, broker_addr=b.registered_addr, order=True)
            assert [c.code for c in seen if c.code in (100, 101)] == [101, 100]
            assert (await admin.route(topic)).order_topic_conf == "broker-b:2;broker-a:4"
            # a topic the name server has no order config of (101 answers 22): this broker alone
            other = f"{topic}O"
            await admin.create_topic(other, broker_addr=b.registered_addr, order=True)
            assert (await admin.route(other)).order_topic_conf == "broker-b:8"
            with pytest.raises(ConfigError, match=r"no broker at 127\.0\.0\.1:1 "):
                await admin.create_topic(f"{topic}N", broker_addr="127.0.0.1:1", order=True)
            assert f"{topic}N" not in await admin.topics()  # refused before anything was written
        assert cluster.namesrv.kv["ORDER_TOPIC_CONFIG"] == {
            topic: "broker-b:2;broker-a:4",
            other: "broker-b:8",
        }


async def test_without_order_message_enable_the_route_has_no_order_config(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, _ = names
    async with _admin(cluster, timing) as admin:
        await admin.create_topic(topic, write_queues=3, order=True)
        assert (await admin.route(topic)).order_topic_conf is None  # Java's default: off
        await admin.create_topic(f"{topic}P", write_queues=3)  # not ordered: nothing written
    assert cluster.namesrv is not None
    assert cluster.namesrv.kv == {"ORDER_TOPIC_CONFIG": {topic: f"{cluster.brokers[0].name}:3"}}
