"""The embedded 5.x broker answers the captured POP requests (tests/fixtures/pop) like the real one.

Each capture's broker requests (heartbeats, QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE, POP, ACK,
BATCH_ACK, CHANGE_INVISIBLE_TIME, unregister) are replayed on one connection per captured
connection, in the order of the answers. A message a captured pop returned is put (SEND_MESSAGE_V2,
same queue, offset, body and properties) just before that pop, so each pop finds what the real one
found; a pop the real broker held until its poll time ran out (210) is sent with pollTime 0
(answered at once with 210); the receipt handles (popTime in extraInfo and in batch acks) are
translated to the ones this broker gave; before a pop that returned revived messages the
checkpoints are made due and the revive scan runs. Every answer must have the captured code, remark,
extFields keys, and the same assignments or messages (topic, queue, offset, body, reconsume times,
POP_CK present or not).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.wire import Frame, pairs

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.pop import pop_state
from rmq_async.protocol.command import RemotingCommand

from .rawclient import RawClient, StoredMsg, call, decode_messages, props_string

FILES = [f"pop/v5-pop-{n}.jsonl" for n in ("consume", "retry", "two-consumers", "lite", "admin")]
QUEUES = {"PopT": 8, "PopRetry": 8, "PopTwo": 2, "PopLite": 2}
REPLAYED = {34, 35, 400, 401, 200050, 200051, 200053, 200151}


def _ext(fr: Frame) -> dict[str, str]:
    return dict(fr.header.get("extFields") or {})


def _msgs(body: bytes) -> list[StoredMsg]:
    return list(decode_messages(body)) if body else []


def _shape(m: StoredMsg) -> tuple[Any, ...]:
    # a revived message's offset in the retry topic depends on the order the real broker's revive
    # queues (one per reviveQid, scanned independently) copied it: not compared
    revived = "POP_CK" in m.props
    return (m.topic, m.queue_id, -1 if revived else m.queue_offset, m.body, m.reconsume, revived)


class PopReplay:
    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.clients: dict[str, RawClient] = {}
        self.pop_times: dict[int, int] = {}  # captured popTime -> ours
        self.failures: list[str] = []
        self.checked = 0

    async def client(self, conn: str) -> RawClient:
        c = self.clients.get(conn)
        if c is None:
            c = self.clients[conn] = RawClient(self.cluster.brokers[0].addr, version=479)
            await c.__aenter__()
        return c

    async def ensure(self, msgs: list[StoredMsg]) -> None:
        """Put the captured normal messages up to their offsets (the revived ones come by revive)."""
        broker = self.cluster.brokers[0]
        c = await self.client("preload")
        for m in sorted(msgs, key=lambda m: (m.queue_id, m.queue_offset)):
            if "POP_CK" in m.props:
                continue
            while broker.store.max_offset(m.topic, m.queue_id) <= m.queue_offset:
                props = {k: v for k, v in m.props.items() if k not in ("CLUSTER", "MSG_REGION", "TRACE_ON")}
                ext = {
                    "a": "pop_pre_pg", "b": m.topic, "c": "TBW102", "d": "4", "e": str(m.queue_id),
                    "f": "0", "g": str(m.born_ts), "h": "0", "i": props_string(props), "j": "0",
                    "k": "false", "m": "false", "n": "broker-a",
                }  # fmt: skip
                r = await c.request(310, ext, m.body)
                assert r.code == 0, r

    def _handle(self, text: str) -> str:
        f = text.split(" ")
        f[1] = str(self.pop_times.get(int(f[1]), int(f[1])))
        return " ".join(f)

    def rewrite(self, req: Frame, resp: Frame | None) -> RemotingCommand:
        ext = req.header.get("extFields")
        ext = dict(ext) if ext is not None else None
        body = req.body
        if ext is not None and req.code == 200050 and resp is not None and resp.code == 210:
            ext["pollTime"] = "0"
        if ext is not None and "extraInfo" in ext:
            ext["extraInfo"] = self._handle(ext["extraInfo"])
        if req.code == 200151:
            obj = json.loads(body)
            for a in obj["acks"]:
                a["pt"] = self.pop_times.get(a["pt"], a["pt"])
            body = json.dumps(obj, separators=(",", ":")).encode()
        return RemotingCommand(
            req.code,
            ext_fields=ext,
            body=body,
            flag=int(req.header.get("flag", 0)) & 2,
            language="JAVA",
            version=479,
        )

    async def replay(self, file: str) -> None:
        broker = self.cluster.brokers[0]
        # in the order the broker answered (a held pop after what was done while it was held)
        ordered = sorted(pairs(file), key=lambda p: p[1].seq if p[1] is not None else p[0].seq)
        for req, resp in ordered:
            if req.dir != "c2s" or req.peer != "broker" or req.code not in REPLAYED:
                continue
            if resp is None and req.kind != "oneway":
                continue  # held when the client shut down
            theirs = _msgs(resp.body) if resp is not None and req.code == 200050 else []
            await self.ensure(theirs)
            if any("POP_CK" in m.props for m in theirs):
                ps = pop_state(broker.context)
                for ck in ps.cks.values():
                    ck.invisible_time = 0
                ps.revive_once()
            got = await call(await self.client(req.conn), self.rewrite(req, resp))
            if got is None or resp is None:
                continue
            self.compare(file, req, resp, got, theirs)

    def compare(
        self, file: str, req: Frame, resp: Frame, got: RemotingCommand, theirs: list[StoredMsg]
    ) -> None:
        self.checked += 1
        where = f"{file} seq {req.seq} (code {req.code})"
        if got.code != resp.code:
            self.failures.append(f"{where}: code {got.code} {got.remark!r}, captured {resp.code}")
            return
        want_remark = resp.header.get("remark")
        if want_remark != got.remark and not (want_remark and "127.0.0.1:" in want_remark):
            self.failures.append(f"{where}: remark {got.remark!r}, captured {want_remark!r}")
        raw_ext = resp.header.get("extFields")
        want_ext: dict[str, str] = dict(raw_ext or {})
        if (raw_ext is not None) != got.ext_fields_present or set(want_ext) != set(got.ext_fields):
            self.failures.append(f"{where}: extFields {got.ext_fields}, captured {raw_ext}")
        if "popTime" in want_ext and "popTime" in got.ext_fields:
            self.pop_times[int(want_ext["popTime"])] = int(got.ext_fields["popTime"])
        if req.code == 200050 and resp.code == 0:
            mine = sorted(_shape(m) for m in _msgs(got.body))
            if mine != sorted(_shape(m) for m in theirs):
                self.failures.append(
                    f"{where}: messages {mine} != captured {sorted(_shape(m) for m in theirs)}"
                )
            for k in ("startOffsetInfo", "msgOffsetInfo"):
                if set(got.ext_fields[k].split(";")) != set(want_ext[k].split(";")):
                    self.failures.append(f"{where}: {k} {got.ext_fields[k]!r}, captured {want_ext[k]!r}")
        if req.code == 400:
            mine_a = json.loads(got.body)["messageQueueAssignments"]
            want_a = resp.body_json["messageQueueAssignments"]
            strip = [(a["messageQueue"]["topic"], a["messageQueue"]["queueId"], a["mode"]) for a in want_a]
            if [
                (a["messageQueue"]["topic"], a["messageQueue"]["queueId"], a["mode"]) for a in mine_a
            ] != strip:
                self.failures.append(f"{where}: assignments {mine_a}, captured {want_a}")


def _expected(file: str) -> int:
    return sum(
        1
        for q, r in pairs(file)
        if q.dir == "c2s" and q.peer == "broker" and q.code in REPLAYED and r is not None
    )


@pytest.mark.parametrize("file", FILES)
async def test_replay_pop_capture(file: str) -> None:
    async with EmbeddedCluster(queues=8, timing=Timing(), flavour=5) as cluster:
        for topic, n in QUEUES.items():
            await cluster.create_topic(topic, n)
        ps = pop_state(cluster.brokers[0].context)
        if file.endswith("admin.jsonl") or file.endswith("two-consumers.jsonl"):
            # the group was switched beforehand (admin: by this capture's first 401, replayed too)
            ps.modes[("PopTwo", "pop_two_g")] = ("POP", 8)
        else:  # switched with mqadmin setConsumeMode -m POP -q 8 before the capture
            for q, _ in pairs(file):
                if q.code == 400 and q.body_json and not q.body_json["topic"].startswith("%"):
                    ps.modes[(q.body_json["topic"], q.body_json["consumerGroup"])] = ("POP", 8)
        r = PopReplay(cluster)
        try:
            await r.replay(file)
        finally:
            for c in r.clients.values():
                await c.close()
    assert r.checked == _expected(file)
    assert not r.failures, "\n".join(r.failures[:20])


def test_codes_seen_in_the_captures() -> None:
    codes: dict[int, set[int]] = defaultdict(set)
    for f in FILES:
        for q, r in pairs(f):
            if r is not None and q.code in REPLAYED:
                codes[q.code].add(r.code)
    assert codes[200050] == {0, 210} and codes[200051] == {0, 208, 13} and codes[401] == {0, 16, 17}


async def test_request_modes_survive_a_broker_restart(tmp_path: Path) -> None:
    """SET_MESSAGE_REQUEST_MODE is kept in config/messageRequestMode.json (MessageRequestModeManager)."""
    body = b'{"consumerGroup":"g","mode":"POP","popShareQueueNum":2,"topic":"PopKeep"}'
    async with EmbeddedCluster(queues=2, timing=Timing(), flavour=5, data_dir=tmp_path) as cluster:
        await cluster.create_topic("PopKeep", 2)
        async with RawClient(cluster.brokers[0].addr, version=479) as c:
            assert (await c.request(401, None, body)).code == 0
    assert sorted(p.name for p in tmp_path.rglob("messageRequestMode.json")) == ["messageRequestMode.json"]  # noqa: ASYNC240
    async with EmbeddedCluster(queues=2, timing=Timing(), flavour=5, data_dir=tmp_path) as cluster:
        assert pop_state(cluster.brokers[0].context).modes[("PopKeep", "g")] == ("POP", 2)


async def test_query_assignment_covers_every_broker_of_the_topic() -> None:
    """As the Java broker (TopicRouteInfoManager), the answer lists the topic's queues on every
    broker: a POP group gets queue -1 of each broker, whichever broker it asks."""
    async with EmbeddedCluster(brokers=2, queues=2, timing=Timing.fast(), flavour=5) as cluster:
        await cluster.create_topic("PopWide", 2)
        for b in cluster.brokers:
            pop_state(b.context).modes[("PopWide", "g")] = ("POP", 0)
        for b in cluster.brokers:
            async with RawClient(b.addr, version=479) as c:
                for model, group, want in (
                    ("CLUSTERING", "g", [("broker-a", -1, "POP"), ("broker-b", -1, "POP")]),
                    (
                        "BROADCASTING",
                        "other",
                        [(n, q, "PULL") for n in ("broker-a", "broker-b") for q in (0, 1)],
                    ),
                ):
                    body = {"clientId": "x@1", "consumerGroup": group, "messageModel": model}
                    body |= {"strategyName": "AVG", "topic": "PopWide"}
                    r = await c.request(400, None, json.dumps(body).encode())
                    got = json.loads(r.body)["messageQueueAssignments"]
                    mine = [
                        (a["messageQueue"]["brokerName"], a["messageQueue"]["queueId"], a["mode"])
                        for a in got
                    ]
                    assert r.code == 0 and mine == want, (b.name, model, mine)
