"""mqadmin's frames (tests/fixtures/admin, from shared/wire admin-ops): the embedded broker answers them
as the 4.9.8 broker did, and :class:`rmq_async.admin.Admin` sends what mqadmin sent.

Broker side: a cluster set up as the capture's (``WireAdm`` created by the captured 17, k-0..k-19 sent
five per queue, group ``wire_adm_cg`` online through the captured heartbeat with its offsets at 5),
then every captured mqadmin request to the name server and the master replayed in capture order (the
slave's frames are left out: this cluster has none). Each answer must have the captured code, remark
(where it names nothing variable), ``extFields`` present/absent and key set, and body shape: strict
JSON bodies compared by shape, fastjson bodies with object keys parsed with ``protocol.fastjson`` and
compared by shape and key order (Java ``HashMap`` order). The broker's 220 to the online member is
compared too.

Client side: each Admin call through a recording proxy, each request compared with mqadmin's of the
same code: ``extFields`` present or absent, the keys (in order, but for the stream pull's ``ReqT``),
the values that do not name the run (fixed values), and the 200 body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest
from support.wire import Frame, frames, pairs

from rmq_async import ClientConfig, Timing
from rmq_async.admin import Admin
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol import fastjson
from rmq_async.protocol.command import FrameDecoder, RemotingCommand
from rmq_async.protocol.fastjson import ObjectKeyMap
from rmq_async.protocol.mq import MessageQueue

from .rawclient import RawClient, call, props_string

OPS = "admin/admin-ops.jsonl"
CLIENTS = "admin/admin-ops-clients.jsonl"
TOPIC, GROUP = "WireAdm", "wire_adm_cg"
RETRY = "%RETRY%" + GROUP
#: codes whose answer names the run (a search by this run's store times, a view by its offsets)
_VARIABLE = {29}


def _ext(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


def _shape(a: Any) -> Any:
    """Types, not values: lists as the set of their items' shapes, object-key maps as their pairs."""
    if isinstance(a, ObjectKeyMap):
        return ("okm", [(_shape(k), _shape(v)) for k, v in a])
    if isinstance(a, dict):
        return {str(k): _shape(v) for k, v in sorted(a.items(), key=lambda kv: str(kv[0]))}
    if isinstance(a, list):
        return ("list", sorted({json.dumps(_shape(v), sort_keys=True) for v in a}))
    return type(a).__name__


def _mq_order(body: bytes) -> list[tuple[str, int]]:
    """The (topic, queue id) keys of the body's object-key map, in wire order."""
    obj = fastjson.loads(body)
    table = obj["offsetTable"]
    assert isinstance(table, ObjectKeyMap)
    return [(k["topic"], k["queueId"]) for k, _ in table]


async def _preload(broker_addr: str) -> None:
    """k-i in queue i % 4 at offset i // 4 (as the capture's producer left them); the group at 5 (and
    at 0 on its retry queue, which the capture's consumer committed)."""
    async with RawClient(broker_addr) as b:
        for i in range(20):
            props = {"KEYS": f"k-{i}", "UNIQ_KEY": f"ADM{i:029d}", "WAIT": "true", "TAGS": "TagA"}
            ext = {
                "a": "wire_adm_pg",
                "b": TOPIC,
                "c": "TBW102",
                "d": "4",
                "e": str(i % 4),
                "f": "0",
                "g": str(int(time.time() * 1000)),
                "h": "0",
                "i": props_string(props),
                "j": "0",
                "k": "false",
                "m": "false",
                "n": "broker-a",
            }
            r = await b.request(310, ext, f"wire-{TOPIC}-{i}".encode())
            assert r.code == 0 and r.ext_fields["queueOffset"] == str(i // 4), r
        for topic, q, offset in [(TOPIC, 0, 5), (TOPIC, 1, 5), (TOPIC, 2, 5), (TOPIC, 3, 5), (RETRY, 0, 0)]:
            ext = {"consumerGroup": GROUP, "topic": topic, "queueId": str(q), "commitOffset": str(offset)}
            assert (await b.request(15, ext)).code == 0


class _Compare:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.checked = 0

    def answer(self, req: Frame, resp: Frame, got: RemotingCommand) -> None:
        self.checked += 1
        where = f"seq {req.seq} (code {req.code}, {_ext(req)})"
        fail = self.failures.append
        if got.code != resp.code:
            fail(
                f"{where}: code {got.code} {got.remark!r}, captured {resp.code} {resp.header.get('remark')!r}"
            )
            return
        if got.remark != resp.header.get("remark"):
            fail(f"{where}: remark {got.remark!r}, captured {resp.header.get('remark')!r}")
        want_ext = resp.header.get("extFields")
        if (want_ext is not None) != got.ext_fields_present or set(want_ext or {}) != set(got.ext_fields):
            fail(
                f"{where}: extFields {got.ext_fields if got.ext_fields_present else None}, "
                f"captured {want_ext}"
            )
        if bool(resp.body_len) != bool(got.body):
            fail(f"{where}: body of {len(got.body)} bytes, captured {resp.body_len}")
            return
        if not resp.body_len or req.code in (11, 12, 33):  # stored messages: the generic replay's part
            return
        if req.code == 28:  # the table holds what this broker knows: some of the captured keys, strings
            table = json.loads(got.body)["table"]
            theirs = resp.body_json["table"]
            if not set(table) <= set(theirs) or not all(isinstance(v, str) for v in table.values()):
                fail(f"{where}: runtime table {sorted(table)} not a part of {sorted(theirs)}")
            return
        if resp.body_json is not None:
            try:
                mine = json.loads(got.body)
            except ValueError:
                fail(f"{where}: body is not strict JSON: {got.body[:80]!r}")
                return
            theirs = resp.body_json
        else:
            mine, theirs = fastjson.loads(got.body), fastjson.loads(resp.body)
            if req.code == 106:  # the capture's broker had a slave (id 1), this cluster has none
                for bd in theirs["brokerAddrTable"].values():
                    bd["brokerAddrs"].pop(1, None)
            if req.code in (202, 208, 222) and _mq_order(got.body) != _mq_order(resp.body):
                fail(f"{where}: map order {_mq_order(got.body)}, captured {_mq_order(resp.body)}")
        if _shape(mine) != _shape(theirs):
            fail(f"{where}: body shape {_shape(mine)} != captured {_shape(theirs)}")
        if req.code == 300 and mine != theirs:
            fail(f"{where}: groups {mine}, captured {theirs}")


def _to_cmd(req: Frame) -> RemotingCommand:
    h = req.header
    ext = h.get("extFields")
    return RemotingCommand(
        req.code,
        ext_fields=dict(ext) if ext is not None else None,
        body=req.body,
        flag=int(h.get("flag", 0)),
        language=str(h.get("language", "JAVA")),
        version=int(h.get("version", 409)),
    )


async def test_the_broker_answers_mqadmin_as_the_captured_one() -> None:
    ops = [(q, r) for q, r in pairs(OPS) if q.dir == "c2s" and q.peer != "slave" and r is not None]
    ops.sort(key=lambda p: p[0].seq)
    (heartbeat,) = [f for f in frames(CLIENTS) if f.code == 34]
    (reset_220,) = [f for f in frames(CLIENTS) if f.code == 220]
    cmp = _Compare()
    async with EmbeddedCluster(queues=8, timing=Timing()) as cluster:
        broker = cluster.brokers[0]
        ns, member = RawClient(cluster.namesrv_addr), RawClient(broker.addr)
        await ns.__aenter__()
        await member.__aenter__()
        conns: dict[str, RawClient] = {}
        try:
            preloaded = False
            for req, resp in ops:
                if req.code in (105, 35, 34):  # the admin instance's own routes and bookkeeping
                    continue
                if req.code == 202 and not preloaded:  # the clients' messages came before topicStatus
                    await _preload(broker.addr)
                    hb = await member.request(34, None, heartbeat.body)
                    assert hb.code == 0
                    preloaded = True
                if req.code == 222 and resp.code == 206:  # the member shut down before the offline reset
                    await member.close()
                if req.code == 33:
                    continue  # a commit-log offset of the capture's broker: the generic replay maps those
                if req.peer == "namesrv":
                    c = ns
                elif req.conn in conns:
                    c = conns[req.conn]
                else:
                    c = conns[req.conn] = RawClient(broker.addr)
                    await c.__aenter__()
                got = await call(c, _to_cmd(req))
                assert got is not None, req
                if req.code in _VARIABLE:
                    cmp.checked += 1
                    if got.code != resp.code or set(got.ext_fields) != set(_ext(resp)):
                        cmp.failures.append(
                            f"seq {req.seq}: {got.code} {got.ext_fields}, captured {_ext(resp)}"
                        )
                    continue
                cmp.answer(req, resp, got)
                if req.code == 222 and resp.code == 0:
                    pushed = await asyncio.wait_for(member.server_requests.get(), 5)
                    while pushed.code == 40:  # the join's NOTIFY_CONSUMER_IDS_CHANGED
                        pushed = await asyncio.wait_for(member.server_requests.get(), 5)
                    assert pushed.code == 220 and pushed.is_oneway
                    assert pushed.ext_fields == _ext(reset_220)
                    assert _shape(fastjson.loads(pushed.body)) == _shape(fastjson.loads(reset_220.body))
                    assert _mq_order(pushed.body) == _mq_order(reset_220.body)
        finally:
            for c in [ns, member, *conns.values()]:
                with contextlib.suppress(Exception):
                    await c.close()
    assert cmp.checked >= 25
    assert not cmp.failures, "\n".join(cmp.failures)


# -- what Admin sends ------------------------------------------------------------------------------


class _Recorder:
    """A proxy in front of one server that keeps every request it forwards; name-server answers get
    the broker's address swapped for the broker proxy's (as the capture's proxy did)."""

    def __init__(self, upstream: str, swap: tuple[str, str] | None = None) -> None:
        self.upstream = upstream
        self.swap = swap
        self.requests: list[RemotingCommand] = []
        self.addr = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> _Recorder:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = self.upstream.rpartition(":")
        ureader, uwriter = await asyncio.open_connection(host, int(port))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upward: bool) -> None:
            decoder = FrameDecoder()
            try:
                while data := await src.read(65536):
                    for cmd in decoder.feed(data):
                        if upward and not cmd.is_response:
                            self.requests.append(cmd)
                        if not upward and self.swap is not None and cmd.body:
                            cmd.body = cmd.body.replace(self.swap[0].encode(), self.swap[1].encode())
                        dst.write(cmd.encode())
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(
            pump(reader, uwriter, True), pump(ureader, writer, False), return_exceptions=True
        )


#: values that name the run (topics, groups, ids, times, offsets): their keys are compared, not them
_NAMED = {"topic", "consumerGroup", "group", "groupName", "key", "timestamp", "queueId", "queueOffset",
          "commitOffset", "offset", "clusterName", "bname", "clientId", "msgId"}  # fmt: skip


def _mqadmin(code: int) -> list[Frame]:
    return [f for f in frames(OPS) if f.dir == "c2s" and f.kind == "request" and f.code == code]


async def test_admin_sends_what_mqadmin_sent() -> None:
    timing = Timing.fast()
    async with EmbeddedCluster(queues=4, timing=timing) as cluster:
        broker = cluster.brokers[0]
        async with (
            _Recorder(broker.addr) as bproxy,
            _Recorder(cluster.namesrv_addr, (broker.registered_addr, "")) as nproxy,
        ):
            nproxy.swap = (broker.registered_addr, bproxy.addr)
            cfg = ClientConfig(namesrv_addr=nproxy.addr, timing=timing, language="JAVA")
            async with Admin(client_config=cfg) as admin:
                await admin.cluster()
                await admin.create_topic(TOPIC, read_queues=4, write_queues=4)
                await admin.topics()
                await _preload(broker.addr)
                await admin.topic_status(TOPIC)
                (heartbeat,) = [f for f in frames(CLIENTS) if f.code == 34]
                async with RawClient(broker.addr) as member:  # the group online (and its retry topic)
                    assert (await member.request(34, None, heartbeat.body)).code == 0
                    await admin.progress(GROUP)
                    await admin.connections(GROUP)
                await admin.query_by_key(TOPIC, "k-5")
                await admin.who_consumes(TOPIC)
                await admin.message_at(MessageQueue(TOPIC, broker.name, 0), 3)
                await admin.reset_offset(GROUP, TOPIC, timestamp=int(time.time() * 1000) - 60_000)
                await admin.create_topic("WireAdmDel", read_queues=4, write_queues=4)
                await admin.delete_topic("WireAdmDel")
                await admin.create_group("wire_adm_g2")
                await admin.delete_group("wire_adm_g2")
        ours = nproxy.requests + bproxy.requests
    failures: list[str] = []
    seen: set[int] = set()
    for cmd in ours:
        java = _mqadmin(cmd.code)
        if not java or cmd.code in (105, 35):
            continue
        seen.add(cmd.code)
        want = java[0]
        want_ext = want.header.get("extFields")
        where = f"code {cmd.code} {cmd.ext_fields}"
        if (want_ext is not None) != cmd.ext_fields_present:
            failures.append(
                f"{where}: extFields present={cmd.ext_fields_present}, mqadmin {want_ext is not None}"
            )
            continue
        keys, their_keys = list(cmd.ext_fields), list(want_ext or {})
        if cmd.code == 11:
            # the stream pull's ReqT: RequestSettings adds it after the header's 12 keys (16-bucket order);
            # Java puts 13 entries in a 32-bucket HashMap. The same set, another order (every stream client)
            keys, their_keys = sorted(keys), sorted(their_keys)
        if keys != their_keys:
            failures.append(f"{where}: keys {keys}, mqadmin {their_keys}")
        fixed = {k: v for k, v in (want_ext or {}).items() if k not in _NAMED}
        if cmd.code in (17,):  # queue counts: the command's arguments
            fixed = {k: v for k, v in fixed.items() if not k.endswith("QueueNums")}
        mine = {k: v for k, v in cmd.ext_fields.items() if k in fixed}
        if mine != fixed:
            failures.append(f"{where}: values {mine}, mqadmin {fixed}")
        if cmd.code == 200:
            body, theirs = json.loads(cmd.body), json.loads(want.body)
            if list(body) != list(theirs) or {**body, "groupName": ""} != {**theirs, "groupName": ""}:
                failures.append(f"200 body {cmd.body!r}, mqadmin {want.body!r}")
    assert seen >= {106, 28, 17, 206, 202, 208, 203, 12, 300, 11, 222, 15, 29, 215, 216, 200, 207}, sorted(
        seen
    )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("code", [202, 208])
def test_the_client_reads_the_captured_fastjson_answers(code: int) -> None:
    from rmq_async.protocol.bodies import ConsumeStats, TopicStatsTable

    (resp,) = [r for q, r in pairs(OPS) if q.code == code and r is not None and r.code == 0][:1]
    table = (TopicStatsTable if code == 202 else ConsumeStats).decode(resp.body).offset_table
    assert MessageQueue(TOPIC, "broker-a", 0) in table and len(table) >= 4
