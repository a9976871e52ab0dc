"""Timer messages (``deliver_at``, ``delay``) on the embedded cluster: a 5.x flavour delivers them
not before their time and within the wheel's slot; a distant one is refused as the 5.x broker
refuses it; a 4.x flavour gets no timer message (the producer refuses it) and keeps delay levels."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from support.integration import Collector, consumer

from rmq_async import (
    BrokerError,
    ClientConfig,
    Message,
    Producer,
    Timing,
    UnsupportedByBrokerError,
)
from rmq_async.config import parse_delay_levels
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import Prop

#: the embedded wheel's slot (timerPrecisionMs) plus what a loaded machine adds to a delivery
SLACK = 1.0 + 1.5


def _producer(cluster: EmbeddedCluster, timing: Timing, group: str) -> Producer:
    return Producer(group, client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing))


async def test_timer_messages_arrive_not_before_their_time_and_in_time(
    names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    seen = Collector()
    arrived: dict[str, float] = {}

    async def handler(msgs: list, ctx: object) -> None:  # type: ignore[type-arg]
        for m in msgs:
            arrived.setdefault(m.keys or "", time.time())
        await seen(msgs, ctx)  # type: ignore[arg-type]

    async with EmbeddedCluster(queues=4, timing=timing, flavour=5) as cluster:
        await cluster.create_topic(topic)
        async with consumer(cluster, group, topic, handler, timing), _producer(cluster, timing, "tm_pg") as p:
            sent = time.time()
            wanted = {
                "delay-1": sent + 1.0,
                "delay-1.5": sent + 1.5,
                "deliver-2": sent + 2.0,
                "now": sent,
            }
            await p.send(Message(topic, b"d1", keys="delay-1", delay=1))
            await p.send(Message(topic, b"d15", keys="delay-1.5", delay=timedelta(milliseconds=1500)))
            at = datetime.fromtimestamp(wanted["deliver-2"], UTC)
            res = await p.send(Message(topic, b"d2", keys="deliver-2", deliver_at=at))
            await p.send(Message(topic, b"now", keys="now"))
            assert res.message_queue.topic == topic
            await seen.wait_unique(4, timeout=15)
    for key, when in wanted.items():
        assert arrived[key] >= when - 0.01, f"{key} came {when - arrived[key]:.3f}s early"
        assert arrived[key] <= when + SLACK, f"{key} came {arrived[key] - when:.3f}s late"
    by_key = {m.keys: m for m in seen.msgs}
    d1 = by_key["delay-1"]
    assert d1.topic == topic and d1.get_property(Prop.TIMER_DELAY_SEC) == "1"
    assert by_key["delay-1.5"].get_property(Prop.TIMER_DELAY_MS) == "1500"
    out = int(by_key["deliver-2"].get_property(Prop.TIMER_OUT_MS) or 0)
    assert out == int(wanted["deliver-2"] * 1000) // 1000 * 1000  # rounded down to the second
    for m in (d1, by_key["deliver-2"]):
        assert m.get_property(Prop.TIMER_ENQUEUE_MS) and m.get_property(Prop.TIMER_DEQUEUE_MS)
        assert m.get_property(Prop.REAL_TOPIC) == topic
    assert by_key["now"].get_property(Prop.TIMER_OUT_MS) is None
    assert seen.duplicates == 0


async def test_a_timer_beyond_the_brokers_max_delay_is_refused(
    names: tuple[str, str], timing: Timing
) -> None:
    topic, _ = names
    async with (
        EmbeddedCluster(queues=4, timing=timing, flavour=5) as cluster,
        _producer(cluster, timing, "tm_far_pg") as p,
    ):
        with pytest.raises(BrokerError) as err:
            await p.send(Message(topic, b"far", delay=timedelta(days=3, seconds=5)))
        assert err.value.code == 13 and "max delay 259200000ms" in (err.value.remark or "")
        res = await p.send(Message(topic, b"near", delay=timedelta(days=3)))  # the limit itself
        assert res.queue_offset >= 0
        assert cluster.brokers[0].timers.pending == 1


async def test_a_4x_broker_gets_no_timer_message_and_delay_levels_still_work(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    seen = Collector()
    async with _producer(cluster, timing, "tm_v4_pg") as p:
        with pytest.raises(UnsupportedByBrokerError) as err:
            await p.send(Message(topic, b"t", delay=1))
        assert err.value.version == 409 and "delay_level" in str(err.value)
        with pytest.raises(UnsupportedByBrokerError):
            await p.send_oneway(Message(topic, b"t", deliver_at=time.time() + 5))
        sent = time.monotonic()
        await p.send(Message(topic, b"level", keys="level-1", delay_level=1))
    async with consumer(cluster, group, topic, seen, timing):
        await seen.wait_unique(1)
    waited = time.monotonic() - sent
    assert waited >= parse_delay_levels(timing.delay_levels)[0] - 0.05
    assert seen.msgs[0].get_property(Prop.TIMER_OUT_MS) is None
    store = cluster.brokers[0].store
    assert sum(store.max_offset(topic, q) for q in range(4)) == 1  # nothing of the refused ones
