"""Replay every capture in tests/fixtures against a fresh embedded cluster and compare the answers.

For each file (v5-* against flavour 5): the topics whose first route lookup succeeded are created
with the captured queue counts, the messages that were already there are preloaded through
SEND_MESSAGE_V2 (same bodies, keys, tags, queue and offset, taken from the captured pull answers;
unobserved ones get the README's ``wire-<TOPIC>-<i>`` / ``k-<i>``), and offsets committed before the
capture are committed again. Then every client request is sent on its own connection, in capture
order (a long poll is replayed where its answer was, and without the suspend flag), with commit-log
offsets (36, 33) translated to this broker's. Every answer must have the captured response code,
the same ``extFields`` keys (present-but-empty and absent alike) and the same body shape. Code 25
(a client-side race) is excluded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from collections import defaultdict
from typing import Any

import pytest
from support.wire import CAPTURE_FILES, Frame, frames, pairs

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import FLAG_ONEWAY, RemotingCommand

from .rawclient import RawClient, StoredMsg, call, decode_messages, java_hash, props_string

_SKIP: dict[str, str] = {}
_BATCH_SUFFIX = "\x02CLUSTER\x01DefaultCluster\x02WAIT\x01true"  # 4.9.8 batch properties, HashMap order


def _ext(fr: Frame) -> dict[str, str]:
    return dict(fr.header.get("extFields") or {})


def _stored(fr: Frame | None) -> list[StoredMsg]:
    if fr is None or fr.code != 0 or not fr.body_len:
        return []
    try:
        return list(decode_messages(fr.body))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return []


class Plan:
    """What one capture needs before replay, and the replay order."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.pairs = [(q, r) for q, r in pairs(file) if q.dir == "c2s" and q.kind in ("request", "oneway")]
        self.topics: dict[str, dict[str, Any]] = {}  # topic -> first successful queueData
        self.messages: dict[tuple[str, int], dict[int, StoredMsg]] = defaultdict(dict)
        self.preload_count: dict[tuple[str, int], int] = defaultdict(int)
        self.commits: dict[tuple[str, str, int], int] = {}
        self._analyse()

    def _analyse(self) -> None:
        first_route: dict[str, Frame | None] = {}
        sends: list[tuple[int, str, int, int]] = []  # request seq, topic, queue, count
        observations: list[tuple[int, str, int, int]] = []  # seq, topic, queue, max offset
        committed: set[tuple[str, str, int]] = set()
        for req, resp in sorted(self.pairs, key=lambda p: p[0].seq):
            e = _ext(req)
            if req.code == 105 and resp is not None:
                first_route.setdefault(e["topic"], resp)
            elif req.code in (310, 320, 10) and resp is not None and resp.code == 0:
                re = _ext(resp)
                topic = e.get("b", e.get("topic", ""))
                delayed = "DELAY\x01" in e.get("i", e.get("properties", ""))
                if not delayed:
                    sends.append((req.seq, topic, int(re["queueId"]), len(re["msgId"].split(","))))
            elif req.code == 11 and resp is not None:
                topic, q = e["topic"], int(e["queueId"])
                re = _ext(resp)
                if "maxOffset" in re:
                    observations.append((resp.seq, topic, q, int(re["maxOffset"])))
                for m in _stored(resp):
                    self.messages[(m.topic, m.queue_id)].setdefault(m.queue_offset, m)
                if int(e.get("sysFlag", "0")) & 1:
                    committed.add((e["consumerGroup"], topic, q))
            elif req.code == 30 and resp is not None and resp.code == 0:
                observations.append((resp.seq, e["topic"], int(e["queueId"]), int(_ext(resp)["offset"])))
            elif req.code == 15:
                committed.add((e["consumerGroup"], e["topic"], int(e["queueId"])))
            elif req.code == 14 and resp is not None:
                key = (e["consumerGroup"], e["topic"], int(e["queueId"]))
                if key not in committed and key not in self.commits and resp.code == 0:
                    off = int(_ext(resp)["offset"])
                    if off > 0:
                        self.commits[key] = off
                committed.add(key)
        for topic, resp in first_route.items():
            if resp is not None and resp.code == 0 and topic != "TBW102" and resp.body_json:
                self.topics[topic] = resp.body_json["queueDatas"][0]
        for seq, topic, q, max_off in observations:
            if topic.startswith(("%RETRY%", "%DLQ%")) or topic not in self.topics:
                continue
            added = sum(n for s, t, qq, n in sends if t == topic and qq == q and s < seq)
            self.preload_count[(topic, q)] = max(self.preload_count[(topic, q)], max_off - added)

    def expected_checks(self) -> int:
        """Every answered request except the excluded code 25."""
        return sum(1 for _, r in self.pairs if r is not None and r.code != 25)

    def ordered(self) -> list[tuple[Frame, Frame | None]]:
        """Requests in the order the broker processed them.

        That is the order of the answers (the broker answers a request when it has processed it),
        a oneway at its own place, and a long poll after every non-pull request that was still in
        flight when it was answered (the send that woke it is answered after it).
        """
        spans = [(q.seq, r.seq) for q, r in self.pairs if r is not None and q.code != 11]

        def key(p: tuple[Frame, Frame | None]) -> float:
            req, resp = p
            if resp is None:
                return req.seq
            if req.code == 11 and int(_ext(req).get("sysFlag", "0")) & 2:
                later = [r for q, r in spans if q < resp.seq < r]
                return max([resp.seq, *later]) + 0.5
            return resp.seq

        return sorted(self.pairs, key=key)


def _shape(a: Any) -> Any:
    if isinstance(a, dict):
        return {k: _shape(v) for k, v in sorted(a.items())}
    if isinstance(a, list):
        return [_shape(v) for v in a]
    return type(a).__name__


def _msg_shape(m: StoredMsg) -> tuple[Any, ...]:
    # property names in stored order (Java HashMap order), values only where they are deterministic
    keys = [item.split("\x01", 1)[0] for item in m.props_text.split("\x02")]
    fixed = {k: v for k, v in m.props.items() if k not in ("ORIGIN_MESSAGE_ID",)}
    return (m.topic, m.queue_id, m.queue_offset, m.body, m.reconsume, m.sys_flag, m.flag, keys, fixed)


class Replayer:
    def __init__(self, plan: Plan, cluster: EmbeddedCluster) -> None:
        self.plan = plan
        self.cluster = cluster
        self.clients: dict[str, RawClient] = {}
        self.phys: dict[int, int] = {}  # capture commit-log offset -> ours
        self.failures: list[str] = []
        self.checked = 0

    async def client(self, conn: str) -> RawClient:
        c = self.clients.get(conn)
        if c is None:
            addr = self.cluster.namesrv_addr if conn.startswith("namesrv") else self.cluster.brokers[0].addr
            c = self.clients[conn] = RawClient(addr)
            await c.__aenter__()
        return c

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()

    async def preload(self) -> None:
        plan = self.plan
        for topic, qd in plan.topics.items():
            await self.cluster.create_topic(topic, int(qd["readQueueNums"]), perm=int(qd["perm"]))
        async with RawClient(self.cluster.brokers[0].addr) as b:
            for (topic, q), count in sorted(plan.preload_count.items()):
                seen = plan.messages.get((topic, q), {})
                for off in range(count):
                    m = seen.get(off)
                    if m is not None:
                        props = {
                            k: v for k, v in m.props.items() if k not in ("CLUSTER", "MSG_REGION", "TRACE_ON")
                        }
                        body, sys_flag, flag = m.body, m.sys_flag, m.flag
                    else:
                        props = {"KEYS": f"k-{off}", "UNIQ_KEY": f"PRELOAD{topic}{q}{off}", "WAIT": "true"}
                        body, sys_flag, flag = f"wire-{topic}-{off}".encode(), 0, 0
                    ext = {
                        "a": "wire_pre_pg",
                        "b": topic,
                        "c": "TBW102",
                        "d": "4",
                        "e": str(q),
                        "f": str(sys_flag),
                        "g": str(int(time.time() * 1000)),
                        "h": str(flag),
                        "i": props_string(props),
                        "j": "0",
                        "k": "false",
                        "m": "false",
                        "n": "broker-a",
                    }
                    if "DELAY" in props:
                        # delivered from the schedule topic before the capture: store it as it is
                        # stored (DELAY/REAL_* kept), since a send would schedule it again
                        broker = self.cluster.brokers[0]
                        res = broker.store.put(
                            topic,
                            q,
                            body,
                            flag,
                            m.props_text if m else "",
                            java_hash(props.get("TAGS", "")) if props.get("TAGS") else 0,
                            sys_flag,
                            m.born_ts if m else 0,
                            m.born if m else b"\0" * 8,
                        )
                        assert res.queue_offset == off
                        if m is not None:
                            self.phys[m.phys] = res.phys_offset
                        continue
                    if m is not None and m.props_text.endswith(_BATCH_SUFFIX):
                        # sent in a batch: a batch stores each message's own properties + the batch's
                        own = m.props_text[: -len(_BATCH_SUFFIX)].encode()
                        item = struct.pack(">iiiii", 22 + len(body) + len(own), 0, 0, flag, len(body))
                        ext.update({"i": "WAIT\x01true", "m": "true"})
                        r = await b.request(320, ext, item + body + struct.pack(">h", len(own)) + own)
                    else:
                        r = await b.request(310, ext, body)
                    assert r.code == 0 and r.ext_fields["queueOffset"] == str(off), (topic, q, off, r)
                    if m is not None:
                        self.phys[m.phys] = int(r.ext_fields["msgId"][-16:], 16)
            for (group, topic, q), off in plan.commits.items():
                ext = {"consumerGroup": group, "topic": topic, "queueId": str(q), "commitOffset": str(off)}
                assert (await b.request(15, ext)).code == 0

    def _rewrite(self, req: Frame) -> RemotingCommand:
        h = req.header
        ext = h.get("extFields")
        ext = dict(ext) if ext is not None else None
        if ext is not None and req.code in (36, 33) and "offset" in ext:
            ext["offset"] = str(self.phys.get(int(ext["offset"]), int(ext["offset"])))
        if ext is not None and req.code == 11:
            ext["sysFlag"] = str(int(ext.get("sysFlag", "0")) & ~2)  # long polls without the suspend flag
        return RemotingCommand(
            req.code,
            ext_fields=ext,
            body=req.body,
            flag=int(h.get("flag", 0)) & FLAG_ONEWAY,
            language=str(h.get("language", "JAVA")),
            version=int(h.get("version", 409)),
            serialize_type=SerializeType.ROCKETMQ if req.serialize == "ROCKETMQ" else SerializeType.JSON,
        )

    async def _wait_for_queue(self, topic: str, q: int, max_offset: int) -> None:
        """Messages that arrived after a delay (retry, schedule) are delivered now, earliest first,
        until the queue holds what the captured answer saw; no wall-clock waiting."""
        broker = self.cluster.brokers[0]
        while broker.store.max_offset(topic, q) < max_offset and broker.schedule.deliver_next():
            pass

    async def replay(self) -> None:
        for req, resp in self.plan.ordered():
            if resp is None and req.kind != "oneway":
                continue  # a long poll still held when the client shut down
            if resp is not None and resp.code == 25:
                continue  # a client-side subVersion race, excluded
            cmd = self._rewrite(req)
            c = await self.client(req.conn)
            e = _ext(req)
            if req.code == 11 and resp is not None and "maxOffset" in _ext(resp):
                await self._wait_for_queue(e["topic"], int(e["queueId"]), int(_ext(resp)["maxOffset"]))
            got = await call(c, cmd)
            if got is None:
                # a oneway: make sure it was processed before requests on other connections
                await c.request(30, {"topic": "TBW102", "queueId": "0"})
                continue
            if req.code == 105 and resp is not None and resp.code == 0 and got.code == 17:
                deadline = time.monotonic() + 2  # auto-created topics are registered right after creation
                while got is not None and got.code == 17 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                    got = await call(c, self._rewrite(req))
                assert got is not None
            assert resp is not None
            self.compare(req, resp, got)

    def compare(self, req: Frame, resp: Frame, got: RemotingCommand) -> None:
        self.checked += 1
        where = f"{self.plan.file} seq {req.seq} (code {req.code}, {_ext(req)})"
        if got.code != resp.code:
            self.failures.append(
                f"{where}: code {got.code} {got.remark!r}, captured {resp.code} {resp.header.get('remark')!r}"
            )
            return
        want_remark = resp.header.get("remark")
        if want_remark != got.remark and not (want_remark and "127.0.0.1:" in want_remark):
            self.failures.append(f"{where}: remark {got.remark!r}, captured {want_remark!r}")
        want_ext = resp.header.get("extFields")
        if (want_ext is not None) != got.ext_fields_present and req.serialize != "ROCKETMQ":
            self.failures.append(
                f"{where}: extFields present={got.ext_fields_present}, captured {want_ext is not None}"
            )
        if set(want_ext or {}) != set(got.ext_fields):
            self.failures.append(
                f"{where}: extFields keys {sorted(got.ext_fields)}, captured {sorted(want_ext or {})}"
            )
        if resp.body_json is not None:
            try:
                mine = json.loads(got.body)
            except ValueError:
                self.failures.append(f"{where}: body is not JSON: {got.body[:80]!r}")
                return
            if _shape(mine) != _shape(resp.body_json):
                self.failures.append(
                    f"{where}: body shape {_shape(mine)} != captured {_shape(resp.body_json)}"
                )
        elif req.code in (11, 33) and resp.code == 0:
            theirs, mine_msgs = _stored(resp), _stored_cmd(got)
            for t, m in zip(theirs, mine_msgs, strict=False):
                self.phys[t.phys] = m.phys
            mine_shape, their_shape = [_msg_shape(m) for m in mine_msgs], [_msg_shape(m) for m in theirs]
            if mine_shape != their_shape:
                self.failures.append(f"{where}: messages {mine_shape} != captured {their_shape}")
        elif bool(resp.body_len) != bool(got.body):
            self.failures.append(f"{where}: body of {len(got.body)} bytes, captured {resp.body_len}")


def _stored_cmd(cmd: RemotingCommand) -> list[StoredMsg]:
    return list(decode_messages(cmd.body)) if cmd.body else []


@pytest.mark.parametrize("file", CAPTURE_FILES)
async def test_replay_capture(file: str) -> None:
    if file in _SKIP:
        pytest.skip(_SKIP[file])
    plan = Plan(file)
    flavour = 5 if file.startswith("v5-") else 4
    timing = Timing()  # real delay levels: due order as in the capture; deliveries are forced
    async with EmbeddedCluster(queues=8, timing=timing, flavour=flavour) as cluster:
        r = Replayer(plan, cluster)
        try:
            await r.preload()
            await r.replay()
        finally:
            with contextlib.suppress(Exception):
                await r.close()
    assert r.checked >= plan.expected_checks()
    assert not r.failures, "\n".join(r.failures[:20])


def test_every_capture_has_frames() -> None:
    assert len(CAPTURE_FILES) == 21
    assert all(frames(f) for f in CAPTURE_FILES)
