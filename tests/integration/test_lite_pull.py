"""LitePullConsumer on the embedded cluster: assign, poll, seek, commit, rebalance, restart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from support.broker_admin import query_offset
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import produce

from rmq_async import ClientError, ConfigError, MessageExt, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue

pytestmark = pytest.mark.timeout(40)


async def poll_until(c: LitePullConsumer, n: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(out) < n:
            out.extend(await c.poll(1.0, max_messages=100))
    return out


def from_first(cluster: EmbeddedCluster, group: str, timing: Timing) -> LitePullConsumer:
    """A lite consumer committing only when told, new queues read from their first offset."""
    return LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip


def offsets_by_queue(msgs: list[MessageExt]) -> dict[int, list[int]]:
    by: dict[int, list[int]] = {}
    for m in msgs:
        by.setdefault(m.queue_id, []).append(m.queue_offset)
    return by


async def test_assign_poll_seek_commit(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    async with from_first(cluster, group, timing) as c:
        assert internals(c).client.client_id.endswith("@STREAM")
        mqs = await c.fetch_queues(topic)
        assert len(mqs) == 4
        q0 = mqs[0]
        await c.assign([q0])
        assert c.assignment() == {q0}
        data = c._consumer_data()
        assert data.consume_type == "CONSUME_ACTIVELY" and data.subscription_data_set == []
        got = await poll_until(c, 10)
        assert [m.queue_offset for m in got] == list(range(10))
        assert {m.queue_id for m in got} == {q0.queue_id}
        assert c.position(q0) == 10
        # seek back into the middle: buffered batches are dropped, reading starts at 5
        await c.seek(q0, 5)
        again = await poll_until(c, 5)
        assert [m.queue_offset for m in again] == list(range(5, 10))
        with pytest.raises(ConfigError, match="outside the queue's range"):
            await c.seek(q0, 11)
        # explicit commit, written synchronously; the broker then reports it
        await c.commit(sync=True)
        assert await c.committed(q0) == 10
        await c.seek_to_begin(q0)
        assert (await poll_until(c, 1))[0].queue_offset == 0
        await c.seek_to_end(q0)
        assert await c.poll(0.3) == []
        assert await c.offset_for_timestamp(q0, 0) == 0
        with pytest.raises(ClientError, match="not assigned"):
            await c.seek(mqs[1], 0)


async def test_pause_resume_and_bounded_buffer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 80)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, pull_batch_size=5,
        pull_threshold_for_queue=5, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        mqs = await c.fetch_queues(topic)
        await c.assign(mqs[:2])
        with anyio.fail_after(5):
            while sum(q.count for q in c.queues.values()) < 10:
                await internals(c).buffer.wait_changed()
        with anyio.move_on_after(0.2):  # a pull past the bound would show here
            while True:
                await internals(c).buffer.wait_changed()
        assert all(q.count <= 5 for q in c.queues.values())
        c.pause([mqs[0]])
        assert c.paused() == {mqs[0]}
        got = await poll_until(c, 20)
        assert {m.queue_id for m in got} == {mqs[1].queue_id}
        c.resume([mqs[0]])
        more = await poll_until(c, 20)
        assert mqs[0].queue_id in {m.queue_id for m in more}


async def test_subscribe_rebalance_between_two_members(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    seen: Counter[str] = Counter()
    kw = dict(
        namesrv_addr=cluster.namesrv_addr, timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    async with LitePullConsumer(group, instance_name="lite-a", **kw) as a:  # type: ignore[arg-type]
        await a.subscribe(topic, "*")
        with anyio.fail_after(10):
            while len(a.assignment()) < 4:
                await a.wait_rebalanced()
        async with LitePullConsumer(group, instance_name="lite-b", **kw) as b:  # type: ignore[arg-type]
            await b.subscribe(topic, "*")
            with anyio.fail_after(10):
                while not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
                    for m in await a.poll(0.1, max_messages=100) + await b.poll(0.1, max_messages=100):
                        seen[m.keys or ""] += 1
            assert a.assignment().isdisjoint(b.assignment())
            with anyio.fail_after(15):
                while len(seen) < 40:
                    for m in await a.poll(0.1, max_messages=100) + await b.poll(0.1, max_messages=100):
                        seen[m.keys or ""] += 1
    assert set(seen) == {f"k-{i}" for i in range(40)}


async def test_at_least_once_across_restart(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    kw = dict(
        namesrv_addr=cluster.namesrv_addr, timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    processed: set[tuple[int, int]] = set()
    async with LitePullConsumer(group, auto_commit=False, **kw) as c:  # type: ignore[arg-type]
        mq_all = await c.fetch_queues(topic)
        await c.assign(mq_all)
        first = await poll_until(c, 12)
        processed |= {(m.queue_id, m.queue_offset) for m in first}
        await c.commit()  # memory only: the close writes it
        # polled but never committed: must come again after the restart
        uncommitted = await poll_until(c, 1)
    expected = {q: max((o for qq, o in processed if qq == q), default=-1) + 1 for q in range(4)}
    async with LitePullConsumer(group, auto_commit=True, **kw) as c2:  # type: ignore[arg-type]
        for mq in mq_all:
            assert await c2.committed(mq) == expected[mq.queue_id]
        await c2.assign(mq_all)
        rest = await poll_until(c2, 40 - len(processed))
        got = {(m.queue_id, m.queue_offset) for m in rest}
        assert got.isdisjoint(processed)  # nothing committed is delivered again
        assert {(m.queue_id, m.queue_offset) for m in uncommitted} <= got  # the uncommitted ones are
        assert len(processed | got) == 40


# -- helpers ---------------------------------------------------------------------------------------------


async def _poll_until(
    c: LitePullConsumer, pred: Callable[[], bool], timeout: float = 10.0
) -> list[MessageExt]:
    out: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while not pred():
            out.extend(await c.poll(0.5, max_messages=100))
    return out


async def _queue(c: LitePullConsumer, topic: str, qid: int) -> MessageQueue:
    return next(mq for mq in await c.fetch_queues(topic) if mq.queue_id == qid)


# -- committed() reads the broker and overwrites the commit not yet persisted ----------------------


async def test_committed_reads_memory_first_and_keeps_the_pending_commit(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``DefaultLitePullConsumerImpl.committed`` reads ``MEMORY_FIRST_THEN_STORE``: after
    ``commitSync()`` (memory only, persisted by the 5 s task) it returns the new offset, and the
    pending commit is persisted later. rmq_async's ``committed`` calls ``RemoteOffsetStore.read_store``,
    which asks the broker AND writes the broker's (older) value into the store's memory: the answer
    is stale and the user's commit is lost (the persist task / close writes the old offset back)."""
    topic, group = names
    broker = cluster.brokers[0].addr
    await produce(cluster.namesrv_addr, topic, 8)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        q0 = await _queue(c, topic, 0)
        await c.assign([q0])
        first = await c.max_offset(q0)
        await _poll_until(c, lambda: c.position(q0) >= first)
        await c.commit(sync=True)  # the broker now holds `first`
        await produce(cluster.namesrv_addr, topic, 8, start=8)
        second = await c.max_offset(q0)
        assert second > first
        await _poll_until(c, lambda: c.position(q0) >= second)
        await c.commit()  # commitSync(): memory only, as Java
        seen = await c.committed(q0)
    persisted = await query_offset(broker, group, topic, 0)
    assert (seen, persisted) == (second, second), (
        f"committed() after commit() returned {seen} and the broker ended with {persisted}; Java returns "
        f"{second} (memory first) and persists {second}"
    )


# -- commit() of a queue this consumer does not own is written to the broker ------------------------


async def test_commit_of_a_queue_not_assigned_is_ignored(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``commit(Map<MessageQueue, Long>, persist)`` only updates queues whose ProcessQueue is
    assigned and not dropped, and ``persistAll`` writes only queues in the offset table: an offset
    for a queue owned by another member (subscribe mode) or never assigned is ignored. rmq_async's
    ``_commit_memory`` stores any queue, and ``commit(..., sync=True)`` writes it to the broker,
    overwriting the offset of the member that owns that queue."""
    topic, group = names
    broker = cluster.brokers[0].addr
    await produce(cluster.namesrv_addr, topic, 8)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        q0 = await _queue(c, topic, 0)
        q1 = await _queue(c, topic, 1)
        await c.assign([q0])
        await c.commit({q1: 5}, sync=True)
    # the broker's answer for a queue nobody committed (0 on a young topic, as a 4.9.8 broker answers;
    # queue 2 was never touched) must be what queue 1 still has
    untouched = await query_offset(broker, group, topic, 2)
    assert await query_offset(broker, group, topic, 1) == untouched != 5, (
        "commit() of an unassigned queue reached the broker; Java ignores it"
    )


# -- the lite pull consumer ignores suggestWhichBrokerId -------------------------------------------


async def test_lite_pull_follows_suggest_which_broker_id(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Java ``PullAPIWrapper.processPullResult`` records the answer's ``suggestWhichBrokerId`` and
    ``pullKernelImpl`` sends the next pull of that queue to ``findBrokerAddressInSubscribe(name,
    suggested, false)``; a real master suggests its slave (id 1, slaveReadEnable) when the data asked
    for is no longer in memory. The lite consumer goes through the same wrapper. rmq_async's
    ``LitePullConsumer._pull_once`` always pulls ``broker_addr(name)`` (the master): catching-up reads
    stay on the busy master (the push consumer's ``pulling.py`` does follow the suggestion)."""
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    real = cluster.brokers[0].addr

    def suggest_slave(cmd: RemotingCommand) -> RemotingCommand:
        if cmd.is_response and "nextBeginOffset" in cmd.ext_fields:
            cmd.ext_fields["suggestWhichBrokerId"] = "1"
        return cmd

    async with (
        FrameProxy(real, suggest_slave) as master,
        FrameProxy(real, lambda cmd: cmd) as slave,
        FrameProxy(cluster.namesrv_addr, route_rewriter(lambda _: {"0": master.addr, "1": slave.addr})) as ns,
    ):
        async with LitePullConsumer(
            group, namesrv_addr=ns.addr, timing=timing, auto_commit=False, pull_batch_size=2,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        ) as c:  # fmt: skip
            q0 = await _queue(c, topic, 0)
            await c.assign([q0])
            top = await c.max_offset(q0)
            await _poll_until(c, lambda: c.position(q0) >= top)
        assert slave.pulls > 0, (
            f"{master.pulls} pulls went to the master, which suggested id 1 each time; none to the slave"
        )


async def test_lite_start_stop_async_for_and_bulk_offsets(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # as a PushConsumer: start()/stop() as well as 'async with', health(), 'async for' over the messages;
    # and aiokafka's bulk offset queries over a set of queues
    topic, group = names
    sent = await produce(cluster.namesrv_addr, topic, 12)
    lite = LitePullConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    await lite.start()
    try:
        with pytest.raises(ClientError, match="already started"):
            await lite.start()
        await lite.subscribe(topic)
        keys = []
        with anyio.fail_after(20):
            async for msg in lite:
                keys.append(msg.keys)
                if len(keys) == 12:
                    break
        assert sorted(keys, key=lambda k: int(str(k)[2:])) == [f"k-{i}" for i in range(12)]
        queues = await lite.fetch_queues(topic)
        ends = await lite.end_offsets(queues)
        per_queue = Counter(r.message_queue for r in sent)
        assert ends == {mq: per_queue[mq] for mq in queues}
        assert await lite.beginning_offsets(reversed(queues)) == {mq: 0 for mq in reversed(queues)}
        early = {mq: 1 for mq in queues}  # 1970: before every message
        assert await lite.offsets_for_times(early) == {mq: 0 for mq in queues}
        assert lite.health().running
    finally:
        await lite.stop()
    assert not lite.health().running


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"group": "a b"}, "group"),
        ({"group": "g", "consume_from_where": "CONSUME_FROM_NOWHERE"}, "consume_from_where"),
        ({"group": "g", "pull_threshold_size_for_queue": 100 << 20}, "pull_threshold_size_for_queue"),  # MiB
    ],
)
def test_lite_and_push_validate_the_same_options_alike(kwargs: dict[str, object], field: str) -> None:
    from rmq_async import PushConsumer

    with pytest.raises(ConfigError, match=field):
        LitePullConsumer(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=field):
        PushConsumer(**kwargs)  # type: ignore[arg-type]


async def test_a_seek_while_a_pull_answer_is_in_hand_wins(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # the seek lands after a pull's answer arrived and before its loop applied it (the task resumes
    # with the answer before the cancellation reaches an await): that answer is for the old position
    # and must not be buffered nor move the next offset past the seek (it did: the messages between
    # the seek and the old position never came, found as a flaky tests/spark/test_compressed.py)
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 40)
    async with from_first(cluster, group, timing) as c:
        q0 = (await c.fetch_queues(topic))[0]
        api = internals(c).client.api
        real = api.pull
        seeks: list[int] = []

        async def pull(addr: str, header: Any, *args: Any, **kwargs: Any) -> Any:
            res = await real(addr, header, *args, **kwargs)
            if header.queue_offset == 5 and not seeks:  # the answer in hand: seek back to 0 now
                seeks.append(header.queue_offset)
                offsets = internals(c).offsets
                assert offsets is not None
                offsets.reset_to(offsets.owned(q0), 0)
            return res

        api.pull = pull  # type: ignore[method-assign]
        await c.assign([q0])
        await c.seek(q0, 5)
        got = await poll_until(c, 10)
        assert seeks == [5]
        assert [m.queue_offset for m in got] == list(range(10))
