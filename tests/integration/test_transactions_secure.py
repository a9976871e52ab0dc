"""Transactions where the cluster asks more of a client: ACL 1.0 and 2.0 (signed END_TRANSACTION,
the broker's check-back reaching the signed producer), TLS (an enforcing cluster: a plain
connection would be closed) and a namespace (the half message and the producer group on the wire
as ``ns%name``, the check routed by that wire group, the checker seeing the user's topic)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from support.integration import Collector, consumer, until
from support.tls import Certs, make_certs

from rmq_async import ClientConfig, Credentials, Message, MessageExt, SendResult, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.acl import Account, AclConfig
from rmq_async.embedded.jcompat import props_decode
from rmq_async.producer.transaction import TransactionProducer, TransactionResult
from rmq_async.protocol.codes import MessageSysFlag
from rmq_async.protocol.transaction import HALF_TOPIC

COMMIT, UNKNOWN = TransactionResult.COMMIT, TransactionResult.UNKNOWN
SECRET = "txSecret1234"
USER = Account(
    "txUserAk",
    SECRET,
    default_topic_perm="DENY",
    default_group_perm="SUB",
    topic_perms=("TxAcl=PUB|SUB",),
    group_perms=("tx_acl_g=SUB",),
)
ACL = AclConfig((Account("RocketMQ", "12345678", admin=True), USER))


class Checker:
    """Answers COMMIT and records the messages it was asked about."""

    def __init__(self) -> None:
        self.seen: list[MessageExt] = []
        self.asked = anyio.Event()

    async def __call__(self, msg: MessageExt) -> TransactionResult:
        self.seen.append(msg)
        self.asked.set()
        return COMMIT


async def local(msg: Message, res: SendResult) -> TransactionResult:
    """COMMIT for key ``now``, UNKNOWN (left to the check-back) otherwise."""
    return COMMIT if msg.keys == "now" else UNKNOWN


def stored(cluster: EmbeddedCluster, topic: str, queues: int = 4) -> int:
    store = cluster.brokers[0].store
    return sum(store.max_offset(topic, q) for q in range(queues))


def halves(cluster: EmbeddedCluster) -> list[dict[str, str]]:
    """The properties of every half message the broker holds (first puts and check copies)."""
    store = cluster.brokers[0].store
    cq = store.queue(HALF_TOPIC, 0)
    assert cq is not None
    found = (store.lookup(o) for o in cq.offsets)
    return [props_decode(m.props) for m in found if m is not None]


async def commit_now_and_by_check(
    cluster: EmbeddedCluster, topic: str, group: str, cfg: ClientConfig, checker: Checker
) -> None:
    """One transaction committed at once, one committed by the check-back: both stored in the
    topic (``ns%topic`` with a namespace)."""
    wire_topic = cfg.with_namespace(topic)
    async with TransactionProducer(group, checker=checker, client_config=cfg) as p:
        assert (await p.send_in_transaction(Message(topic, b"a", keys="now"), local)).local_result is COMMIT
        await p.send_in_transaction(Message(topic, b"b", keys="later"), local)
        with anyio.fail_after(15):
            await checker.asked.wait()
            await until(lambda: stored(cluster, wire_topic) == 2)
    assert {m.keys for m in checker.seen} == {"later"}


@pytest.mark.parametrize("flavour", [4, 5], ids=["acl-1.0", "acl-2.0"])
async def test_transactions_on_an_acl_cluster(flavour: int, timing: Timing) -> None:
    async with EmbeddedCluster(timing=timing, acl=ACL, flavour=flavour) as cluster:
        await cluster.create_topic("TxAcl")
        creds = Credentials(access_key="txUserAk", secret_key=SECRET)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, credentials=creds)
        await commit_now_and_by_check(cluster, "TxAcl", "tx_acl_pg", cfg, Checker())
        assert cluster.brokers[0].transactions.checks_sent >= 1
        col = Collector()
        async with consumer(cluster, "tx_acl_g", "TxAcl", col, timing, client_config=cfg):
            await col.wait_unique(2)
    assert set(col.seen) == {"now", "later"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tx-certs"))


@pytest.fixture
async def tls_cluster(certs: Certs, timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(timing=timing, tls=certs.server_tls("enforcing")) as c:
        yield c


async def test_transactions_over_tls(
    tls_cluster: EmbeddedCluster, certs: Certs, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    cfg = ClientConfig(namesrv_addr=tls_cluster.namesrv_addr, timing=timing, tls=certs.client_tls())
    await commit_now_and_by_check(tls_cluster, topic, group, cfg, Checker())
    col = Collector()
    async with consumer(tls_cluster, group, topic, col, timing, client_config=cfg):
        await col.wait_unique(2)
    for m in col.msgs:
        assert m.sys_flag & 0xC == MessageSysFlag.TRANSACTION_COMMIT_TYPE


async def test_transactions_with_a_namespace(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(f"ns1%{topic}")
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns1", timing=timing)
    checker = Checker()
    await commit_now_and_by_check(cluster, topic, f"{group}_p", cfg, checker)
    first = [h for h in halves(cluster) if "TRANSACTION_CHECK_TIMES" not in h]
    assert len(first) == 2
    for h in first:  # withNamespace: the real topic and the producer group carry the namespace
        assert h["REAL_TOPIC"] == f"ns1%{topic}" and h["PGROUP"] == f"ns1%{group}_p"
    # the check came by the wire group; the checker sees the user's topic (withoutNamespace)
    assert [m.topic for m in checker.seen] == [topic]
    assert checker.seen[0].get_property("PGROUP") == f"ns1%{group}_p"
    col = Collector()
    async with consumer(cluster, group, topic, col, timing, client_config=cfg):
        await col.wait_unique(2)
    assert {m.topic for m in col.msgs} == {topic}
    assert stored(cluster, topic) == 0  # nothing under the plain name
