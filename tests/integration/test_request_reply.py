"""Request-reply on the embedded cluster: a push consumer's handler replies and the requester gets
the reply; no responder times out with :class:`RequestTimeoutError` and no frame after the request;
a responder that dies before replying, and a reply to a requester that is gone."""

from __future__ import annotations

import time

import anyio
import pytest
from support.integration import consumer

from rmq_async import (
    ClientConfig,
    ConsumeContext,
    Credentials,
    Message,
    MessageExt,
    MQClientError,
    Producer,
    RequestTimeoutError,
    Timing,
    create_reply_message,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.acl import Account, AclConfig
from rmq_async.protocol.codes import Prop


def _producer(cluster: EmbeddedCluster, timing: Timing, group: str) -> Producer:
    return Producer(group, client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing))


async def test_a_handler_replies_and_the_requester_gets_the_reply(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    requests: list[MessageExt] = []

    async def respond(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for m in msgs:
            requests.append(m)
            await responder.reply(m, b"reply-" + m.body)

    responder = consumer(cluster, group, topic, respond, timing)
    async with responder, _producer(cluster, timing, "rr_req_pg") as p:
        replies = [await p.request(Message(topic, f"q{i}".encode(), keys=f"req-{i}"), 5.0) for i in range(3)]
        async with anyio.create_task_group() as tg:  # concurrent requests: each gets its own reply
            many: dict[int, MessageExt] = {}

            async def one(i: int) -> None:
                many[i] = await p.request(Message(topic, f"c{i}".encode()), 5.0)

            for i in range(8):
                tg.start_soon(one, i)
        client_id = p.client.client_id
    assert [r.body for r in replies] == [b"reply-q0", b"reply-q1", b"reply-q2"]
    assert {i: r.body for i, r in many.items()} == {i: f"reply-c{i}".encode() for i in range(8)}
    for req, rep in zip(requests[:3], replies, strict=True):
        assert req.get_property(Prop.REPLY_TO_CLIENT) == client_id
        assert req.get_property(Prop.MESSAGE_TTL) == "5000"
        assert rep.get_property(Prop.CORRELATION_ID) == req.get_property(Prop.CORRELATION_ID)
        assert rep.get_property(Prop.MESSAGE_TYPE) == "reply"
        assert rep.topic == "DefaultCluster_REPLY_TOPIC"
    # storeReplyMessageEnable: the replies are stored in the reply topic as well
    assert cluster.brokers[0].store.max_offset("DefaultCluster_REPLY_TOPIC", 0) == 11


async def test_no_responder_times_out_with_a_typed_error(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, _ = names
    async with _producer(cluster, timing, "rr_none_pg") as p:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError) as err:
            await p.request(Message(topic, b"anyone?"), 0.6)
        took = time.monotonic() - started
        assert 0.6 <= took < 2.0
        assert err.value.topic == topic and "wait reply message timeout, 600 ms" in str(err.value)
        assert not p.client._replies  # nothing left waiting


async def test_a_responder_that_dies_before_replying_leaves_the_request_to_time_out(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    got = anyio.Event()

    async def dies(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        got.set()
        await anyio.sleep_forever()

    responder = consumer(cluster, group, topic, dies, Timing.fast(shutdown_timeout=0.5))
    async with _producer(cluster, timing, "rr_dead_pg") as p:
        await responder.start()

        async def kill_when_it_has_the_request() -> None:
            await got.wait()
            await responder.stop()

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_when_it_has_the_request)
            with pytest.raises(RequestTimeoutError):
                await p.request(Message(topic, b"never answered"), 2.0)
    assert got.is_set() and not responder.running


async def test_a_reply_to_a_requester_that_is_gone_fails_the_reply(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic)
    async with _producer(cluster, timing, "rr_gone_pg") as p:
        with pytest.raises(RequestTimeoutError):
            await p.request(Message(topic, b"late"), 0.3)
        requester = p.client.client_id
    errors: list[Exception] = []
    done = anyio.Event()

    async def respond(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for m in msgs:
            try:
                await responder.reply(m, b"too late")
            except MQClientError as exc:
                errors.append(exc)
            done.set()

    responder = consumer(cluster, group, topic, respond, timing)
    async with responder:
        with anyio.fail_after(15):
            await done.wait()
    assert len(errors) == 1 and f"channel of <{requester}> not found" in str(errors[0])
    with pytest.raises(Exception, match="not a request"):
        create_reply_message(MessageExt("T", b"x", properties={"CLUSTER": "C"}), b"r")


async def _round_trip(
    cluster: EmbeddedCluster, topic: str, group: str, cfg: ClientConfig, timing: Timing
) -> None:
    """A responder and a requester on ``cfg``: two requests answered, each reply on the cluster's
    reply topic and for its request."""
    requests: list[MessageExt] = []

    async def respond(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for m in msgs:
            requests.append(m)
            await responder.reply(m, b"re-" + m.body)

    responder = consumer(cluster, group, topic, respond, timing, client_config=cfg)
    async with responder, Producer(f"{group}_req", client_config=cfg) as p:
        replies = [await p.request(Message(topic, f"q{i}".encode()), 5.0) for i in range(2)]
        client_id = p.client.client_id
    assert [r.body for r in replies] == [b"re-q0", b"re-q1"]
    assert {r.topic for r in replies} == {"DefaultCluster_REPLY_TOPIC"}
    assert {m.get_property(Prop.REPLY_TO_CLIENT) for m in requests} == {client_id}  # no namespace
    assert {m.topic for m in requests} == {topic}  # the responder sees the user's topic


async def test_request_reply_with_a_namespace(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    # the request goes to ns%topic; the reply to the cluster's reply topic as it is (a system topic
    # of every broker), and REPLY_TO_CLIENT is a client id, never namespaced
    topic, group = names
    await cluster.create_topic(f"ns1%{topic}")
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns1", timing=timing)
    await _round_trip(cluster, topic, group, cfg, timing)
    store = cluster.brokers[0].store
    assert sum(store.max_offset(f"ns1%{topic}", q) for q in range(4)) == 2
    assert store.max_offset("DefaultCluster_REPLY_TOPIC", 0) == 2
    assert "ns1%DefaultCluster_REPLY_TOPIC" not in cluster.brokers[0].state.topics


@pytest.mark.parametrize("flavour", [4, 5], ids=["acl-1.0", "acl-2.0"])
async def test_request_reply_on_an_acl_cluster(flavour: int, timing: Timing) -> None:
    # the request is a signed send, the reply a signed SEND_REPLY_MESSAGE_V2 (only its signature is
    # checked, by both ACL versions), the push to the requester needs none
    user = Account(
        "rrUserAk",
        "rrSecret1234",
        default_topic_perm="DENY",
        default_group_perm="SUB",
        topic_perms=("RrAcl=PUB|SUB",),
        group_perms=("rr_acl_g=SUB",),
    )
    acl = AclConfig((Account("RocketMQ", "12345678", admin=True), user))
    async with EmbeddedCluster(timing=timing, acl=acl, flavour=flavour) as cluster:
        await cluster.create_topic("RrAcl")
        creds = Credentials(access_key="rrUserAk", secret_key="rrSecret1234")
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, credentials=creds)
        await _round_trip(cluster, "RrAcl", "rr_acl_g", cfg, timing)
