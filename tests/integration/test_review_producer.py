"""Review of the producer path and of ``rmq-async produce`` / ``consume`` against the Java
``DefaultMQProducer`` and a real broker (apache/rocketmq tags rocketmq-all-4.9.8 and -5.3.3).

Each test reproduces one discrepancy on the embedded cluster and fails while rmq_async differs.
"""

from __future__ import annotations

import json
import sys
import time

import anyio
import pytest
from helpers import child_env, until

from rmq_async import ClientConfig, EmbeddedCluster, Message, Producer, Timing
from rmq_async.errors import RocketMQError
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.codes import RequestCode


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", *args]


def _producer(namesrv: str, timing: Timing) -> Producer:
    return Producer("review_pg", client_config=ClientConfig(namesrv_addr=namesrv, timing=timing))


async def test_unknown_topic_without_auto_create_names_the_topic(timing: Timing) -> None:
    # Java (DefaultMQProducerImpl.sendDefaultImpl, 4.9.8 and 5.3.3): the topic's route is 17, the
    # TBW102 route is 17 too (no broker creates TBW102 with autoCreateTopicEnable=false), so the send
    # throws MQClientException "No route info of this topic: <topic>". rmq_async raises the name
    # server's 17 about TBW102, and the CLI says "cannot reach the cluster" although it answered.
    topic = "ReviewNoSuchTopic"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, auto_create_topic=False) as cluster:
        async with _producer(cluster.namesrv_addr, timing) as p:
            with pytest.raises(RocketMQError) as ei:
                await p.send(Message(topic, b"x"))
        t0 = time.monotonic()
        with anyio.fail_after(20):
            out = await anyio.run_process(
                _cli(
                    "produce", "--namesrv", cluster.namesrv_addr, "--topic", topic, "--count", "3", "--quiet"
                ),
                env=child_env(),
                check=False,
            )
        took = time.monotonic() - t0
    err = out.stderr.decode()
    assert out.returncode != 0 and took < 15, (out.returncode, took)  # right: fails fast
    assert topic in str(ei.value), str(ei.value)
    assert topic in err and "cannot reach the cluster" not in err, err


async def test_publish_info_follows_the_route_refresh(timing: Timing) -> None:
    # Java: MQClientInstance.updateTopicRouteInfoFromNameServer (every 30 s) rebuilds the producer's
    # TopicPublishInfo (updateTopicPublishInfo). rmq_async refreshes client.routes but Producer._publish
    # keeps the queues of the first lookup forever: new queues are never used.
    topic = "ReviewGrow"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=2)
        async with _producer(cluster.namesrv_addr, timing) as p:
            await p.send(Message(topic, b"x"))
            assert len(await p.queues(topic)) == 2
            await cluster.create_topic(topic, queues=6)
            with anyio.fail_after(10):
                await until(lambda: [q.write_queue_nums for q in p.client.routes[topic].queue_datas] == [6])
            await anyio.sleep(0.2)
            assert len(await p.queues(topic)) == 6


async def test_selector_sends_after_a_broker_leaves(timing: Timing) -> None:
    # Java: after the route refresh the selector (sendSelectImpl) gets the queue list of the live
    # brokers only, so every key still has a writable queue. rmq_async hands the selector the stale
    # list (both brokers), and keys hashing onto the stopped broker fail forever (no retry on a
    # selector send).
    topic = "ReviewLeave"
    async with EmbeddedCluster(brokers=2, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=4)
        async with _producer(cluster.namesrv_addr, timing) as p:
            assert len(await p.queues(topic)) == 8
            await cluster.stop_broker(1)
            with anyio.fail_after(10):
                await until(lambda: len(p.client.routes[topic].broker_datas) == 1)
            await anyio.sleep(0.2)
            failed = []
            for key in range(8):
                try:
                    await p.send(Message(topic, b"x"), selector=select_by_key_hash, arg=key, timeout=2)
                except RocketMQError as exc:
                    failed.append((key, str(exc)[:80]))
            assert not failed, failed
            assert {q.broker_name for q in await p.queues(topic)} == {"broker-a"}


async def test_cli_produce_seconds_exclude_the_shutdown(timing: Timing) -> None:
    # _produce measures "seconds" after `await producer.stop()` (unregister from every broker, up to
    # request_timeout each), so a slow or dead broker at shutdown inflates seconds and deflates
    # msgs_per_s. Here UNREGISTER_CLIENT is answered after 2 s: 10 sends report >= 2 s.
    topic = "ReviewSecs"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=4)
        cluster.brokers[0].faults.delay(RequestCode.UNREGISTER_CLIENT, 2.0)
        with anyio.fail_after(30):
            out = await anyio.run_process(
                _cli(
                    "produce", "--namesrv", cluster.namesrv_addr, "--topic", topic, "--count", "10", "--quiet"
                ),
                env=child_env(),
                check=False,
            )
    assert out.returncode == 0, out.stderr.decode()[-1000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["sent"] == 10 and summary["failed"] == 0, summary
    assert summary["seconds"] < 1.5, summary


async def test_cli_consume_waits_for_a_topic_not_created_yet(timing: Timing) -> None:
    # Java DefaultMQPushConsumer on a topic the name server does not know yet keeps running and
    # picks the route up at a later refresh; the usual "start consume --from last, then produce to a
    # new (auto-created) topic" works. `rmq-async consume` exits 2 at once ("cannot reach the cluster
    # or topic") although the name server answered.
    topic = "ReviewLater"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        args = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", "review_later_cg")
        args += ["--topic", topic, "--from", "last", "--idle-exit", "30"]
        proc = await anyio.open_process(args, env=child_env())
        try:
            await anyio.sleep(4.0)
            code = proc.returncode
            err = b""
            if code is not None and proc.stderr is not None:
                err = await proc.stderr.receive()
        finally:
            if proc.returncode is None:
                proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
            await proc.aclose()
    assert code is None, (code, err.decode()[-500:])


async def test_cli_produce_illegal_topic_prints_a_message_not_a_traceback(timing: Timing) -> None:
    # Java: Validators.checkTopic throws MQClientException "The specified topic[...] contains illegal
    # characters". The CLI lets the ValueError from Message() escape its task group: an exception
    # group traceback, no JSON line, no "rmq-async:" message.
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        with anyio.fail_after(20):
            out = await anyio.run_process(
                _cli("produce", "--namesrv", cluster.namesrv_addr, "--topic", "bad.topic", "--count", "2"),
                env=child_env(),
                check=False,
            )
    err = out.stderr.decode()
    assert out.returncode != 0
    assert "Traceback" not in err and "rmq-async:" in err, err[-800:]
