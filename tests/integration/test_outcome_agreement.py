"""The concurrent and the POP consume paths settle a handler's answer by one rule (``consumer.outcome``,
Java's meaning): SUCCESS consumes up to ``ctx.ack_index``, RECONSUME_LATER nothing; an ``ack_index``
below -1 or not an int is the user's error, logged, and consumes nothing, and the consumer goes on.

Before: with ``ack_index = -2`` on a 3-message batch POP acked the first two while the concurrent service
sent all three back; with ``ack_index = "1"`` POP raised TypeError in a task-group task and ended the
consumer. What each path did is read off the broker: the send-backs (CONSUMER_SEND_MSG_BACK, 36) of the
concurrent path, the acks (200051) and invisible-time changes (200053) of POP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio
import pytest
from support.integration import consumer, until

from rmq_async import ConsumeContext, ConsumeResult, Message, MessageExt, Producer, Timing
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode

CASES = {
    # ack_index, result -> how many of the batch's first messages are consumed
    "success-ack-0": (0, ConsumeResult.SUCCESS, 1),
    "success-ack-1": (1, ConsumeResult.SUCCESS, 2),
    "success-ack-minus-1": (-1, ConsumeResult.SUCCESS, 0),
    "success-ack-minus-2": (-2, ConsumeResult.SUCCESS, 0),
    "success-ack-str": ("1", ConsumeResult.SUCCESS, 0),
    "later-ack-1": (1, ConsumeResult.RECONSUME_LATER, 0),
}


@pytest.fixture
async def cluster5(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=1, timing=timing, flavour=5) as c:
        yield c


@pytest.mark.parametrize("path", ["concurrent", "pop"])
@pytest.mark.parametrize("case", list(CASES))
async def test_both_paths_settle_ack_index_alike(
    cluster5: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    path: str,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ack_index, result, acked = CASES[case]
    topic, group = names
    await cluster5.create_topic(topic, 1)
    if path == "pop":
        answers = await set_consume_mode(topic, group, "POP", 0, namesrv_addr=cluster5.namesrv_addr)
        assert all(code == 0 for code, _ in answers.values()), answers
    async with Producer("agree_p", namesrv_addr=cluster5.namesrv_addr) as p:
        for i in range(3):
            await p.send(Message(topic, b"x", keys=f"k-{i}"))
    first: list[str] = []
    again: list[str] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        if msgs[0].reconsume_times > 0:
            again.extend(m.keys or "" for m in msgs)
            return ConsumeResult.SUCCESS
        first.extend(m.keys or "" for m in msgs)
        ctx.ack_index = ack_index  # type: ignore[assignment]
        return result

    broker = cluster5.brokers[0]
    failed = {f"k-{i}" for i in range(acked, 3)}
    with broker.faults.recording() as seen, caplog.at_level(logging.ERROR, logger="rmq_async"):
        kw = {"client_rebalance": False} if path == "pop" else {}
        async with consumer(cluster5, group, topic, handler, timing, consume_batch_max_size=3, **kw) as c:
            with anyio.fail_after(20):
                await until(lambda: set(again) >= failed)
            assert c.health().ready  # the consumer is still running
    assert first == ["k-0", "k-1", "k-2"]  # one batch of three
    assert set(again) == failed
    codes = [cmd.code for cmd in seen]
    if path == "concurrent":
        assert codes.count(RequestCode.CONSUMER_SEND_MSG_BACK) == len(failed)
    else:
        first_acks = codes.count(RequestCode.ACK_MESSAGE) - len(again)  # the retries are acked too
        assert (first_acks, codes.count(RequestCode.CHANGE_MESSAGE_INVISIBLETIME)) == (acked, len(failed))
    if case in ("success-ack-minus-2", "success-ack-str"):
        assert "ctx.ack_index" in caplog.text
