"""A stored message no client can decode never stalls its queue, on the embedded cluster with
its fault injection (``EmbeddedCluster.corrupt_message`` over ``MessageStore.corrupt``, and
``broker.faults``): the rest is consumed, the bad one goes to ``%DLQ%group`` through the broker, the
committed offset waits for it, nothing is lost."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from support.integration import alive_until

from rmq_async import (
    ConsumeContext,
    ConsumeResult,
    Message,
    MessageExt,
    OrderlyContext,
    OrderlyResult,
    Producer,
    PushConsumer,
    SendResult,
    Timing,
    UndecodableMessageError,
)
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ClientConfig
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import Undecodable

pytestmark = pytest.mark.timeout(90)


async def produce_one_queue(
    cluster: EmbeddedCluster, topic: str, n: int
) -> tuple[MessageQueue, list[SendResult]]:
    async with Producer("poison_pg", namesrv_addr=cluster.namesrv_addr) as p:
        mq = (await p.queues(topic))[0]
        sent = [await p.send(Message(topic, f"body-{i}".encode(), keys=f"k-{i}"), queue=mq) for i in range(n)]
    assert [r.queue_offset for r in sent] == list(range(n))
    return mq, sent


async def read_back_dlq(cluster: EmbeddedCluster, group: str, offset: int, timing: Timing) -> Undecodable:
    """The message at ``offset`` of ``%DLQ%group`` queue 0, read back by a lite pull consumer of
    another group: it is still undecodable, so ``poll`` raises its record."""
    dlq = MessageQueue(f"%DLQ%{group}", cluster.brokers[0].name, 0)
    async with LitePullConsumer(group + "_dlq_reader", namesrv_addr=cluster.namesrv_addr, timing=timing) as r:
        await r.assign([dlq])
        await r.seek(dlq, offset)
        with anyio.fail_after(15), pytest.raises(UndecodableMessageError) as err:
            while True:
                assert not await r.poll(1.0)
    return err.value.record


def dlq_count(cluster: EmbeddedCluster, group: str) -> int:
    return int(cluster.brokers[0].store.max_offset(f"%DLQ%{group}", 0))


class Seen:
    """Concurrent handler: keys seen, and the pull count when each arrived."""

    def __init__(self, c: list[PushConsumer], topic: str) -> None:
        self.keys: dict[str, int] = {}
        self.pulls_at: dict[str, int] = {}
        self._c, self._topic = c, topic
        self.changed = anyio.Event()

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        stats = self._c[0].stats.topics.get(self._topic)
        for m in msgs:
            k = m.keys or ""
            self.keys[k] = self.keys.get(k, 0) + 1
            self.pulls_at.setdefault(k, stats.pulls if stats else -1)
        self.changed.set()
        self.changed = anyio.Event()
        return ConsumeResult.SUCCESS

    async def wait(self, n: int) -> None:
        while len(self.keys) < n:
            await self.changed.wait()


def committed(c: PushConsumer, topic: str) -> int:
    """The consumer's committed offset of ``topic`` queue 0 (the one the tests produce to)."""
    for q in c.health().queues:
        if q.queue.topic == topic and q.queue.queue_id == 0 and q.committed is not None:
            return q.committed
    return -1  # not assigned yet


async def wait_committed(c: PushConsumer, topic: str, offset: int) -> None:
    while committed(c, topic) != offset:  # noqa: ASYNC110 (the offset store has no event)
        await anyio.sleep(0.02)


@pytest.mark.parametrize("how", ["body", "type"])
async def test_corrupt_message_in_the_middle_of_1000(
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    how: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = names
    mq, sent = await produce_one_queue(cluster, topic, 1000)
    phys = cluster.corrupt_message(topic, mq.queue_id, 500, how)
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    holder.append(c)
    with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"):
        async with c:
            await alive_until(c, lambda: seen.wait(999), 30)
            await alive_until(c, lambda: wait_committed(c, topic, 1000), 10)
            health = c.health().as_dict()["undecodable"]
    assert set(seen.keys) == {f"k-{i}" for i in range(1000)} - {"k-500"}
    # the messages after it came with the pull that brought it: the queue did not wait
    assert seen.pulls_at["k-501"] - seen.pulls_at["k-499"] <= 1
    assert health["total"] == 1 and health["moved_to_dlq"] == 1
    [line] = [r.getMessage() for r in caplog.records if "undecodable message at" in r.getMessage()]
    for part in (f"{topic}@{mq.broker_name}:{mq.queue_id}", "offset 500", sent[500].msg_id, str(phys)):
        assert part in line
    # the bad message is in %DLQ%group, read back by offset: the stored bytes, still undecodable
    assert dlq_count(cluster, group) == 1
    rec = await read_back_dlq(cluster, group, 0, timing)
    assert (rec.topic, rec.queue_offset, rec.msg_id) == (f"%DLQ%{group}", 0, sent[500].msg_id)
    assert rec.reconsume_times == 1


async def test_send_back_refused_the_others_go_on_and_the_offset_holds(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 300)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 100)
    faults = cluster.brokers[0].faults
    faults.refuse(RequestCode.CONSUMER_SEND_MSG_BACK, ResponseCode.SYSTEM_ERROR, "refused by the test")
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    holder.append(c)
    async with c:
        await alive_until(c, lambda: seen.wait(299), 30)
        await alive_until(c, lambda: wait_committed(c, topic, 100), 10)

        async def retried() -> None:
            while c.health().undecodable.send_back_retries < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)

        await alive_until(c, retried, 20)
        assert committed(c, topic) == 100  # held at the bad message while the broker refuses it
        assert dlq_count(cluster, group) == 0
        faults.clear()
        await alive_until(c, lambda: wait_committed(c, topic, 300), 20)
    assert set(seen.keys) == {f"k-{i}" for i in range(300)} - {"k-100"}
    assert dlq_count(cluster, group) == 1


async def test_nothing_lost_across_a_restart_while_the_bad_message_waits(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 1000)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 500)
    faults = cluster.brokers[0].faults
    faults.refuse(RequestCode.CONSUMER_SEND_MSG_BACK, ResponseCode.SYSTEM_ERROR, "refused by the test")
    holder: list[PushConsumer] = []
    first = Seen(holder, topic)

    def make(handler: Seen) -> PushConsumer:
        return PushConsumer(
            group, namesrv_addr=cluster.namesrv_addr, handler=handler, subscriptions={topic: "*"},
            timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )  # fmt: skip

    c1 = make(first)
    holder.append(c1)
    async with c1:
        await alive_until(c1, lambda: first.wait(600), 30)  # stopped in the middle, the bad one held
    assert dlq_count(cluster, group) == 0
    faults.clear()
    holder.clear()
    second = Seen(holder, topic)
    c2 = make(second)
    holder.append(c2)
    async with c2:
        await alive_until(c2, lambda: wait_committed(c2, topic, 1000), 30)
    # at least once: the second run starts at the held offset (500), so it sees what came after again
    assert set(first.keys) | set(second.keys) == {f"k-{i}" for i in range(1000)} - {"k-500"}
    assert "k-501" in second.keys and "k-499" not in second.keys
    assert dlq_count(cluster, group) == 1


async def test_orderly_waits_for_the_move_then_goes_on_in_order(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 200)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 80, "type")
    got: list[int] = []
    dlq_when_next: list[int] = []
    done = anyio.Event()

    async def handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        for m in msgs:
            if m.queue_offset == 81:
                dlq_when_next.append(dlq_count(cluster, group))
            got.append(m.queue_offset)
        if len(got) >= 199:
            done.set()
        return OrderlyResult.SUCCESS

    async with PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=handler, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", orderly=True,
    ) as c:  # fmt: skip
        await alive_until(c, done.wait, 30)
        await alive_until(c, lambda: wait_committed(c, topic, 200), 10)
    assert got == [i for i in range(200) if i != 80]
    assert dlq_when_next == [1]  # the message after it came only once the broker had the bad one


async def test_lite_pull_fails_naming_the_offset_or_skips(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 50)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 20)
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        await c.assign([mq])
        got: list[int] = []
        with anyio.fail_after(15), pytest.raises(UndecodableMessageError) as err:
            while True:
                got.extend(m.queue_offset for m in await c.poll(1.0, max_messages=100))
        assert got == list(range(20))  # everything before it first
        assert err.value.record.queue_offset == 20 and "offset 20" in str(err.value)
        assert c.position(mq) == 20
        with pytest.raises(UndecodableMessageError):  # it stays there: fails again
            with anyio.fail_after(15):
                while True:
                    assert not await c.poll(1.0)
        await c.seek(mq, 21)  # the caller moves past it
        rest: list[int] = []
        with anyio.fail_after(15):
            while len(rest) < 29:
                rest.extend(m.queue_offset for m in await c.poll(1.0, max_messages=100))
        assert rest == list(range(21, 50))

    async with LitePullConsumer(
        group + "_skip", namesrv_addr=cluster.namesrv_addr, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", on_undecodable="skip",
    ) as s:  # fmt: skip
        await s.assign([mq])
        polled: list[int] = []
        with anyio.fail_after(15):
            while len(polled) < 49:
                polled.extend(m.queue_offset for m in await s.poll(1.0, max_messages=100))
        assert polled == [i for i in range(50) if i != 20] and s.stats.undecodable == 1


async def test_a_body_refused_as_a_whole_three_times_is_handled_at_its_offset(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Broken framing (a store size that does not add up) fails the whole pull body: the connection
    is closed and the pull retried; the third failure at one offset narrows the pull to the good
    messages before it, then the broken one goes to the DLQ by the commit-log offset it names."""
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 60)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 30, "framing")
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    holder.append(c)
    async with c:
        await alive_until(c, lambda: seen.wait(59), 60)
        await alive_until(c, lambda: wait_committed(c, topic, 60), 20)
        health = c.health().as_dict()["undecodable"]
    assert set(seen.keys) == {f"k-{i}" for i in range(60)} - {"k-30"}
    assert health["broken_bodies"] >= 3 and health["moved_to_dlq"] == 1
    assert dlq_count(cluster, group) == 1


async def test_consume_directly_of_an_undecodable_message_says_why(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """CONSUME_MESSAGE_DIRECTLY (mqadmin consumeMessage) of a message the consumer cannot decode is
    refused with the reason, not as 'no message'."""
    topic, group = names
    mq, sent = await produce_one_queue(cluster, topic, 3)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 1, "type")
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    holder.append(c)
    async with c:
        await alive_until(c, lambda: seen.wait(2), 20)
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci:
            ext = {"consumerGroup": group, "clientId": c.client_id, "msgId": sent[1].offset_msg_id}
            cmd = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext)
            resp = await ci.pool.request(cluster.brokers[0].addr, cmd, 5.0)
    assert resp.code != 0 and resp.remark is not None
    assert "undecodable message at" in resp.remark and "unknown compression type 7" in resp.remark


async def test_broadcasting_passes_it_over_with_an_error_record(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, tmp_path: Path
) -> None:
    """Broadcasting: each member has its own offsets and Java drops what a member fails to consume, so
    an undecodable message is logged at ERROR and passed over, not dead-lettered by every member."""
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 40)
    cluster.brokers[0].store.corrupt(topic, mq.queue_id, 5)
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"}, timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", message_model="BROADCASTING",
        offset_store_dir=str(tmp_path),
    )  # fmt: skip
    holder.append(c)
    async with c:
        await alive_until(c, lambda: seen.wait(39), 20)
        await alive_until(c, lambda: wait_committed(c, topic, 40), 10)
        assert c.health().undecodable.total == 1
    assert set(seen.keys) == {f"k-{i}" for i in range(40)} - {"k-5"}
    assert dlq_count(cluster, group) == 0


# -- broken framing whose fixed part does not read (a bad magic code, junk over the ids) -------------


def _quick(timing: Timing) -> Timing:
    """The fast profile with a shorter pull error delay: the back-off before a skip stays well under
    a second (the real one: about a minute on the Java timing)."""
    return timing.model_copy(update={"pull_error_delay": 0.02})  # the fixture's: Timing.fast()


async def _consume_60_with_30_spoiled(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, how: str
) -> tuple[PushConsumer, Seen, MessageQueue, list[SendResult], int]:
    topic, group = names
    mq, sent = await produce_one_queue(cluster, topic, 60)
    phys = cluster.corrupt_message(topic, mq.queue_id, 30, how)
    holder: list[PushConsumer] = []
    seen = Seen(holder, topic)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=seen, subscriptions={topic: "*"},
        timing=_quick(timing), consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    holder.append(c)
    async with c:
        await alive_until(c, lambda: seen.wait(59), 30)
        await alive_until(c, lambda: wait_committed(c, topic, 60), 20)
    assert set(seen.keys) == {f"k-{i}" for i in range(60)} - {"k-30"}  # nothing else lost
    return c, seen, mq, sent, phys


async def test_a_bad_magic_code_with_sound_ids_goes_to_the_dlq_by_its_offset(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad magic code: the decoder refuses the body from it on, so no record names it; the pull is
    narrowed to the messages before it, then to it alone, whose fixed fields (queue id, offset as
    pulled) give its commit-log offset: a 4.9.8 broker moves it to the DLQ (its decoder skips the
    magic code; the copy is stored whole, so it reads back), and the queue goes on."""
    topic, group = names
    with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"):
        c, _, mq, _, phys = await _consume_60_with_30_spoiled(cluster, names, timing, "magic")
    assert c.stats.undecodable == 1 and c.stats.undecodable_to_dlq == 1
    assert c.stats.undecodable_skipped == 0 and c.health().undecodable.skipped == 0
    [line] = [r.getMessage() for r in caplog.records if "undecodable message at" in r.getMessage()]
    for part in (
        f"{topic}@{mq.broker_name}:{mq.queue_id}",
        "offset 30",
        str(phys),
        "broken framing",
        "magic",
    ):
        assert part in line
    assert dlq_count(cluster, group) == 1
    dlq = MessageQueue(f"%DLQ%{group}", cluster.brokers[0].name, 0)
    async with LitePullConsumer(group + "_dlq_reader", namesrv_addr=cluster.namesrv_addr, timing=timing) as r:
        await r.assign([dlq])
        await r.seek(dlq, 0)
        got: list[MessageExt] = []
        with anyio.fail_after(15):
            while not got:
                got = await r.poll(1.0)
    assert [(m.keys, m.body, m.get_property("RETRY_TOPIC")) for m in got] == [("k-30", b"body-30", topic)]


async def test_a_bad_magic_code_a_5x_broker_cannot_move_is_skipped(
    names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    """A 5.x broker cannot read a bad magic code back ("look message by offset failed"): after a
    bounded number of refusals the message is skipped with an ERROR record; the queue goes on."""
    group = names[1]
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, flavour=5) as cluster:
        with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"):
            c, _, _, _, phys = await _consume_60_with_30_spoiled(cluster, names, timing, "magic")
        assert dlq_count(cluster, group) == 0
    assert c.stats.undecodable == 1 and c.stats.undecodable_skipped == 1
    assert c.stats.undecodable_to_dlq == 0 and c.stats.undecodable_retries >= 4
    [line] = [r.getMessage() for r in caplog.records if "SKIPPED" in r.getMessage()]
    for part in ("offset 30", str(phys), "look message by offset failed", "NOT moved to the DLQ"):
        assert part in line


async def test_unreadable_ids_are_skipped_with_an_error_record(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    """Junk over the magic code, queue id and offsets: nothing names the message, so the broker could
    not move it; after bounded retries (the back-off at its cap) it is skipped: an ERROR record naming
    topic, queue, offset and reason, the skipped count, the committed offset past it."""
    topic, group = names
    with caplog.at_level(logging.ERROR, logger="rmq_async.consumer"):
        c, _, mq, _, _ = await _consume_60_with_30_spoiled(cluster, names, timing, "ids")
    assert c.stats.undecodable == 1 and c.stats.undecodable_skipped == 1
    assert c.stats.undecodable_to_dlq == 0 and c.stats.broken_bodies >= 6
    counts = c.health().undecodable
    assert (counts.total, counts.skipped, counts.moved_to_dlq) == (1, 1, 0)
    assert dlq_count(cluster, group) == 0
    [line] = [r.getMessage() for r in caplog.records if "SKIPPED" in r.getMessage()]
    for part in (
        f"{topic}@{mq.broker_name}:{mq.queue_id}", "offset 30", "broken framing", "bad magic code",
        "commit-log offset unknown", "the stored message stays in the commit log",
        "it was NOT moved to the DLQ",
    ):  # fmt: skip
        assert part in line


async def test_lite_pull_fails_or_skips_at_unreadable_ids(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """Lite pull keeps its on_undecodable choice for a message nothing names: 'fail' raises naming
    its offset after the messages before it, 'skip' passes over it; no back-off to a skip."""
    topic, group = names
    mq, _ = await produce_one_queue(cluster, topic, 40)
    cluster.corrupt_message(topic, mq.queue_id, 20, "ids")
    async with LitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, timing=_quick(timing),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as c:  # fmt: skip
        await c.assign([mq])
        got: list[int] = []
        with anyio.fail_after(15), pytest.raises(UndecodableMessageError) as err:
            while True:
                got.extend(m.queue_offset for m in await c.poll(1.0, max_messages=100))
        assert got == list(range(20))
        assert err.value.record.queue_offset == 20 and "broken framing" in str(err.value)
    async with LitePullConsumer(
        group + "_skip", namesrv_addr=cluster.namesrv_addr, timing=_quick(timing),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", on_undecodable="skip",
    ) as s:  # fmt: skip
        await s.assign([mq])
        polled: list[int] = []
        with anyio.fail_after(15):
            while len(polled) < 39:
                polled.extend(m.queue_offset for m in await s.poll(1.0, max_messages=100))
        assert polled == [i for i in range(40) if i != 20] and s.stats.undecodable == 1
