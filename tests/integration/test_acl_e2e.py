"""ACL end to end on the embedded cluster (brokers enforcing a plain_acl.yml): signed clients produce and
consume (push, orderly push with its signed queue locks, and lite pull), every kind of refusal is a typed
AuthError at once (producer and lite consumer at start, push consumer at start or, for a permission taken
away later, logged once per resource and backed off while its other queues go on), whitelisted addresses
need no signature, the retry topic and the DLQ work under ACL, and the secret shows up nowhere."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from support.frame_proxy import FrameProxy, route_rewriter
from support.integration import Collector, child_env

from rmq_async import (
    AuthError,
    ClientConfig,
    ConsumeResult,
    Credentials,
    LitePullConsumer,
    Message,
    MessageQueue,
    OrderlyContext,
    OrderlyResult,
    Producer,
    PushConsumer,
    Timing,
)
from rmq_async.bench.cluster import ChildCluster
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.acl import Account, AclConfig
from rmq_async.internals import internals
from rmq_async.producer.producer import select_by_key_hash
from rmq_async.protocol.acl import ACCESS_KEY, SIGNATURE, verify
from rmq_async.protocol.bodies import LockBatchResponseBody, UnlockBatchRequestBody
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.stored import MessageExt

ADMIN = Account("RocketMQ", "12345678", admin=True)
SECRET = "rmqSecret123"
USER = Account(
    "rmqUser",
    SECRET,
    default_topic_perm="DENY",
    default_group_perm="SUB",
    topic_perms=("AclT=PUB|SUB", "AclT2=PUB|SUB", "AclDeny=DENY", "AclPubOnly=PUB"),
    group_perms=("acl_g=SUB", "acl_nosub=DENY"),
)
CONFIG = AclConfig((ADMIN, USER))
FAST = 5.0  # seconds: "at once", with room for a loaded machine


@pytest.fixture(params=[4, 5], ids=["4.x", "5.x"])
async def acl_cluster(request: pytest.FixtureRequest, timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(timing=timing, acl=CONFIG, flavour=request.param) as c:
        for t in ("AclT", "AclT2", "AclDeny", "AclPubOnly", "NotListed"):
            await c.create_topic(t)
        yield c


def cfg(
    cluster: EmbeddedCluster, timing: Timing, ak: str = "rmqUser", sk: str = SECRET, **kw: Any
) -> ClientConfig:
    return ClientConfig(
        namesrv_addr=cluster.namesrv_addr,
        timing=timing,
        credentials=Credentials(access_key=ak, secret_key=sk),
        **kw,
    )


def push(
    cluster: EmbeddedCluster, timing: Timing, group: str, topics: list[str], handler: Any, **kw: Any
) -> PushConsumer:
    return PushConsumer(
        group,
        handler=handler,
        subscriptions={t: "*" for t in topics},
        client_config=kw.pop("client_config", None) or cfg(cluster, timing),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **kw,
    )


async def test_right_keys_produce_and_consume(acl_cluster: EmbeddedCluster, timing: Timing) -> None:
    async with Producer("acl_pg", client_config=cfg(acl_cluster, timing)) as p:
        for i in range(6):
            await p.send(Message("AclT", b"m%d" % i, keys=f"k-{i}"))
        await p.send_batch([Message("AclT", b"b", keys=f"b-{i}") for i in range(3)])
    col = Collector()
    async with push(acl_cluster, timing, "acl_g", ["AclT"], col):
        await col.wait_unique(9)
    async with LitePullConsumer(
        "acl_g2", client_config=cfg(acl_cluster, timing), consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as lite:
        await lite.assign([MessageQueue("AclT", "broker-a", q) for q in range(4)])
        got: list[MessageExt] = []
        with anyio.fail_after(20):
            while len(got) < 9:
                got += await lite.poll(1.0)
    assert {m.keys for m in got} == set(col.seen)


@pytest.mark.parametrize(
    ("ak", "sk", "why"),
    [("rmqUser", "wrongSecret99", "signature"), ("unknownAK", "unknownSecret1", "unknown")],
)
async def test_bad_keys_fail_every_start_at_once(
    acl_cluster: EmbeddedCluster, timing: Timing, ak: str, sk: str, why: str
) -> None:
    bad = cfg(acl_cluster, timing, ak, sk)
    for make in (
        lambda: Producer("acl_pg", client_config=bad),
        lambda: push(acl_cluster, timing, "acl_g", ["AclT"], Collector(), client_config=bad),
        lambda: LitePullConsumer("acl_g", client_config=bad),
    ):
        t0 = time.monotonic()
        with pytest.raises(AuthError) as ei:
            async with make():
                pytest.fail("started with bad keys")
        assert time.monotonic() - t0 < FAST
        err = ei.value
        assert err.request_code == 34 and not err.retriable and sk not in str(err)
        text = (err.remark or "").lower()
        assert (
            ("signature" in text) if why == "signature" else ("no acl config" in text or "not found" in text)
        )


async def test_denied_topic_send_is_refused_at_once_without_retries(
    acl_cluster: EmbeddedCluster, timing: Timing
) -> None:
    async with Producer("acl_pg", client_config=cfg(acl_cluster, timing)) as p:
        for topic in ("AclDeny", "NotListed"):  # explicit DENY, and the DENY default
            t0 = time.monotonic()
            with pytest.raises(AuthError) as ei:
                await p.send(Message(topic, b"x"))
            assert time.monotonic() - t0 < FAST
            assert ei.value.request_code == 310 and ei.value.resource == f"topic:{topic}"
        if acl_cluster.flavour == 5:  # 5.x checks batches too (4.9.8 does not: upstream #5303)
            with pytest.raises(AuthError):
                await p.send_batch([Message("AclDeny", b"x")])
        await p.send(Message("AclT", b"still fine"))


@pytest.mark.parametrize(
    ("group", "topic", "resource"),
    [
        ("acl_g", "AclPubOnly", "topic:AclPubOnly"),  # topic without SUB
        ("acl_nosub", "AclT", "group:acl_nosub"),  # group without SUB
        ("acl_g", "NotListed", "topic:NotListed"),  # the DENY default
    ],
)
async def test_consumers_without_sub_fail_at_once(
    acl_cluster: EmbeddedCluster, timing: Timing, group: str, topic: str, resource: str
) -> None:
    t0 = time.monotonic()
    with pytest.raises(AuthError) as ei:
        async with push(acl_cluster, timing, group, [topic], Collector()):
            pytest.fail("started without permission")
    assert time.monotonic() - t0 < FAST and ei.value.resource == resource
    t0 = time.monotonic()
    with pytest.raises(AuthError) as ei:
        async with LitePullConsumer(group, client_config=cfg(acl_cluster, timing)) as lite:
            await lite.assign([MessageQueue(topic, "broker-a", 0)])
            await lite.poll(FAST)  # a 4.x broker checks the topic's SUB at the pull, not the heartbeat
            pytest.fail("polled without permission")
    assert time.monotonic() - t0 < FAST and ei.value.resource == resource


class _LockWatch:
    """The LOCK_BATCH_MQ / UNLOCK_BATCH_MQ requests that reached the broker through a frame proxy, as the
    broker decoded them, with its answers: (code, signed, signature valid, answer code, queue ids)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool, bool, int, frozenset[int]]] = []

    def __call__(self, req: RemotingCommand, resp: RemotingCommand) -> None:
        if req.code == RequestCode.LOCK_BATCH_MQ:
            body = resp.body if resp.code == 0 and resp.body else b'{"lockOKMQSet":[]}'
            qids = frozenset(mq.queue_id for mq in LockBatchResponseBody.decode(body).lock_ok_mq_set)
        elif req.code == RequestCode.UNLOCK_BATCH_MQ:
            qids = frozenset(mq.queue_id for mq in UnlockBatchRequestBody.decode(req.body).mq_set)
        else:
            return
        ext = req.ext_fields
        signed = ext.get(ACCESS_KEY) == "rmqUser" and SIGNATURE in ext
        self.seen.append((req.code, signed, verify(ext, req.body, SECRET), resp.code, qids))

    def of(self, code: int) -> list[tuple[int, bool, bool, int, frozenset[int]]]:
        return [x for x in self.seen if x[0] == code]


async def test_orderly_consumer_locks_consumes_in_order_and_unlocks(
    acl_cluster: EmbeddedCluster, timing: Timing
) -> None:
    """An orderly consumer with the right keys: its LOCK_BATCH_MQ (41) and its UNLOCK_BATCH_MQ (42) at
    shutdown are signed and accepted (it reaches the broker through a frame proxy that checks them), it
    holds the broker's locks on its queues while it runs, consumes each queue in send order, and leaves
    no lock behind."""
    broker = acl_cluster.brokers[0]
    watch = _LockWatch()
    sent: dict[int, list[str]] = {}
    async with Producer("acl_pg", client_config=cfg(acl_cluster, timing)) as p:
        for i in range(24):
            order = i % 6
            res = await p.send(
                Message("AclT", b"o", keys=f"o{order}-{i}"), selector=select_by_key_hash, arg=order
            )
            sent.setdefault(res.message_queue.queue_id, []).append(f"o{order}-{i}")
    got: dict[int, list[str]] = {}
    done = anyio.Event()

    async def handle(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        for m in msgs:
            got.setdefault(ctx.mq.queue_id, []).append(m.keys or "")
        if sum(map(len, got.values())) >= 24:
            done.set()
        return OrderlyResult.SUCCESS

    async with (
        FrameProxy(broker.addr, lambda cmd: cmd, on_answer=watch) as link,
        FrameProxy(acl_cluster.namesrv_addr, route_rewriter(lambda _: {"0": link.addr})) as ns,
    ):
        conf = ClientConfig(
            namesrv_addr=ns.addr,
            timing=timing,
            credentials=Credentials(access_key="rmqUser", secret_key=SECRET),
        )
        async with push(
            acl_cluster, timing, "acl_g", ["AclT"], handle, client_config=conf, orderly=True
        ) as c:
            with anyio.fail_after(20):
                await done.wait()
            mine = {mq.queue_id for mq in c.assignment() if mq.topic == "AclT"}
            locks = broker.locks.table.get("acl_g", {})
            assert {q for (t, _, q), e in locks.items() if t == "AclT" and e.client_id == c.client_id} == mine
        assert (
            link.requests[RequestCode.LOCK_BATCH_MQ] >= 1 and link.requests[RequestCode.UNLOCK_BATCH_MQ] >= 1
        )
    assert got == sent  # every queue in send order, nothing twice
    assert mine == set(range(acl_cluster.queues))
    locked = watch.of(RequestCode.LOCK_BATCH_MQ)
    assert locked and all(signed and ok and code == 0 for _, signed, ok, code, _ in locked), locked
    assert frozenset().union(*(q for *_, q in locked)) == mine  # the broker granted every queue
    unlocked = watch.of(RequestCode.UNLOCK_BATCH_MQ)
    assert unlocked and all(signed and ok and code == 0 for _, signed, ok, code, _ in unlocked), unlocked
    assert unlocked[-1][4] == mine  # the shutdown unlock released them all, and was accepted
    assert not any(e.client_id == c.client_id for e in broker.locks.table.get("acl_g", {}).values())


async def test_orderly_consumer_without_group_sub_fails_at_once(
    acl_cluster: EmbeddedCluster, timing: Timing
) -> None:
    """As the concurrent consumer: the heartbeat is refused at start, and no lock is ever asked for."""
    broker = acl_cluster.brokers[0]
    async with (
        FrameProxy(broker.addr, lambda cmd: cmd) as link,
        FrameProxy(acl_cluster.namesrv_addr, route_rewriter(lambda _: {"0": link.addr})) as ns,
    ):
        conf = ClientConfig(
            namesrv_addr=ns.addr,
            timing=timing,
            credentials=Credentials(access_key="rmqUser", secret_key=SECRET),
        )
        t0 = time.monotonic()
        with pytest.raises(AuthError) as ei:
            async with push(
                acl_cluster, timing, "acl_nosub", ["AclT"], Collector(), client_config=conf, orderly=True
            ):
                pytest.fail("started without the group's SUB")
        assert time.monotonic() - t0 < FAST
        assert ei.value.request_code == 34 and ei.value.resource == "group:acl_nosub"
        assert link.requests[RequestCode.HEART_BEAT] >= 1
        assert link.requests[RequestCode.LOCK_BATCH_MQ] == 0
    assert not broker.locks.table.get("acl_nosub")


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
async def test_a_permission_taken_away_is_logged_once_and_backed_off(
    acl_cluster: EmbeddedCluster, timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    col = Collector()
    producer = Producer("acl_pg", client_config=cfg(acl_cluster, timing))
    async with producer as p, push(acl_cluster, timing, "acl_g", ["AclT", "AclT2"], col) as c:
        await p.send(Message("AclT", b"a", keys="a-0"))
        await p.send(Message("AclT2", b"b", keys="b-0"))
        await col.wait_unique(2)
        # AclT2 loses SUB (PUB stays): its pulls are refused, AclT's go on
        perms = tuple(x.replace("AclT2=PUB|SUB", "AclT2=PUB") for x in USER.topic_perms)
        acl_cluster.update_acl(AclConfig((ADMIN, Account("rmqUser", SECRET, **_kw(USER, topic_perms=perms)))))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            await anyio.sleep(timing.pull_timeout + 1.0)  # held pulls come back, then get refused
            await p.send(Message("AclT", b"a", keys="a-1"))
            await p.send(Message("AclT2", b"b", keys="b-1"))
            await col.wait_unique(3)
            await anyio.sleep(2.0)
        refusals = [r for r in caplog.records if "AclT2" in r.getMessage() and "denied" in r.getMessage()]
        assert 1 <= len(refusals) <= 2, [r.getMessage() for r in caplog.records]  # pulls + heartbeat
        assert "b-1" not in col.seen
        health = c.health()
        assert any(e["resource"] == "topic:AclT2" for e in health.auth_errors)
        assert SECRET not in repr(health)


def _kw(a: Account, **over: Any) -> dict[str, Any]:
    d = {
        "white_remote_address": a.white_remote_address,
        "admin": a.admin,
        "default_topic_perm": a.default_topic_perm,
        "default_group_perm": a.default_group_perm,
        "topic_perms": a.topic_perms,
        "group_perms": a.group_perms,
    }
    d.update(over)
    return d


async def test_whitelisted_addresses_need_no_signature(timing: Timing) -> None:
    white = AclConfig((ADMIN, USER), global_white_remote_addresses=("127.0.0.*",))
    async with EmbeddedCluster(timing=timing, acl=white) as c:
        plain = ClientConfig(namesrv_addr=c.namesrv_addr, timing=timing)  # no credentials at all
        async with Producer("anyone", client_config=plain) as p:
            await p.send(Message("AnyTopic", b"x", keys="w-0"))
        col = Collector()
        async with push(c, timing, "any_group", ["AnyTopic"], col, client_config=plain):
            await col.wait_unique(1)
    # an account's own whitelist skips its signature check (a wrong secret passes from there)
    mine = AclConfig((ADMIN, Account("rmqUser", SECRET, **_kw(USER, white_remote_address="127.0.0.1"))))
    async with EmbeddedCluster(timing=timing, acl=mine) as c:
        await c.create_topic("AclT")
        async with Producer("acl_pg", client_config=cfg(c, timing, sk="wrongSecret99")) as p:
            await p.send(Message("AclT", b"x"))


async def test_retry_and_dlq_under_acl(acl_cluster: EmbeddedCluster, timing: Timing) -> None:
    attempts: dict[str, int] = {}
    redelivered = anyio.Event()

    async def fail(msgs: list[MessageExt], ctx: Any) -> ConsumeResult:
        for m in msgs:
            attempts[m.keys or ""] = attempts.get(m.keys or "", 0) + 1
        if attempts.get("r-0", 0) >= 2:
            redelivered.set()
        return ConsumeResult.RECONSUME_LATER

    async with Producer("acl_pg", client_config=cfg(acl_cluster, timing)) as p:
        await p.send(Message("AclT", b"x", keys="r-0"))
    # send-back (36) and the retry topic's pulls need the group's SUB: acl_g has it
    async with push(acl_cluster, timing, "acl_g", ["AclT"], fail, max_reconsume_times=1):
        with anyio.fail_after(20):
            await redelivered.wait()
    dlq = Collector()
    admin = cfg(acl_cluster, timing, "RocketMQ", "12345678")
    async with LitePullConsumer(
        "dlq_reader", client_config=admin, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as lite:
        with anyio.fail_after(20):
            while True:
                try:
                    await lite.assign([MessageQueue("%DLQ%acl_g", "broker-a", 0)])
                    break
                except Exception:  # the DLQ topic's route appears once the broker made it
                    await anyio.sleep(0.1)
            while not dlq.msgs:
                dlq.msgs += await lite.poll(1.0)
    assert dlq.msgs[0].keys == "r-0"


async def test_secrets_appear_nowhere(
    acl_cluster: EmbeddedCluster, timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    good = cfg(acl_cluster, timing)
    assert (
        SECRET not in repr(good)
        and SECRET not in str(good.model_dump())
        and SECRET not in good.model_dump_json()
    )
    caplog.set_level(logging.DEBUG)
    col = Collector()
    async with Producer("acl_pg", client_config=good) as p:
        assert SECRET not in repr(p.client.signer) and SECRET not in repr(p.client.pool)
        await p.send(Message("AclT", b"x", keys="s-0"))
        with pytest.raises(AuthError) as ei:
            await p.send(Message("AclDeny", b"x"))
        assert SECRET not in str(ei.value) and SECRET not in repr(ei.value)
    async with push(acl_cluster, timing, "acl_g", ["AclT"], col) as c:
        await col.wait_unique(1)
        assert SECRET not in repr(c.health())
        assert (
            SECRET.encode() not in internals(c).admin.running_info().encode()
        )  # what GET_CONSUMER_RUNNING_INFO answers
    with pytest.raises(AuthError):
        async with Producer("acl_pg", client_config=cfg(acl_cluster, timing, sk="wrongSecret99")):
            pass
    assert "wrongSecret99" not in caplog.text and SECRET not in caplog.text


async def test_cli_with_keys_against_a_child_cluster_with_an_acl_file(tmp_path: Path) -> None:
    # the child cluster reads its accounts from a plain_acl.yml (python -m rmq_async.embedded --acl-file);
    # the CLI signs with --access-key and the secret from the environment (not in the process list)
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(CONFIG.to_mapping()))
    env = {**child_env(), "RMQ_SECRET_KEY": SECRET}
    cluster = ChildCluster(queues=4, timing="fast", acl_file=str(acl_file))
    await anyio.to_thread.run_sync(cluster.start)
    try:
        base = [
            sys.executable,
            "-m",
            "rmq_async.cli",
            "--no-uvloop",
            "produce",
            "--namesrv",
            cluster.namesrv_addr,
        ]
        ok = await anyio.run_process(
            [*base, "--topic", "AclT", "--count", "5", "--quiet", "--access-key", "rmqUser"],
            env=env,
            check=False,
        )
        assert ok.returncode == 0, ok.stderr.decode()[-2000:]
        assert json.loads(ok.stdout.decode().strip().splitlines()[-1])["sent"] == 5
        bad = await anyio.run_process(
            [
                *base,
                "--topic",
                "AclT",
                "--count",
                "1",
                "--access-key",
                "rmqUser",
                "--secret-key",
                "wrongSecret99",
            ],
            env=env,
            check=False,
        )
        consume = [
            *base[:4],
            "consume",
            "--namesrv",
            cluster.namesrv_addr,
            "--group",
            "acl_g",
            "--idle-exit",
            "1",
        ]
        bad_consume = await anyio.run_process(
            [*consume, "--topic", "AclT", "--access-key", "rmqUser", "--secret-key", "wrongSecret99"],
            env=env,
            check=False,
        )
    finally:
        await anyio.to_thread.run_sync(cluster.stop)
    for run in (bad, bad_consume):
        err = run.stderr.decode()
        assert run.returncode == 2 and "Check signature failed" in err, err
        # the broker answered: refused credentials, not an unreachable cluster
        assert "refused the credentials" in err and "cannot reach the cluster" not in err, err
        assert "wrongSecret99" not in err + run.stdout.decode() and SECRET not in err
