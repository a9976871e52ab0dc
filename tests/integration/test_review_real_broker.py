"""Review against the behaviour of real 4.9.8 / 5.3.3 brokers and the Java client: each test reproduces
one place where rmq_async differs from the Java DefaultMQPushConsumer in a way the embedded broker does
not show by itself. Each test fails on the code it was written against and passes once it is fixed.

Networking is real sockets on 127.0.0.1 (the embedded cluster, a tiny name-server proxy); nothing of
rmq_async's transport is mocked. ``alive_until`` races the awaited condition against the consumer's
supervisor task, so an exception escaping into the consumer's task group fails the test at once.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import Collector, alive_until, consumer, produce, until
from support.broker_admin import commit_offset
from support.frame_proxy import FrameProxy, route_rewriter

from rmq_async import ConsumeContext, ConsumeResult, EmbeddedCluster, MessageExt, PushConsumer, Timing
from rmq_async.client.instance import local_ip
from rmq_async.config import ClientConfig
from rmq_async.consumer.offset_store import LocalFileOffsetStore
from rmq_async.consumer.orderly import OrderlyContext, OrderlyResult
from rmq_async.embedded.outbound import Outbound
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue

# -- helpers ---------------------------------------------------------------------------------------------


# -- 1. offsets are read only from a master: a broker whose master is down is never consumed ----------


async def test_offset_query_falls_back_to_the_slave_when_the_master_is_absent(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``RemoteBrokerOffsetStore.fetchConsumeOffsetFromBroker`` (4.9.8 and 5.3.3) looks the broker
    up with ``findBrokerAddressInSubscribe(name, MASTER_ID, true)``, refreshes the route, then asks
    again with ``onlyThisBroker=false``: with the master down it reads the offset from the slave, and
    ``pullKernelImpl`` pulls from the slave too, so consumption goes on. rmq_async's
    ``RemoteOffsetStore.read_store`` uses ``master_addr`` (only id 0, both times): every
    ``compute_pull_from_where`` raises, no queue of that broker is ever started, nothing is consumed
    until the master comes back (a restarted or rebalanced member stalls)."""
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 8)
    col = Collector()
    # the name server's routes list every broker under id 1 only: what a real 4.x master/slave name
    # server answers while the master is down and the slave is registered (the embedded broker plays
    # the slave: it answers everything)
    slave_only = route_rewriter(lambda a: {"1": a.get("0") or next(iter(a.values()))})
    async with FrameProxy(cluster.namesrv_addr, slave_only) as ns:
        c = PushConsumer(
            group,
            namesrv_addr=ns.addr,
            handler=col,
            subscriptions={topic: "*"},
            timing=timing,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        async with c:
            try:
                await alive_until(c, lambda: until(lambda: col.unique >= 8), timeout=8.0)
            except pytest.fail.Exception:
                pytest.fail(
                    f"master down, slave registered: consumed "
                    f"{col.unique}/8, owned queues {sorted(map(str, c.assignment()))}; Java reads the "
                    "offset from the slave and consumes"
                )


# -- 2. orderly: re-locking overwrites the committed offset with the broker's older one ---------------


async def _orderly_until_lease_lost(
    cluster: EmbeddedCluster, topic: str, group: str
) -> tuple[PushConsumer, MessageQueue, list[str]]:
    """An orderly consumer of a 1-queue topic that consumed k-0..k-9 (offset 10 in memory); then the
    broker stops answering LOCK_BATCH_MQ (a renewal times out, as on a slow real broker) until the
    client-side lease has run out. Returns the STARTED consumer (the caller stops it)."""
    broker = cluster.brokers[0]
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)
    mq = MessageQueue(topic, broker.name, 0)
    seen: list[str] = []

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        seen.extend(m.keys or "" for m in msgs)
        return OrderlyResult.SUCCESS

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,
        subscriptions={topic: "*"},
        # no periodic persist during the test; lock requests time out quickly
        timing=Timing.fast(persist_interval=60.0, request_timeout=0.5),
        orderly=True,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    await c.start()
    await alive_until(c, lambda: until(lambda: len(seen) >= 10 and c.offset_store.read_memory(mq) == 10))
    broker.faults.drop(RequestCode.LOCK_BATCH_MQ)
    pq = c.pqs[mq]
    await alive_until(c, lambda: until(lambda: not c.consume_service.lease_valid(pq)))
    # the pull sent before the lease ran out (held by the broker) has come back; no pull is sent
    # (and no offset piggy-backed) until the queue is locked again
    await anyio.sleep(c.timing.suspend_timeout + c.timing.held_pull_check_interval + 0.3)
    return c, mq, seen


async def _relocked(cluster: EmbeddedCluster, c: PushConsumer, mq: MessageQueue) -> None:
    cluster.brokers[0].faults.clear()
    pq = c.pqs[mq]

    def done() -> bool:
        st = c.consume_service._states.get(pq)
        return c.consume_service.lease_valid(pq) and st is not None and not st.refresh_offset

    await alive_until(c, lambda: until(done))
    await anyio.sleep(0.3)  # the re-read of the broker's offset (one round trip) has finished


async def test_orderly_relock_does_not_move_the_committed_offset_back(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """orderly.py ``_refresh_offset`` (the first pull after a re-lock) calls
    ``offset_store.read_store``, which OVERWRITES the in-memory offset with the broker's
    (``RemoteOffsetStore.read_store``: ``update(..., increase_only=False)``), and only then compares
    it with ``read_memory``, which is now the same value. The broker's offset lags the memory by up to
    one persist interval (5 s) or one long poll, so a single failed lock renewal moves the committed
    offset back; the persist timer and the piggy-backed pulls then write the old value to the broker,
    and the next owner (or a restart) consumes those messages again. Java re-reads the offset only at
    the first lock (``pullRequest.previouslyLocked``), never after a renewal gap."""
    topic, group = names
    c, mq, _ = await _orderly_until_lease_lost(cluster, topic, group)
    try:
        # the broker has an older offset than ours (the last persist/pull piggy-back was earlier)
        await commit_offset(cluster.brokers[0].addr, group, topic, 0, 5)
        await _relocked(cluster, c, mq)
        memory = c.offset_store.read_memory(mq)
        assert memory == 10, (
            f"k-0..k-9 consumed (offset 10), but after re-locking the committed offset is {memory}: "
            "the broker's older offset replaced ours and will be persisted"
        )
    finally:
        await c.stop()


async def test_orderly_relock_skips_what_another_member_consumed_meanwhile(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """The same ``_refresh_offset`` is meant to jump to the broker's offset when it is ahead of ours
    ("another member consumed past what we hold"), but the comparison runs after ``read_store``
    overwrote the memory (``stored <= max(local, ...)`` is then always true): the queue goes on from
    its own ``next_offset`` and consumes again what the other member consumed."""
    topic, group = names
    c, mq, seen = await _orderly_until_lease_lost(cluster, topic, group)
    try:
        await produce(cluster.namesrv_addr, topic, 10, start=10)  # offsets 10..19
        # while we had no lease, another member held the queue and consumed 10..14
        await commit_offset(cluster.brokers[0].addr, group, topic, 0, 15)
        await _relocked(cluster, c, mq)
        await alive_until(c, lambda: until(lambda: {f"k-{i}" for i in range(15, 20)} <= set(seen)))
        again = sorted({f"k-{i}" for i in range(10, 15)} & set(seen))
        assert not again, f"the broker's offset was 15 after the re-lock, but {again} were consumed again"
    finally:
        await c.stop()


# -- 3. one topic's failed GET_CONSUMER_LIST_BY_GROUP aborts the rebalance of every topic ------------


async def test_failed_consumer_list_of_one_topic_does_not_stop_the_others(
    cluster: EmbeddedCluster, names: tuple[str, str]
) -> None:
    """Java ``MQClientInstance.findConsumerIdList`` catches the failure (a timeout, or code 1 "no consumer
    for this group" from a broker that has not seen our heartbeat yet) and returns null;
    ``rebalanceByTopic`` skips that topic and the other topics are rebalanced in the same round.
    rmq_async lets the BrokerError / timeout escape ``do_rebalance`` (rebalancer.py
    ``_consumer_ids``): the whole round stops at the first topic in sorted order, which is always
    ``%RETRY%group``. On a multi-broker cluster every round has that chance, so joins and leaves are
    applied one or more rebalance intervals (20 s) late: a dropped queue is still pulled while its new
    owner consumes it too."""
    topic, group = names
    broker = cluster.brokers[0]
    await cluster.create_topic(topic, queues=2)
    await cluster.create_topic(f"%RETRY%{group}", queues=1)  # the group has run before
    broker.faults.drop(RequestCode.GET_CONSUMER_LIST_BY_GROUP, count=1)  # the retry topic's lookup
    c = consumer(cluster, group, topic, Collector(), Timing.fast(request_timeout=1.0))
    async with c:
        await alive_until(c, c.wait_rebalanced)  # the first round
        owned = sorted(mq.queue_id for mq in c.assignment() if mq.topic == topic)
        assert owned == [0, 1], (
            f"the consumer list lookup for %RETRY%{group} failed once; {topic} should still have been "
            f"rebalanced in the same round, but owns {owned}"
        )


# -- 4. CONSUME_FROM_TIMESTAMP: the default timestamp moves with every rebalance ---------------------


def test_default_consume_timestamp_is_fixed_when_the_consumer_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Java ``DefaultMQPushConsumer.consumeTimestamp`` is a field set once, at construction, to
    now - 30 min; every queue without a committed offset starts from that instant. rebalancer.py
    ``_consume_timestamp_ms`` computes now - 30 min at every ``compute_pull_from_where``: a queue first
    assigned hours after start (a new queue of the topic, a queue whose offset the broker lost) starts
    30 min before THAT moment and its older messages are never consumed."""
    c = PushConsumer(
        "review_ts_group",
        namesrv_addr="127.0.0.1:9876",
        handler=Collector(),
        subscriptions={"ReviewTs": "*"},
        consume_from_where="CONSUME_FROM_TIMESTAMP",
    )
    first = c.rebalancer._consume_timestamp_ms()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200.0)  # two hours later
    later = c.rebalancer._consume_timestamp_ms()
    assert later == first, f"the default consume timestamp moved by {(later - first) / 1000:.0f} s"


# -- 5. client id: the IP is the host name's address, often loopback --------------------------------


def _ipv4_of_interfaces() -> list[str]:
    out = []
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            out.append(socket.inet_ntoa(raw[20:24]))
    return out


def test_client_ip_is_not_loopback_when_the_host_has_another_address() -> None:
    """Java ``ClientConfig.clientIP`` = ``RemotingUtil.getLocalAddress()``: the first non-loopback IPv4
    of the network interfaces (skipping 127.0.* and 192.168.* when another exists). instance.py
    ``local_ip`` resolves the host name, which /etc/hosts maps to 127.0.0.1 or 127.0.1.1 on many hosts:
    every member on such hosts gets the id ``127.0.x.1@<instance>``. With an explicit instance name
    (the same on every host) the ids collide, the broker lists one id twice, both members compute the
    same share, and the other share is never consumed; admin tools cannot tell the members apart."""
    others = [a for a in _ipv4_of_interfaces() if not a.startswith("127.")]
    if not others:
        pytest.skip("this host has no non-loopback IPv4 address")
    assert local_ip() in others, f"client ip {local_ip()!r}, but the host has {others}"


# -- 6. broadcasting: the offset file is not the Java client's format ---------------------------------


async def test_local_offset_file_reads_the_java_format(tmp_path: Path) -> None:
    """Java ``LocalFileOffsetStore`` keeps ``<dir>/<client id>/<group>/offsets.json`` as
    ``OffsetSerializeWrapper.toJson``: fastjson with MessageQueue objects as map keys
    (``{"offsetTable":{{"brokerName":..,"queueId":0,"topic":..}:5}}``). rmq_async uses the same path
    but its own ``{"offsets":[...]}`` rows, and reads a Java file as "unreadable": a broadcasting group
    moved from Java to rmq_async (or back) restarts every queue from consume_from_where (re-consumes
    everything, or skips what arrived meanwhile)."""
    cid, group = "127.0.0.1@DEFAULT", "review_bcast_group"
    path = tmp_path / cid / group / "offsets.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"ReviewBcast"}:5,'
        '{"brokerName":"broker-a","queueId":1,"topic":"ReviewBcast"}:7}}',
        encoding="utf-8",
    )
    store = LocalFileOffsetStore(tmp_path, cid, group)
    await store.load()
    got = {mq.queue_id: off for mq, off in store.snapshot().items()}
    assert got == {0: 5, 1: 7}, f"a Java offsets.json was read as {got}"


# -- 7. CONSUME_MESSAGE_DIRECTLY of a retry copy shows the %RETRY% topic -------------------------------


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


# -- 8. every pull answered 24/25 sends a heartbeat and retries within 50 ms ----------------------------


async def test_subscription_not_exist_does_not_become_a_heartbeat_storm(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """pulling.py: on 24 SUBSCRIPTION_NOT_EXIST / 25 NOT_LATEST every pull loop sends a full heartbeat to
    every broker and pulls again after 50 ms, without limit. A real broker answers 24 over and over while
    heartbeats succeed when the group's members subscribe different topics (the broker keeps ONE
    subscription table per group and each heartbeat replaces it, ``ConsumerGroupInfo.updateSubscription``
    removes the topics the heartbeat lacks, and every such change pushes NOTIFY_CONSUMER_IDS_CHANGED to
    all members). Then each queue of this member re-registers ~20 times a second: a heartbeat and
    notify storm, and a Java member of the group (which only retries after 3 s,
    ``pullTimeDelayMillsWhenException``, and heartbeats every 30 s) has its subscription replaced
    within 50 ms every time and starves. Java sends no heartbeat on 24/25."""
    topic, group = names
    broker = cluster.brokers[0]
    col = Collector()
    c = consumer(cluster, group, topic, col, timing)
    await produce(cluster.namesrv_addr, topic, 1)
    async with c:
        await alive_until(c, lambda: col.wait_unique(1))
        api = c.client.api
        real = api.heartbeat
        sent = 0

        async def counting(*args: Any, **kw: Any) -> Any:
            nonlocal sent
            sent += 1
            return await real(*args, **kw)

        api.heartbeat = counting  # type: ignore[method-assign]  # counts, the real request still goes out
        broker.faults.refuse(
            RequestCode.PULL_MESSAGE,
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            "the consumer's subscription not exist",
        )
        await anyio.sleep(2.0)
        broker.faults.clear()
        periodic = int(2.0 / c.timing.heartbeat_interval) + 1
        assert sent <= periodic + 2, (
            f"{sent} heartbeats in 2 s while pulls got 24 (the periodic timer sends {periodic}); each one "
            "re-registers the group's subscription on a real broker and notifies every member"
        )


# -- 9. ClientConfig.namespace is accepted and ignored ---------------------------------------------------


def test_namespace_wraps_the_group_and_topics_as_java_does() -> None:
    """Java ``DefaultMQPushConsumer`` with a namespace registers and pulls as ``ns%group`` /
    ``ns%topic`` / ``%RETRY%ns%group`` (``NamespaceUtil.wrapNamespace`` in ``start()`` and
    ``subscribe()``). rmq_async has ``ClientConfig.namespace`` and ``with_namespace`` but nothing calls
    them: a member configured like its Java peers joins another group on other topics (or gets
    TOPIC_NOT_EXIST), silently."""
    c = PushConsumer(
        "review_ns_group",
        client_config=ClientConfig(namesrv_addr="127.0.0.1:9876", namespace="ns"),
        handler=Collector(),
        subscriptions={"ReviewNs": "*"},
    )
    data = c.consumer_data()
    topics = sorted(s.topic for s in data.subscription_data_set)
    assert (data.group_name, topics) == (
        "ns%review_ns_group",
        ["%RETRY%ns%review_ns_group", "ns%ReviewNs"],
    ), f"namespace 'ns' configured, but the heartbeat registers group {data.group_name!r} with {topics}"
