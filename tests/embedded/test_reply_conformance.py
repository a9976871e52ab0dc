"""Request-reply against ``tests/fixtures/tx/reply.jsonl`` (4.9.8, see ADMIN-TX-NOTES.md).

The broker side: with the captured requester heartbeat on one raw connection and the captured
responder's 325 on another, the broker pushes a 326 request to the requester with the captured
extFields in the captured order, the properties with PUSH_REPLY_TIME in the captured order and the
reply body; only once the requester answered does the 325 get its answer, with the captured keys.
The client side: our request's 310 and our reply's 325 carry the Java client's property keys in
its order and the fixed header fields it sends; our requester answers the 326 with code 0 and no
extFields and no remark.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from support.integration import consumer
from support.wire import Frame, frames

from rmq_async import ClientConfig, ConsumeContext, Message, MessageExt, Producer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.command import RemotingCommand

from .rawclient import RawClient
from .test_tx_conformance import Recorder

FILE = "tx/reply.jsonl"


def _ext(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


def _keys(props_text: str) -> list[str]:
    return [item.split("\x01", 1)[0] for item in props_text.split("\x02") if item]


def _first(code: int, direction: str = "c2s") -> Frame:
    return next(f for f in frames(FILE) if f.code == code and f.dir == direction and f.kind != "response")


def _answer(req: Frame) -> Frame:
    return next(
        f for f in frames(FILE) if f.kind == "response" and f.conn == req.conn and f.opaque == req.opaque
    )


async def test_broker_pushes_the_captured_reply_to_the_requester_as_498_does() -> None:
    heartbeat = next(
        f for f in frames(FILE) if f.code == 34 and f.dir == "c2s" and "req-1" in json.dumps(f.body_json)
    )
    java_reply = _first(325)
    java_push = _first(326, "s2c")
    java_ack = _answer(java_push)
    async with EmbeddedCluster(queues=4, timing=Timing.fast()) as cluster:
        broker = cluster.brokers[0]
        async with RawClient(broker.addr) as requester, RawClient(broker.addr) as responder:
            assert (await requester.request(34, None, heartbeat.body)).code == 0
            ext = dict(_ext(java_reply), n=broker.name)
            pending = anyio.Event()
            answer: list[RemotingCommand] = []

            async def send_reply() -> None:
                answer.append(await responder.request(325, ext, java_reply.body))
                pending.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(send_reply)
                push = await requester.next_server_request()
                await anyio.sleep(0.1)
                assert not pending.is_set()  # the 325 waits for the requester's answer
                requester.reply(push, java_ack.code)
    assert push.code == 326 and not push.is_oneway
    assert list(push.ext_fields) == list(_ext(java_push))  # the long names, in the broker's order
    assert _keys(push.ext_fields["properties"]) == _keys(_ext(java_push)["properties"])
    for k in ("producerGroup", "topic", "defaultTopic", "queueId", "sysFlag", "flag", "unitMode"):
        assert push.ext_fields[k] == _ext(java_push)[k], k
    assert push.ext_fields["bornTimestamp"] == ext["g"]
    assert push.body == java_reply.body
    (resp,) = answer
    assert resp.code == 0, resp.remark
    assert set(resp.ext_fields) == set(_ext(_answer(java_reply)))
    assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["queueId"] == "0"


async def test_our_requester_and_responder_send_what_the_java_clients_send() -> None:
    java_req = _first(310)
    java_reply = _first(325)
    timing = Timing.fast()
    acks: list[RemotingCommand] = []
    async with EmbeddedCluster(queues=4, timing=timing) as cluster:
        await cluster.create_topic("WireReq")
        ctx = cluster.brokers[0].context
        rec = Recorder(cluster.brokers[0].handlers, (310, 325))
        find = ctx.producers.find_channel

        def find_recording(client_id: str) -> Any:
            ch = find(client_id)
            if ch is not None:
                invoke = ch.conn.invoke

                async def recorded(cmd: RemotingCommand, within: float) -> RemotingCommand:
                    acks.append(await invoke(cmd, within))
                    return acks[-1]

                ch.conn.invoke = recorded
            return ch

        ctx.producers.find_channel = find_recording

        async def respond(msgs: list[MessageExt], c: ConsumeContext) -> None:
            for m in msgs:
                await responder.reply(m, b"reply-" + m.body)

        responder = consumer(cluster, "wire_req_cg", "WireReq", respond, timing)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
        async with responder, Producer("wire_req_pg", client_config=cfg) as p:
            reply = await p.request(Message("WireReq", b"wire-WireReq-0", tags="TagReq", keys="req-0"), 5.0)
    assert reply.body == b"reply-wire-WireReq-0"
    (_, req_ext, _) = next(r for r in rec.seen if r[0].code == 310 and "TTL\x01" in r[1]["i"])
    assert _keys(req_ext["i"]) == _keys(_ext(java_req)["i"])
    assert "TTL\x015000" in req_ext["i"]
    (_, reply_ext, reply_resp) = next(r for r in rec.seen if r[0].code == 325)
    assert set(reply_ext) == set(_ext(java_reply))
    assert _keys(reply_ext["i"]) == _keys(_ext(java_reply)["i"])
    for k in ("b", "c", "d", "f", "h", "j", "k", "m"):
        assert reply_ext[k] == _ext(java_reply)[k], k
    assert reply_resp is None  # answered later, after the push
    (ack,) = acks
    assert ack.code == 0 and ack.ext_fields in ({}, None) and ack.remark is None
