"""SQL92 filters on the embedded broker, request by request, against what the Java broker does
(apache/rocketmq 4.9.8 and 5.3.3): ``ClientManageProcessor.checkClientConfig`` (CHECK_CLIENT_CONFIG 46),
``PullMessageProcessor`` (the subscription from the request or the group, FILTER_DATA_NOT_EXIST 27,
FILTER_DATA_NOT_LATEST 28, SUBSCRIPTION_PARSE_FAILED 23, code 1 with property filters off),
``ExpressionMessageFilter`` (the stored properties, user and system, evaluated per message; only TRUE
delivers), ``ExpressionForRetryMessageFilter`` (filterSupportRetry: 4.x filters the retry topic by the
original topic's filter, 5.x returns early for the retry topic's tag subscription) and
``ConsumerFilterManager`` (filter data registered by heartbeats, newest version wins).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient, decode_messages, java_hash

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def sql_cluster(request: pytest.FixtureRequest, timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    flavour, on, retry = getattr(request, "param", (4, True, False))
    async with EmbeddedCluster(
        brokers=1,
        queues=1,
        timing=timing,
        flavour=flavour,
        enable_property_filter=on,
        filter_support_retry=retry,
    ) as c:
        yield c


@pytest.fixture
async def raw(sql_cluster: EmbeddedCluster) -> AsyncIterator[RawClient]:
    async with RawClient(sql_cluster.brokers[0].addr) as c:
        yield c


def _sub(topic: str, expr: str, etype: str, version: int) -> dict[str, Any]:
    tags = [] if etype != "TAG" or expr == "*" else [t.strip() for t in expr.split("||")]
    return {
        "classFilterMode": False,
        "codeSet": [java_hash(t) for t in tags],
        "expressionType": etype,
        "subString": expr,
        "subVersion": version,
        "tagsSet": tags,
        "topic": topic,
    }


async def _heartbeat(raw: RawClient, group: str, subs: list[dict[str, Any]]) -> None:
    body = {
        "clientID": "127.0.0.1@sql",
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": subs,
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    r = await raw.request(34, None, json.dumps(body).encode())
    assert r.code == 0


async def _check(raw: RawClient, expr: str, etype: str = "SQL92") -> tuple[int, str | None]:
    body = {"clientId": "127.0.0.1@sql", "group": "g", "subscriptionData": _sub("T", expr, etype, 1)}
    r = await raw.request(46, None, json.dumps(body).encode())
    assert not r.ext_fields_present
    return r.code, r.remark


async def _pull(
    raw: RawClient, group: str, topic: str, *, version: int, expr: str | None = None, etype: str = "SQL92"
) -> tuple[int, str | None, list[str]]:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4" if expr is not None else "0",  # the subscription flag: the expression rides along
        "commitOffset": "0",
        "suspendTimeoutMillis": "1000",
        "subVersion": str(version),
        "expressionType": etype,
        "bname": "broker-a",
    }
    if expr is not None:
        ext["subscription"] = expr
    r = await raw.request(11, ext)
    bodies = [m.body.decode() for m in decode_messages(r.body)] if r.code == 0 else []
    return r.code, r.remark, bodies


async def _send_all(raw: RawClient, topic: str) -> None:
    for i, (a, tag) in enumerate([("1", "TagA"), ("7", "TagB"), ("9", "TagA"), ("x", None), ("12", "TagB")]):
        await raw.send(topic, f"m{i}".encode(), tags=tag, keys=f"k{i}", props={"a": a, "region": "eu"})


@pytest.mark.parametrize("sql_cluster", [(4, True, False), (5, True, False)], indirect=True)
async def test_check_client_config(sql_cluster: EmbeddedCluster, raw: RawClient) -> None:
    assert await _check(raw, "TagA || TagB", "TAG") == (0, None)
    assert await _check(raw, "a > 5 AND region = 'eu'") == (0, None)
    code, remark = await _check(raw, "a >")
    assert code == 23 and remark is not None
    assert remark.startswith("org.apache.rocketmq.filter.parser.ParseException: ")
    assert (await _check(raw, ""))[0] == 23
    assert await _check(raw, "a = 1", "FOO") == (23, None)  # no filter for the type: Java's NPE, no message
    # 4.x has no CONTAINS keyword and its parser stops where its grammar does: 'a' is the whole filter
    assert await _check(raw, "a CONTAINS 'x'") == (0, None)
    r = await raw.request(46, None, b"")  # no body: nothing to check
    assert (r.code, r.remark) == (0, None)


@pytest.mark.parametrize("sql_cluster", [(4, False, False)], indirect=True)
async def test_property_filter_off(sql_cluster: EmbeddedCluster, raw: RawClient) -> None:
    assert await _check(raw, "TagA", "TAG") == (0, None)
    assert await _check(raw, "a > 5") == (
        1,
        "The broker does not support consumer to filter message by SQL92",
    )
    await sql_cluster.create_topic("T", 1)
    await _send_all(raw, "T")
    # the filter data is registered even so (the listener does not look at the switch)
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 5)])
    assert await _pull(raw, "g", "T", version=5) == (
        1,
        "The broker does not support consumer to filter message by SQL92",
        [],
    )
    assert (await _pull(raw, "g", "T", version=5, expr="a > 5"))[0] == 1


async def test_pull_by_the_groups_filter(sql_cluster: EmbeddedCluster, raw: RawClient) -> None:
    await sql_cluster.create_topic("T", 1)
    await _send_all(raw, "T")
    r = await _pull(raw, "g", "T", version=5)
    assert r[0] == 24  # no group yet
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 5)])
    # a string property compares as a number when it reads as one; 'x' does not: no match
    assert await _pull(raw, "g", "T", version=5) == (0, "FOUND", ["m1", "m2", "m4"])
    assert (await _pull(raw, "g", "T", version=6))[0] == 25  # the subscription first
    # a newer subscription: the filter data follows the heartbeat
    await _heartbeat(raw, "g", [_sub("T", "a BETWEEN 7 AND 9 AND TAGS = 'TagA'", "SQL92", 7)])
    assert await _pull(raw, "g", "T", version=7) == (0, "FOUND", ["m2"])
    # system properties are seen too: TAGS, KEYS, UNIQ_KEY
    await _heartbeat(raw, "g", [_sub("T", "KEYS IN ('k0', 'k3') OR UNIQ_KEY IS NULL", "SQL92", 8)])
    assert await _pull(raw, "g", "T", version=8) == (0, "FOUND", ["m0", "m3"])
    # an older heartbeat changes nothing
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 8)])
    assert (await _pull(raw, "g", "T", version=8))[2] == ["m0", "m3"]
    # nothing matches: PULL_RETRY_IMMEDIATELY, past every message looked at
    await _heartbeat(raw, "g", [_sub("T", "a > 100", "SQL92", 9)])
    code, remark, _ = await _pull(raw, "g", "T", version=9)
    assert (code, remark) == (20, "NO_MATCHED_MESSAGE")


async def test_filter_data_missing_or_behind(sql_cluster: EmbeddedCluster, raw: RawClient) -> None:
    await sql_cluster.create_topic("T", 1)
    await _send_all(raw, "T")
    # an expression the broker cannot compile registers no filter data
    await _heartbeat(raw, "g", [_sub("T", "a >", "SQL92", 5)])
    assert await _pull(raw, "g", "T", version=5) == (
        27,
        "The broker's consumer filter data is not exist!Your expression may be wrong!",
        [],
    )
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 6)])
    assert (await _pull(raw, "g", "T", version=6))[0] == 0
    # a replacement that does not compile removes the filter data
    await _heartbeat(raw, "g", [_sub("T", "a >>", "SQL92", 7)])
    assert (await _pull(raw, "g", "T", version=7))[0] == 27
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 8)])
    ctx = sql_cluster.brokers[0]._ctx
    ctx.filters.get("T", "g").client_version = 3  # as if the filter data were older than the subscription
    assert await _pull(raw, "g", "T", version=8) == (28, "the consumer's consumer filter data not latest", [])


async def test_pull_with_the_subscription_in_the_request(
    sql_cluster: EmbeddedCluster, raw: RawClient
) -> None:
    await sql_cluster.create_topic("T", 1)
    await _send_all(raw, "T")
    # lite pull: the expression rides along; no group, no heartbeat needed
    assert await _pull(raw, "lg", "T", version=1, expr="region = 'eu' AND a < 8") == (
        0,
        "FOUND",
        ["m0", "m1"],
    )
    assert await _pull(raw, "lg", "T", version=1, expr="") == (
        23,
        "parse the consumer's subscription failed",
        [],
    )
    # Java asserts the filter data compiles; with assertions off (production) a bad one filters nothing
    assert await _pull(raw, "lg", "T", version=1, expr="a >") == (0, "FOUND", ["m0", "m1", "m2", "m3", "m4"])


async def _retry_scenario(cluster: EmbeddedCluster, raw: RawClient) -> list[str]:
    """Messages sent back to %RETRY%g (RETRY_TOPIC = T); g subscribes T with a > 5, %RETRY%g with *."""
    await cluster.create_topic("T", 1)
    await cluster.create_topic("%RETRY%g", 1)
    for i, a in enumerate(["1", "7", "9", "2"]):
        await raw.send("%RETRY%g", f"r{i}".encode(), props={"a": a, "RETRY_TOPIC": "T"})
    await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 5), _sub("%RETRY%g", "*", "TAG", 5)])
    code, _, bodies = await _pull(raw, "g", "%RETRY%g", version=5, etype="TAG")
    assert code == 0
    return bodies


@pytest.mark.parametrize(
    ("sql_cluster", "want"),
    [
        ((4, True, False), ["r0", "r1", "r2", "r3"]),
        ((4, True, True), ["r1", "r2"]),  # filterSupportRetry: the original topic's filter
        ((5, True, False), ["r0", "r1", "r2", "r3"]),
        ((5, True, True), ["r0", "r1", "r2", "r3"]),  # 5.x: returns early for the tag subscription
    ],
    indirect=["sql_cluster"],
)
async def test_retry_topic(sql_cluster: EmbeddedCluster, raw: RawClient, want: list[str]) -> None:
    assert await _retry_scenario(sql_cluster, raw) == want


@pytest.mark.parametrize("sql_cluster", [(5, True, False)], indirect=True)
async def test_5x_grammar(sql_cluster: EmbeddedCluster, raw: RawClient) -> None:
    await sql_cluster.create_topic("T", 1)
    await _send_all(raw, "T")
    assert await _check(raw, "region CONTAINS 'u' AND a STARTSWITH '1'") == (0, None)
    await _heartbeat(raw, "g", [_sub("T", "region CONTAINS 'u' AND a STARTSWITH '1'", "SQL92", 5)])
    assert await _pull(raw, "g", "T", version=5) == (0, "FOUND", ["m0", "m4"])


async def test_a_held_sql_pull_wakes_only_for_a_matching_message() -> None:
    """``PullRequestHoldService.notifyMessageArriving``: a parked pull with a SQL92 filter is answered
    at once when a message its filter matches arrives, not for one it does not match (that one is
    seen by the periodic check, which wakes it on the consume queue alone, as Java's; it is made
    rare here)."""
    timing = Timing.fast(held_pull_check_interval=30.0, pull_timeout=40.0)
    async with EmbeddedCluster(brokers=1, queues=1, timing=timing, enable_property_filter=True) as cluster:
        await cluster.create_topic("T", 1)
        async with RawClient(cluster.brokers[0].addr) as raw, RawClient(cluster.brokers[0].addr) as sender:
            await _heartbeat(raw, "g", [_sub("T", "a > 5", "SQL92", 5)])
            ext = {
                "consumerGroup": "g",
                "topic": "T",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": "2",  # suspend
                "commitOffset": "0",
                "suspendTimeoutMillis": "20000",
                "subVersion": "5",
                "expressionType": "SQL92",
                "bname": "broker-a",
            }
            pending = asyncio.ensure_future(raw.request(11, ext, wait=25))
            await asyncio.sleep(0.2)
            await sender.send("T", b"no", props={"a": "1"})
            await asyncio.sleep(0.3)
            assert not pending.done()  # the parked pull stays parked
            await sender.send("T", b"yes", props={"a": "9"})
            r = await asyncio.wait_for(pending, 3)
    assert r.code == 0 and [m.body for m in decode_messages(r.body)] == [b"yes"]
