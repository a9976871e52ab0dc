"""SQL92 property filters end to end on the embedded cluster: push and lite pull consumers get
exactly the messages whose properties match, checked against the filter evaluated client-side
(``rmq_async.protocol.sql92``) on what was sent; a subscription changed tag -> SQL92 -> another SQL92
without restart; brokers refusing at start (property filters off, an expression they cannot compile);
retried messages as the real broker delivers them (``filterSupportRetry`` off and on, 4.x and 5.x)."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
from support.integration import child_env

from rmq_async import (
    ConfigError,
    ConsumeContext,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    Selector,
    SubscriptionRefused,
    Timing,
)
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.sql92 import FilterSyntaxError, parse

pytestmark = pytest.mark.timeout(60)

SQL1 = "amount > 500 AND region IN ('eu', 'us')"
SQL2 = "region = 'ap' OR (amount BETWEEN 100 AND 200 AND vip IS NOT NULL)"


def random_props(rng: random.Random) -> dict[str, str]:
    """Properties as senders set them: numbers as strings, some missing, some not numbers."""
    p: dict[str, str] = {}
    r = rng.random()
    if r < 0.9:
        p["amount"] = str(rng.randint(0, 1000))
    elif r < 0.95:
        p["amount"] = "n/a"  # compared with a number: cannot be evaluated, no match
    region = rng.choice(["eu", "us", "ap", "af", None])
    if region is not None:
        p["region"] = region
    if rng.random() < 0.3:
        p["vip"] = "true"
    return p


class Sent:
    """What was produced: message id (the body) -> properties, and its tag."""

    def __init__(self) -> None:
        self.props: dict[str, dict[str, str]] = {}
        self.tags: dict[str, str] = {}

    def matching(self, expr: str, flavour: int, ids: list[str] | None = None) -> set[str]:
        e = parse(expr, flavour=5 if flavour == 5 else 4)
        return {i for i in (ids if ids is not None else self.props) if e.matches(self.props[i])}


async def produce(namesrv: str, topic: str, n: int, sent: Sent, *, prefix: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids: list[str] = []
    async with Producer("sql_producer", namesrv_addr=namesrv) as p:
        batch: list[Message] = []
        for i in range(n):
            mid = f"{prefix}{i}"
            props = random_props(rng)
            tag = rng.choice(["TagA", "TagB"])
            sent.props[mid], sent.tags[mid] = props, tag
            ids.append(mid)
            batch.append(Message(topic, mid.encode(), tags=tag, properties=props))
            if len(batch) == 250:
                await p.send_batch(batch)
                batch = []
        if batch:
            await p.send_batch(batch)
    return ids


class Received:
    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._changed = anyio.Event()

    def add(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self.seen[m.body.decode()] += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def handler(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        self.add(msgs)
        return ConsumeResult.SUCCESS

    async def wait(self, pred: Callable[[], bool], timeout: float = 20.0) -> None:
        with anyio.fail_after(timeout):
            while not pred():
                await self._changed.wait()

    def of(self, ids: list[str]) -> Counter[str]:
        wanted = set(ids)
        return Counter({k: v for k, v in self.seen.items() if k in wanted})


async def settle_and_check(
    got: Received | list[Received], ids: list[str], want: set[str], timing: Timing
) -> None:
    """Every wanted message arrives at each consumer; after a pause nothing else of ``ids`` has,
    and none twice."""
    every = got if isinstance(got, list) else [got]
    for g in every:
        await g.wait(lambda g=g: set(g.of(ids)) >= want)  # type: ignore[misc]
    await anyio.sleep(timing.suspend_timeout)
    for g in every:
        seen = g.of(ids)
        assert set(seen) == want, (len(set(seen) - want), len(want - set(seen)))
        assert max(seen.values(), default=1) == 1


async def poll_into(c: LitePullConsumer, got: Received, stop: anyio.Event) -> None:
    while not stop.is_set():
        got.add(await c.poll(0.2, max_messages=500))


def cluster_with(timing: Timing, **kw: object) -> EmbeddedCluster:
    return EmbeddedCluster(brokers=1, queues=4, timing=timing, **kw)  # type: ignore[arg-type]


@pytest.fixture
def timing() -> Timing:
    return Timing.fast()


@pytest.mark.parametrize("flavour", [4, 5])
async def test_push_and_lite_get_exactly_the_matching_messages(flavour: int, timing: Timing) -> None:
    topic, sent = f"SqlTopic{flavour}", Sent()
    async with cluster_with(timing, flavour=flavour, enable_property_filter=True) as cluster:
        ns = cluster.namesrv_addr
        ids = await produce(ns, topic, 10_000, sent, prefix="m", seed=20 + flavour)
        want = sent.matching(SQL1, flavour)
        assert 1000 < len(want) < 5000
        pushed, pulled = Received(), Received()
        push = PushConsumer(
            "sql_push",
            namesrv_addr=ns,
            handler=pushed.handler,
            subscriptions={topic: Selector.sql(SQL1)},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            timing=timing,
        )
        async with (
            push,
            LitePullConsumer(
                "sql_lite", namesrv_addr=ns, timing=timing, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
            ) as lite,
        ):
            await lite.subscribe(topic, Selector.sql(SQL1))
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll_into, lite, pulled, stop)
                await settle_and_check([pushed, pulled], ids, want, timing)
                stop.set()


async def _broker_has(cluster: EmbeddedCluster, group: str, topic: str, version: int) -> None:
    """Wait until the broker registered ``version`` of the group's subscription and its filter data."""
    ctx = cluster.brokers[0]._ctx
    with anyio.fail_after(10):
        while True:
            g = ctx.consumers.get(group)
            sub = g.subs.get(topic) if g is not None else None
            if sub is not None and sub.version >= version:
                data = ctx.filters.get(topic, group)
                if sub.expression_type == "TAG" or (data is not None and data.client_version >= version):
                    return
            await anyio.sleep(0.02)


async def test_subscription_changes_without_restart(timing: Timing) -> None:
    """tag -> SQL92 -> another SQL92 on running push and lite consumers: each phase's messages are
    filtered by that phase's subscription. Messages are sent once the pulls made with the previous
    subscription are over (a pull in flight across a change is answered by the broker's newest filter
    and re-filtered by tag with the one it was made with, as in Java)."""
    topic, sent = "SqlChange", Sent()
    async with cluster_with(timing, flavour=5, enable_property_filter=True) as cluster:
        ns = cluster.namesrv_addr
        pushed, pulled = Received(), Received()
        push = PushConsumer(
            "chg_push", namesrv_addr=ns, handler=pushed.handler, subscriptions={topic: "TagA"}, timing=timing
        )
        await cluster.create_topic(topic, 4)
        async with (
            push,
            LitePullConsumer("chg_lite", namesrv_addr=ns, timing=timing) as lite,
        ):
            await lite.subscribe(topic, "TagA")
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll_into, lite, pulled, stop)
                await push.wait_rebalanced()
                await lite.wait_rebalanced()
                await anyio.sleep(timing.suspend_timeout)
                phases: list[tuple[Selector | str, Callable[[list[str]], set[str]]]] = [
                    ("TagA", lambda ids: {i for i in ids if sent.tags[i] == "TagA"}),
                    (Selector.sql(SQL1), lambda ids: sent.matching(SQL1, 5, ids)),
                    (Selector.sql(SQL2), lambda ids: sent.matching(SQL2, 5, ids)),
                ]
                for n, (selector, expected) in enumerate(phases):
                    if n:
                        push.subscribe(topic, selector)
                        await lite.subscribe(topic, selector)
                        for group, c in (("chg_push", push._subscription(topic)), ("chg_lite", None)):
                            version = c.sub_version if c is not None else 0
                            await _broker_has(cluster, group, topic, version)
                        # the pulls made before the change are answered (the lite pull's long poll,
                        # the longer one, is held up to pull_timeout - pull_timeout_margin)
                        await anyio.sleep(timing.pull_timeout - timing.pull_timeout_margin)
                    ids = await produce(ns, topic, 1000, sent, prefix=f"p{n}-", seed=n)
                    want = expected(ids)
                    assert 0 < len(want) < len(ids)
                    await settle_and_check([pushed, pulled], ids, want, timing)
                stop.set()


async def test_a_broker_with_property_filters_off_refuses_at_start(timing: Timing) -> None:
    async with cluster_with(timing) as cluster:  # enablePropertyFilter=false, as real brokers
        await cluster.create_topic("SqlOff", 4)
        push = PushConsumer(
            "off_push",
            namesrv_addr=cluster.namesrv_addr,
            handler=Received().handler,
            subscriptions={"SqlOff": Selector.sql("a > 1")},
            timing=timing,
        )
        with pytest.raises(SubscriptionRefused, match="enablePropertyFilter=true") as info:
            await push.start()
        assert info.value.code == 1 and info.value.topic == "SqlOff" and not push.running
        assert info.value.remark == "The broker does not support consumer to filter message by SQL92"
        async with LitePullConsumer("off_lite", namesrv_addr=cluster.namesrv_addr, timing=timing) as lite:
            with pytest.raises(SubscriptionRefused) as info:
                await lite.subscribe("SqlOff", Selector.sql("a > 1"))
            assert info.value.code == 1
            await lite.subscribe("SqlOff", "*")  # tag subscriptions need nothing from the broker


@pytest.mark.parametrize("flavour", [4, 5])
async def test_a_bad_expression_is_refused_at_start(flavour: int, timing: Timing) -> None:
    with pytest.raises(FilterSyntaxError):  # the client's own parse comes first
        Selector.sql("amount >")
    with pytest.raises(ConfigError, match=r"Selector\.sql"):
        Selector.tag("amount > 5")
    async with cluster_with(timing, flavour=flavour, enable_property_filter=True) as cluster:
        ns = cluster.namesrv_addr
        await cluster.create_topic("SqlBad", 4)

        def push(selector: Selector, handler: Received) -> PushConsumer:
            return PushConsumer(
                f"bad_push{flavour}",
                namesrv_addr=ns,
                handler=handler.handler,
                subscriptions={"SqlBad": selector},
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                timing=timing,
            )

        # past the client's parse (built directly): the broker's compiler refuses it
        c = push(Selector("SQL92", "amount >"), Received())
        with pytest.raises(SubscriptionRefused) as info:
            await c.start()
        assert info.value.code == 23 and info.value.remark is not None
        assert info.value.remark.startswith("org.apache.rocketmq.filter.parser.ParseException")
        # CONTAINS: a 5.x keyword; a 4.x broker would read only 'region' of it, so it is refused
        sent = Sent()
        ids = await produce(ns, "SqlBad", 300, sent, prefix="b", seed=7)
        contains = "region CONTAINS 'u' AND amount > 300"
        got = Received()
        c = push(Selector.sql(contains), got)
        if flavour == 4:
            with pytest.raises(SubscriptionRefused, match=r"before 5\.1\.3") as info:
                await c.start()
            assert info.value.code == 23
        else:
            async with c:
                await settle_and_check(got, ids, sent.matching(contains, 5), timing)


@pytest.mark.parametrize(
    ("flavour", "support_retry", "filtered"),
    [(4, False, False), (4, True, True), (5, True, False)],
)
async def test_retries_of_sql_filtered_messages(
    flavour: int, support_retry: bool, filtered: bool, timing: Timing
) -> None:
    """A message the handler fails comes back from %RETRY%group (subscribed with '*'): it matched, so
    it arrives again whatever the broker. Messages in the retry topic that do not match the original
    topic's filter arrive too, unless a 4.x broker runs with filterSupportRetry (the 5.x retry filter
    returns early for the retry topic's tag subscription)."""
    topic, group = "SqlRetry", "retry_push"
    expr = "a > 5"
    async with cluster_with(
        timing, flavour=flavour, enable_property_filter=True, filter_support_retry=support_retry
    ) as cluster:
        ns = cluster.namesrv_addr
        await cluster.create_topic(topic, 4)
        seen: Counter[str] = Counter()
        changed = [anyio.Event()]

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
            fail = False
            for m in msgs:
                mid = m.body.decode()
                seen[mid] += 1
                assert m.topic == topic  # a retried message is handed over under its own topic
                fail = fail or (mid.startswith("m") and seen[mid] == 1)
            changed[0].set()
            changed[0] = anyio.Event()
            return ConsumeResult.RECONSUME_LATER if fail else ConsumeResult.SUCCESS

        async with PushConsumer(
            group,
            namesrv_addr=ns,
            handler=handler,
            subscriptions={topic: Selector.sql(expr)},
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            timing=timing,
        ):
            async with Producer("sql_retry_producer", namesrv_addr=ns) as p:
                for i in range(12):
                    await p.send(Message(topic, f"m{i}".encode(), properties={"a": str(i)}))
                # in the retry topic already (as a message sent back is), matching or not
                for i in range(8):
                    props = {"a": str(i * 2), "RETRY_TOPIC": topic}
                    await p.send(Message.resent(f"%RETRY%{group}", f"r{i}".encode(), props))
            want = {f"m{i}": 2 for i in range(6, 12)}
            want.update({f"r{i}": 1 for i in range(8) if not filtered or i * 2 > 5})
            with anyio.fail_after(20):
                while any(seen[k] < v for k, v in want.items()):
                    await changed[0].wait()
            await anyio.sleep(1.0)  # nothing else comes
            assert dict(seen) == want


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", *args]


async def test_cli_produce_properties_and_consume_sql(timing: Timing) -> None:
    topic = "SqlCli"
    async with cluster_with(timing, enable_property_filter=True) as cluster:
        ns = cluster.namesrv_addr
        await cluster.create_topic(topic, 4)
        for region, amount in (("eu", "700"), ("ap", "900"), ("eu", "20")):
            args = _cli("produce", "--namesrv", ns, "--topic", topic, "--count", "15", "--quiet")
            args += ["--keys-prefix", f"{region}{amount}-", "--property", f"region={region}"]
            args += ["--property", f"amount={amount}", "--size", "8"]
            out = await anyio.run_process(args, env=child_env(), check=False)
            assert out.returncode == 0, out.stderr.decode()[-1000:]
        args = _cli("consume", "--namesrv", ns, "--topic", topic, "--group", "sql_cli", "--idle-exit", "1")
        with anyio.fail_after(30):
            out = await anyio.run_process(
                [*args, "--print", "--sql", "region = 'eu' AND amount > 100"], env=child_env(), check=False
            )
        assert out.returncode == 0, out.stderr.decode()[-1000:]
        lines = [json.loads(line) for line in out.stdout.decode().strip().splitlines()]
        keys = sorted(d["key"] for d in lines[:-1])
        assert keys == sorted(f"eu700-{i}" for i in range(15)) and lines[-1]["unique_keys"] == 15
        # refused before anything starts: a filter that does not parse, or --sql with --expr
        for bad in (["--sql", "amount >"], ["--sql", "amount > 1", "--expr", "TagA"], ["--expr", "a > 1"]):
            out = await anyio.run_process([*args, *bad], env=child_env(), check=False)
            assert out.returncode == 2 and b"Traceback" not in out.stderr, out.stderr.decode()[-1000:]


async def test_cli_consume_sql_on_a_broker_with_property_filters_off(timing: Timing) -> None:
    async with cluster_with(timing) as cluster:
        await cluster.create_topic("SqlCliOff", 4)
        args = _cli("consume", "--namesrv", cluster.namesrv_addr, "--topic", "SqlCliOff", "--group", "g")
        out = await anyio.run_process(
            [*args, "--sql", "a > 1", "--idle-exit", "1"], env=child_env(), check=False
        )
        assert out.returncode != 0 and b"enablePropertyFilter=true" in out.stderr, out.stderr.decode()[-1000:]


def test_embedded_cli_switches() -> None:
    from rmq_async.cli.app import build_parser

    args = build_parser().parse_args(["embedded", "--enable-property-filter", "--filter-support-retry"])
    assert args.enable_property_filter and args.filter_support_retry
    args = build_parser().parse_args(["embedded"])
    assert not args.enable_property_filter and not args.filter_support_retry


async def test_spark_source_option_sql(timing: Timing) -> None:
    """The Spark source's option ``sql`` (the reader's session, without Spark): the broker filters the
    range by the expression; ``sql`` with ``tags`` or one that does not parse is refused."""
    from rmq_async.spark.bridge import Session
    from rmq_async.spark.offsets import Range
    from rmq_async.spark.options import parse_options

    topic, sent = "SqlSpark", Sent()
    async with cluster_with(timing, enable_property_filter=True) as cluster:
        ns = cluster.namesrv_addr
        ids = await produce(ns, topic, 400, sent, prefix="s", seed=3)
        opts = parse_options({"namesrv": ns, "topic": topic, "sql": SQL1}, streaming=False)
        got: list[str] = []
        async with Session(opts) as session:
            for key in await session.queues():
                end = (await session.bounds([key]))[key][1]
                offset, r = 0, Range(*key, 0, end)
                while offset < end:
                    msgs, offset = await session.read_chunk(r, offset, 1000)
                    got.extend(m.body.decode() for m in msgs)
        assert sorted(got) == sorted(sent.matching(SQL1, 4, ids))
    with pytest.raises(ConfigError, match="cannot be combined with tags"):
        parse_options({"namesrv": "x:1", "topic": "T", "sql": "a > 1", "tags": "A"}, streaming=False)
    with pytest.raises(ConfigError, match="option 'sql'"):
        parse_options({"namesrv": "x:1", "topic": "T", "sql": "a >"}, streaming=False)


async def test_members_subscribing_by_tag_and_by_sql_are_told_apart(timing: Timing) -> None:
    """The subscription check between members of a group compares the type too: the tag 'vip' and
    the SQL92 filter 'vip' (a property read as a boolean) are different subscriptions."""
    async with cluster_with(timing, enable_property_filter=True) as cluster:
        await cluster.create_topic("SqlMembers", 4)

        def member(selector: Selector | str) -> PushConsumer:
            return PushConsumer(
                "sql_members",
                namesrv_addr=cluster.namesrv_addr,
                handler=Received().handler,
                subscriptions={"SqlMembers": selector},
                timing=timing,
            )

        async with member("vip") as a, member(Selector.sql("vip")) as b:
            with anyio.fail_after(10):
                await internals(a).subcheck.mismatched.wait()
    assert internals(a).subcheck.mismatches[b.client_id] == {"SqlMembers": ("vip", "SQL92 'vip'")}


async def test_a_sql92_topic_routed_after_start_is_checked_then_and_its_refusal_is_loud(
    timing: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    async with cluster_with(timing) as cluster:  # enablePropertyFilter=false, as real brokers
        push = PushConsumer(
            "late_route_push",
            namesrv_addr=cluster.namesrv_addr,
            handler=Received().handler,
            subscriptions={"SqlLate": Selector.sql("a > 1")},
            timing=timing,
        )
        async with push:  # no route yet: not checked at start
            assert not push.health().ready
            with caplog.at_level("ERROR", logger="rmq_async.consumer"):
                await cluster.create_topic("SqlLate", 2)
                with anyio.fail_after(15):
                    while not push.health().refused_subscriptions:  # noqa: ASYNC110 (no event to await)
                        await anyio.sleep(0.05)
                    while not push.health().filter_refused_pulls:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
            health = push.health()
            assert not health.ready
            assert "SqlLate" in health.refused_subscriptions
            assert "enablePropertyFilter=true" in health.refused_subscriptions["SqlLate"]
            assert any("SqlLate" in r and "refused" in r for r in health.reasons), health.reasons
            assert health.filter_refused_pulls["SqlLate"] > 0
            assert health.as_dict()["refused_subscriptions"] == dict(health.refused_subscriptions)
            errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert any("SqlLate" in e and "enablePropertyFilter=true" in e for e in errors), errors
