"""Transactional producer against the embedded cluster: commit, rollback, UNKNOWN resolved by the
broker's check-back (either way), a checker that raises or hangs, the check maximum, and a producer
restarted between the send and the check."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from support.integration import Collector, consumer, until

from rmq_async import ClientConfig, Message, MessageExt, SendResult, Timing
from rmq_async.client.instance import ClientInstance
from rmq_async.config import TraceConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.errors import ClientError
from rmq_async.observability.trace import query_trace
from rmq_async.observability.trace.encoder import MessageType
from rmq_async.producer.transaction import TransactionProducer, TransactionResult
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.transaction import HALF_TOPIC, TRANSACTION_CHECK_MAX_TIME_TOPIC

COMMIT, ROLLBACK, UNKNOWN = TransactionResult.COMMIT, TransactionResult.ROLLBACK, TransactionResult.UNKNOWN


def stored(cluster: EmbeddedCluster, topic: str, queues: int = 4) -> int:
    store = cluster.brokers[0].store
    return sum(store.max_offset(topic, q) for q in range(queues))


class Checks:
    """A checker answering from a table by key (a list: one answer per call, the last repeats); a
    ``"raise"`` answer raises, ``"hang"`` never returns."""

    def __init__(self, answers: dict[str, list[object]]) -> None:
        self.answers = answers
        self.calls: Counter[str] = Counter()
        self.changed = anyio.Event()

    async def __call__(self, msg: MessageExt) -> TransactionResult | None:
        key = msg.keys or ""
        n = self.calls[key]
        self.calls[key] += 1
        self.changed.set()
        self.changed = anyio.Event()
        got = self.answers[key][min(n, len(self.answers[key]) - 1)]
        if got == "raise":
            raise RuntimeError("the outbox is unreachable")
        if got == "hang":
            await anyio.sleep_forever()
        assert got is None or isinstance(got, TransactionResult)
        return got

    async def wait(self, key: str, n: int, timeout: float = 15.0) -> None:
        with anyio.fail_after(timeout):
            while self.calls[key] < n:
                await self.changed.wait()


def producer(
    cluster: EmbeddedCluster, group: str, timing: Timing, checker: Checks, **kw: object
) -> TransactionProducer:
    return TransactionProducer(
        group,
        checker=checker,
        client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing),
        **kw,  # type: ignore[arg-type]
    )


async def test_commit_rollback_and_unknown_resolved_by_the_check(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    checks = Checks({"tx-u-commit": [COMMIT], "tx-u-rollback": [ROLLBACK], "tx-raise": [COMMIT]})
    local = {"tx-c": COMMIT, "tx-r": ROLLBACK, "tx-u-commit": UNKNOWN, "tx-u-rollback": None}
    seen: dict[str, SendResult] = {}

    async def local_transaction(msg: Message, res: SendResult) -> TransactionResult | None:
        key = msg.keys or ""
        seen[key] = res
        if key == "tx-raise":
            raise ValueError("the database said no")
        return local[key]

    async with producer(cluster, f"{group}_p", timing, checks) as p:
        results = {}
        for key in ("tx-c", "tx-r", "tx-u-commit", "tx-u-rollback", "tx-raise"):
            msg = Message(topic, f"body-{key}".encode(), tags="TagTx", keys=key, delay_level=2)
            results[key] = await p.send_in_transaction(msg, local_transaction)
        want = {**local, "tx-u-rollback": UNKNOWN, "tx-raise": UNKNOWN}
        assert {k: r.local_result for k, r in results.items()} == want
        assert all(seen[k].msg_id == r.msg_id for k, r in results.items())  # the transaction id
        # half messages wait apart: nothing in the real topic but the committed one
        assert stored(cluster, HALF_TOPIC, 1) == 5
        await until(lambda: stored(cluster, topic) == 1)
        for key in ("tx-u-commit", "tx-u-rollback", "tx-raise"):
            await checks.wait(key, 1)
        await until(lambda: stored(cluster, topic) == 3)
        col = Collector()
        async with consumer(cluster, group, topic, col, timing):
            await col.wait_unique(3)
    assert set(col.seen) == {"tx-c", "tx-u-commit", "tx-raise"}
    assert checks.calls["tx-c"] == checks.calls["tx-r"] == 0  # ended at once: never checked
    for m in col.msgs:
        assert m.sys_flag & 0xC == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        assert m.get_property("DELAY") is None  # a delay level is cleared, as Java does
        assert m.get_property("PGROUP") == f"{group}_p" and m.get_property("TRAN_MSG") == "true"
        assert m.body == f"body-{m.keys}".encode()
    assert stored(cluster, topic) == 3  # the rolled-back ones never came


async def test_checker_that_raises_or_hangs_answers_unknown(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    checks = Checks({"tx": ["raise", "hang", COMMIT]})

    async def unknown(msg: Message, res: SendResult) -> TransactionResult:
        return UNKNOWN

    async with producer(cluster, group, timing, checks, check_timeout=0.3) as p:
        await p.send_in_transaction(Message(topic, b"x", keys="tx"), unknown)
        await checks.wait("tx", 3)
        await until(lambda: stored(cluster, topic) == 1)
    assert checks.calls["tx"] == 3
    assert cluster.brokers[0].transactions.checks_sent >= 3


async def test_checked_too_often_is_dropped(names: tuple[str, str]) -> None:
    topic, group = names
    checks = Checks({"tx": [UNKNOWN]})
    timing = Timing.fast(transaction_check_max=2)

    async def unknown(msg: Message, res: SendResult) -> TransactionResult:
        return UNKNOWN

    async with EmbeddedCluster(timing=timing) as cluster, producer(cluster, group, timing, checks) as p:
        await p.send_in_transaction(Message(topic, b"x", keys="tx"), unknown)
        # the broker's second check is oneway: the checker may run it just after the next walk
        # moved the half away, so wait for both
        await until(
            lambda: stored(cluster, TRANSACTION_CHECK_MAX_TIME_TOPIC, 1) == 1 and checks.calls["tx"] >= 2
        )
        assert checks.calls["tx"] == 2  # transaction_check_max
        assert stored(cluster, topic) == 0


async def test_check_reaches_the_restarted_producer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    first, second = Checks({"tx": [UNKNOWN]}), Checks({"tx": [COMMIT]})

    async def unknown(msg: Message, res: SendResult) -> TransactionResult:
        return UNKNOWN

    async with producer(cluster, group, timing, first) as p:
        await p.send_in_transaction(Message(topic, b"x", keys="tx"), unknown)
    async with producer(cluster, group, timing, second) as p:
        await p.queues(topic)  # knows the broker: its heartbeats register the group there
        await p.client.send_heartbeat_to_all_brokers()
        await second.wait("tx", 1)
        await until(lambda: stored(cluster, topic) == 1)
    assert first.calls["tx"] == 0


async def test_bad_arguments_are_refused(cluster: EmbeddedCluster) -> None:
    async def check(msg: MessageExt) -> TransactionResult:
        return COMMIT

    with pytest.raises(ClientError, match="check_concurrency"):
        TransactionProducer("g", checker=check, check_concurrency=0)
    with pytest.raises(ClientError, match="check_timeout"):
        TransactionProducer("g", checker=check, check_timeout=-1)
    with pytest.raises(ClientError, match="checker"):
        TransactionProducer("g", checker=None)  # type: ignore[arg-type]


async def test_transactions_are_traced_as_java(names: tuple[str, str]) -> None:
    # a Pub record of type Trans_Msg_Half for the half message, an EndTransaction record (type
    # Trans_msg_Commit) for each END_TRANSACTION: the send's and the check-back's
    topic, group = names
    timing = Timing.fast()
    checks = Checks({"tx": [COMMIT]})

    async def unknown(msg: Message, res: SendResult) -> TransactionResult:
        return UNKNOWN

    async with EmbeddedCluster(timing=timing, trace_topic_enable=True) as cluster:
        trace = TraceConfig(enabled=True, flush_interval=0.05)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, trace=trace)
        async with TransactionProducer(group, checker=checks, client_config=cfg) as p:
            res = await p.send_in_transaction(Message(topic, b"x", tags="TagTx", keys="tx"), unknown)
            await checks.wait("tx", 1)
        async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as client:
            records = await query_trace(client, res.msg_id)
    by_kind = sorted((r.trace_type, r.beans[0].from_transaction_check) for r in records)
    assert by_kind == [("EndTransaction", False), ("EndTransaction", True), ("Pub", False)], by_kind
    pub = next(r for r in records if r.trace_type == "Pub")
    assert pub.beans[0].msg_type == MessageType.TRANS_HALF and pub.group_name == group
    ends = {
        r.beans[0].from_transaction_check: r.beans[0] for r in records if r.trace_type == "EndTransaction"
    }
    assert ends[False].transaction_state == "UNKNOW" and ends[True].transaction_state == "COMMIT_MESSAGE"
    assert all(
        b.msg_type == MessageType.TRANS_COMMIT and b.transaction_id == res.msg_id for b in ends.values()
    )
    assert all(b.topic == topic and b.tags == "TagTx" and b.keys == "tx" for b in ends.values())
