"""ACL signing where the client does it: RequestSigner (protocol/acl.py), the transport's signer hook
(every request and oneway, right before encoding; never the answers to the server's requests), the
credentials' config and the classification of refusals (client/auth.py)."""

from __future__ import annotations

import pytest
from support.transport_server import FrameServer

from rmq_async.client.auth import AuthErrorLog, auth_resource, broker_error, is_auth_refusal
from rmq_async.config import ClientConfig, Credentials
from rmq_async.errors import AuthError, BrokerError, ConfigError
from rmq_async.protocol.acl import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, RequestSigner, sign_fields, verify
from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import RemotingCommand
from rmq_async.transport.connection import Connection
from rmq_async.transport.pool import ConnectionPool

SEND_EXT = {
    "a": "pg", "b": "TopicX", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1795300000000",
    "h": "0", "i": "UNIQ_KEY\x01ID\x02WAIT\x01true", "j": "0", "k": "false", "m": "false", "n": "b-a",
}  # fmt: skip


@pytest.mark.parametrize("token", [None, "tok-test-0001"])
def test_request_signer_matches_sign_fields_and_is_idempotent(token: str | None) -> None:
    signer = RequestSigner("rmqUser", "rmqSecret123", token)
    cmd = RemotingCommand.request(310, dict(SEND_EXT), b"x" * 1024)
    signer(cmd)
    ref = dict(SEND_EXT)
    sign_fields(ref, b"x" * 1024, "rmqUser", "rmqSecret123", token)
    assert cmd.ext_fields == ref  # same fields and values (the order may differ: brokers ignore it)
    assert (SECURITY_TOKEN in cmd.ext_fields) == (token is not None)
    first = cmd.ext_fields[SIGNATURE]
    signer(cmd)  # a retried request is signed again: same value
    assert cmd.ext_fields[SIGNATURE] == first and verify(cmd.ext_fields, cmd.body, "rmqSecret123")
    assert "rmqSecret123" not in repr(signer) and "rmqUser" in repr(signer)


def test_worked_example_of_the_notes() -> None:
    cmd = RemotingCommand.request(105, {"topic": "AclT"})
    RequestSigner("rmqUser", "rmqSecret123")(cmd)
    assert cmd.ext_fields[SIGNATURE] == "coGvqNI4Ey8h3K+pEcLD/EHeTlY="


async def test_connection_signs_requests_and_oneways_not_answers() -> None:
    signer = RequestSigner("rmqUser", "rmqSecret123")

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        return cmd.make_response(0, None, {"ok": "1"})

    async with FrameServer() as server, ConnectionPool(handler=handler, signer=signer) as pool:
        for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
            await pool.request(server.addr, RemotingCommand.request(11, {"topic": "T"}, serialize_type=st), 2)
        await pool.oneway(server.addr, RemotingCommand.request(15, {"topic": "T"}, oneway=True))
        await server.wait_for(lambda: len(server.received) == 3)
        for got in server.received:
            assert got.ext_fields[ACCESS_KEY] == "rmqUser"
            assert verify(got.ext_fields, got.body, "rmqSecret123")
        answer = await server.conns[0].request(RemotingCommand.request(307, {"consumerGroup": "g"}))
        assert ACCESS_KEY not in answer.ext_fields and SIGNATURE not in answer.ext_fields


async def test_no_signer_no_fields() -> None:
    async with FrameServer() as server, ConnectionPool() as pool:
        await pool.request(server.addr, RemotingCommand.request(11, {"topic": "T"}), 2)
        assert ACCESS_KEY not in server.received[-1].ext_fields


def test_credentials_from_config_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY", "RMQ_SECURITY_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    assert ClientConfig().effective_credentials() is None
    monkeypatch.setenv("RMQ_ACCESS_KEY", "envAK")
    with pytest.raises(ConfigError, match="RMQ_SECRET_KEY") as ei:
        ClientConfig().effective_credentials()
    monkeypatch.setenv("RMQ_SECRET_KEY", "envSecret1")
    monkeypatch.setenv("RMQ_SECURITY_TOKEN", "envTok")
    creds = ClientConfig().effective_credentials()
    assert creds is not None and creds.access_key == "envAK"
    assert creds.secret_key.get_secret_value() == "envSecret1"
    assert creds.security_token is not None and creds.security_token.get_secret_value() == "envTok"
    given = Credentials(access_key="mine", secret_key="mySecret99")
    assert ClientConfig(credentials=given).effective_credentials() == given  # the argument wins
    text = repr(ClientConfig(credentials=given)) + str(given) + given.model_dump_json()
    assert "mySecret99" not in text and "envSecret1" not in str(ei.value)
    with pytest.raises(ConfigError) as ei2:
        Credentials(access_key="a", secret_key=12345678)
    assert "12345678" not in str(ei2.value)


def test_refusals_are_classified_and_named() -> None:
    remark4 = (
        "org.apache.rocketmq.acl.common.AclException: No default permission for topic:AclDeny, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:611)"
    )
    assert is_auth_refusal(1, remark4) and not is_auth_refusal(1, "some other failure")
    remark5 = "User:rmqUser has no permission to access Group:acl_g from 127.0.0.1, the decision is deny."
    assert is_auth_refusal(16, remark5) and is_auth_refusal(16, "check signature failed.")
    assert not is_auth_refusal(16, "the topic[T] sending message is forbidden")  # a perm, not ACL
    assert auth_resource(remark4, {}) == "topic:AclDeny"
    assert auth_resource(remark5, {}) == "group:acl_g"
    assert auth_resource("check signature failed.", {"b": "T", "a": "pg"}) == "topic:T"
    assert auth_resource(None, {"consumerGroup": "g"}) == "group:g"
    err = broker_error(1, remark4, 310, {"b": "AclDeny"}, "127.0.0.1:10911")
    assert isinstance(err, AuthError) and not err.retriable and err.resource == "topic:AclDeny"
    assert "310" in str(err) and "topic:AclDeny" in str(err) and "No default permission" in str(err)
    other = broker_error(1, "oops", 310, {}, "a:1")
    assert type(other) is BrokerError and other.retriable


def test_auth_error_log_rate_limits_per_resource() -> None:
    now = [0.0]
    log = AuthErrorLog(interval=60.0, clock=lambda: now[0])
    heard: list[AuthError] = []
    log.add_listener(heard.append)
    e1 = AuthError(1, "x", request_code=11, resource="topic:T")
    e2 = AuthError(1, "y", request_code=11, resource="topic:U")
    assert log.note(e1) and not log.note(e1) and log.note(e2)
    now[0] = 61.0
    assert log.note(e1)
    assert len(heard) == 4 and log.current({"topic:T"}) is e1 and log.current({"group:g"}) is None
    snap = log.snapshot()
    assert [s["resource"] for s in snap] == ["topic:T", "topic:U"] and snap[0]["count"] == 3
    log.clear("topic:T")
    assert log.current({"topic:T"}) is None and bool(log)
