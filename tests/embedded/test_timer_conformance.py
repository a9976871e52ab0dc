"""5.x timer messages against ``tests/fixtures/tx/v5-timer.jsonl`` (5.3.3, see ADMIN-TX-NOTES.md).

The broker side: the three captured sends (TIMER_DELIVER_MS, TIMER_DELAY_SEC, a delay level) are
replayed on a raw connection to a 5.x-flavoured broker, the times moved to now (+2 s and 1 s, the
level kept); the answers have the captured extFields keys (``recallHandle`` on the timer sends
only, decoding to ``v1 <topic> <broker> <TIMER_OUT_MS + 1> <UNIQ_KEY>``); the delivered copies have
the captured properties in the captured order, TIMER_OUT_MS rounded down to the second, and come
no earlier than asked. The client side: our producer's timer sends carry the Java client's
property keys in its order.
"""

from __future__ import annotations

import base64
import time

import anyio
from support.wire import Frame, frames

from rmq_async import ClientConfig, Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient, StoredMsg, decode_messages
from .test_tx_conformance import Recorder

FILE = "tx/v5-timer.jsonl"


def _ext(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


def _keys(props_text: str) -> list[str]:
    return [item.split("\x01", 1)[0] for item in props_text.split("\x02") if item]


def _sends() -> list[Frame]:
    return [f for f in frames(FILE) if f.dir == "c2s" and f.kind == "request" and f.code == 310]


def _answer(req: Frame) -> Frame:
    return next(
        f for f in frames(FILE) if f.kind == "response" and f.conn == req.conn and f.opaque == req.opaque
    )


def _java_delivered() -> dict[str, StoredMsg]:
    out: dict[str, StoredMsg] = {}
    for f in frames(FILE):
        if (
            f.kind == "response"
            and f.code == 0
            and f.conn.startswith("broker")
            and f.body_len
            and not f.body_json
        ):
            out.update({m.props["KEYS"]: m for m in decode_messages(f.body)})
    return out


def _moved(props: str, now_ms: int) -> str:
    """The captured properties with the timer moved to now: +2 s absolute, or a 1 s delay."""
    items = []
    for item in props.split("\x02"):
        if item.startswith("TIMER_DELIVER_MS\x01"):
            item = f"TIMER_DELIVER_MS\x01{now_ms + 2000}"
        elif item.startswith("TIMER_DELAY_SEC\x01"):
            item = "TIMER_DELAY_SEC\x011"
        items.append(item)
    return "\x02".join(items)


async def test_broker_parks_and_delivers_the_captured_timers_as_533_does() -> None:
    java = _java_delivered()
    got: dict[str, StoredMsg] = {}
    async with EmbeddedCluster(queues=4, timing=Timing.fast(), flavour=5) as cluster:
        broker = cluster.brokers[0]
        await cluster.create_topic("WireTimer")
        async with RawClient(broker.addr, version=479) as c:
            sent_ms: dict[str, int] = {}
            for req in _sends():
                now = time.time_ns() // 1_000_000
                ext = dict(_ext(req), n=broker.name, g=str(now), i=_moved(_ext(req)["i"], now))
                key = ext["i"].split("KEYS\x01")[1].split("\x02")[0]
                sent_ms[key] = now
                resp = await c.request(310, ext, req.body)
                want = _ext(_answer(req))
                assert resp.code == 0, resp.remark
                assert set(resp.ext_fields) == set(want), key
                uniq = ext["i"].split("UNIQ_KEY\x01")[1].split("\x02")[0]
                if "recallHandle" in want:
                    raw = base64.urlsafe_b64decode(resp.ext_fields["recallHandle"]).decode()
                    v, topic, bname, ms, mid = raw.split(" ")
                    assert (v, topic, bname, mid) == ("v1", "WireTimer", broker.name, uniq)
                    assert int(ms) % 1000 == 1  # TIMER_OUT_MS (whole seconds) + 1
            with anyio.fail_after(10):
                while len(got) < 3:
                    for q in range(4):
                        pull = {
                            "consumerGroup": "wire_timer_cg", "topic": "WireTimer", "queueId": str(q),
                            "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
                            "expressionType": "TAG",
                        }  # fmt: skip
                        r = await c.request(11, pull)
                        if r.code == 0:
                            got.update({m.props["KEYS"]: m for m in decode_messages(r.body)})
                    await anyio.sleep(0.05)
    assert set(got) == set(java) == {"t-deliver5000", "t-delaysec3", "t-level2"}
    for key, theirs in java.items():
        mine = got[key]
        assert (mine.topic, mine.queue_id, mine.queue_offset, mine.sys_flag) == (
            theirs.topic, theirs.queue_id, theirs.queue_offset, theirs.sys_flag,
        ), key  # fmt: skip
        assert _keys(mine.props_text) == _keys(theirs.props_text), key
    deliver = got["t-deliver5000"]
    asked = int(deliver.props["TIMER_DELIVER_MS"])
    assert int(deliver.props["TIMER_OUT_MS"]) == asked // 1000 * 1000
    assert deliver.store_ts >= asked
    delay = got["t-delaysec3"]
    assert delay.store_ts >= sent_ms["t-delaysec3"] + 1000
    assert int(delay.props["TIMER_DEQUEUE_MS"]) >= int(delay.props["TIMER_OUT_MS"])
    assert int(delay.props["TIMER_ENQUEUE_MS"]) % 1000 == 0


async def test_our_producer_writes_the_timer_properties_as_the_java_client() -> None:
    timing = Timing.fast()
    async with EmbeddedCluster(queues=4, timing=timing, flavour=5) as cluster:
        rec = Recorder(cluster.brokers[0].handlers, (310,))
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
        async with Producer("wire_timer_pg", client_config=cfg) as p:
            await p.send(
                Message("WireTimer", b"a", tags="TagT", keys="t-deliver5000", deliver_at=time.time() + 5)
            )
            await p.send(Message("WireTimer", b"b", tags="TagT", keys="t-delaysec3", delay=3))
    java = {f.header["extFields"]["i"].split("KEYS\x01")[1].split("\x02")[0]: _ext(f) for f in _sends()}
    assert len(rec.seen) == 2
    for _, ext, resp in rec.seen:
        key = ext["i"].split("KEYS\x01")[1].split("\x02")[0]
        theirs = java[key]
        assert _keys(ext["i"]) == _keys(theirs["i"].rstrip("\x02")), key
        assert {k: ext[k] for k in "acdfhjkm"} == {k: theirs[k] for k in "acdfhjkm"}
        assert resp is not None and resp.code == 0 and "recallHandle" in resp.ext_fields
