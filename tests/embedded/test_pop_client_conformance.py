"""What OUR POP consumer puts on the wire, compared with the Java 5.3.3 client's POP requests.

The recording proxy of ``test_client_conformance`` sits between a ``PushConsumer(client_rebalance=
False)`` and a 5.x embedded cluster whose group was switched to POP (SET_MESSAGE_REQUEST_MODE, sent
by ``rmq_async.admin``, through the proxy too). The handler fails one message once, so the
scenario sends QUERY_ASSIGNMENT (400), POP_MESSAGE (200050), ACK_MESSAGE (200051) and
CHANGE_MESSAGE_INVISIBLETIME (200053). Each request is compared with the Java client's in
``tests/fixtures/pop``: kind (request/oneway), serialize type, ``extFields`` present or absent, the key
set, the kind of every value, and the values Java fixes (queue id -1, 32 messages, TAG/*, order false,
init mode 0 for CONSUME_FROM_FIRST_OFFSET); the poll and invisible times map back to Java's 15000 and
60000 (ours follow ``Timing.fast()``), the changed invisible time to Java's first pop delay level
(10000); the bodies of 400 and 401 key for key. Our header language and version stay those of the
rest of the client (PYTHON, 4.9.8), as ``test_client_conformance`` documents.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any

import pytest
from support.wire import Frame

from rmq_async import ConsumeResult, Message, Producer, PushConsumer
from rmq_async.admin import set_consume_mode
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import FLAG_ONEWAY

from .test_client_conformance import TIMING, Proxy, Rec, Scenario, _cc, java_requests, value_kind

FILES = [f"pop/v5-pop-{n}.jsonl" for n in ("consume", "retry", "two-consumers", "admin")]
TOPIC, GROUP = "ConfPop", "conf_pop_g"
#: our value -> the Java default it stands for
TIMERS = {
    "pollTime": (str(int(TIMING.suspend_timeout * 1000)), "15000"),
    "invisibleTime": (str(int(TIMING.pop_invisible_time * 1000)), "60000"),
}
FIXED = {"queueId": "-1", "maxMsgNums": "32", "expType": "TAG", "exp": "*", "order": "false", "initMode": "0"}


async def _record() -> Scenario:
    scen = Scenario("pop")
    proxies: list[Proxy] = []
    async with EmbeddedCluster(queues=4, timing=TIMING, flavour=5) as cluster:
        baddr = cluster.brokers[0].addr
        bp = await Proxy("pop", "broker", baddr, scen.frames, {}).start()
        np_ = await Proxy(
            "pop", "namesrv", cluster.namesrv_addr, scen.frames, {baddr.encode(): bp.addr.encode()}
        ).start()
        proxies += [bp, np_]
        try:
            await cluster.create_topic(TOPIC, 4)
            await set_consume_mode(TOPIC, GROUP, "POP", 8, client_config=_cc(np_.addr, "admin"))
            async with Producer("conf_pop_pg", client_config=_cc(cluster.namesrv_addr, "pre")) as p:
                for i in range(6):
                    await p.send(Message(TOPIC, f"wire-{TOPIC}-{i}".encode(), tags="TagA", keys=f"k-{i}"))
            seen: dict[str, int] = defaultdict(int)

            async def handler(msgs: list[Any], ctx: Any) -> ConsumeResult:
                seen[msgs[0].keys] += 1
                if msgs[0].keys == "k-1" and seen["k-1"] == 1:
                    return ConsumeResult.RECONSUME_LATER
                return ConsumeResult.SUCCESS

            async with PushConsumer(
                GROUP, handler=handler, subscriptions={TOPIC: "*"}, client_config=_cc(np_.addr, "pop-1"),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_rebalance=False,
            ):  # fmt: skip
                for _ in range(300):
                    if seen["k-1"] >= 2 and len(seen) == 6:
                        break
                    await asyncio.sleep(0.02)
            assert seen["k-1"] >= 2 and len(seen) == 6, seen
        finally:
            for p_ in proxies:
                await p_.close()
    return scen


@pytest.fixture(scope="module")
def rec() -> Scenario:
    return asyncio.run(_record())


def _ext_of(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


@pytest.mark.parametrize("code", [400, 401, 200050, 200051, 200053])
def test_pop_request_headers_match_java(rec: Scenario, code: int) -> None:
    java = java_requests(FILES, code)
    ours: list[Rec] = rec.sent(code)
    assert java and ours, (code, len(java), len(ours))
    j_present = {"extFields" in f.header for f in java}
    j_keys = {frozenset(_ext_of(f)) for f in java}
    for r in ours:
        cmd = r.cmd
        assert not cmd.flag & FLAG_ONEWAY and {f.kind for f in java} == {"request"}
        assert cmd.serialize_type == SerializeType.JSON and {f.serialize for f in java} == {"JSON"}
        assert {cmd.ext_fields_present} == j_present, code
        assert frozenset(cmd.ext_fields) in j_keys, (code, sorted(cmd.ext_fields), j_keys)
        for k, v in cmd.ext_fields.items():
            jv = {_ext_of(f)[k] for f in java}
            assert value_kind(v) in {value_kind(x) for x in jv}, (code, k, v, jv)
        if code == 200050:
            ext = dict(cmd.ext_fields)
            for k, (mine, javas) in TIMERS.items():
                assert ext[k] == mine
                ext[k] = javas
            java_ext = _ext_of(java[0])
            for k in [*FIXED, *TIMERS]:
                assert ext[k] == java_ext[k] == FIXED.get(k, java_ext[k]), k
        if code in (200051, 200053):
            info = cmd.ext_fields["extraInfo"].split(" ")
            assert (
                len(info) == 8
                and info[6] == cmd.ext_fields["queueId"]
                and info[7] == cmd.ext_fields["offset"]
            )
            assert info[5] == cmd.ext_fields["bname"]
        if code == 200053:
            # popDelayLevel[reconsumeTimes 0]: 10 s in Java, the first fast level here
            assert cmd.ext_fields["invisibleTime"] == str(int(TIMING.pop_delay_seconds[0] * 1000))
            assert {_ext_of(f)["invisibleTime"] for f in java} == {"10000"}


@pytest.mark.parametrize("code", [400, 401])
def test_pop_request_bodies_match_java(rec: Scenario, code: int) -> None:
    java = [f.body_json for f in java_requests(FILES, code)]
    ours = [json.loads(r.cmd.body) for r in rec.sent(code)]
    assert ours
    for body in ours:
        assert {tuple(sorted(body))} == {tuple(sorted(j)) for j in java}
        assert list(body) == sorted(body)  # fastjson: properties in alphabetical order
        if code == 400:
            assert body["messageModel"] == "CLUSTERING" and body["strategyName"] == "AVG"
            assert body["clientId"] == "127.0.0.1@pop-1" and body["consumerGroup"] == GROUP
        else:
            assert body == {"consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 8, "topic": TOPIC}
    if code == 400:  # the topic and the group's retry topic, as Java
        assert {b["topic"] for b in ours} >= {TOPIC, f"%RETRY%{GROUP}"}


def test_pop_consumer_sends_no_pull_for_the_popped_topic(rec: Scenario) -> None:
    """The topic is popped, only the retry topic is pulled; no offsets are committed for the topic."""
    pulled = {r.cmd.ext_fields["topic"] for r in rec.sent(11)}
    committed = {r.cmd.ext_fields["topic"] for r in rec.sent(15)}
    assert TOPIC not in pulled and TOPIC not in committed
    assert not rec.sent(38)  # the broker assigns: no consumer list asked (Java does not either)
