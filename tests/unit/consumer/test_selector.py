"""Selector and tag-expression checks, and how SQL92 subscriptions go on the wire: the heartbeat's
SubscriptionData, the CHECK_CLIENT_CONFIG body and the pull header.

There are no captures of SQL92 subscriptions in tests/fixtures (the Java capture runs subscribed with
tags only), so the field names and values are checked against the Java sources (apache/rocketmq
rocketmq-all-4.9.8 and 5.3.3, which agree on all of them):
- ``FilterAPI.build``: a SQL92 ``SubscriptionData`` has ``subString`` = the expression as given (no
  trim), empty ``tagsSet`` / ``codeSet``, ``expressionType`` "SQL92"; ``subVersion`` is the
  ``SubscriptionData`` default, ``System.currentTimeMillis()`` at construction.
- ``SubscriptionData`` fields as fastjson writes them: classFilterMode, codeSet, expressionType,
  subString, subVersion, tagsSet, topic (``filterClassSource`` is not serialized).
- ``CheckClientRequestBody``: clientId, group, subscriptionData (``MQClientAPIImpl.checkClientInBroker``).
- ``DefaultMQPushConsumerImpl.pullMessage``: ``expressionType`` from the subscription on every pull,
  ``subscription`` (and the sys flag's subscription bit) only with ``postSubscriptionWhenPull``,
  ``subVersion`` the subscription's.
- ``DefaultLitePullConsumerImpl.pull``: sys flag ``buildSysFlag(false, block, true, false, true)``, the
  expression always, ``subVersion`` 0 for a tag subscription and the subscription's for SQL92.
"""

from __future__ import annotations

import copy
import json
from typing import cast

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.consumer_context import make_context, owned

from rmq_async import ConfigError, Selector
from rmq_async.client.api import PullResult, PullStatus
from rmq_async.client.instance import ClientInstance
from rmq_async.config import ConsumerConfig, Timing
from rmq_async.consumer.context import ConsumerContext, Subscriptions
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.pulling import PullLoop, PullSettings
from rmq_async.consumer.queues import QueueTable
from rmq_async.errors import BrokerError
from rmq_async.protocol import headers as H
from rmq_async.protocol.bodies import CheckClientRequestBody, HeartbeatData, SubscriptionData
from rmq_async.protocol.filter import check_tag_expression, parse_tag_expression
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.sql92 import FilterSyntaxError
from rmq_async.protocol.stored import MessageExt

# -- tag expressions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    ["*", "", "TagA", "TagA || TagB", " TagA ||TagB ", "TagA ||", "TagA|| ||TagB", "Tag-A.b_1:2/x", "标签"],
)
def test_tag_expressions_accepted(expr: str) -> None:
    assert check_tag_expression(expr) == expr
    sel = Selector.tag(expr)
    assert (sel.expression_type, sel.expression, sel.is_sql) == ("TAG", expr, False)
    assert Selector.of(expr) == sel


def test_none_is_every_tag() -> None:
    assert Selector.of(None) == Selector.tag() == Selector("TAG", "*")


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("||", "names no tag"),
        ("   ", "names no tag"),
        ("|| ||", "names no tag"),
        ("TagA,TagB", "separated by '\\|\\|'"),
        ("TagA | TagB", "separated by '\\|\\|'"),
        ("TagA || *", "'\\*' stands alone"),
        ("Tag A", "is not a tag"),
        ("a > 5", "Selector.sql"),
        ("region = 'eu'", "Selector.sql"),
        ("a IS NOT NULL", "Selector.sql"),
        ("(TagA)", "Selector.sql"),
        ("TagA && TagB", "is not a tag"),
    ],
)
def test_tag_expressions_refused(expr: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Selector.tag(expr)
    with pytest.raises(ConfigError, match=match):
        Subscriptions(None).put("T", expr)  # a plain string given to subscribe() is a tag expression


# -- SQL92 selectors -------------------------------------------------------------------------------


def test_sql_selector() -> None:
    sel = Selector.sql("region = 'eu' AND amount > 100")
    assert (sel.expression_type, sel.expression, sel.is_sql) == (
        "SQL92",
        "region = 'eu' AND amount > 100",
        True,
    )
    assert Selector.of(sel) is sel
    assert str(sel) == "SQL92 \"region = 'eu' AND amount > 100\""


@pytest.mark.parametrize("expr", ["a CONTAINS 'x'", "contains = 1", "a NOT STARTSWITH 'p'", "TRUE"])
def test_sql_selector_takes_either_grammar(expr: str) -> None:
    # 5.x grammar (5.1.3 on) has CONTAINS & co. as keywords; 4.x takes them as property names
    assert Selector.sql(expr).expression == expr


@pytest.mark.parametrize("expr", ["a >", "a = 1 b = 2", "a IN ()", "'x'", "a > 5 )"])
def test_sql_selector_refuses_what_does_not_parse(expr: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        Selector.sql(expr)
    assert isinstance(info.value, ConfigError) and info.value.expression == expr


@pytest.mark.parametrize("expr", ["", "  "])
def test_sql_selector_needs_an_expression(expr: str) -> None:
    with pytest.raises(ConfigError, match="needs an expression"):
        Selector.sql(expr)


# -- SubscriptionData in heartbeats ---------------------------------------------------------------


def test_sql_subscription_data_as_java_builds_it() -> None:
    subs = Subscriptions("%RETRY%g")
    sub = subs.put("T", Selector.sql(" a > 5 "))
    assert (sub.sub_string, sub.tags_set, sub.code_set, sub.expression_type) == (" a > 5 ", [], [], "SQL92")
    bean = json.loads(sub.encode())
    assert bean == {
        "classFilterMode": False,
        "codeSet": [],
        "expressionType": "SQL92",
        "subString": " a > 5 ",
        "subVersion": sub.sub_version,
        "tagsSet": [],
        "topic": "T",
    }
    assert list(bean) == sorted(bean)  # fastjson's order
    # the retry topic stays a tag subscription with *, beside the SQL92 one
    data = subs.data()
    assert [(s.topic, s.expression_type, s.sub_string) for s in data] == [
        ("T", "SQL92", " a > 5 "),
        ("%RETRY%g", "TAG", "*"),
    ]
    assert subs.sql() == [sub]
    assert subs.selectors() == {"T": Selector("SQL92", " a > 5 ")}


def test_every_change_gets_a_new_version() -> None:
    subs = Subscriptions(None)
    versions = [
        subs.put("T", "TagA").sub_version,
        subs.put("T", Selector.sql("a > 1")).sub_version,
        subs.put("T", Selector.sql("a > 2")).sub_version,
        subs.put("T", Selector.sql("a > 2")).sub_version,
    ]
    assert versions == sorted(set(versions))  # strictly increasing, also within one millisecond
    got = subs.get("T")
    assert got is not None and got.sub_string == "a > 2" and got.expression_type == "SQL92"


def test_heartbeat_carries_the_sql_subscription() -> None:
    subs = Subscriptions(None)
    subs.put("T", Selector.sql("a BETWEEN 1 AND 3"))
    hb = HeartbeatData.model_validate(
        {
            "clientID": "c@1",
            "consumerDataSet": [
                {
                    "groupName": "g",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [s.model_dump(by_alias=True) for s in subs.data()],
                }
            ],
        }
    )
    (sd,) = json.loads(hb.encode())["consumerDataSet"][0]["subscriptionDataSet"]
    assert (sd["expressionType"], sd["subString"], sd["tagsSet"], sd["codeSet"]) == (
        "SQL92",
        "a BETWEEN 1 AND 3",
        [],
        [],
    )


def test_check_client_body_as_java() -> None:
    sub = SubscriptionData(topic="T", sub_string="a > 1", sub_version=7, expression_type="SQL92")
    body = CheckClientRequestBody(client_id="127.0.0.1@1", group="g", subscription_data=sub)
    obj = json.loads(body.encode())
    assert list(obj) == ["clientId", "group", "subscriptionData"]
    assert obj["subscriptionData"]["expressionType"] == "SQL92" and obj["subscriptionData"]["subVersion"] == 7
    back = CheckClientRequestBody.decode(body.encode())
    assert back.subscription_data == sub


# -- the pull header ---------------------------------------------------------------------------------

MQ = MessageQueue("T", "b", 0)
ADDR = "127.0.0.1:10911"


class _Api:
    def __init__(self, results: list[PullResult | BrokerError]) -> None:
        self.results = results
        self.requests: list[H.PullMessageRequestHeader] = []
        self.idle = anyio.Event()

    async def pull(
        self, addr: str, header: H.PullMessageRequestHeader, timeout: float, *, broker_name: str
    ) -> PullResult:
        self.requests.append(copy.copy(header))
        if not self.results:
            self.idle.set()
            await anyio.sleep_forever()
        r = self.results.pop(0)
        if isinstance(r, BrokerError):
            raise r
        return r


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api
        self.client_id = "a@1"
        self.broker_addrs = {"b": {0: ADDR}}
        self.heartbeats = 0

    def broker_addr(self, broker_name: str, broker_id: int = 0) -> str | None:
        return ADDR

    async def send_heartbeat_to_all_brokers(self) -> bool:
        self.heartbeats += 1
        return True


class _Sink:
    gates_pulls = False
    sync_drop = False

    def __init__(self) -> None:
        self.batches: list[list[MessageExt]] = []

    async def before_pull(self, pq: ProcessQueue) -> bool:
        return True

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self.batches.append(msgs)

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        pq.drop()
        return True

    async def unlock_dropped(self, pq: ProcessQueue, idle: bool) -> None:
        return None


def _found(first: int, tags: list[str]) -> PullResult:
    msgs = [MessageExt("T", b"x", properties={"TAGS": t}, queue_offset=first + k) for k, t in enumerate(tags)]
    return PullResult(PullStatus.FOUND, first + len(tags), 0, first + len(tags), 0, msgs)


async def _pulls(
    settings: PullSettings, selector: Selector | str | None, results: list[PullResult | BrokerError]
) -> tuple[ConsumerContext, _Client, _Sink, list[H.PullMessageRequestHeader]]:
    ctx = make_context(Timing.fast(), config=ConsumerConfig(group="g", pull_batch_size=16))
    api = _Api(results)
    client = _Client(api)
    ctx.attach(cast(ClientInstance, client), ctx.offset_store)
    if selector is not None:
        ctx.subscriptions.put("T", selector)
    sink = _Sink()
    table = QueueTable(ctx, sink)
    loop = PullLoop(ctx, table, sink, settings)
    pq = owned(ctx, ProcessQueue(MQ))
    pq.next_offset = 0
    table.pqs[MQ] = pq

    async def pull() -> None:
        try:
            await loop.run(pq)
        finally:
            api.idle.set()

    async with anyio.create_task_group() as tg:
        ctx.set_task_group(tg)
        tg.start_soon(pull)
        with anyio.fail_after(5):
            await api.idle.wait()
        tg.cancel_scope.cancel()
    return ctx, client, sink, api.requests


@pytest.mark.parametrize("post", [False, True])
async def test_push_pull_header_for_sql92(post: bool) -> None:
    config = ConsumerConfig(group="g", pull_batch_size=16, post_subscription_when_pull=post)
    settings = PullSettings.for_push(config, Timing.fast())
    ctx, _, sink, (first, *_) = await _pulls(settings, Selector.sql("a > 5"), [_found(0, ["A", "B"])])
    sub = ctx.subscriptions.get("T")
    assert sub is not None
    assert first.expression_type == "SQL92" and first.sub_version == sub.sub_version
    assert first.subscription == ("a > 5" if post else None)
    assert first.sys_flag == (0b0110 if post else 0b0010)  # suspend (+ subscription)
    assert [len(b) for b in sink.batches] == [2]  # no client-side re-filter for SQL92 (no tags)


async def test_push_pull_header_for_tags_is_unchanged() -> None:
    settings = PullSettings.for_push(ConsumerConfig(group="g", pull_batch_size=16), Timing.fast())
    _, _, sink, (first, *_) = await _pulls(settings, "A", [_found(0, ["A", "B"])])
    assert first.expression_type == "TAG" and first.subscription is None
    assert [[m.tags for m in b] for b in sink.batches] == [["A"]]


@pytest.mark.parametrize(("selector", "etype"), [(Selector.sql("a > 5"), "SQL92"), ("A || B", "TAG")])
async def test_lite_pull_header(selector: Selector | str, etype: str) -> None:
    settings = PullSettings.for_lite_pull(10, Timing.fast())
    ctx, _, _, (first, *_) = await _pulls(settings, selector, [_found(0, ["A"])])
    sub = ctx.subscriptions.get("T")
    assert sub is not None
    assert first.sys_flag == 0b10110 and first.expression_type == etype
    assert first.subscription == sub.sub_string
    assert first.sub_version == (sub.sub_version if etype == "SQL92" else 0)


@pytest.mark.parametrize("code", [27, 28])
async def test_filter_data_behind_sends_a_heartbeat_and_pulls_again(code: int) -> None:
    settings = PullSettings.for_push(ConsumerConfig(group="g", pull_batch_size=16), Timing.fast())
    refused = BrokerError(code, "the consumer's consumer filter data not latest", request_code=11)
    _, client, sink, reqs = await _pulls(settings, Selector.sql("a > 5"), [refused, _found(0, ["A"])])
    assert client.heartbeats == 1 and len(reqs) == 3 and [len(b) for b in sink.batches] == [1]


_TAGGY = st.text(alphabet="ab| ,*=<>()'\t_-.\u00e9\u3000", max_size=12)


@given(_TAGGY)
@settings(max_examples=300, deadline=None)
def test_an_accepted_tag_expression_names_tags_that_can_match(expr: str) -> None:
    """Whatever the string, the check either refuses it with ConfigError or accepts it, and then every
    message with one of its tags (as Java splits them) is wanted: subscribe-all, or one tag at least,
    none of them holding a separator, a star, whitespace or a SQL character."""
    try:
        check_tag_expression(expr)
    except ConfigError:
        return
    sub_string, tags, codes = parse_tag_expression(expr)
    if sub_string == "*":
        assert tags == [] and codes == []
        return
    assert tags and len(codes) >= 1
    for tag in tags:
        assert not any(ch.isspace() or ch in ",|*=<>()'" for ch in tag), tag


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_selector_sql_raises_only_config_errors(expr: str) -> None:
    try:
        sel = Selector.sql(expr)
    except ConfigError:
        return
    assert sel.expression == expr and sel.is_sql
