"""ACL 1.0 signing (rmq_async.protocol.acl) against every signed frame of the acl captures.

The captures (tests/fixtures/acl/, described in tests/fixtures/acl/ACL-NOTES.md) are the 4.9.8 Java client
with ``AclClientRPCHook`` against an ACL-enabled 4.9.8 name server and broker. They live in a sub-folder
so that the tests replaying every ``tests/fixtures/*.jsonl`` on the (ACL-less) embedded cluster skip them.
The one code our clients send that the captures lack, the orderly consumer's LOCK_BATCH_MQ (41) and
UNLOCK_BATCH_MQ (42), has its own vectors (``LOCK_VECTORS``).
"""

from __future__ import annotations

import base64
import functools
import hmac
import struct
from collections.abc import Mapping
from typing import cast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.wire import Frame, frames, pairs

from rmq_async.client.api import MQClientAPI
from rmq_async.protocol.acl import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    RequestSigner,
    sign_fields,
    signature,
    verify,
)
from rmq_async.protocol.codes import MQ_VERSION_V4_9_8, RequestCode, SerializeType
from rmq_async.protocol.command import RemotingCommand, decode_frame
from rmq_async.protocol.headers import REQUEST_HEADERS, SendMessageRequestHeader
from rmq_async.protocol.mq import MessageQueue
from rmq_async.transport.pool import ConnectionPool

FILES = (
    "acl/acl-produce-consume.jsonl",
    "acl/acl-denied.jsonl",
    "acl/acl-sendback.jsonl",
    "acl/acl-binary.jsonl",
    "acl/acl-token.jsonl",
    "acl/acl-query.jsonl",
)
#: the broker's plain_acl.yml (test-only secrets)
ACCOUNTS = {"RocketMQ": "12345678", "rmqUser": "rmqSecret123"}
TOKEN = "tok-test-0001"
#: acl-denied: the rmqUser push consumer (namesrv-3, broker-4) and pull consumer (namesrv-5, broker-6)
#: configured with the wrong secret
WRONG_SECRET_CONNS = frozenset({"namesrv-3", "broker-4", "namesrv-5", "broker-6"})
#: acl-query: the producer whose hook leaves _UNIQUE_KEY_QUERY out of the signed content (the broker's rule)
BROKER_RULE_FRAMES = frozenset({("acl/acl-query.jsonl", 23), ("acl/acl-query.jsonl", 25)})
SIGNED_KEYS = (ACCESS_KEY, SECURITY_TOKEN, SIGNATURE)


def _client_secret(fr: Frame) -> str:
    """The secret the client that sent ``fr`` was configured with (ACL-NOTES.md, Files and Denials)."""
    ak = fr.header["extFields"][ACCESS_KEY]
    if ak == "unknownAK":
        return "unknownSecret1"
    assert ak == "rmqUser"
    if fr.file == "acl/acl-denied.jsonl" and fr.conn in WRONG_SECRET_CONNS:
        return "wrongSecret99"
    return "rmqSecret123"


@functools.cache
def _requests() -> tuple[Frame, ...]:
    return tuple(fr for f in FILES for fr in frames(f) if fr.dir == "c2s")


def _ids(frs: tuple[Frame, ...]) -> list[str]:
    return [f"{fr.file[4:-6]}-{fr.seq}-{fr.code}" for fr in frs]


REQUESTS = _requests()
CLIENT_RULE = tuple(fr for fr in REQUESTS if (fr.file, fr.seq) not in BROKER_RULE_FRAMES)


def _wire_ext(fr: Frame) -> dict[str, str]:
    """The ext fields in wire order: the JSON text's order, or the binary map's own (HashMap) part."""
    if fr.serialize == "JSON":
        ext: dict[str, str] = fr.header["extFields"]  # parsed from the JSON text, in its order
        return dict(ext)
    entries = _binary_ext_entries(fr.raw)
    unique = len({k for k, _ in entries})
    return dict(entries[len(entries) - unique :])


def _binary_ext_entries(raw: bytes) -> list[tuple[str, str]]:
    """Every (key, value) of a ROCKETMQ binary header's ext map, duplicates included."""
    (mark,) = struct.unpack_from(">I", raw, 4)
    header = raw[8 : 8 + (mark & 0xFFFFFF)]
    pos = 13  # code, language, version, opaque, flag
    (remark_len,) = struct.unpack_from(">i", header, pos)
    pos += 4 + remark_len
    (map_len,) = struct.unpack_from(">i", header, pos)
    pos += 4
    end, out = pos + map_len, []
    while pos < end:
        (klen,) = struct.unpack_from(">h", header, pos)
        key = header[pos + 2 : pos + 2 + klen].decode()
        pos += 2 + klen
        (vlen,) = struct.unpack_from(">i", header, pos)
        out.append((key, header[pos + 4 : pos + 4 + vlen].decode()))
        pos += 4 + vlen
    assert pos == end == len(header)
    return out


def _unsigned(ext: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in ext.items() if k not in SIGNED_KEYS}


# -- the captures as a whole --------------------------------------------------------------------------


def test_every_client_request_is_signed_and_nothing_else_is() -> None:
    assert len(REQUESTS) == 254
    assert all(SIGNATURE in fr.header["extFields"] for fr in REQUESTS)
    assert all(ACCESS_KEY in fr.header["extFields"] for fr in REQUESTS)
    tokens = [fr for fr in REQUESTS if SECURITY_TOKEN in fr.header["extFields"]]
    assert {fr.file for fr in tokens} == {"acl/acl-token.jsonl"} and len(tokens) == 6
    assert all(fr.header["extFields"][SECURITY_TOKEN] == TOKEN for fr in tokens)
    for f in FILES:  # responses and broker-initiated requests (40) carry none
        for fr in frames(f):
            if fr.dir == "s2c":
                assert not set(fr.header.get("extFields") or {}) & set(SIGNED_KEYS), (f, fr.seq)
    # what the 254 cover: request codes, oneways, serialize types, bodies
    assert {fr.code for fr in REQUESTS} == {11, 12, 14, 15, 17, 34, 35, 36, 38, 105, 310, 320}
    assert {fr.kind for fr in REQUESTS if fr.code == 15} == {"oneway"}
    assert sum(fr.serialize == "ROCKETMQ" for fr in REQUESTS) == 62
    assert {fr.code for fr in REQUESTS if fr.body_len} == {34, 310, 320}
    assert {fr.peer for fr in REQUESTS} == {"namesrv", "broker"}
    assert sum("ReqT" in fr.header["extFields"] for fr in REQUESTS) == 10  # the pull consumer's hook


@pytest.mark.parametrize("fr", CLIENT_RULE, ids=_ids(CLIENT_RULE))
def test_captured_signature_is_recomputed(fr: Frame) -> None:
    ext = fr.header["extFields"]
    secret = _client_secret(fr)
    assert signature(ext, fr.body, secret) == ext[SIGNATURE]
    assert signature(ext, fr.body, secret.encode()) == ext[SIGNATURE]
    assert (
        signature(_unsigned(ext) | {ACCESS_KEY: ext[ACCESS_KEY]} | _token(ext), fr.body, secret)
        == ext[SIGNATURE]
    )
    for wrong in {"rmqSecret123", "wrongSecret99", "unknownSecret1", secret + "x", secret[:-1]} - {secret}:
        assert signature(ext, fr.body, wrong) != ext[SIGNATURE]
    if fr.body:  # the body is part of the content
        assert signature(ext, fr.body[:-1], secret) != ext[SIGNATURE]
        assert signature(ext, None, secret) != ext[SIGNATURE]
    else:
        assert signature(ext, None, secret) == signature(ext, b"", secret) == ext[SIGNATURE]


def _token(ext: Mapping[str, str]) -> dict[str, str]:
    return {SECURITY_TOKEN: ext[SECURITY_TOKEN]} if SECURITY_TOKEN in ext else {}


@pytest.mark.parametrize("fr", CLIENT_RULE, ids=_ids(CLIENT_RULE))
def test_sign_fields_reproduces_the_wire_ext_fields(fr: Frame) -> None:
    wire = _wire_ext(fr)
    assert wire == fr.header["extFields"]
    fields = _unsigned(wire)
    sign_fields(
        fields, fr.body, wire[ACCESS_KEY], _client_secret(fr), security_token=wire.get(SECURITY_TOKEN)
    )
    assert list(fields.items()) == list(wire.items())  # same fields, in the Java client's HashMap order
    # signing again (a retry) gives the same map: the old Signature is not signed
    sign_fields(
        fields, fr.body, wire[ACCESS_KEY], _client_secret(fr), security_token=wire.get(SECURITY_TOKEN)
    )
    assert list(fields.items()) == list(wire.items())


@pytest.mark.parametrize("fr", CLIENT_RULE, ids=_ids(CLIENT_RULE))
def test_signing_what_our_typed_headers_write(fr: Frame) -> None:
    """The transport's path: typed header -> to_ext_fields() (+ ReqT / _UNIQUE_KEY_QUERY) -> sign_fields."""
    wire = _wire_ext(fr)
    cls = REQUEST_HEADERS.get(fr.code)
    if fr.code in (12, 17):  # QUERY_MESSAGE, UPDATE_AND_CREATE_TOPIC: no typed header (yet)
        assert cls is None
        return
    if cls is None:
        assert fr.code == 34  # HEART_BEAT has no header: only AccessKey and Signature
        fields: dict[str, str] = {}
    elif fr.code in (310, 320):
        fields = SendMessageRequestHeader.from_v2_ext_fields(wire).to_v2_ext_fields()
    else:
        fields = cls.from_ext_fields(wire).to_ext_fields()
    extra = {k: v for k, v in _unsigned(wire).items() if k not in fields}
    assert set(extra) <= {"ReqT"}
    fields = extra | fields  # the stream clients' hook adds ReqT before the ACL hook
    sign_fields(fields, fr.body, wire[ACCESS_KEY], _client_secret(fr), wire.get(SECURITY_TOKEN))
    assert fields == wire
    if fr.serialize == "JSON":
        assert list(fields) == list(wire)


def test_binary_fast_coded_headers_repeat_their_fields() -> None:
    """ROCKETMQ headers of 310/320/11 (FastCodesHeader): the fast-coded fields, then the whole signed map
    again (the hook's makeCustomHeaderToNet filled it); the receiver keeps one of each, same value."""
    dup_codes = set()
    for fr in REQUESTS:
        if fr.serialize != "ROCKETMQ":
            continue
        entries = _binary_ext_entries(fr.raw)
        ext = dict(entries)
        assert ext == fr.header["extFields"] == decode_frame(fr.raw).ext_fields
        if len(entries) != len(ext):
            dup_codes.add(fr.code)
            head = entries[: len(entries) - len(ext)]
            assert all(k not in SIGNED_KEYS and ext[k] == v for k, v in head)
            assert {k for k, _ in head} == set(_unsigned(ext))
    assert dup_codes == {11, 310}  # (no 320 in the binary file)


# -- known values from ACL-NOTES.md ------------------------------------------------------------------


def test_worked_examples() -> None:
    sk = "rmqSecret123"
    assert signature({"topic": "AclT", ACCESS_KEY: "rmqUser"}, None, sk) == "coGvqNI4Ey8h3K+pEcLD/EHeTlY="
    with_token = {"topic": "AclT", ACCESS_KEY: "rmqUser", SECURITY_TOKEN: TOKEN}
    assert signature(with_token, None, sk) == "wS6/fVGY/PCyY2f19ZELIEYBVPg="
    commit = {
        "bname": "broker-acl",
        "commitOffset": "1",
        "consumerGroup": "acl_g",
        "queueId": "0",
        "topic": "AclT",
        ACCESS_KEY: "rmqUser",
    }
    assert signature(commit, None, sk) == "OVuuvh+kHMPct1s0fzViX3IlPis="
    fields = {"topic": "AclT"}
    sign_fields(fields, None, "rmqUser", sk)
    assert fields == {"topic": "AclT", ACCESS_KEY: "rmqUser", SIGNATURE: "coGvqNI4Ey8h3K+pEcLD/EHeTlY="}
    # an explicit HMAC-SHA1 over "rmqUserAclT": values only, keys in order, no separators
    digest = hmac.digest(b"rmqSecret123", b"rmqUserAclT", "sha1")
    assert base64.b64encode(digest).decode() == "coGvqNI4Ey8h3K+pEcLD/EHeTlY="


# Computed with an independent Java 17 program doing what AclClientRPCHook + AclUtils + AclSigner do
# (new TreeMap<>(fields), StringBuilder of the values, getBytes(UTF_8), + body, HmacSHA1, Base64).
JAVA_VECTORS: list[tuple[str, dict[str, str], bytes | None, str, str]] = [
    (
        "non-ASCII values and body",
        {ACCESS_KEY: "rmqUser", "topic": "AclT", "i": "city\x01上海\x02KEYS\x01键-1\x02TAGS\x01标签中文"},
        "acl-体".encode(),
        "rmqSecret123",
        "Tr1W2fphOL6TMNATF1p8eSUg3Jw=",
    ),
    (
        "non-BMP key before a high BMP key (Java: a, U+1F600, U+FB01x)",
        {ACCESS_KEY: "rmqUser", "\ufb01x": "BMP", "\U0001f600": "EMOJI", "a": "A"},
        None,
        "rmqSecret123",
        "Mbyez2W1bk35VPFSnzxCOXu1IaQ=",
    ),
    (
        "U+10000 sorts before U+FFFF",
        {"\uffff": "1", "\U00010000": "2"},
        None,
        "k",
        "0dfLpG+X3XGSjzCx2cv8s9OScuo=",
    ),
    ("non-ASCII secret", {ACCESS_KEY: "ak", "topic": "T"}, None, "秘密🔑", "7OdnpOdjjocrAgdIxoUvFrJgTss="),
    (
        "unpaired surrogate -> '?'",
        {ACCESS_KEY: "ak", "x": "a\ud800b"},
        None,
        "rmqSecret123",
        "MWLnADc/CLmKOuPkRrAVtufDleA=",
    ),
    (
        "pair split over two values",
        {ACCESS_KEY: "ak", "x1": "p\ud83d", "x2": "\ude00q"},
        None,
        "rmqSecret123",
        "o4MQbx4l1kzNEsIZVbnA8BaBWr0=",
    ),
    ("unpaired surrogate in the secret", {ACCESS_KEY: "ak"}, None, "s\udc00", "MMDZdplXl2DpQog98uipE0wgA0g="),
    (
        "binary body",
        {ACCESS_KEY: "ak", "topic": "T"},
        bytes(range(256)),
        "rmqSecret123",
        "MCmWTJ6s+8TtcGP27qtxbjrst6M=",
    ),
    ("nothing at all", {}, None, "rmqSecret123", "7yNqBBTHqrAvFa6+Ya2UPZr6JXM="),
]


@pytest.mark.parametrize(
    ("fields", "body", "secret", "want"), [v[1:] for v in JAVA_VECTORS], ids=[v[0] for v in JAVA_VECTORS]
)
def test_java_vectors(fields: dict[str, str], body: bytes | None, secret: str, want: str) -> None:
    assert signature(fields, body, secret) == want
    assert verify({**fields, SIGNATURE: want}, body, secret)


def test_non_bmp_keys_sort_by_utf16_code_units_not_code_points() -> None:
    fields = {ACCESS_KEY: "rmqUser", "\ufb01x": "BMP", "\U0001f600": "EMOJI", "a": "A"}
    java_content = b"rmqUser" + b"A" + b"EMOJI" + b"BMP"  # TreeMap: AccessKey, a, U+1F600, U+FB01x
    python_content = b"rmqUser" + b"A" + b"BMP" + b"EMOJI"  # sorted(): U+FB01x before U+1F600
    sig = signature(fields, None, "rmqSecret123")
    assert sig == base64.b64encode(hmac.digest(b"rmqSecret123", java_content, "sha1")).decode()
    assert sig != base64.b64encode(hmac.digest(b"rmqSecret123", python_content, "sha1")).decode()
    assert sig == signature(dict(reversed(fields.items())), None, "rmqSecret123")


# -- LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the orderly consumer's requests ---------------------------
#
# The captures have none (only an orderly consumer sends them). Both have no request header, as in the Java
# client (createRequestCommand(LOCK_BATCH_MQ, null)): the signed ext fields are AccessKey (and SecurityToken)
# only, and the content is their values in TreeMap order (AccessKey < SecurityToken) + the JSON lock body.
# The request code is not signed, so a 41 and a 42 with the same body have the same signature.
#
# Expected signatures: computed by hand below (content written out, stdlib HMAC-SHA1 + base64) and, as
# literals, by a throwaway Java 17 program (not in the repo) doing AclClientRPCHook + AclUtils by hand:
# new TreeMap<>(extFields), StringBuilder of the values (Signature skipped), getBytes(UTF_8) + body bytes
# (the body JSON below as a Java string literal, getBytes(UTF_8)), javax.crypto.Mac "HmacSHA1" keyed with
# secret.getBytes(UTF_8), Base64.getEncoder(); the same program gives the notes' worked example
# OVuuvh+kHMPct1s0fzViX3IlPis=.

_LOCK_BODY_2Q = (
    b'{"clientId":"127.0.0.1@acl-orderly","consumerGroup":"acl_g","mqSet":['
    b'{"brokerName":"broker-acl","queueId":0,"topic":"AclT"},'
    b'{"brokerName":"broker-acl","queueId":1,"topic":"AclT"}]}'
)
_LOCK_BODY_1Q = (
    b'{"clientId":"127.0.0.1@acl-orderly","consumerGroup":"acl_g","mqSet":['
    b'{"brokerName":"broker-acl","queueId":1,"topic":"AclT"}]}'
)
_LOCK_BODY_NON_ASCII = (
    '{"clientId":"127.0.0.1@消费者-🔑","consumerGroup":"acl_组","mqSet":['
    '{"brokerName":"broker-acl","queueId":3,"topic":"订单T"}]}'
).encode()
_MQS_2Q = [MessageQueue("AclT", "broker-acl", 0), MessageQueue("AclT", "broker-acl", 1)]
_MQS_1Q = [MessageQueue("AclT", "broker-acl", 1)]
_MQS_NON_ASCII = [MessageQueue("订单T", "broker-acl", 3)]

#: (id, code, oneway, group, client id, queues, body as fastjson writes it, access key, secret, token,
#: content before the body written out by hand, Java's signature)
LOCK_VECTORS: list[
    tuple[str, int, bool, str, str, list[MessageQueue], bytes, str, str, str | None, str, str]
] = [
    (
        "41",
        RequestCode.LOCK_BATCH_MQ,
        False,
        "acl_g",
        "127.0.0.1@acl-orderly",
        _MQS_2Q,
        _LOCK_BODY_2Q,
        "rmqUser",
        "rmqSecret123",
        None,
        "rmqUser",
        "UQhEJmNf/SQWpCTe94/a5MxETVA=",
    ),
    (
        "42-same-body-same-signature",
        RequestCode.UNLOCK_BATCH_MQ,
        False,
        "acl_g",
        "127.0.0.1@acl-orderly",
        _MQS_2Q,
        _LOCK_BODY_2Q,
        "rmqUser",
        "rmqSecret123",
        None,
        "rmqUser",
        "UQhEJmNf/SQWpCTe94/a5MxETVA=",
    ),
    (
        "41-token",
        RequestCode.LOCK_BATCH_MQ,
        False,
        "acl_g",
        "127.0.0.1@acl-orderly",
        _MQS_2Q,
        _LOCK_BODY_2Q,
        "rmqUser",
        "rmqSecret123",
        TOKEN,
        "rmqUser" + TOKEN,
        "Ego0fxyYERBTmFK9s1qnxGmjn48=",
    ),
    (
        "42-oneway",  # the release of a lock granted after its queue was dropped
        RequestCode.UNLOCK_BATCH_MQ,
        True,
        "acl_g",
        "127.0.0.1@acl-orderly",
        _MQS_1Q,
        _LOCK_BODY_1Q,
        "rmqUser",
        "rmqSecret123",
        None,
        "rmqUser",
        "Bnr9mxSI78GqB7NH0qFcuOcWSr8=",
    ),
    (
        "42-non-ASCII-token-and-body",
        RequestCode.UNLOCK_BATCH_MQ,
        False,
        "acl_组",
        "127.0.0.1@消费者-🔑",
        _MQS_NON_ASCII,
        _LOCK_BODY_NON_ASCII,
        "rmqUser",
        "rmqSecret123",
        "令牌-ü🔑",
        "rmqUser令牌-ü🔑",
        "Z4QrC2mkvTZTxybKT//DVN4KWMM=",
    ),
    (
        "41-non-ASCII-keys-and-body",
        RequestCode.LOCK_BATCH_MQ,
        False,
        "acl_组",
        "127.0.0.1@消费者-🔑",
        _MQS_NON_ASCII,
        _LOCK_BODY_NON_ASCII,
        "用户rmqUser",
        "秘密🔑rmq123",
        None,
        "用户rmqUser",
        "w2okNUxNFoIdFHr8P5ft2BBt29U=",
    ),
]


class _CapturingPool:
    """Stands in for the ConnectionPool under MQClientAPI: keeps the request as the client built it."""

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    async def request(
        self, addr: str, cmd: RemotingCommand, timeout: float, *, coalesce: bool = False
    ) -> RemotingCommand:
        self.sent.append(cmd)
        return cmd.make_response(0)  # a lock answer without a body: no queue locked

    async def oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


async def _client_lock_request(
    code: int, oneway: bool, group: str, client_id: str, mqs: list[MessageQueue], stype: SerializeType
) -> RemotingCommand:
    """The request our orderly consumer sends, built by MQClientAPI as it builds it (unsigned yet)."""
    pool = _CapturingPool()
    api = MQClientAPI(cast(ConnectionPool, pool), serialize_type=stype)
    if code == RequestCode.LOCK_BATCH_MQ:
        assert await api.lock_batch_mq("127.0.0.1:1", group, client_id, mqs, 1.0) == set()
    else:
        await api.unlock_batch_mq("127.0.0.1:1", group, client_id, mqs, 1.0, oneway=oneway)
    (cmd,) = pool.sent
    return cmd


@pytest.mark.parametrize("stype", list(SerializeType), ids=[t.name for t in SerializeType])
@pytest.mark.parametrize(
    ("code", "oneway", "group", "client_id", "mqs", "body", "ak", "sk", "token", "head", "want"),
    [v[1:] for v in LOCK_VECTORS],
    ids=[v[0] for v in LOCK_VECTORS],
)
async def test_lock_and_unlock_signature_vectors(
    stype: SerializeType,
    code: int,
    oneway: bool,
    group: str,
    client_id: str,
    mqs: list[MessageQueue],
    body: bytes,
    ak: str,
    sk: str,
    token: str | None,
    head: str,
    want: str,
) -> None:
    cmd = await _client_lock_request(code, oneway, group, client_id, mqs, stype)
    assert cmd.code == code and cmd.is_oneway == oneway and cmd.serialize_type == stype
    assert cmd.ext_fields == {}  # no request header, as the Java client
    assert cmd.body == body  # the lock body, byte for byte as written out above
    # the rule by hand: values in TreeMap key order (AccessKey, SecurityToken) + the body, HMAC-SHA1, base64
    by_hand = base64.b64encode(hmac.digest(sk.encode(), head.encode() + body, "sha1")).decode()
    assert by_hand == want  # == what the Java program computed
    transport = RemotingCommand.request(
        cmd.code, dict(cmd.ext_fields), cmd.body, oneway=oneway, serialize_type=stype
    )
    sign_fields(cmd.ext_fields, cmd.body, ak, sk, token)
    assert cmd.ext_fields == {ACCESS_KEY: ak, SIGNATURE: want} | ({SECURITY_TOKEN: token} if token else {})
    RequestSigner(ak, sk, token)(transport)  # what the transport runs on every request
    assert transport.ext_fields == cmd.ext_fields
    # the frame as it goes out, and the request as the broker decodes it
    frame = cmd.encode()
    assert frame[4] == stype
    got = decode_frame(frame)
    assert got.serialize_type == stype and got.code == code and got.body == body
    assert got.ext_fields == cmd.ext_fields
    assert verify(got.ext_fields, got.body, sk)  # 4.9.8 broker
    assert verify(got.ext_fields, got.body, sk.encode(), request_version=MQ_VERSION_V4_9_8)  # 5.x broker
    assert not verify(got.ext_fields, got.body, sk + "x")
    assert not verify(got.ext_fields, got.body[:-1] + b"]", sk)  # the body is signed
    assert not verify(got.ext_fields, None, sk)
    if token is not None:  # the token is signed too
        assert not verify({**got.ext_fields, SECURITY_TOKEN: token + "x"}, got.body, sk)


# -- the broker's check ------------------------------------------------------------------------------------


def _refusal(resp: Frame | None) -> str | None:
    remark = resp.header.get("remark") if resp is not None else None
    if resp is None or resp.code != 1 or not remark or "AclException" not in remark:
        return None
    return str(remark).split(": ", 1)[1].split(",", 1)[0]


@pytest.mark.parametrize("file", FILES)
def test_verify_agrees_with_the_broker(file: str) -> None:
    """With the broker's secrets, verify() is False exactly where the 4.9.8 broker answered
    ``Check signature failed``; the name server checks nothing."""
    checked = 0
    for req, resp in pairs(file):
        if req.dir != "c2s":
            continue
        cmd = decode_frame(req.raw)  # as the embedded broker will see it
        assert cmd.ext_fields == req.header["extFields"]
        ak = cmd.ext_fields[ACCESS_KEY]
        refusal = _refusal(resp)
        if ak not in ACCOUNTS:
            assert req.peer == "namesrv" or refusal == f"No acl config for {ak}"
            continue
        ok = verify(cmd.ext_fields, cmd.body or None, ACCOUNTS[ak])
        assert ok == verify(cmd.ext_fields, cmd.body, ACCOUNTS[ak].encode())
        signed_as_broker_checks = (
            UNIQUE_KEY_QUERY not in cmd.ext_fields or (req.file, req.seq) in BROKER_RULE_FRAMES
        )
        assert ok == (_client_secret(req) == ACCOUNTS[ak] and signed_as_broker_checks)
        if req.peer == "broker" and resp is not None:
            assert (refusal == f"Check signature failed for accessKey={ak}") == (not ok), req.seq
            checked += 1
        elif req.peer == "namesrv":
            assert resp is not None and resp.code in (0, 17)  # no ACL on the 4.9.8 name server
    assert checked


def test_unique_key_query_is_left_out_by_the_broker() -> None:
    """acl-query: the stock client signs _UNIQUE_KEY_QUERY (seq 11, 13: refused); a hook leaving it out
    of the content passes a 4.9.8 broker (seq 23, 25) but would fail a 5.x broker for a 4.9.8 client."""
    queries = {fr.seq: fr for fr in frames("acl/acl-query.jsonl") if fr.dir == "c2s" and fr.code == 12}
    assert sorted(queries) == [11, 13, 23, 25]
    sk = ACCOUNTS["rmqUser"]
    for seq, fr in queries.items():
        ext = fr.header["extFields"]
        stock = seq in (11, 13)
        assert UNIQUE_KEY_QUERY in ext
        assert (signature(ext, None, sk) == ext[SIGNATURE]) == stock
        without = {k: v for k, v in ext.items() if k != UNIQUE_KEY_QUERY}
        assert (signature(without, None, sk) == ext[SIGNATURE]) == (not stock)
        assert verify(ext, None, sk) == (not stock)  # 4.9.8 broker
        assert verify(ext, None, sk, request_version=399) == (not stock)  # 5.x broker, client <= V4_9_3
        assert verify(ext, None, sk, request_version=MQ_VERSION_V4_9_8) == stock  # 5.x broker
        assert fr.header["version"] == MQ_VERSION_V4_9_8


def test_verify_needs_a_signature() -> None:
    fields = {"topic": "AclT", ACCESS_KEY: "rmqUser"}
    assert not verify(fields, None, "rmqSecret123")
    sign_fields(fields, None, "rmqUser", "rmqSecret123")
    assert verify(fields, None, "rmqSecret123")
    assert not verify({**fields, SIGNATURE: fields[SIGNATURE].lower()}, None, "rmqSecret123")
    assert not verify({**fields, SIGNATURE: "\ud800"}, None, "rmqSecret123")
    assert not verify({**fields, "topic": "AclU"}, None, "rmqSecret123")
    assert not verify(fields, b"x", "rmqSecret123")


def test_sign_fields_on_a_plain_mapping_and_with_a_token() -> None:
    class Fields(dict[str, str]):
        pass

    plain: dict[str, str] = {"topic": "AclT"}
    sign_fields(plain, None, "rmqUser", b"rmqSecret123", security_token=TOKEN)
    assert plain == {
        "topic": "AclT",
        ACCESS_KEY: "rmqUser",
        SECURITY_TOKEN: TOKEN,
        SIGNATURE: "wS6/fVGY/PCyY2f19ZELIEYBVPg=",
    }
    sub = Fields(topic="AclT")
    sign_fields(sub, None, "rmqUser", "rmqSecret123")
    assert sub[SIGNATURE] == "coGvqNI4Ey8h3K+pEcLD/EHeTlY="


# -- properties --------------------------------------------------------------------------------------------

_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates included


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_ANY_TEXT, _ANY_TEXT, max_size=10),
    st.one_of(st.none(), st.binary(max_size=64)),
    st.one_of(_ANY_TEXT, st.binary(max_size=80)),
)
def test_signature_never_raises(fields: dict[str, str], body: bytes | None, secret: str | bytes) -> None:
    sig = signature(fields, body, secret)
    assert len(sig) == 28 and base64.b64decode(sig, validate=True)
    assert signature(dict(reversed(fields.items())), body, secret) == sig  # order of the dict is irrelevant
    assert signature({**fields, SIGNATURE: "x"}, body, secret) == signature(
        {k: v for k, v in fields.items() if k != SIGNATURE}, body, secret
    )
    assert verify({**fields, SIGNATURE: sig}, body, secret, request_version=479)


def _utf16_cmp(a: str, b: str) -> int:
    ua = struct.unpack(f">{len(a.encode('utf-16-be')) // 2}H", a.encode("utf-16-be"))
    ub = struct.unpack(f">{len(b.encode('utf-16-be')) // 2}H", b.encode("utf-16-be"))
    return (ua > ub) - (ua < ub)


_TEXT = st.text(max_size=8)  # no surrogates: plain UTF-8 applies


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _TEXT, max_size=10), st.binary(max_size=32), st.binary(min_size=1, max_size=32))
def test_signature_matches_a_model(fields: dict[str, str], body: bytes, secret: bytes) -> None:
    keys = sorted((k for k in fields if k != SIGNATURE), key=functools.cmp_to_key(_utf16_cmp))
    content = "".join(fields[k] for k in keys).encode() + body
    assert signature(fields, body, secret) == base64.b64encode(hmac.digest(secret, content, "sha1")).decode()


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(_ANY_TEXT, _ANY_TEXT, max_size=8),
    st.binary(max_size=32),
    _TEXT,
    st.one_of(st.none(), _TEXT),
    st.binary(max_size=40),
    st.binary(max_size=40),
)
def test_sign_then_verify(
    fields: dict[str, str], body: bytes, ak: str, token: str | None, secret: bytes, other: bytes
) -> None:
    assume(secret.rstrip(b"\0") != other.rstrip(b"\0"))  # HMAC pads short keys with zeros
    fields.pop(UNIQUE_KEY_QUERY, None)
    sign_fields(fields, body, ak, secret, token)
    assert fields[ACCESS_KEY] == ak and fields.get(SECURITY_TOKEN) == token
    assert verify(fields, body, secret) and verify(fields, body, secret, request_version=479)
    assert not verify(fields, body, other)
    assert not verify(fields, body + b"!", secret)
