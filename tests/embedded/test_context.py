"""BrokerContext: settings, the shared put path, topic/group auto-creation, the handler tables."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import anyio
import pytest

from rmq_async.config import Timing, parse_delay_levels
from rmq_async.embedded import admin, clients, delay, pull, send
from rmq_async.embedded.context import (
    BrokerContext,
    BrokerSettings,
    Wakeup,
    open_store,
    recovery_tags_code,
)
from rmq_async.embedded.groups import ConsumerManager, LockManager, ProducerManager
from rmq_async.embedded.holds import HeldPull, HoldService
from rmq_async.embedded.jcompat import PROP_SEP, java_hash, props_decode
from rmq_async.embedded.server import Connection
from rmq_async.embedded.state import SCHEDULE_TOPIC, BrokerState
from rmq_async.protocol.codes import MQ_VERSION_V4_9_8, MQ_VERSION_V5_3_3, RequestCode
from rmq_async.protocol.command import RemotingCommand

HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x01"


def settings(flavour: int = 4, data_dir: Path | None = None, levels: str = "1s 5s 10s") -> BrokerSettings:
    return BrokerSettings(
        "broker-a",
        "DefaultCluster",
        "127.0.0.1:9876",
        Timing.fast(),
        flavour,
        4,
        True,
        data_dir,
        parse_delay_levels(levels),
    )


class Calls:
    def __init__(self) -> None:
        self.register_soon = 0
        self.spawned: list[tuple[object, ...]] = []

    def spawn(self, fn: Callable[..., Awaitable[object]], /, *args: object) -> None:
        self.spawned.append((fn, *args))

    async def register(self) -> None:
        pass

    def soon(self) -> None:
        self.register_soon += 1


def make_ctx(s: BrokerSettings | None = None) -> tuple[BrokerContext, Calls]:
    s = s or settings()
    calls = Calls()
    store, _ = open_store(s, 10911)
    state = BrokerState(
        s.name, s.cluster, default_queues=s.queues, auto_create=True, schedule_queues=18, data_dir=s.data_dir
    )
    ctx = BrokerContext(
        s,
        state,
        store,
        ConsumerManager(lambda conns, group: None),
        ProducerManager(),
        LockManager(3.0),
        HoldService(),
        spawn=calls.spawn,
        register=calls.register,
        register_soon=calls.soon,
    )
    return ctx, calls


def _found(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.make_response(0)


def test_settings_version_and_delays() -> None:
    s4, s5 = settings(4, levels="500ms 2s"), settings(5)
    assert s4.version == MQ_VERSION_V4_9_8 and s5.version == MQ_VERSION_V5_3_3
    assert s4.delay_ms == (500, 2000)
    with pytest.raises(AttributeError):
        s4.flavour = 5  # type: ignore[misc]


async def test_wakeup_keeps_an_early_call_and_is_used_up() -> None:
    w = Wakeup()
    w.set()  # nobody waits yet: kept
    with anyio.fail_after(1):
        await w.wait(10)
    start = time.monotonic()
    await w.wait(0.05)  # used up: this one times out
    assert time.monotonic() - start >= 0.04


def test_put_plain_message_wakes_matching_held_pull() -> None:
    ctx, _ = make_ctx()
    answered: list[int] = []

    class Conn:
        closed = False

        def send(self, cmd: RemotingCommand, parts: object = ()) -> None:
            answered.append(cmd.code)

    conn = cast(Connection, Conn())
    held = HeldPull(conn, RemotingCommand.request(11, {}), 0, 30_000, frozenset({java_hash("a")}), _found)
    ctx.holds.hold("T", 0, held)
    props = {"TAGS": "b"}
    res = ctx.put("T", 0, b"x", 0, props, "TAGS\x01b", 0, 1, HOST)
    assert (res.queue_offset, answered) == (0, [])  # tag b does not match the parked filter
    ctx.put("T", 0, b"y", 0, {"TAGS": "a"}, "TAGS\x01a", 0, 1, HOST)
    assert answered == [0] and ctx.holds.table == {}
    assert ctx.store.max_offset("T", 0) == 2
    assert ctx.store.queue("T", 0).tags[1] == java_hash("a")  # type: ignore[union-attr]


async def test_put_delayed_message_goes_to_the_schedule_topic() -> None:
    ctx, _ = make_ctx()
    props = {"DELAY": "9", "KEYS": "k"}
    before = int(time.time() * 1000)
    ctx.put("T", 2, b"x", 0, props, "DELAY\x019\x02KEYS\x01k", 0, 1, HOST)
    assert ctx.store.max_offset("T", 2) == 0
    cq = ctx.store.queue(SCHEDULE_TOPIC, 2)  # level 9 capped at the 3 configured levels
    assert cq is not None and len(cq) == 1
    assert before + 10_000 <= cq.tags[0] <= int(time.time() * 1000) + 10_000  # the delivery time
    stored = ctx.store.lookup(cq.offsets[0])
    assert stored is not None
    assert props_decode(stored.props) == {"DELAY": "9", "KEYS": "k", "REAL_TOPIC": "T", "REAL_QID": "2"}
    with anyio.fail_after(1):
        await ctx.delayed.wait(10)  # the schedule service was called


def test_put_prepared_transaction_is_not_delayed() -> None:
    ctx, _ = make_ctx()
    ctx.put("T", 0, b"x", 0, {"DELAY": "1"}, "DELAY\x011", 1 << 2, 1, HOST)  # TRANSACTION_PREPARED_TYPE
    assert ctx.store.max_offset("T", 0) == 1 and ctx.store.queue(SCHEDULE_TOPIC, 0) is None


def test_encode_props_by_flavour() -> None:
    props = {"KEYS": "k", "WAIT": "true", "TAGS": "t"}
    four = make_ctx(settings(4))[0].encode_props(props)
    five = make_ctx(settings(5))[0].encode_props(props)
    assert not four.endswith(PROP_SEP) and five.endswith(PROP_SEP)  # 5.3.3 keeps the trailing separator
    assert props_decode(four) == props_decode(five) == props


def test_topic_and_group_auto_creation() -> None:
    ctx, calls = make_ctx()
    tc = ctx.create_topic_in_back_method("%RETRY%g", 1, 6)
    assert (tc.read, tc.write, tc.perm) == (1, 1, 6) and calls.register_soon == 1
    assert ctx.create_topic_in_back_method("%RETRY%g", 8, 2) is tc and calls.register_soon == 1
    assert ctx.find_group("g") and "g" in ctx.state.groups and ctx.state.dirty


def test_respond_ext_fields() -> None:
    ctx, _ = make_ctx(settings(5))
    cmd = RemotingCommand.request(14, {})
    assert not ctx.respond(cmd, 0).ext_fields_present  # ext None: extFields left out
    assert ctx.respond(cmd, 0, None, {}).ext_fields_present
    r = ctx.respond(cmd, 1, "bad", {"b": "2", "a": "1"}, b"body")
    assert (r.code, r.remark, r.body, r.version, r.opaque) == (
        1,
        "bad",
        b"body",
        MQ_VERSION_V5_3_3,
        cmd.opaque,
    )
    assert set(r.ext_fields) == {"a", "b"}


def test_recovery_tags_code() -> None:
    fn = recovery_tags_code((1000, 5000))
    assert fn("T", "TAGS\x01a", 7) == java_hash("a")
    assert fn("T", "KEYS\x01k", 7) == 0
    assert fn(SCHEDULE_TOPIC, "DELAY\x012\x02REAL_TOPIC\x01T", 7) == 5007
    assert fn(SCHEDULE_TOPIC, "DELAY\x0118", 7) == 5007  # past the last level: the last one


def test_open_store_recovers_from_the_data_dir(tmp_path: Path) -> None:
    s = settings(data_dir=tmp_path)
    store, recovered = open_store(s, 10911)
    assert recovered == 0
    store.put("T", 0, b"x", 0, "TAGS\x01a", java_hash("a"), 0, 1, HOST)
    store.close()
    again, recovered = open_store(s, 10911)
    try:
        assert recovered == 1 and again.queue("T", 0).tags[0] == java_hash("a")  # type: ignore[union-attr]
    finally:
        again.close()


def test_handler_tables_are_disjoint_and_complete() -> None:
    ctx, _ = make_ctx()
    tables = [m.handlers(ctx) for m in (send, pull, delay, clients, admin)]
    codes = [code for t in tables for code in t]
    assert len(codes) == len(set(codes))
    for code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.PULL_MESSAGE,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.HEART_BEAT,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
    ):
        assert code in codes
