"""What OUR client puts on the wire, compared with what the official Java client sends.

Every scenario runs the real client paths (Producer, PushConsumer concurrently/orderly/broadcasting,
LitePullConsumer subscribe/assign) against an embedded cluster through a small recording TCP proxy
(one for the name server, one for the broker; route bodies get the broker address swapped for the
broker proxy's, as the capture proxy did). Each frame our client sends is decoded with
``rmq_async.protocol`` and compared, request code by request code, with the Java client's requests
in the matching capture of ``tests/fixtures`` (a copy of shared/wire: 4.9.8, ``v5-*`` 5.3.3; see
WIRE-README.md): header fields (flag,
language, version, serialize type, ``extFields`` present/absent, the key set, the kind of every value
and the fixed values), property strings, and the JSON bodies of HEART_BEAT, LOCK/UNLOCK_BATCH_MQ and the
UNREGISTER_CLIENT set. Values that legitimately vary (opaque, timestamps, offsets, ids, names, bodies)
are normalised; timer values that follow ``Timing.fast()`` are mapped back to the Java defaults.

Where the Java captures have no example (the retry/DLQ send of the inner producer), the expectation
comes from the Java source (``DefaultMQProducerImpl.sendKernelImpl``, rocketmq-all-4.9.8).
Deliberate, documented differences are asserted as documented, with the reason next to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import struct
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.wire import Frame, frames

from rmq_async import ClientConfig, ConsumeResult, Message, OrderlyResult, Producer, PushConsumer, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import MQ_VERSION_V4_9_8, SerializeType
from rmq_async.protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, decode_frame
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.properties import parse_properties

from .rawclient import RawClient

# -- the Java captures ---------------------------------------------------------------------------


def _ext(f: Frame) -> dict[str, str]:
    return dict(f.header.get("extFields") or {})


def java_requests(files: Iterable[str], code: int) -> list[Frame]:
    """The Java client's requests (and oneways) of ``code`` in ``files``."""
    return [
        f
        for file in files
        for f in frames(file)
        if f.dir == "c2s" and f.kind in ("request", "oneway") and f.code == code
    ]


# -- the recording proxy ---------------------------------------------------------------------------


@dataclass
class Rec:
    """One frame our client sent (``c2s``) or received (``s2c``), decoded."""

    scen: str
    conn: str
    peer: str
    dir: str
    cmd: RemotingCommand
    seq: int
    raw: bytes  # the whole frame as it went over the socket

    @property
    def is_request(self) -> bool:
        return not self.cmd.flag & FLAG_RESPONSE


class Proxy:
    """A TCP relay that decodes and logs every frame; in ``s2c`` bodies it replaces ``rewrite`` keys
    by their values (the broker address in route data), fixing the frame length."""

    def __init__(
        self, scen: str, peer: str, target: str, log: list[Rec], rewrite: dict[bytes, bytes]
    ) -> None:
        self.scen, self.peer, self.target, self.log, self.rewrite = scen, peer, target, log, rewrite
        self.addr = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._n = 0

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in self._writers:
            with contextlib.suppress(Exception):
                await w.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self._writers.append(cw)
        self._n += 1
        conn = f"{self.peer}-{self._n}"
        host, _, port = self.target.rpartition(":")
        try:
            sr, sw = await asyncio.open_connection(host, int(port))
        except OSError:
            cw.close()
            return
        self._writers.append(sw)
        up = asyncio.ensure_future(self._pump(cr, sw, conn, "c2s"))
        down = asyncio.ensure_future(self._pump(sr, cw, conn, "s2c"))
        self._tasks.update((up, down))
        await asyncio.gather(up, down, return_exceptions=True)

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, conn: str, d: str) -> None:
        try:
            while True:
                prefix = await r.readexactly(4)
                (n,) = struct.unpack(">i", prefix)
                raw = prefix + await r.readexactly(n)
                cmd = decode_frame(raw)
                self.log.append(Rec(self.scen, conn, self.peer, d, cmd, len(self.log), raw))
                if d == "s2c" and self.rewrite and cmd.body:
                    body = cmd.body
                    for a, b in self.rewrite.items():
                        body = body.replace(a, b)
                    if body != cmd.body:
                        header_len = struct.unpack(">I", raw[4:8])[0] & 0xFFFFFF
                        raw = struct.pack(">i", 4 + header_len + len(body)) + raw[4 : 8 + header_len] + body
                w.write(raw)
                await w.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            w.close()


# -- scenarios -----------------------------------------------------------------------------------

TIMING = Timing.fast()


@dataclass
class Scenario:
    name: str
    frames: list[Rec] = field(default_factory=list)
    #: our values of timer fields -> the Java default they stand for
    timer_ms: dict[str, str] = field(default_factory=dict)

    def sent(self, code: int | None = None) -> list[Rec]:
        return [
            r for r in self.frames if r.dir == "c2s" and r.is_request and (code is None or r.cmd.code == code)
        ]


def _cc(ns: str, instance: str, **kw: Any) -> ClientConfig:
    return ClientConfig(namesrv_addr=ns, client_ip="127.0.0.1", instance_name=instance, timing=TIMING, **kw)


async def _proxied(scen: Scenario, cluster: EmbeddedCluster, proxies: list[Proxy]) -> str:
    """Proxies for ``scen`` (name server + broker); returns the name server address to give clients."""
    baddr = cluster.brokers[0].addr
    bp = await Proxy(scen.name, "broker", baddr, scen.frames, {}).start()
    np_ = await Proxy(
        scen.name, "namesrv", cluster.namesrv_addr, scen.frames, {baddr.encode(): bp.addr.encode()}
    ).start()
    proxies += [bp, np_]
    return np_.addr


async def _preload(ns: str) -> None:
    async with Producer("conf_pre_pg", client_config=_cc(ns, "pre")) as p:
        for i in range(8):
            await p.send(Message("ConfPush", f"wire-ConfPush-{i}".encode(), tags="TagA", keys=f"k-{i}"))
            await p.send(
                Message("ConfOrder", f"wire-ConfOrder-{i}".encode(), keys=f"k-{i}"),
                queue=MessageQueue("ConfOrder", "broker-a", i % 4),
            )
            await p.send(
                Message(
                    "ConfTags",
                    f"wire-ConfTags-{i}".encode(),
                    tags=("TagA", "TagB", "TagC")[i % 3],
                    keys=f"k-{i}",
                )
            )
            await p.send(
                Message("ConfLite", f"wire-ConfLite-{i}".encode(), keys=f"k-{i}"),
                queue=MessageQueue("ConfLite", "broker-a", i % 2),
            )


async def _send(scen: Scenario, ns: str) -> None:
    """send.jsonl / compressed-unicode.jsonl: sync sends to a new topic, compressed + UTF-8, oneway, batch."""
    async with Producer("conf_send_pg", client_config=_cc(ns, "send")) as p:
        for i in range(4):
            await p.send(
                Message(
                    "ConfSend",
                    f"wire-ConfSend-{i}".encode(),
                    tags="TagA" if i % 2 == 0 else "TagB",
                    keys=f"k-{i}",
                    properties={"userProp": "v0"} if i == 0 else None,
                    delay_level=1 if i == 1 else 0,
                )
            )
        big = (b"wire-ConfSend-0 " * 700)[:10240]
        await p.send(
            Message("ConfSend", big, tags="标签中文", keys=["k-2", "k-2b"], properties={"city": "上海"})
        )
        await p.send_oneway(Message("ConfSend", b"wire-oneway", tags="TagA", keys="k-o"))
        await p.send_batch(
            [Message("ConfSend", f"wire-batch-{i}".encode(), keys=f"k-b{i}") for i in range(3)]
        )
        await asyncio.sleep(TIMING.heartbeat_interval + 0.3)  # one periodic producer heartbeat


async def _send_binary(scen: Scenario, ns: str) -> None:
    """binary-send.jsonl: the same with ROCKETMQ binary headers."""
    async with Producer("conf_bin_pg", client_config=_cc(ns, "bin-p", serialize_type="ROCKETMQ")) as p:
        for i in range(2):
            await p.send(Message("ConfBin", f"wire-ConfBin-{i}".encode(), tags="TagA", keys=f"k-{i}"))
        await p.send_oneway(Message("ConfBin", b"wire-oneway", tags="TagA", keys="k-o"))
        await p.send_batch([Message("ConfBin", f"wire-batch-{i}".encode(), keys=f"k-b{i}") for i in range(3)])


async def _push(scen: Scenario, ns: str, broker_addr: str) -> None:
    """push-concurrently / retry-sendback: a failing handler (send-back with delay 1 and 0), a second
    member that joins and leaves, and the broker forwarding admin calls (307, 221, 309) to us."""
    seen: dict[str, int] = defaultdict(int)
    offset_ids: list[str] = []

    async def handler(msgs: list[Any], ctx: Any) -> ConsumeResult:
        for m in msgs:
            seen[m.keys] += 1
            offset_ids.append(m.offset_msg_id)
            if m.keys in ("k-0", "k-2") and seen[m.keys] == 1:
                ctx.delay_level = 1 if m.keys == "k-0" else 0
                return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    def consumer(instance: str) -> PushConsumer:
        return PushConsumer(
            "conf_push_cg", handler=handler, subscriptions={"ConfPush": "*"}, client_config=_cc(ns, instance),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )  # fmt: skip

    scen.timer_ms = {"suspendTimeoutMillis": str(int(TIMING.suspend_timeout * 1000))}
    async with consumer("push-1"):
        await asyncio.sleep(1.5)
        async with consumer("push-2"):
            await asyncio.sleep(1.5)
        await asyncio.sleep(0.5)
        async with RawClient(broker_addr) as admin:  # mqadmin's side, straight to the broker
            await admin.request(
                307,
                {"consumerGroup": "conf_push_cg", "clientId": "127.0.0.1@push-1", "jstackEnable": "false"},
            )
            await admin.request(223, {"topic": "ConfPush", "group": "conf_push_cg"}, wait=8)
            if offset_ids:
                await admin.request(
                    309,
                    {
                        "consumerGroup": "conf_push_cg",
                        "clientId": "127.0.0.1@push-1",
                        "msgId": offset_ids[-1],
                    },
                )
        await asyncio.sleep(0.3)


async def _push5(scen: Scenario, ns: str, cluster: EmbeddedCluster) -> None:
    """A 5.3.3-flavoured broker that refuses CONSUMER_SEND_MSG_BACK: the concurrently path falls back to a
    send to %RETRY% through the inner producer (DefaultMQPushConsumerImpl.sendMessageBack's catch)."""
    cluster.brokers[0].faults.refuse(36, 1, "refused by the test")
    seen: dict[str, int] = defaultdict(int)

    async def handler(msgs: list[Any], ctx: Any) -> ConsumeResult:
        for m in msgs:
            seen[m.keys] += 1
            if m.keys == "k-1" and seen[m.keys] == 1:
                return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    scen.timer_ms = {"suspendTimeoutMillis": str(int(TIMING.suspend_timeout * 1000))}
    async with PushConsumer(
        "conf_push5_cg", handler=handler, subscriptions={"ConfPush": "*"}, client_config=_cc(ns, "push5-1"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ):  # fmt: skip
        await asyncio.sleep(2.5)


async def _orderly(scen: Scenario, ns: str) -> None:
    """orderly-lock / orderly-rebalance: locks, a joining member (oneway unlock of dropped queues), a
    suspended message past max_reconsume_times=0 (sent to %RETRY% -> DLQ by the inner producer), sync
    unlock at shutdown."""
    seen: dict[str, int] = defaultdict(int)

    async def handler(msgs: list[Any], ctx: Any) -> OrderlyResult:
        k = msgs[0].keys
        seen[k] += 1
        if k == "k-1" and seen[k] == 1:
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyResult.SUCCESS

    def consumer(instance: str) -> PushConsumer:
        return PushConsumer(
            "conf_order_cg",
            handler=handler,
            orderly=True,
            subscriptions={"ConfOrder": "*"},
            client_config=_cc(ns, instance),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            max_reconsume_times=0,
        )

    scen.timer_ms = {"suspendTimeoutMillis": str(int(TIMING.suspend_timeout * 1000))}
    async with consumer("order-1"):
        await asyncio.sleep(1.5)
        async with consumer("order-2"):
            await asyncio.sleep(2.0)


async def _broadcast(scen: Scenario, ns: str, offset_dir: Path) -> None:
    async def ok(msgs: list[Any], ctx: Any) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    scen.timer_ms = {"suspendTimeoutMillis": str(int(TIMING.suspend_timeout * 1000))}
    async with PushConsumer(
        "conf_bcast_cg",
        handler=ok,
        subscriptions={"ConfPush": "*"},
        client_config=_cc(ns, "bc-1"),
        message_model="BROADCASTING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        offset_store_dir=str(offset_dir),
    ):
        await asyncio.sleep(2.0)


async def _tags(scen: Scenario, ns: str) -> None:
    async def ok(msgs: list[Any], ctx: Any) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    scen.timer_ms = {"suspendTimeoutMillis": str(int(TIMING.suspend_timeout * 1000))}
    async with PushConsumer(
        "conf_tags_cg",
        handler=ok,
        subscriptions={"ConfTags": "TagA || TagC"},
        client_config=_cc(ns, "tags-1"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ):
        await asyncio.sleep(2.0)


async def _lite(scen: Scenario, ns: str) -> None:
    """lite-pull.jsonl #1: subscribe mode with auto commit (configured FIRST_OFFSET, as a user would)."""
    async with LitePullConsumer(
        "conf_lite_cg", client_config=_cc(ns, "lite-1"), consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as lc:
        scen.timer_ms = {"suspendTimeoutMillis": str(int(lc.suspend_timeout * 1000))}
        await lc.subscribe("ConfLite", "*")
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            await lc.poll(timeout=0.3)


async def _lite_assign(scen: Scenario, ns: str) -> None:
    """lite-pull.jsonl #2: assign mode, seek (31, 30), commit."""
    async with LitePullConsumer(
        "conf_lite_assign_cg", client_config=_cc(ns, "lite-2"), consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as lc:
        scen.timer_ms = {"suspendTimeoutMillis": str(int(lc.suspend_timeout * 1000))}
        mq = MessageQueue("ConfLite", "broker-a", 0)
        await lc.assign([mq])
        await lc.poll(timeout=1.0)
        await lc.seek(mq, 1)
        await lc.poll(timeout=1.0)
        await lc.commit()
        await asyncio.sleep(0.6)


async def _record_all(offset_dir: Path) -> dict[str, Scenario]:
    scens = {
        n: Scenario(n)
        for n in ("send", "send_bin", "push", "push5", "orderly", "bcast", "tags", "lite", "lite_assign")
    }
    proxies: list[Proxy] = []
    async with (
        EmbeddedCluster(brokers=1, queues=4, timing=TIMING) as c4,
        EmbeddedCluster(brokers=1, queues=4, timing=TIMING, flavour=5) as c5,
    ):
        await asyncio.gather(_preload(c4.namesrv_addr), _preload(c5.namesrv_addr))
        ns = {name: await _proxied(s, c5 if name == "push5" else c4, proxies) for name, s in scens.items()}
        try:
            await asyncio.wait_for(
                asyncio.gather(
                    _send(scens["send"], ns["send"]),
                    _send_binary(scens["send_bin"], ns["send_bin"]),
                    _push(scens["push"], ns["push"], c4.brokers[0].addr),
                    _push5(scens["push5"], ns["push5"], c5),
                    _orderly(scens["orderly"], ns["orderly"]),
                    _broadcast(scens["bcast"], ns["bcast"], offset_dir),
                    _tags(scens["tags"], ns["tags"]),
                    _lite(scens["lite"], ns["lite"]),
                    _lite_assign(scens["lite_assign"], ns["lite_assign"]),
                ),
                40,
            )
        finally:
            for p in proxies:
                await p.close()
    return scens


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scenario]:
    # its own event loop: the scenarios run once, concurrently, for every test of the module
    return asyncio.run(_record_all(tmp_path_factory.mktemp("bcast-offsets")))


# -- what each scenario is compared with -----------------------------------------------------------

REFS: dict[str, list[str]] = {
    "send": ["send.jsonl", "compressed-unicode.jsonl", "route-and-heartbeat.jsonl"],
    "send_bin": ["binary-send.jsonl"],
    "push": ["push-concurrently.jsonl", "retry-sendback.jsonl"],
    # we present ourselves as a 4.9.8 client (version 409) to 5.x brokers too, so the 4.9.8 Java
    # client's frames are the reference there as well
    "push5": ["push-concurrently.jsonl", "retry-sendback.jsonl"],
    "orderly": ["orderly-lock.jsonl", "orderly-rebalance.jsonl"],
    "bcast": ["broadcast.jsonl"],
    "tags": ["tags-filter.jsonl"],
    "lite": ["lite-pull.jsonl"],
    "lite_assign": ["lite-pull.jsonl"],
}
#: the Java instance whose heartbeat / unregister frames stand for the scenario's client
JAVA_CLIENT = {
    "send": "@routehb-p",
    "send_bin": "@send",
    "push": "@push-1",
    "push5": "@push-1",
    "orderly": "@",
    "bcast": "@bc-1",
    "tags": "@tags-1",
    "lite": "@lite-1@STREAM",
    "lite_assign": "@lite-2@STREAM",
}
#: the Java default each scenario's timer fields stand for (Timing.fast() changes ours)
JAVA_TIMER = {"lite": "20000", "lite_assign": "20000"}
#: request codes we send that the scenario's Java capture has no example of, and why they are right
EXTRA_CODES: dict[str, dict[int, str]] = {
    # the Java producer heartbeats too (route-and-heartbeat.jsonl), every 30 s: binary-send.jsonl was shorter
    "send_bin": {34: "periodic producer heartbeat"},
    # CHANGELOG "A warning when members of one group subscribe differently": each new member's
    # subscriptions are read once with GET_CONSUMER_RUNNING_INFO forwarded by the broker (deliberate)
    "push": {307: "subscription check of a new member (documented)"},
    "orderly": {
        307: "subscription check of a new member (documented)",
        310: "orderly send to %RETRY% past maxReconsumeTimes (ConsumeMessageOrderlyService.sendMessageBack)",
    },
    "push5": {310: "send-back fallback (DefaultMQPushConsumerImpl.sendMessageBack, catch block)"},
}

#: keys whose VALUE must be one the Java client sends for the same code (the rest: kind of value only)
FIXED: dict[int, set[str]] = {
    11: {"maxMsgNums", "sysFlag", "suspendTimeoutMillis", "expressionType", "subscription", "bname"},
    14: {"bname"},
    15: {"bname"},
    30: {"bname"},
    31: {"bname"},
    36: {"delayLevel", "maxReconsumeTimes", "unitMode", "bname"},
    310: {"c", "d", "f", "h", "j", "k", "m", "n"},
    320: {"c", "d", "f", "h", "i", "j", "k", "m", "n"},
}
FIXED_ALWAYS = {"ReqT"}
#: lite pull: the Java lite consumer always pulls with subVersion 0 (tag type)
FIXED_EXTRA = {"lite": {11: {"subVersion"}}, "lite_assign": {11: {"subVersion"}}}

_INT = re.compile(r"-?[0-9]+")


def value_kind(v: str) -> str:
    if v in ("true", "false"):
        return "bool"
    if _INT.fullmatch(v):
        return "int"
    return "text"


def _kind(flag: int) -> str:
    return "oneway" if flag & FLAG_ONEWAY else "request"


def _cases() -> list[tuple[str, int]]:
    out = []
    codes = {
        "send": (105, 310, 320, 34, 35),
        "send_bin": (105, 310, 320, 35),
        "push": (105, 34, 38, 14, 11, 15, 36, 35),
        "push5": (105, 34, 38, 14, 11, 15, 35),
        "orderly": (105, 34, 38, 14, 11, 15, 41, 42, 35),
        "bcast": (105, 34, 11, 35),
        "tags": (105, 34, 38, 14, 11, 15, 35),
        "lite": (105, 34, 38, 14, 11, 15, 35),
        "lite_assign": (105, 34, 14, 11, 30, 31, 15, 35),
    }
    for scen, cs in codes.items():
        out += [(scen, c) for c in cs]
    return out


CASES = _cases()
_IDS = [f"{s}-{c}" for s, c in CASES]


def _ours(rec: dict[str, Scenario], scen: str, code: int) -> list[Rec]:
    got = rec[scen].sent(code)
    assert got, f"scenario {scen} sent no request {code}: the scenario no longer exercises it"
    return got


# -- header shape: flag, language, version, serialize type, peer, extFields ------------------------


@pytest.mark.parametrize(("scen", "code"), CASES, ids=_IDS)
def test_header_matches_java(rec: dict[str, Scenario], scen: str, code: int) -> None:
    java = java_requests(REFS[scen], code)
    assert java, f"no Java {code} in {REFS[scen]}"
    ours = _ours(rec, scen, code)
    j_serialize = {f.serialize for f in java}
    j_peer = {f.peer for f in java}
    j_present = {"extFields" in f.header for f in java}
    j_keysets = {frozenset(_ext(f)) for f in java}
    j_kinds: dict[str, set[str]] = defaultdict(set)
    j_values: dict[str, set[str]] = defaultdict(set)
    for f in java:
        for k, v in _ext(f).items():
            j_kinds[k].add(value_kind(v))
            j_values[k].add(v)
    fixed = FIXED.get(code, set()) | FIXED_ALWAYS | FIXED_EXTRA.get(scen, {}).get(code, set())
    timer = rec[scen].timer_ms
    problems: list[str] = []
    for r in ours:
        c = r.cmd
        where = f"{scen} {code} {_kind(c.flag)} (our frame #{r.seq})"
        # language: deliberately "PYTHON" (ClientConfig.language default, PROTOCOL.md); the broker only
        # stores and displays it (ClientChannelInfo, consumerConnection). The Java client sends "JAVA".
        if c.language != "PYTHON":
            problems.append(f"{where}: language {c.language!r}, documented default is 'PYTHON'")
        if c.version != MQ_VERSION_V4_9_8:  # the 4.9.8 client's MQVersion ordinal (409), as Java's
            problems.append(f"{where}: version {c.version}, Java 4.9.8 sends 409")
        if c.serialize_type.name not in j_serialize:
            problems.append(f"{where}: serialize {c.serialize_type.name}, Java {sorted(j_serialize)}")
        if r.peer not in j_peer:
            problems.append(f"{where}: sent to the {r.peer}, Java sends it to the {sorted(j_peer)}")
        if c.remark is not None:
            problems.append(f"{where}: remark {c.remark!r}; Java requests carry none")
        if c.ext_fields_present not in j_present:
            problems.append(f"{where}: extFields present={c.ext_fields_present}, Java {sorted(j_present)}")
        keys = frozenset(c.ext_fields)
        if c.ext_fields_present and keys not in j_keysets:
            problems.append(
                f"{where}: extFields keys {sorted(keys)}; Java sends {[sorted(k) for k in j_keysets]}"
            )
        for k, v in c.ext_fields.items():
            if k in j_kinds and value_kind(v) not in j_kinds[k]:
                problems.append(f"{where}: {k}={v!r} is a {value_kind(v)}, Java sends {sorted(j_kinds[k])}")
            if k in fixed and k in j_values:
                norm = JAVA_TIMER.get(scen, "15000") if k in timer and v == timer[k] else v
                if norm not in j_values[k]:
                    problems.append(f"{where}: {k}={v!r}, Java sends {sorted(j_values[k])}")
    assert not problems, "\n".join(dict.fromkeys(problems))


@pytest.mark.parametrize(("scen", "code"), CASES, ids=_IDS)
def test_oneway_or_request_as_java(rec: dict[str, Scenario], scen: str, code: int) -> None:
    java_kinds = {f.kind for f in java_requests(REFS[scen], code)}
    ours = _ours(rec, scen, code)
    our_kinds = {_kind(r.cmd.flag) for r in ours}
    if code == 15:
        # Deliberate (rmq_async/consumer/offset_store.py module doc): the periodic persist is oneway as
        # in Java, but the persist at a queue drop and at shutdown is a sync request, "so a graceful
        # shutdown really leaves the offsets on the broker". The broker answers it (code 0, {}).
        assert "oneway" in our_kinds, f"{scen}: the periodic offset commit must be oneway, as Java's"
        assert our_kinds <= {"oneway", "request"}
        return
    assert our_kinds <= java_kinds, f"{scen} {code}: we send {sorted(our_kinds)}, Java {sorted(java_kinds)}"


def test_no_request_codes_java_does_not_send(rec: dict[str, Scenario]) -> None:
    problems = []
    for name, scen in rec.items():
        java = {
            f.code for file in REFS[name] for f in frames(file) if f.dir == "c2s" and f.kind != "response"
        }
        extra = EXTRA_CODES.get(name, {})
        for code in sorted({r.cmd.code for r in scen.sent()} - java - set(extra)):
            problems.append(f"{name}: we send request code {code}; the Java client does not ({REFS[name]})")
    assert not problems, "\n".join(problems)


def test_we_present_as_a_4_9_8_client_to_4x_and_5x_brokers(rec: dict[str, Scenario]) -> None:
    """Header version 409 everywhere, so none of the fields only a 5.x client sends may appear (a 5.x
    broker treats us as the 4.9.8 Java client, which it serves unchanged)."""
    v5_only_ext = {"maxMsgBytes", "setZeroIfNotFound", "committed", "boundaryType", "topicRequestType"}
    v5_only_body = {"heartbeatFingerprint", "withoutSub", "onlyThisBroker"}
    problems = []
    for name, scen in rec.items():
        for r in scen.sent():
            c = r.cmd
            if c.version != MQ_VERSION_V4_9_8:
                problems.append(f"{name} {c.code}: version {c.version}")
            if set(c.ext_fields) & v5_only_ext:
                problems.append(f"{name} {c.code}: 5.x-only keys {sorted(set(c.ext_fields) & v5_only_ext)}")
            if c.code in (34, 41, 42) and not c.ext_fields and c.ext_fields_present:
                problems.append(f"{name} {c.code}: 'extFields':{{}} is the 5.x client's form")
            if c.code in (34, 41, 42) and set(json.loads(c.body)) & v5_only_body:
                problems.append(f"{name} {c.code}: 5.x-only body keys")
            if c.code in (310, 320) and c.ext_fields.get("i", "").endswith("\x02"):
                problems.append(f"{name} {c.code}: trailing \\x02 in properties is the 5.x form")
    assert not problems, "\n".join(problems)


# -- SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE properties ------------------------------------------------

_SYSTEM_PROPS = {"KEYS", "UNIQ_KEY", "WAIT", "TAGS", "DELAY"}


def _uniq_ok(u: str) -> bool:
    return len(u) in (32, 56) and all(ch in "0123456789ABCDEF" for ch in u)


@pytest.mark.parametrize("scen", ["send", "send_bin"])
def test_send_properties_match_java(rec: dict[str, Scenario], scen: str) -> None:
    java = [f for f in java_requests(REFS[scen], 310)]
    j_sets = {frozenset(parse_properties(_ext(f)["i"])) & _SYSTEM_PROPS for f in java}
    problems = []
    for r in _ours(rec, scen, 310):
        i = r.cmd.ext_fields["i"]
        props = parse_properties(i)
        if i.endswith("\x02") or "\x02\x02" in i:
            problems.append(f"{scen}: properties {i!r}: 4.9.8 joins items with \\x02 and ends without one")
        if frozenset(props) & _SYSTEM_PROPS not in j_sets:
            problems.append(f"{scen}: system properties {sorted(props)}; Java {[sorted(s) for s in j_sets]}")
        if props.get("WAIT") != "true":
            problems.append(f"{scen}: WAIT={props.get('WAIT')!r}, Java 'true'")
        if not _uniq_ok(props.get("UNIQ_KEY", "")):
            problems.append(
                f"{scen}: UNIQ_KEY {props.get('UNIQ_KEY')!r} is not 16/28 bytes of upper-case hex"
            )
        if r.cmd.ext_fields["f"] == "769" and props.get("TAGS") == "标签中文":
            assert props.get("city") == "上海" and props.get("KEYS") == "k-2 k-2b"
    for r in _ours(rec, scen, 320):
        if r.cmd.ext_fields["i"] != "WAIT\x01true":  # 4.9.8: no batch-level UNIQ_KEY
            problems.append(f"{scen}: 320 properties {r.cmd.ext_fields['i']!r}, Java 'WAIT\\x01true'")
    assert not problems, "\n".join(problems)


def test_compressed_send_sysflag_and_utf8_header(rec: dict[str, Scenario]) -> None:
    """compressed-unicode.jsonl: a 10 KiB body goes zlib-compressed with f = 769 (COMPRESSED | ZLIB << 8)
    and the non-ASCII tag travels as raw UTF-8 inside the JSON header."""
    ours = [
        r
        for r in _ours(rec, "send", 310)
        if parse_properties(r.cmd.ext_fields["i"]).get("TAGS") == "标签中文"
    ]
    assert len(ours) == 1
    c = ours[0].cmd
    assert c.ext_fields["f"] == "769"
    assert c.body[:2] == b"\x78\x5e"  # zlib level 5, as the Java producer
    header = ours[0].raw[8 : 8 + (struct.unpack(">I", ours[0].raw[4:8])[0] & 0xFFFFFF)]
    assert "标签中文".encode() in header and "上海".encode() in header
    assert not re.search(rb"\\u(?!00[01])[0-9a-fA-F]{4}", header)  # only \u0001 / \u0002 are escaped


@pytest.mark.parametrize("scen", ["orderly", "push5"])
def test_retry_send_of_the_inner_producer(rec: dict[str, Scenario], scen: str) -> None:
    """A send to %RETRY%<group> (orderly past maxReconsumeTimes; concurrently when 36 fails). The Java
    producer copies RECONSUME_TIME / MAX_RECONSUME_TIMES from the properties into the header fields j
    and l (DefaultMQProducerImpl.sendKernelImpl, 4.9.8 lines 774-790, 5.3.3 lines 1000-1016). It
    serialises the properties string 'i' BEFORE it clears them from the message, so the frame of the
    first attempt still carries both in 'i' (only a retried attempt of the same Message object would
    lack them, and then also send j=0: a Java quirk we do not copy)."""
    sends = [r for r in rec[scen].sent(310) if r.cmd.ext_fields.get("b", "").startswith("%RETRY%")]
    assert sends, f"{scen}: no send to the retry topic recorded"
    problems = []
    for r in sends:
        e = r.cmd.ext_fields
        props = parse_properties(e["i"])
        if e.get("a") != "CLIENT_INNER_PRODUCER":
            problems.append(f"{scen}: producer group {e.get('a')!r}, Java CLIENT_INNER_PRODUCER")
        if value_kind(e.get("j", "")) != "int" or value_kind(e.get("l", "")) != "int":
            problems.append(f"{scen}: reconsumeTimes j={e.get('j')!r} / maxReconsumeTimes l={e.get('l')!r}")
        for kept, key in (("RECONSUME_TIME", "j"), ("MAX_RECONSUME_TIMES", "l")):
            if props.get(kept) != e.get(key):
                problems.append(
                    f"{scen}: property {kept}={props.get(kept)!r} in 'i', header {key}={e.get(key)!r}: "
                    "Java's first attempt carries both, equal"
                )
        if "RETRY_TOPIC" not in props or "ORIGIN_MESSAGE_ID" not in props or "DELAY" not in props:
            problems.append(f"{scen}: retry properties missing in {sorted(props)}")
    assert not problems, "\n".join(problems)


# -- HEART_BEAT body ------------------------------------------------------------------------------


def _norm_topic(topic: str) -> str:
    return "%RETRY%<group>" if topic.startswith("%RETRY%") else "<topic>"


def _norm_heartbeat(body: dict[str, Any]) -> dict[str, Any]:
    """The heartbeat with names, ids and versions replaced by their shape."""
    out: dict[str, Any] = {"keys": sorted(body)}
    out["clientID"] = "@STREAM" if str(body.get("clientID", "")).endswith("@STREAM") else "plain"
    out["producers"] = sorted(
        g["groupName"] if g["groupName"] == "CLIENT_INNER_PRODUCER" else "<group>"
        for g in body["producerDataSet"]
    )
    consumers = []
    for cd in body["consumerDataSet"]:
        subs = []
        for sd in cd["subscriptionDataSet"]:
            subs.append(
                {
                    "keys": sorted(sd),
                    "topic": _norm_topic(sd["topic"]),
                    "subString": sd["subString"],
                    "tagsSet": sorted(sd["tagsSet"]),
                    "codeSet": sorted(sd["codeSet"]),
                    "classFilterMode": sd["classFilterMode"],
                    "expressionType": sd["expressionType"],
                    "subVersion": type(sd["subVersion"]).__name__,
                }
            )
        consumers.append(
            {
                "keys": sorted(cd),
                **{k: cd[k] for k in ("consumeType", "messageModel", "consumeFromWhere", "unitMode")},
                "groupName": type(cd["groupName"]).__name__,
                "subscriptions": sorted(subs, key=lambda s: (s["topic"], s["subString"])),
            }
        )
    out["consumers"] = consumers
    return out


HB_SCENARIOS = ["send", "push", "push5", "orderly", "bcast", "tags", "lite", "lite_assign"]


def _java_heartbeats(scen: str) -> list[dict[str, Any]]:
    who = JAVA_CLIENT[scen]
    java = [f.body_json for f in java_requests(REFS[scen], 34) if who in f.body_json["clientID"]]
    assert java, f"no Java heartbeat of {who} in {REFS[scen]}"
    return java


def _shapes(bodies: Iterable[dict[str, Any]], part: str) -> set[str]:
    return {json.dumps(_norm_heartbeat(b)[part], sort_keys=True, ensure_ascii=False) for b in bodies}


@pytest.mark.parametrize("scen", HB_SCENARIOS)
def test_heartbeat_consumer_data_matches_java(rec: dict[str, Scenario], scen: str) -> None:
    """Top-level keys, client id form, consumerDataSet (consumeType, messageModel, consumeFromWhere,
    unitMode) and every subscriptionData field (classFilterMode, expressionType, tagsSet, codeSet,
    subString, subVersion type, the %RETRY% subscription). For a lite pull consumer Java hard-codes
    consumeFromWhere CONSUME_FROM_LAST_OFFSET (DefaultLitePullConsumerImpl.consumeFromWhere, 4.9.8
    line 1096), whatever the user configured; our scenario configures FIRST, as a user would."""
    ours = [json.loads(r.cmd.body) for r in _ours(rec, scen, 34)]
    problems = []
    for part in ("keys", "clientID", "consumers"):
        java = _shapes(_java_heartbeats(scen), part)
        for shape in _shapes(ours, part) - java:
            problems.append(
                f"{scen}: heartbeat {part} = {shape}\n    Java: " + "\n    Java: ".join(sorted(java))
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scen", HB_SCENARIOS)
def test_heartbeat_producer_groups_match_java(rec: dict[str, Scenario], scen: str) -> None:
    """producerDataSet: every Java MQClientInstance registers the CLIENT_INNER_PRODUCER group
    (MQClientInstance constructor line 149, start() line 244), so it is in every heartbeat: producer,
    push and lite pull alike (route-and-heartbeat.jsonl seq 54, lite-pull.jsonl seq 5). The broker keeps
    it in its producer table (ProducerManager; mqadmin producerConnection)."""
    java = _shapes(_java_heartbeats(scen), "producers")
    ours = _shapes((json.loads(r.cmd.body) for r in _ours(rec, scen, 34)), "producers")
    assert ours <= java, f"{scen}: producerDataSet groups {sorted(ours)}, Java {sorted(java)}"


# -- UNREGISTER_CLIENT -----------------------------------------------------------------------------


def _unregs(frames: Iterable[tuple[dict[str, str], str]]) -> dict[str, set[tuple[str, str]]]:
    """client id -> {(producerGroup|consumerGroup, normalised group)} of its 35 requests."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for ext, _ in frames:
        for k in ("producerGroup", "consumerGroup"):
            if k in ext:
                g = ext[k]
                out[ext["clientID"]].add((k, g if g == "CLIENT_INNER_PRODUCER" else "<group>"))
    return out


@pytest.mark.parametrize("scen", HB_SCENARIOS)
def test_unregister_set_matches_java(rec: dict[str, Scenario], scen: str) -> None:
    """At shutdown the Java client unregisters its group AND the CLIENT_INNER_PRODUCER group that every
    MQClientInstance registers (MQClientInstance.shutdown line 848 -> DefaultMQProducerImpl.shutdown
    line 254 -> unregisterProducer; push-concurrently.jsonl seq 96/99). A group never unregistered
    stays in the broker's producer table until the connection closes."""
    who = JAVA_CLIENT[scen]
    java = _unregs((_ext(f), f.file) for f in java_requests(REFS[scen], 35) if who in _ext(f)["clientID"])
    assert java
    j_sets = {frozenset(s) for s in java.values()}
    ours = _unregs((r.cmd.ext_fields, "") for r in _ours(rec, scen, 35))
    problems = [
        f"{scen}: {cid} unregisters {sorted(s)}; Java {[sorted(x) for x in j_sets]}"
        for cid, s in ours.items()
        if frozenset(s) not in j_sets
    ]
    assert not problems, "\n".join(problems)


# -- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ --------------------------------------------------------------


@pytest.mark.parametrize("code", [41, 42])
def test_lock_bodies_match_java(rec: dict[str, Scenario], code: int) -> None:
    java = java_requests(REFS["orderly"], code)
    j_top = {tuple(sorted(f.body_json)) for f in java}
    j_mq = {tuple(sorted(mq)) for f in java for mq in f.body_json["mqSet"]}
    j_types = {(k, type(v).__name__) for f in java for mq in f.body_json["mqSet"] for k, v in mq.items()}
    problems = []
    for r in _ours(rec, "orderly", code):
        b = json.loads(r.cmd.body)
        if tuple(sorted(b)) not in j_top:
            problems.append(f"{code}: body keys {sorted(b)}, Java {sorted(j_top)}")
        if not b["mqSet"]:
            problems.append(f"{code}: an empty mqSet (Java never sends one)")
        for mq in b["mqSet"]:
            if tuple(sorted(mq)) not in j_mq or {(k, type(v).__name__) for k, v in mq.items()} - j_types:
                problems.append(f"{code}: mq {mq}, Java {sorted(j_mq)} {sorted(j_types)}")
        if b["clientId"] not in ("127.0.0.1@order-1", "127.0.0.1@order-2"):
            problems.append(f"{code}: clientId {b['clientId']!r} is not the sender's client id")
    assert not problems, "\n".join(problems)


def test_unlock_kinds_match_java(rec: dict[str, Scenario]) -> None:
    """orderly-rebalance.jsonl: a queue dropped at rebalance is released with a ONEWAY 42 of one mq;
    shutdown uses a sync 42 with every queue, %RETRY% included."""
    ours = _ours(rec, "orderly", 42)
    dropped = [r for r in ours if r.cmd.flag & FLAG_ONEWAY]
    final = [r for r in ours if not r.cmd.flag & FLAG_ONEWAY]
    assert dropped and all(len(json.loads(r.cmd.body)["mqSet"]) == 1 for r in dropped)
    assert final
    assert any(mq["topic"].startswith("%RETRY%") for r in final for mq in json.loads(r.cmd.body)["mqSet"])


# -- answers to the broker's requests (307, 221, 309) ----------------------------------------------


@pytest.mark.parametrize("code", [307, 221, 309])
def test_answers_to_broker_requests(rec: dict[str, Scenario], code: int) -> None:
    """admin-running-info.jsonl seq 66, admin-tools.jsonl seq 57 / 124: the client answers on the same
    connection with flag 1, the broker's opaque, its serialize type, code 0 and no extFields."""
    frames = rec["push"].frames
    reqs = {
        (r.conn, r.cmd.opaque): r for r in frames if r.dir == "s2c" and r.is_request and r.cmd.code == code
    }
    assert reqs, f"the broker forwarded no {code}"
    answers = [r for r in frames if r.dir == "c2s" and not r.is_request and (r.conn, r.cmd.opaque) in reqs]
    assert len(answers) == len(reqs)
    for a in answers:
        c = a.cmd
        assert c.flag == FLAG_RESPONSE
        assert c.code == 0
        assert c.serialize_type == reqs[(a.conn, c.opaque)].cmd.serialize_type
        assert not c.ext_fields_present  # Java: no extFields key
        assert c.language == "PYTHON"  # deliberate, as for requests
        assert c.body
        # Java leaves the default remark of createResponseCommand ("not set any response code") on
        # these answers; nothing reads a success answer's remark (the admin tool checks the code).
    if code == 309:
        body = json.loads(answers[0].cmd.body)
        assert sorted(body) == ["autoCommit", "consumeResult", "order", "spentTimeMills"]
        assert body["consumeResult"] == "CR_SUCCESS"


# -- ROCKETMQ binary headers --------------------------------------------------------------------


def test_binary_headers_throughout(rec: dict[str, Scenario]) -> None:
    """binary-send.jsonl: with -Drocketmq.serialize.type=ROCKETMQ every request is binary."""
    sent = rec["send_bin"].sent()
    assert sent
    assert {r.cmd.serialize_type for r in sent} == {SerializeType.ROCKETMQ}
