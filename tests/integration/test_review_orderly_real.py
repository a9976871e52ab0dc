"""Review of the orderly path against the Java client's (ConsumeMessageOrderlyService / RebalanceImpl).

Each test states what a real cluster mixing rmq_async and Java members needs, and fails while rmq_async
differs in a way that matters:

* ``rmq-async consume --orderly`` checks order per (topic, queue id): with two brokers, queue 0 of
  broker-a and queue 0 of broker-b are two queues, each in order; the metric must not merge them;
* Java's orderly service has no consume timeout (a handler runs as long as it needs, under the lock):
  a slow but successful orderly handler must not be cancelled and suspended over and over.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from helpers import child_env
from support.orderly_stub import stub_consumer

from rmq_async import EmbeddedCluster, Message, Producer, Timing
from rmq_async.consumer.orderly import OrderlyConsumeService, OrderlyContext, OrderlyResult
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.message import MessageExt
from rmq_async.protocol.mq import MessageQueue


async def test_cli_order_violations_does_not_merge_same_queue_id_of_two_brokers(
    names: tuple[str, str],
) -> None:
    # A real cluster has several brokers: the topic's queue 0 on broker-a and its queue 0 on broker-b
    # are different queues, consumed concurrently. Message i goes to broker (i % 2), queue 0, so each
    # queue holds strictly increasing send indexes and an orderly consumer consumes each in order: the
    # summary must report 0 order violations (cli.py keys its per-queue check on (topic, queue_id)).
    topic, group = names
    async with EmbeddedCluster(brokers=2, queues=1, timing=Timing.fast()) as cluster:
        await cluster.create_topic(topic, queues=1)
        async with Producer("review_orderly_pg", namesrv_addr=cluster.namesrv_addr) as p:

            def by_index(queues: Any, msg: Any, arg: int) -> MessageQueue:
                ordered = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
                return ordered[arg % len(ordered)]

            for i in range(40):
                await p.send(Message(topic, b"x", keys=f"k-{i}"), selector=by_index, arg=i)
        args = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", "consume", "--orderly"]
        args += ["--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic]
        args += ["--count", "40", "--idle-exit", "5"]
        with anyio.fail_after(25):
            out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["unique_keys"] == 40, summary
    assert summary["order_violations"] == 0, summary


# -- driving OrderlyConsumeService directly (as tests/unit/test_review_orderly.py does) ----------------

MQ = MessageQueue("T", "b", 0)


async def test_orderly_handler_is_not_cancelled_by_the_consume_timeout() -> None:
    # Java's ConsumeMessageOrderlyService has no consume timeout: a handler runs under the queue's
    # lock until it returns (consumeTimeout only labels the hook's return type TIME_OUT), and its
    # SUCCESS is committed. Here consume_timeout is 0.3 s and the handler takes 0.6 s, while the broker
    # lock is renewed all along: it must run once and its batch be committed, not be cancelled,
    # suspended (reconsume_times + 1, the DLQ once max_reconsume_times is set) and run again forever.
    timing = Timing.fast().model_copy(update={"consume_timeout": 0.3})
    c = stub_consumer(timing)
    calls: list[int] = []

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        calls.append(msgs[0].reconsume_times)
        await anyio.sleep(0.6)
        return OrderlyResult.SUCCESS

    svc = OrderlyConsumeService(c, handler)
    async with anyio.create_task_group() as tg:
        await svc.run(tg)
        pq = ProcessQueue(MQ)
        c.pqs[MQ] = pq
        assert await svc.lock_new(pq)
        msgs = [MessageExt("T", b"x", queue_offset=100)]
        pq.put(msgs)
        svc.submit(pq, msgs)
        with anyio.move_on_after(3):
            await c.offset_store.committed.wait()
        tg.cancel_scope.cancel()
    assert [off for off, _ in c.offset_store.commits] == [101], (c.offset_store.commits, calls)
    assert calls == [0], calls
