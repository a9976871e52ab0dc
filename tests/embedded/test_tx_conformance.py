"""Transactional messages against ``tests/fixtures/tx/tx-produce.jsonl`` (4.9.8, see ADMIN-TX-NOTES.md).

The broker side: the captured half sends (310, sysFlag 4) are replayed on a raw connection, with
the captured producer heartbeat; each answer must have the captured code, extFields keys, queueId
and queueOffset (the half queue's offsets 0, 1, 2); the captured END_TRANSACTIONs follow with this
broker's commit-log offsets. A check walk then sends CHECK_TRANSACTION_STATE for tx-u only, with the
captured extFields keys and a body like the captured one (topic and queue restored, the next half
offset, sysFlag 0, the properties in the captured order with TRANSACTION_CHECK_TIMES=1 and WAIT
false). The captured answer (a oneway 37 with transactionId, without bname) commits it; pulls then
find tx-c and tx-u as the capture's consumer got them (sysFlag 8, the same properties in the same
order) and never tx-r.

The client side: our TransactionProducer's half sends and END_TRANSACTIONs, recorded as the broker
decodes them, have the Java client's extFields keys and values where they are fixed, the same
property order, and the offsets of the answers they end.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anyio
from support.integration import until
from support.wire import Frame, frames

from rmq_async import ClientConfig, Message, SendResult, Timing, TransactionProducer, TransactionResult
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.command import RemotingCommand
from rmq_async.protocol.stored import MessageExt

from .rawclient import RawClient, StoredMsg, decode_messages

FILE = "tx/tx-produce.jsonl"


def _ext(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


def _c2s(code: int) -> list[Frame]:
    return [f for f in frames(FILE) if f.dir == "c2s" and f.kind in ("request", "oneway") and f.code == code]


def _answer(req: Frame) -> Frame:
    return next(
        f for f in frames(FILE) if f.kind == "response" and f.conn == req.conn and f.opaque == req.opaque
    )


def _keys(props_text: str) -> list[str]:
    return [item.split("\x01", 1)[0] for item in props_text.split("\x02") if item]


def _stored(body: bytes) -> list[StoredMsg]:
    return list(decode_messages(body))


_VARYING = {"UNIQ_KEY"}


def _fixed(m: StoredMsg) -> dict[str, str]:
    return {k: v for k, v in m.props.items() if k not in _VARYING}


async def test_broker_answers_the_captured_transaction_as_the_real_one() -> None:
    halves = _c2s(310)
    ends = [f for f in _c2s(37) if _ext(f)["fromTransactionCheck"] == "false"]
    (check_answer,) = [f for f in _c2s(37) if _ext(f)["fromTransactionCheck"] == "true"]
    (java_check,) = [f for f in frames(FILE) if f.code == 39]
    heartbeat = next(f for f in _c2s(34) if "wire_tx_pg" in json.dumps(f.body_json))
    consumer_pulls = [
        f for f in frames(FILE) if f.kind == "response" and f.code == 0 and f.conn.startswith("broker")
    ]
    java_committed = {
        m.props["KEYS"]: m for f in consumer_pulls if f.body_len and not f.body_json for m in _stored(f.body)
    }
    async with EmbeddedCluster(queues=4, timing=Timing.fast(transaction_check_interval=3600)) as cluster:
        broker = cluster.brokers[0]
        async with RawClient(broker.addr) as c:
            hb = await c.request(34, None, heartbeat.body)
            assert hb.code == 0
            ours: list[RemotingCommand] = []
            for req in halves:
                got = await c.request(310, _ext(req), req.body)
                want = _answer(req)
                assert got.code == want.code == 0, got.remark
                assert set(got.ext_fields) == set(_ext(want))
                for k in ("queueId", "queueOffset"):
                    assert got.ext_fields[k] == _ext(want)[k], k
                ours.append(got)
            assert broker.store.max_offset("WireTx", 0) == 0  # nothing visible yet
            for end, got in zip(ends, ours, strict=True):
                ext = dict(_ext(end), commitLogOffset=str(int(got.ext_fields["msgId"][-16:], 16)))
                await c.request(37, ext, oneway=True)
            await c.request(30, {"topic": "TBW102", "queueId": "0"})  # the oneways were processed
            last = broker.store.queue("RMQ_SYS_TRANS_HALF_TOPIC", 0)
            assert last is not None
            newest = broker.store.store_ts_at(last.offsets[-1])
            await until(lambda: time.time_ns() // 1_000_000 > newest)  # not "stored during the walk"
            assert broker.transactions.check() == 1  # tx-u only
            check = await c.next_server_request()
            assert check.code == 39 and check.is_oneway
            assert set(check.ext_fields) == set(_ext(java_check))
            assert check.ext_fields["tranStateTableOffset"] == _ext(java_check)["tranStateTableOffset"] == "3"
            assert (
                check.ext_fields["msgId"]
                == check.ext_fields["transactionId"]
                == _ext(halves[2])["i"].split("UNIQ_KEY\x01")[1].split("\x02")[0]
            )
            (mine,) = _stored(check.body)
            (theirs,) = _stored(java_check.body)
            assert (mine.topic, mine.queue_id, mine.queue_offset, mine.sys_flag, mine.body) == (
                theirs.topic, theirs.queue_id, theirs.queue_offset, theirs.sys_flag, theirs.body,
            )  # fmt: skip
            assert _keys(mine.props_text) == _keys(theirs.props_text)
            assert _fixed(mine) == _fixed(theirs)
            assert mine.phys == int(check.ext_fields["commitLogOffset"])
            answer = dict(
                _ext(check_answer),
                commitLogOffset=check.ext_fields["commitLogOffset"],
                msgId=check.ext_fields["msgId"],
                transactionId=check.ext_fields["transactionId"],
            )
            await c.request(37, answer, oneway=True)
            await c.request(30, {"topic": "TBW102", "queueId": "0"})
            got_msgs: dict[str, StoredMsg] = {}
            for q in range(4):
                pull = {
                    "consumerGroup": "wire_tx_cg", "topic": "WireTx", "queueId": str(q), "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": "*", "subVersion": "0", "expressionType": "TAG",
                }  # fmt: skip
                r = await c.request(11, pull)
                if r.code == 0:
                    got_msgs.update({m.props["KEYS"]: m for m in _stored(r.body)})
    assert set(got_msgs) == set(java_committed) == {"tx-c", "tx-u"}
    for key, theirs in java_committed.items():
        mine = got_msgs[key]
        assert (mine.topic, mine.queue_id, mine.queue_offset, mine.sys_flag, mine.body) == (
            theirs.topic, theirs.queue_id, theirs.queue_offset, theirs.sys_flag, theirs.body,
        )  # fmt: skip
        assert _keys(mine.props_text) == _keys(theirs.props_text), key
        assert _fixed(mine) == _fixed(theirs), key


class Recorder:
    """Wraps the broker's handlers of some codes: every request as the broker decoded it, with its
    answer."""

    def __init__(self, handlers: dict[int, Any], codes: tuple[int, ...]) -> None:
        self.seen: list[tuple[RemotingCommand, dict[str, str], RemotingCommand | None]] = []
        for code in codes:
            inner = handlers[code]

            def wrapped(conn: Any, cmd: RemotingCommand, inner: Any = inner) -> Any:
                ext = dict(cmd.ext_fields)  # before the handler renames the V2 keys
                resp = inner(conn, cmd)
                self.seen.append((cmd, ext, resp if isinstance(resp, RemotingCommand) else None))
                return resp

            handlers[code] = wrapped


async def test_our_producer_sends_what_the_java_client_sends() -> None:
    java_half = _c2s(310)[0]
    java_end = next(f for f in _c2s(37) if _ext(f)["fromTransactionCheck"] == "false")
    java_answer = next(f for f in _c2s(37) if _ext(f)["fromTransactionCheck"] == "true")
    timing = Timing.fast()
    outcomes = {
        "tx-c": TransactionResult.COMMIT,
        "tx-r": TransactionResult.ROLLBACK,
        "tx-u": TransactionResult.UNKNOWN,
    }
    checked = asyncio.Event()

    async def local(msg: Message, res: SendResult) -> TransactionResult:
        return outcomes[msg.keys or ""]

    async def checker(msg: MessageExt) -> TransactionResult:
        checked.set()
        return TransactionResult.COMMIT

    async with EmbeddedCluster(queues=4, timing=timing) as cluster:
        rec = Recorder(cluster.brokers[0].handlers, (310, 37))
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
        async with TransactionProducer("wire_tx_pg", checker=checker, client_config=cfg) as p:
            results = {}
            for key in outcomes:
                msg = Message("WireTx", f"wire-WireTx-{key}".encode(), tags="TagTx", keys=key)
                results[key] = await p.send_in_transaction(msg, local)
            with anyio.fail_after(10):
                await checked.wait()
                await until(lambda: sum(1 for cmd, _, _ in rec.seen if cmd.code == 37) >= 4)
    sends = [(cmd, ext, resp) for cmd, ext, resp in rec.seen if cmd.code == 310]
    e2e = [(cmd, ext) for cmd, ext, _ in rec.seen if cmd.code == 37]
    assert len(sends) == 3 and len(e2e) == 4
    jext = _ext(java_half)
    for _, ext, resp in sends:
        assert set(ext) == set(jext)
        assert {k: ext[k] for k in ("a", "c", "d", "f", "h", "j", "k", "m", "n")} == {
            k: jext[k] for k in ("a", "c", "d", "f", "h", "j", "k", "m", "n")
        }
        assert _keys(ext["i"]) == _keys(jext["i"])  # KEYS TRAN_MSG UNIQ_KEY WAIT PGROUP TAGS
        assert "TRAN_MSG\x01true" in ext["i"] and "PGROUP\x01wire_tx_pg" in ext["i"]
        assert resp is not None and resp.code == 0
    by_key = {}
    for cmd, ext in e2e:
        assert cmd.is_oneway and cmd.version == 409
        by_key[(ext["msgId"], ext["fromTransactionCheck"])] = ext
    for key, res in results.items():
        ext = by_key[(res.msg_id, "false")]
        assert list(ext) == list(_ext(java_end))  # the same keys, in the Java client's order
        assert ext["commitOrRollback"] == {"tx-c": "8", "tx-r": "12", "tx-u": "0"}[key]
        assert ext["tranStateTableOffset"] == str(res.queue_offset)
        assert ext["commitLogOffset"] == str(int(res.offset_msg_id[-16:], 16))
        assert ext["producerGroup"] == "wire_tx_pg" and ext["bname"] == "broker-a"
    ext = by_key[(results["tx-u"].msg_id, "true")]
    assert list(ext) == list(_ext(java_answer))  # transactionId, no bname
    assert ext["commitOrRollback"] == "8" and ext["transactionId"] == results["tx-u"].msg_id
