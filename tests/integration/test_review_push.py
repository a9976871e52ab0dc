"""Review of the push consumer's lifecycle, rebalance, pull loop and offset store: each test here
reproduces one bug (it fails on the code it was written against and passes once the bug is fixed).

Every test runs against the embedded cluster on the fast timing profile, with real sockets.
``alive_until`` races the awaited condition against the consumer's supervisor task: when an exception
escapes into the consumer's task group the supervisor ends, and the test fails at once with that
exception instead of timing out.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest
from helpers import Collector, alive_until, consumer, produce, until
from support.broker_admin import query_offset

from rmq_async import EmbeddedCluster, PushConsumer, Timing
from rmq_async.client.instance import ClientInstance, build_client_id
from rmq_async.config import ClientConfig
from rmq_async.consumer.offset_store import LocalFileOffsetStore
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue

# -- 1. a rebalance listener that raises stops the whole consumer -------------------------------------


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


# -- 2. broadcasting: an offsets file that cannot be written stops the whole consumer ------------------


async def test_unwritable_offset_dir_does_not_stop_a_broadcasting_consumer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """offset_store.py LocalFileOffsetStore.persist_all/_write: an OSError (read-only or full disk,
    permissions) is not caught by ``PushConsumer._persist_loop`` (nor by ``drop_queue``, which catches
    only RocketMQError), so the first timer tick kills the consumer's task group. Java's
    ``LocalFileOffsetStore.persistAll`` logs the IOException and the consumer keeps consuming."""
    topic, group = names
    # a directory nobody may create anything in (sysfs refuses mkdir even to root); reading a missing
    # offsets file there is fine, so the consumer starts
    base = Path("/sys") / f"rmq-review-{os.getpid()}"
    try:
        base.mkdir()
    except OSError:
        pass
    else:  # pragma: no cover - not Linux sysfs
        base.rmdir()
        pytest.skip("no unwritable directory available")
    await cluster.create_topic(topic, queues=1)
    col = Collector()
    async with consumer(
        cluster, group, topic, col, timing, message_model="BROADCASTING", offset_store_dir=str(base)
    ) as c:
        await produce(cluster.namesrv_addr, topic, 5)
        await alive_until(c, lambda: col.wait_unique(5))
        # let the persist timer run a few times (each tick tries to write the offsets file)
        await alive_until(c, lambda: anyio.sleep(timing.persist_interval * 6))
        await produce(cluster.namesrv_addr, topic, 5, start=5)
        await alive_until(c, lambda: col.wait_unique(10))


# -- 3. broadcasting: the offset a PULL_OFFSET_MOVED corrected to is forgotten -------------------------


async def test_broadcasting_offset_illegal_keeps_the_corrected_offset(
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pulling.py OFFSET_ILLEGAL -> push.py drop_queue(mq, offset=next_begin): the corrected offset is
    written to the table and file, then ``offset_store.remove(mq)`` deletes it from the memory table,
    which is all ``LocalFileOffsetStore.read_store`` reads. The re-added queue therefore starts from
    ``consume_from_where`` instead of the corrected offset: with CONSUME_FROM_LAST_OFFSET every message
    stored between the correction and the re-add is skipped (never consumed). Java's
    ``LocalFileOffsetStore.removeOffset`` is a no-op for this reason."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)  # offsets 0..9
    broker = cluster.brokers[0]
    mq = MessageQueue(topic, broker.name, 0)
    col = Collector()
    starts: list[int] = []  # the start offset of each (re)start of the queue

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        if mq in mqs:
            starts.append(c.pqs[mq].next_offset)

    c = consumer(
        cluster,
        group,
        topic,
        col,
        # only the rebalances the consumer asks for itself (no timer between the steps below)
        Timing.fast(rebalance_interval=600.0),
        message_model="BROADCASTING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        offset_store_dir=str(tmp_path),
        instance_name="review",
        on_assigned=on_assigned,
    )
    path = LocalFileOffsetStore(tmp_path, build_client_id(c.client_config, "review"), group).path
    path.parent.mkdir(parents=True)
    # a stored offset past the queue's end: the first pull is answered PULL_OFFSET_MOVED, next 10
    rows = [{"topic": topic, "brokerName": broker.name, "queueId": 0, "offset": 50}]
    path.write_text(json.dumps({"offsets": rows}))
    # the broker cannot answer GET_MAX_OFFSET for a while: a queue that must start from
    # CONSUME_FROM_LAST_OFFSET cannot be (re)started until then
    broker.faults.refuse(RequestCode.GET_MAX_OFFSET, ResponseCode.SYSTEM_ERROR, "review: not now")
    async with c:
        refused = f"cannot compute the start offset of {mq}"

        def settled() -> bool:
            # started at 50, dropped by the correction, then either restarted (from the corrected
            # offset) or refused a start offset by the broker
            return len(starts) >= 2 or any(refused in r.getMessage() for r in caplog.records)

        await alive_until(c, lambda: until(settled))
        assert starts[0] == 50
        await produce(cluster.namesrv_addr, topic, 5, start=10)  # offsets 10..14
        broker.faults.clear()
        c.rebalance_now()
        await alive_until(c, lambda: until(lambda: mq in c.pqs and c.offset_store.read_memory(mq) >= 15))
        missing = sorted({f"k-{i}" for i in range(10, 15)} - set(col.seen))
        assert not missing, (
            f"queue restarted at {starts[1:]} instead of the corrected offset 10: "
            f"{missing} were never consumed"
        )


# -- 4. orderly: RESET_CONSUMER_CLIENT_OFFSET is overwritten by the handler that was running ----------


async def test_orderly_reset_offset_is_not_undone_by_the_running_handler(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """push.py drop_queue: ``offset_store.update(mq, offset)`` (the reset target) happens BEFORE the
    orderly ``consume_service.drop`` waits for the running handler, and the queue is marked dropped
    only after that wait. The handler that finishes meanwhile commits (orderly ``_settle``:
    ``update(commit, increase_only=False)`` since ``pq.dropped`` is still False), overwriting the
    reset; ``persist(sync=True)`` then stores the handler's offset and the queue restarts there. Java's
    ``resetOffset`` marks the queue dropped first (suppressing that commit) and writes the reset offset
    after the in-flight consumption ended."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)  # offsets 0..9
    broker = cluster.brokers[0]
    mq = MessageQueue(topic, broker.name, 0)
    entered = anyio.Event()
    release = anyio.Event()
    starts: list[int] = []

    async def handler(msgs: list, ctx: object) -> None:
        if msgs[0].keys == "k-1" and not release.is_set():
            entered.set()
            await release.wait()

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        if mq in mqs:
            starts.append(c.pqs[mq].next_offset)

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=handler,
        subscriptions={topic: "*"},
        # only the rebalances the consumer asks for itself (no timer between the steps below)
        timing=Timing.fast(rebalance_interval=600.0),
        orderly=True,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        orderly_drop_wait=10.0,
        on_assigned=on_assigned,
    )
    async with c:
        await alive_until(c, entered.wait)  # k-0 committed, the handler of k-1 is running

        async def committed() -> None:  # the broker resets only groups with a committed offset
            while await query_offset(broker.addr, group, topic, 0) < 1:  # noqa: ASYNC110 (broker state)
                await anyio.sleep(0.02)

        await alive_until(c, committed)
        # mqadmin resetOffsetByTime -timestamp -1 (skip to the end): RESET_CONSUMER_CLIENT_OFFSET {q0: 10}
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
            ext = {"topic": topic, "group": group, "timestamp": "-1", "isForce": "true"}
            req = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
            resp = await ci.pool.request(broker.addr, req, 5.0)
        assert resp.code == 0, resp.remark
        await alive_until(c, lambda: until(lambda: mq not in c.pqs))  # the reset is dropping the queue
        release.set()  # the running handler finishes (successfully) while the drop waits for it
        await alive_until(c, lambda: until(lambda: len(starts) >= 2))  # restarted after the reset
        stored = await query_offset(broker.addr, group, topic, 0)
        assert starts[-1] == 10 and stored >= 10, (
            f"reset to 10, but the queue restarted at {starts[-1]} (broker offset {stored})"
        )


# -- 5. subscription changed at runtime: a queue kept without a pull loop is never pulled again --------


async def test_resubscribe_during_a_rebalance_keeps_the_queues_pulled(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """pulling.py ``_loop``: when ``c.subscription(topic)`` is None (the topic was unsubscribed) the pull
    loop returns but leaves its ProcessQueue in ``c.pqs`` (only a later rebalance drops it). If the topic
    is subscribed again before a rebalance that no longer lists it has run (here: the rebalance in
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
        mine = sorted(mq for mq in c.pqs if mq.topic == topic)
        assert len(mine) == 2
        await alive_until(c, lambda: until(lambda: all(c.pqs[mq].scope is not None for mq in mine)))
        t0 = time.monotonic()
        c.unsubscribe(topic)
        # the held pulls come back (suspend timeout) and each loop, in the same step, finds no
        # subscription (the loops end)
        await alive_until(c, lambda: until(lambda: all(c.pqs[mq].last_pull_time > t0 for mq in mine)))
        c.subscribe(topic, "*")  # changed our mind: subscribed again
        gate.set()
        await alive_until(c, c.wait_rebalanced)  # the rebalance that was in the listener
        await alive_until(c, c.wait_rebalanced)  # the one the (un)subscribe asked for
        await produce(cluster.namesrv_addr, topic, 4)
        with anyio.move_on_after(10):
            await alive_until(c, lambda: col.wait_unique(4))
        idle = [str(mq) for mq in mine if mq in c.pqs and c.pqs[mq].scope is None]
        assert col.unique == 4, (
            f"only {col.unique}/4 messages consumed; queues assigned but never pulled again: {idle}"
        )
