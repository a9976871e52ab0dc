"""Rebalance of the push consumer: a listener that raises, a topic resubscribed while a rebalance
is in progress, a consumer-list lookup that fails for one topic."""

from __future__ import annotations

import time

import anyio
from support.integration import Collector, alive_until, consumer, produce, until

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.mq import MessageQueue

# -- a rebalance listener that raises stops the whole consumer -------------------------------------


async def test_raising_rebalance_listener_does_not_stop_the_consumer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """rebalancer.py: ``run`` catches only RocketMQError around ``do_rebalance``, and ``_apply`` awaits
    ``on_assigned`` / ``on_revoked`` unguarded, so a listener that raises once kills the rebalance task
    and with it the consumer's task group: nothing is consumed any more."""
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    calls = 0

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("listener bug in user code")

    col = Collector()
    async with consumer(cluster, group, topic, col, timing, on_assigned=on_assigned) as c:
        await alive_until(c, lambda: until(lambda: calls >= 1))
        await produce(cluster.namesrv_addr, topic, 10)
        await alive_until(c, lambda: col.wait_unique(10))
        assert c.running


# -- subscription changed at runtime: a queue kept without a pull loop is never pulled again --------


async def test_resubscribe_during_a_rebalance_keeps_the_queues_pulled(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """pulling.py ``_loop``: when ``c.subscription(topic)`` is None (the topic was unsubscribed) the pull
    loop returns but leaves its ProcessQueue in the queue table (only a later rebalance drops it). If the
    topic is subscribed again before a rebalance that no longer lists it has run (here: the rebalance in
    progress is inside an async ``on_assigned`` listener), every following rebalance sees the queue as
    owned (``diff`` finds nothing to add), so its pull loop is never started again: the queue stays
    assigned to this member and its messages are never consumed."""
    topic, group = names
    await cluster.create_topic(topic, queues=2)
    gate = anyio.Event()
    in_listener = anyio.Event()

    async def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        if t == topic and not gate.is_set():
            in_listener.set()
            await gate.wait()  # e.g. restoring per-queue state from a database

    col = Collector()
    async with consumer(cluster, group, topic, col, timing, on_assigned=on_assigned) as c:
        await alive_until(c, in_listener.wait)  # the first rebalance started the topic's pull loops
        mine = sorted(mq for mq in internals(c).queues if mq.topic == topic)
        assert len(mine) == 2
        await alive_until(
            c, lambda: until(lambda: all(internals(c).queues[mq].scope is not None for mq in mine))
        )
        t0 = time.monotonic()
        c.unsubscribe(topic)
        # the held pulls come back (suspend timeout) and each loop, in the same step, finds no
        # subscription (the loops end)
        await alive_until(
            c, lambda: until(lambda: all(internals(c).queues[mq].last_pull_time > t0 for mq in mine))
        )
        c.subscribe(topic, "*")  # changed our mind: subscribed again
        gate.set()
        await alive_until(c, c.wait_rebalanced)  # the rebalance that was in the listener
        await alive_until(c, c.wait_rebalanced)  # the one the (un)subscribe asked for
        await produce(cluster.namesrv_addr, topic, 4)
        with anyio.move_on_after(10):
            await alive_until(c, lambda: col.wait_unique(4))
        idle = [str(mq) for mq in mine if mq in internals(c).queues and internals(c).queues[mq].scope is None]
        assert col.unique == 4, (
            f"only {col.unique}/4 messages consumed; queues assigned but never pulled again: {idle}"
        )


# -- one topic's failed GET_CONSUMER_LIST_BY_GROUP aborts the rebalance of every topic ------------


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
