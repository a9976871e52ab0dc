"""The embedded broker's ACL (rmq_async.embedded.acl): the decision rules, both flavours, and a replay of
every request of the 4.9.8 ACL captures (tests/fixtures/acl/) against an embedded cluster with the
captures' plain_acl.yml: each refusal must come back with the captured code and remark, and every
request the real broker let through must pass here too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.wire import Frame, pairs

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.acl import (
    DENY,
    PUB,
    SUB,
    Account,
    AclChecker,
    AclConfig,
    address_matcher,
    check_permission,
    needs4,
    needs5,
    parse_perm,
)
from rmq_async.protocol.acl import sign_fields
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.command import RemotingCommand, decode_frame

from .rawclient import RawClient, call

#: the captures' broker config (ACL-NOTES.md; test-only secrets)
PLAIN_ACL_YML = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: true
  - accessKey: rmqUser
    secretKey: rmqSecret123
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [AclT=PUB|SUB, AclDeny=DENY]
    groupPerms: [acl_g=SUB]
"""
FILES = (
    "acl/acl-produce-consume.jsonl",
    "acl/acl-denied.jsonl",
    "acl/acl-sendback.jsonl",
    "acl/acl-binary.jsonl",
    "acl/acl-token.jsonl",
    "acl/acl-query.jsonl",
)
EXC = "org.apache.rocketmq.acl.common.AclException: "
CONFIG = AclConfig.from_yaml(PLAIN_ACL_YML)


def _req(
    code: int, ext: dict[str, str], body: bytes = b"", *, ak: str = "rmqUser", sk: str = "rmqSecret123"
) -> RemotingCommand:
    cmd = RemotingCommand.request(code, dict(ext), body)
    if ak:
        sign_fields(cmd.ext_fields, cmd.body, ak, sk)
    return cmd


def _heartbeat(group: str, topics: list[str]) -> bytes:
    subs = [{"topic": t, "subString": "*"} for t in topics]
    data = {"clientID": "c", "consumerDataSet": [{"groupName": group, "subscriptionDataSet": subs}]}
    return json.dumps(data).encode()


# -- rules -------------------------------------------------------------------------------------


def test_perm_parsing_and_checking() -> None:
    assert parse_perm("PUB|SUB") == PUB | SUB == parse_perm(" SUB|PUB ")
    assert parse_perm(None) == DENY == parse_perm("nonsense") == parse_perm("DENY")
    assert check_permission(SUB, PUB | SUB) and not check_permission(PUB, SUB)
    assert not check_permission(SUB, DENY | SUB)


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("", [], ["127.0.0.1"]),
        (None, [], ["127.0.0.1"]),
        ("*", ["127.0.0.1", "10.1.2.3"], []),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("192.168.0.*", ["192.168.0.7"], ["192.168.1.7"]),
        ("10.10.*.*", ["10.10.3.4"], ["10.11.3.4"]),
        ("10.0.0.10-20", ["10.0.0.15"], ["10.0.0.21"]),
        ("10.0.0.{1,2,3}", ["10.0.0.2"], ["10.0.0.4"]),
        ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
    ],
)
def test_white_remote_address_patterns(pattern: str | None, yes: list[str], no: list[str]) -> None:
    m = address_matcher(pattern)
    assert all(m(ip) for ip in yes) and not any(m(ip) for ip in no)


def test_bad_patterns_and_accounts_are_refused_without_echoing_secrets() -> None:
    with pytest.raises(ValueError):
        address_matcher("10.0.0.300-400")
    with pytest.raises(ValueError) as ei:
        Account("shortAK", "short")
    assert "short'" not in str(ei.value).replace("'shortAK'", "")
    with pytest.raises(ValueError, match="twice"):
        AclConfig((Account("rmqUser1", "secret123"), Account("rmqUser1", "secret456")))
    acct = CONFIG.account("rmqUser")
    assert acct is not None and "rmqSecret123" not in repr(acct) and "rmqSecret123" not in repr(CONFIG)


def test_yaml_round_trip_and_file(tmp_path: Path) -> None:
    f = tmp_path / "plain_acl.yml"
    f.write_text(PLAIN_ACL_YML)
    loaded = AclConfig.coerce(f)
    assert loaded == CONFIG == AclConfig.from_mapping(CONFIG.to_mapping())
    assert loaded.admin_account() == CONFIG.account("RocketMQ")
    assert CONFIG.account("RocketMQ") is not None and CONFIG.account("RocketMQ").secret_key == "12345678"  # type: ignore[union-attr]


def test_resources_of_requests_4x() -> None:
    assert needs4(310, {"a": "pg", "b": "T"}, b"") == {"T": PUB}
    assert needs4(310, {"a": "g", "b": "%RETRY%g"}, b"") == {"%RETRY%g": SUB}
    assert needs4(320, {"a": "pg", "b": "T"}, b"") == {}  # not checked in 4.9.8 (#5303)
    assert needs4(11, {"topic": "T", "consumerGroup": "g"}, b"") == {"T": SUB, "%RETRY%g": SUB}
    assert needs4(36, {"group": "g"}, b"") == {"%RETRY%g": SUB}
    assert needs4(34, {}, _heartbeat("g", ["T", "%RETRY%g"])) == {"%RETRY%g": SUB, "T": SUB}
    assert needs4(35, {"clientID": "c", "producerGroup": "pg"}, b"") == {}
    assert needs4(14, {"topic": "T", "consumerGroup": "g"}, b"") == {}  # QUERY_CONSUMER_OFFSET: none
    # LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: no case in 4.9.8's PlainAccessValidator.parse, signature only
    assert needs4(41, {}, _lock_body("g", ["T"])) == {} == needs4(42, {}, _lock_body("g", ["T"]))


def test_resources_of_requests_5x() -> None:
    assert needs5(320, {"a": "pg", "b": "T"}, b"") == [("Topic", "T", ("PUB",))]
    assert needs5(11, {"topic": "%RETRY%g", "consumerGroup": "g"}, b"") == [("Group", "g", ("SUB",))]
    lock = json.dumps({"consumerGroup": "g", "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 0}]})
    assert needs5(41, {}, lock.encode()) == [("Group", "g", ("SUB",)), ("Topic", "T", ("SUB",))]
    # 5.3.3 DefaultAuthorizationContextBuilder: 42 as 41, SUB on the group and each topic (not retry topics)
    assert needs5(42, {}, _lock_body("g", ["T", "%RETRY%g", "U"])) == [
        ("Group", "g", ("SUB",)),
        ("Topic", "T", ("SUB",)),
        ("Topic", "U", ("SUB",)),
    ]


def _lock_body(group: str, topics: list[str]) -> bytes:
    mqs = [{"brokerName": "broker-a", "queueId": 0, "topic": t} for t in topics]
    return json.dumps({"clientId": "127.0.0.1@c", "consumerGroup": group, "mqSet": mqs}).encode()


@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
def test_lock_and_unlock_checks(code: int) -> None:
    """4.9.8 checks only the signature of 41/42 (a group and topic without SUB pass); 5.3.3 needs SUB on
    the group and on each topic of the body."""
    no_sub = AclConfig(
        (
            Account(
                "rmqUser",
                "rmqSecret123",
                default_topic_perm="DENY",
                default_group_perm="DENY",
                topic_perms=("AclT=PUB|SUB", "AclPub=PUB"),
                group_perms=("acl_g=SUB",),
            ),
        )
    )
    ip = "127.0.0.1"
    ok, no_group, no_topic = (
        _lock_body("acl_g", ["AclT"]),
        _lock_body("acl_nosub", ["AclT"]),
        _lock_body("acl_g", ["AclT", "AclPub"]),
    )
    v4, v5 = AclChecker(no_sub, 4), AclChecker(no_sub, 5)
    for body in (ok, no_group, no_topic):
        assert v4.check(_req(code, {}, body), ip) is None
        bad = v4.check(_req(code, {}, body, sk="wrongSecret99"), ip)
        assert bad is not None and bad[0] == 1 and "Check signature failed for accessKey=rmqUser" in bad[1]
        unsigned = v4.check(RemotingCommand.request(code, None, body), ip)
        assert unsigned is not None and "No accessKey is configured" in unsigned[1]
    assert v5.check(_req(code, {}, ok), ip) is None
    assert v5.check(_req(code, {}, no_group), ip) == (
        16,
        "User:rmqUser has no permission to access Group:acl_nosub from 127.0.0.1, the decision is deny.",
    )
    assert v5.check(_req(code, {}, no_topic), ip) == (
        16,
        "User:rmqUser has no permission to access Topic:AclPub from 127.0.0.1, the decision is deny.",
    )
    assert v5.check(_req(code, {}, ok, sk="wrongSecret99"), ip) == (16, "check signature failed.")


def test_check_order_and_remarks_4x() -> None:
    acl = AclChecker(CONFIG, 4)
    ok = _req(RequestCode.PULL_MESSAGE, {"topic": "AclT", "consumerGroup": "acl_g"})
    assert acl.check(ok, "127.0.0.1") is None
    unsigned = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "AclT"})
    code, remark = acl.check(unsigned, "127.0.0.1") or (0, "")
    assert code == 1 and remark.startswith(EXC + "No accessKey is configured, ")
    refused = acl.check(_req(11, {"topic": "Other", "consumerGroup": "acl_g"}), "127.0.0.1")
    assert refused is not None and "No default permission for topic:Other" in refused[1]
    assert "checkPerm(PlainPermissionManager.java:606)" in refused[1]  # the default perm's branch
    # trace topic PUB: allowed whatever the topic permissions
    assert acl.check(_req(310, {"a": "pg", "b": "RMQ_SYS_TRACE_TOPIC"}), "127.0.0.1") is None
    # the group's SUB for a send to its retry topic
    assert acl.check(_req(310, {"a": "acl_g", "b": "%RETRY%acl_g"}), "127.0.0.1") is None
    no_group = AclChecker(
        AclConfig(
            (Account("rmqUser", "rmqSecret123", default_topic_perm="PUB|SUB", default_group_perm="DENY"),)
        ),
        4,
    )
    denied = no_group.check(_req(36, {"group": "acl_g", "offset": "1"}), "127.0.0.1")
    assert denied is not None and "No default permission for group:acl_g" in denied[1]
    # the admin with no resource perms passes everything, admin codes included
    admin = _req(17, {"topic": "X"}, ak="RocketMQ", sk="12345678")
    assert acl.check(admin, "127.0.0.1") is None
    not_admin = acl.check(_req(17, {"topic": "X"}), "127.0.0.1")
    assert not_admin is not None and "Need admin permission for request code=17" in not_admin[1]


def test_whitelists_skip_signatures_4x() -> None:
    white = AclConfig(
        (Account("rmqUser", "rmqSecret123", white_remote_address="10.0.0.*", default_topic_perm="DENY"),),
        ("192.168.0.*",),
    )
    acl = AclChecker(white, 4)
    unsigned = RemotingCommand.request(310, {"a": "pg", "b": "T"}, b"x")
    assert acl.check(unsigned, "192.168.0.3") is None  # global whitelist: nothing checked
    assert acl.check(unsigned, "10.0.0.3") is not None  # no access key: refused before the account's list
    bad_sig = _req(310, {"a": "pg", "b": "T"}, b"x", sk="wrongSecret99")
    assert acl.check(bad_sig, "10.0.0.3") is None  # the account's whitelist: signature and perms skipped
    assert acl.check(bad_sig, "10.0.1.3") is not None
    # 5.x migrates no whitelist
    assert AclChecker(white, 5).check(unsigned, "192.168.0.3") == (16, "username cannot be null.")


def test_remarks_5x() -> None:
    acl = AclChecker(CONFIG, 5)
    ip = "127.0.0.1"
    assert acl.check(_req(11, {"topic": "AclT", "consumerGroup": "acl_g"}), ip) is None
    assert acl.check(_req(11, {"topic": "AclT"}, ak="nobodyAK", sk="whatever1"), ip) == (
        ResponseCode.NO_PERMISSION,
        "User:nobodyAK is not found.",
    )
    assert acl.check(_req(11, {"topic": "AclT"}, sk="wrongSecret99"), ip) == (16, "check signature failed.")
    deny = acl.check(_req(320, {"a": "pg", "b": "AclDeny"}, b"batch"), ip)
    assert deny == (
        16,
        "User:rmqUser has no permission to access Topic:AclDeny from 127.0.0.1, the decision is deny.",
    )
    other = acl.check(_req(310, {"a": "pg", "b": "Other"}, b"x"), ip)
    assert other is not None and other[1].endswith("Topic:Other from 127.0.0.1, the decision is deny.")
    nomatch = AclChecker(AclConfig((Account("rmqUser", "rmqSecret123", topic_perms=("T=PUB",)),)), 5)
    res = nomatch.check(_req(11, {"topic": "T", "consumerGroup": "g"}), ip)
    assert res is not None and res[1].endswith("access Topic:T from 127.0.0.1, no matched policies.")
    assert acl.check(_req(17, {"topic": "X"}, ak="RocketMQ", sk="12345678"), ip) is None  # super user


# -- replay of the captures ---------------------------------------------------------------------


def _acl_refusal(resp: Frame | RemotingCommand | None) -> tuple[int, str] | None:
    if resp is None:
        return None
    code = resp.code
    remark = resp.header.get("remark") if isinstance(resp, Frame) else resp.remark
    if code == ResponseCode.SYSTEM_ERROR and remark and remark.startswith(EXC):
        return code, remark
    return None


async def _answer(client: RawClient, req: Frame) -> RemotingCommand | str | None:
    cmd = decode_frame(req.raw)
    try:
        return await call(client, cmd, wait=1.5)
    except TimeoutError:
        return "held"  # a long poll held by the broker: it got through the ACL check


@pytest.mark.parametrize("file", FILES, ids=[f[8:-6] for f in FILES])
async def test_replay_acl_captures(file: str) -> None:
    timing = Timing.fast()
    async with EmbeddedCluster(timing=timing, queues=8, acl=CONFIG) as cluster:
        for topic in ("AclT", "AclDeny"):
            await cluster.create_topic(topic)  # signed with the admin account
        reqs = [(q, r) for q, r in pairs(file) if q.dir == "c2s" and q.kind in ("request", "oneway")]
        async with RawClient(cluster.brokers[0].addr) as broker, RawClient(cluster.namesrv_addr) as ns:
            answers = await asyncio.gather(
                *(_answer(broker if q.peer == "broker" else ns, q) for q, _ in reqs)
            )
        checked = refused = 0
        for (q, r), ours in zip(reqs, answers, strict=True):
            if q.kind == "oneway":
                assert ours is None
                continue
            where = f"{file} seq {q.seq} code {q.code}"
            assert ours is not None, where
            if ours == "held":
                assert q.code == RequestCode.PULL_MESSAGE and _acl_refusal(r) is None, where
                continue
            assert isinstance(ours, RemotingCommand)
            want = _acl_refusal(r)
            assert _acl_refusal(ours) == want, where
            if want is not None:
                assert ours.serialize_type.name == "JSON" and not ours.ext_fields, where  # as the real one
                refused += 1
            checked += 1
        assert checked > 5
        if file == "acl/acl-denied.jsonl":
            # every refusal of the capture (namesrv lookups with bad keys pass: it does not check)
            assert refused == sum(1 for _, r in reqs if _acl_refusal(r) is not None) == 19
