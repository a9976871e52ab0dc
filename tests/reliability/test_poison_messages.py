"""Messages no client can decode: spoiled in the store (a body that does not decompress, an
unknown compression type, broken framing), with the DLQ send-back refused for a while and the
consumer restarted in the middle.

Strategy: the ledger counts a message as accounted for when a handler finished it or, for the spoiled
ones, when its UNIQ_KEY is in ``%DLQ%group`` at the end (read from the broker's store): lost = sent -
consumed - dead-lettered must be 0, and every spoiled message must be in the DLQ (never consumed,
never silently dropped). The committed offset of every queue must reach its end.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rmq_async import PushConsumer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.store import StoredMessage
from rmq_async.protocol.codes import RequestCode, ResponseCode

from .scenario import SCALE, Ledger, consumer, n_msgs, produce


@pytest.fixture
async def cluster(timing: Timing) -> Any:
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as c:
        yield c


def _uniq_key(cluster: EmbeddedCluster, topic: str, queue_id: int, offset: int) -> str:
    store = cluster.brokers[0].store
    cq = store.queue(topic, queue_id)
    assert cq is not None
    view = store.message_at(cq.offsets[offset])
    assert view is not None
    props = dict(item.split("\x01", 1) for item in StoredMessage(bytes(view)).props.split("\x02") if item)
    return props["UNIQ_KEY"]


def _dlq_keys(cluster: EmbeddedCluster, group: str) -> set[str]:
    store = cluster.brokers[0].store
    cq = store.queue(f"%DLQ%{group}", 0)
    if cq is None:
        return set()
    out = set()
    for phys in cq.offsets:
        view = store.message_at(phys)
        assert view is not None
        props = dict(i.split("\x01", 1) for i in StoredMessage(bytes(view)).props.split("\x02") if i)
        out.add(props["UNIQ_KEY"])
    return out


def _committed(c: PushConsumer, topic: str) -> dict[str, int]:
    prefix = f"MessageQueue [topic={topic}, "
    queues = c.health().as_dict()["queues"]
    return {q["queue"]: q["committed"] for q in queues if q["queue"].startswith(prefix)}


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
async def test_spoiled_messages_go_to_the_dlq_and_nothing_is_lost(
    cluster: EmbeddedCluster, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(600)
    await produce(cluster.namesrv_addr, topic, n, ledger)
    store = cluster.brokers[0].store
    per_queue = {q: store.max_offset(topic, q) for q in range(4)}
    spoil = [(0, 10, "body"), (0, 11, "type"), (1, 40, "body"), (2, 7, "framing"), (3, 0, "type")]
    spoil += [(q, per_queue[q] - 1, "body") for q in range(4)]  # the last message of every queue
    spoiled = {_uniq_key(cluster, topic, q, off) for q, off, _ in spoil}
    for q, off, how in spoil:
        store.corrupt(topic, q, off, how)
    faults = cluster.brokers[0].faults
    faults.refuse(RequestCode.CONSUMER_SEND_MSG_BACK, ResponseCode.SYSTEM_ERROR, "refused by the test")
    good = len(ledger.sent) - len(spoiled)

    # phase 1: the broker refuses every DLQ move; the good messages are all consumed anyway
    async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing) as c1:
        await ledger.wait_for(lambda: ledger.unique >= good, 30, "every good message consumed")
        held = _committed(c1, topic)
    assert not _dlq_keys(cluster, group)
    assert all(v < per_queue[int(k.rsplit("=", 1)[1][:-1])] for k, v in held.items())  # offsets held

    # phase 2: restarted (SCALE times) while the broker still refuses, then the refusal ends
    for _ in range(SCALE):
        async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
            await anyio.sleep(timing.rebalance_interval)
    faults.clear()
    ledger.mark_fault_end()
    async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing) as c2:

        def settled() -> bool:
            offsets = _committed(c2, topic)
            return (
                _dlq_keys(cluster, group) == spoiled
                and len(offsets) == 4
                and all(v == per_queue[int(k.rsplit("=", 1)[1][:-1])] for k, v in offsets.items())
            )

        with anyio.fail_after(30):
            while not settled():  # noqa: ASYNC110 (the store and the offset store have no event)
                await anyio.sleep(0.05)
        health = c2.health().as_dict()["undecodable"]
    dead = _dlq_keys(cluster, group)
    assert not dead & set(ledger.seen), "a spoiled message reached a handler"
    for key in dead:  # accounted for: in the DLQ
        ledger.saw(key)
    assert dead == spoiled
    ledger.record(
        spoiled=len(spoiled),
        dead_lettered=len(dead),
        restarts=SCALE + 1,
        dlq_moves_last_run=health["moved_to_dlq"],
    )
