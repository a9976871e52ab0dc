"""PushConsumer API surface: rebalance listener, hooks, stats, uvloop, start/stop from other tasks."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import anyio
import pytest
from support.integration import Collector, produce

from rmq_async import (
    ClientError,
    ConfigError,
    ConsumeResult,
    LitePullConsumer,
    MessageQueue,
    PushConsumer,
    Timing,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode


async def test_listener_hooks_and_stats(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 20)
    assigned: set[MessageQueue] = set()
    before: list[int] = []
    after: list[ConsumeResult] = []
    col = Collector()

    async def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        assigned.update(mqs)

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=col,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        on_assigned=on_assigned,
    )
    c.before_hooks.append(lambda msgs, ctx: before.append(len(msgs)))
    c.after_hooks.append(lambda msgs, ctx, result: after.append(result))
    async with c:
        await col.wait_unique(20)
        snap = c.stats.snapshot()
    assert {mq.queue_id for mq in assigned if mq.topic == topic} == {0, 1, 2, 3}
    assert sum(before) == 20 and after.count(ConsumeResult.SUCCESS) == 20
    assert snap[topic]["consumedOK"] == 20 and snap[topic]["pulled"] >= 20


async def test_start_and_stop_from_different_tasks(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 5)
    col = Collector()
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=col,
        subscriptions={topic: "*"},
        timing=timing,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    await asyncio.create_task(c.start())  # e.g. an ASGI lifespan starting it
    await col.wait_unique(5)
    await asyncio.create_task(c.stop())
    assert not c.running and c.health().running is False


def test_runs_on_uvloop(tmp_path: object) -> None:
    import uvloop

    async def main() -> int:
        async with EmbeddedCluster(timing=Timing.fast()) as cluster:
            await produce(cluster.namesrv_addr, "UvTopic", 10)
            col = Collector()
            async with PushConsumer(
                "uv_group",
                namesrv_addr=cluster.namesrv_addr,
                handler=col,
                subscriptions={"UvTopic": "*"},
                timing=Timing.fast(),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            ):
                with anyio.fail_after(20):
                    await col.wait_unique(10)
            assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
            return col.unique

    assert uvloop.run(main()) == 10


async def test_warns_when_members_subscribe_differently(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: object
) -> None:
    import logging

    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1, tags="TagA")

    def member(expr: str) -> PushConsumer:
        return PushConsumer(
            group,
            namesrv_addr=cluster.namesrv_addr,
            handler=Collector(),
            subscriptions={topic: expr},
            timing=timing,
        )

    caplog.set_level(logging.WARNING, logger="rmq_async.consumer")  # type: ignore[attr-defined]
    async with member("TagA") as a, member("TagB") as b:
        with anyio.fail_after(10):
            await internals(a).subcheck.mismatched.wait()
            await internals(b).subcheck.mismatched.wait()
    assert internals(a).subcheck.mismatches[b.client_id] == {topic: ("TagA", "TagB")}
    assert "must subscribe alike" in caplog.text  # type: ignore[attr-defined]


async def test_binary_header_serialization(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """A client configured for the ROCKETMQ binary header (as -Drocketmq.serialize.type=ROCKETMQ): every
    request it sends to the name server and the broker (sends, route lookups, heartbeats, pulls, offset
    commits, unregisters) arrives with the binary header."""
    from rmq_async import ClientConfig, Message, Producer
    from rmq_async.protocol.codes import SerializeType

    topic, group = names
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing, serialize_type="ROCKETMQ")
    col = Collector()
    with cluster.brokers[0].faults.recording() as seen, cluster.namesrv_faults.recording() as seen_ns:
        async with Producer("bin_p", client_config=cfg) as p:
            for i in range(10):
                await p.send(Message(topic, b"binary", keys=f"k-{i}"))
        async with PushConsumer(
            group,
            client_config=cfg,
            handler=col,
            subscriptions={topic: "*"},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        ):
            await col.wait_unique(10)
    ours = [c for c in seen + seen_ns if c.language == "PYTHON"]  # not the broker's registrations
    codes = {c.code for c in ours}
    assert {105, 310, 34, 11, 35} <= codes, sorted(codes)  # route, send, heartbeat, pull, unregister
    assert {(c.code, c.serialize_type) for c in ours} == {(code, SerializeType.ROCKETMQ) for code in codes}


# -- CONSUME_FROM_TIMESTAMP: the default timestamp is fixed at construction -------------------------


def test_default_consume_timestamp_is_fixed_when_the_consumer_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Java ``DefaultMQPushConsumer.consumeTimestamp`` is a field set once, at construction, to
    now - 30 min; every queue without a committed offset starts from that instant, however late it is
    assigned (a new queue of the topic, a queue whose offset the broker lost). The lite pull consumer
    too: tests/integration/test_start_offsets.py."""
    c = PushConsumer(
        "review_ts_group",
        namesrv_addr="127.0.0.1:9876",
        handler=Collector(),
        subscriptions={"ReviewTs": "*"},
        consume_from_where="CONSUME_FROM_TIMESTAMP",
    )
    first = internals(c).settings.start_offsets.timestamp_ms()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200.0)  # two hours later
    later = internals(c).settings.start_offsets.timestamp_ms()
    assert later == first, f"the default consume timestamp moved by {(later - first) / 1000:.0f} s"


def _sync_handler(msgs: object, ctx: object) -> None:
    return None


async def _one_arg(msgs: object) -> None:
    return None


class _AsyncCallable:
    async def __call__(self, msgs: object, ctx: object) -> None:
        return None


async def _with_default(msgs: object, ctx: object = None, *, extra: int = 0) -> None:
    return None


@pytest.mark.parametrize(
    ("handler", "words"),
    [
        ("not a function", "must be a function"),
        (42, "got int"),
        (_one_arg, "two positional arguments"),
        (_AsyncCallable.__call__, "two positional arguments"),  # unbound: (self, msgs, ctx)
    ],
)
def test_a_handler_that_cannot_work_is_refused_when_the_consumer_is_made(handler: object, words: str) -> None:
    # accepted before: every message then failed ("object NoneType can't be used in 'await'") until the DLQ
    with pytest.raises(ConfigError, match=words):
        PushConsumer("g", namesrv_addr="127.0.0.1:9876", handler=handler, subscriptions={"T": "*"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=words):
        PushConsumer("g", namesrv_addr="127.0.0.1:9876", handler=handler, orderly=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "handler",
    [
        _AsyncCallable(),
        _with_default,
        functools.partial(_with_default, extra=1),
        None,
        _sync_handler,  # plain functions are called inline (tests/integration/test_plain_handler.py)
        lambda msgs, ctx: None,
    ],
)
def test_handlers_of_every_shape_are_accepted(handler: object) -> None:
    PushConsumer("g", namesrv_addr="127.0.0.1:9876", handler=handler)  # type: ignore[arg-type]


async def test_no_warning_from_a_rebalance_caught_by_a_quick_stop(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    # start() then stop() at once: the first rebalance is still going through the topics when stop()
    # unregisters the group, and the broker answers its next consumer-list request "no consumer for
    # this group". That is the stop, not a problem: nothing at WARNING (it used to log one)
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    faults = cluster.brokers[0].faults
    faults.delay(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0.3)  # processed at once, answered later
    faults.delay(RequestCode.UNREGISTER_CLIENT, 1.5)
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, handler=Collector(), subscriptions={topic: "*"}
    )  # default timers: the rebalance runs once, at start
    with caplog.at_level(logging.WARNING, logger="rmq_async"):
        await c.start()
        with anyio.fail_after(20):
            await c.stop()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_no_warning_when_a_lite_consumer_closes_during_a_rebalance(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = names
    await produce(cluster.namesrv_addr, topic, 1)
    faults = cluster.brokers[0].faults
    faults.delay(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0.3)
    faults.delay(RequestCode.UNREGISTER_CLIENT, 1.5)
    with caplog.at_level(logging.WARNING, logger="rmq_async"):
        async with LitePullConsumer(group, namesrv_addr=cluster.namesrv_addr) as lite:
            await lite.subscribe(topic)
            await lite.subscribe(f"{topic}_b")  # a second topic: the rebalance asks twice
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_stop_in_a_second_event_loop_is_a_clear_client_error() -> None:
    # start() in one asyncio.run, stop() in another: the first loop's end cancelled the consumer; say so
    # instead of a bare CancelledError (or a future attached to a different loop)
    c = PushConsumer(
        "two_loops_g",
        namesrv_addr="127.0.0.1:1",  # start() does not need a cluster (routes are retried in the background)
        handler=Collector(),
        subscriptions={"T": "*"},
        timing=Timing.fast(),
    )
    asyncio.run(c.start())
    with pytest.raises(ClientError, match="started in another event loop"):
        asyncio.run(c.stop())
    asyncio.run(c.stop())  # a no-op now: nothing left to stop


def test_a_lite_consumer_used_in_a_second_event_loop_is_a_clear_client_error() -> None:
    lite = LitePullConsumer("two_loops_lg", namesrv_addr="127.0.0.1:1", timing=Timing.fast())

    async def enter() -> None:
        await lite.__aenter__()

    asyncio.run(enter())
    with pytest.raises(ClientError, match="started in another event loop"):
        asyncio.run(lite.poll(0.1))
    with pytest.raises(ClientError, match="started in another event loop"):
        asyncio.run(lite.close())


async def test_deliveries_of_a_consumer_never_started_is_a_client_error_at_once() -> None:
    # nothing would ever feed the stream: waiting on it would hang for ever
    c = PushConsumer("g_not_started", namesrv_addr="127.0.0.1:1", subscriptions={"T": "*"})
    with anyio.fail_after(2), pytest.raises(ClientError, match="not started"):
        async with c.deliveries() as stream:
            async for _ in stream:
                pass


async def test_listeners_never_see_the_retry_topic_and_a_stopping_member_gets_on_revoked(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, 4)
    assigned: list[tuple[str, set[MessageQueue]]] = []
    revoked: list[tuple[str, set[MessageQueue], bool]] = []
    got = anyio.Event()
    c: PushConsumer

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        assigned.append((t, set(mqs)))
        if t == topic:
            got.set()

    def on_revoked(t: str, mqs: set[MessageQueue]) -> None:
        pqs = internals(c).table.pqs
        # told before the queues are dropped (offsets persisted, locks released after)
        revoked.append((t, set(mqs), all(mq in pqs and not pqs[mq].dropped for mq in mqs)))

    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        handler=Collector(),
        subscriptions={topic: "*"},
        timing=timing,
        on_assigned=on_assigned,
        on_revoked=on_revoked,
    )
    async with c:
        with anyio.fail_after(10):
            await got.wait()
        owned = {mq for mq in c.assignment() if mq.topic == topic}
        assert len(owned) == 4
    assert [t for t, _ in assigned] == [topic]  # not %RETRY%group
    assert revoked == [(topic, owned, True)]


async def test_start_looks_the_routes_up_at_once_when_the_name_server_never_answers() -> None:
    # a name server that takes the connection and never answers: each lookup lasts a request timeout;
    # one after another, five topics (and the retry topic) took six of them
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    timing = Timing.fast(request_timeout=1.0)
    c = PushConsumer(
        "g_silent_ns",
        namesrv_addr=f"127.0.0.1:{port}",
        handler=Collector(),
        subscriptions={f"Silent{i}": "*" for i in range(5)},
        timing=timing,
    )
    try:
        began = time.monotonic()
        with anyio.fail_after(20):
            await c.start()
        took = time.monotonic() - began
        assert took < 2 * timing.request_timeout + 0.5, took
        assert not c.health().ready
    finally:
        with anyio.fail_after(20):
            await c.stop()
        server.close()
        await server.wait_closed()
