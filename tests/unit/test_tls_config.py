"""TLSConfig (client) and ServerTLS (embedded) models, the environment switch, the SSLContext they
build, the handshake-error mapping and the CLI options."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest
from support.tls import KEY_PASSWORD, Certs, make_certs

from rmq_async import ClientConfig, ConfigError, ConnectError, TLSConfig, TLSError
from rmq_async.cli.tls import add_tls_arguments, export_tls_env, tls_options
from rmq_async.embedded import ServerTLS
from rmq_async.transport.tls import client_ssl_context, handshake_error

_TLS_ENV = ("RMQ_TLS", "RMQ_TLS_CA_FILE", "RMQ_TLS_INSECURE", "RMQ_TLS_CERT_FILE", "RMQ_TLS_KEY_FILE",
            "RMQ_TLS_KEY_PASSWORD", "RMQ_TLS_SERVER_HOSTNAME")  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _TLS_ENV:  # set then deleted: restored as it was after the test (export_tls_env sets)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


# -- TLSConfig ----------------------------------------------------------------------------------------


def test_defaults_follow_python_conventions() -> None:
    cfg = TLSConfig()
    assert cfg.verify and cfg.check_hostname and cfg.ca_file is None and cfg.cert_file is None
    ctx = client_ssl_context(cfg)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_verify_false_is_trust_all() -> None:
    ctx = client_ssl_context(TLSConfig(verify=False))
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_check_hostname_false_still_verifies_the_chain(certs: Certs) -> None:
    ctx = client_ssl_context(TLSConfig(ca_file=certs.ca, check_hostname=False))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key_file": "k.pem"}, "need cert_file"),
        ({"key_password": "pw"}, "need cert_file"),
        ({"verify": False, "ca_file": "ca.pem"}, "not used with verify=False"),
        ({"verify": "maybe"}, "verify"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_invalid_combinations(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TLSConfig(**kwargs)


def test_key_password_never_shows() -> None:
    cfg = TLSConfig(cert_file="c.pem", key_password="hunter2")
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())
    with pytest.raises(ConfigError) as info:
        TLSConfig(key_password="hunter2")  # a model-level error echoes the input: hidden
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigError) as info2:
        ClientConfig(tls={"key_password": "hunter2"})
    assert "hunter2" not in str(info2.value)


def test_client_config_tls_shorthands(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ClientConfig(tls=True).tls == TLSConfig()
    assert ClientConfig().effective_tls() is None  # nothing set: plain
    monkeypatch.setenv("RMQ_TLS", "1")
    assert ClientConfig().effective_tls() == TLSConfig()  # Java's -Dtls.enable=true
    assert ClientConfig(tls=False).effective_tls() is None  # explicit opt-out beats the environment
    explicit = TLSConfig(verify=False)
    assert ClientConfig(tls=explicit).effective_tls() is explicit


def test_from_env_mirrors_the_java_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RMQ_TLS": "true",
        "RMQ_TLS_CA_FILE": "/ca.pem",
        "RMQ_TLS_CERT_FILE": "/c.pem",
        "RMQ_TLS_KEY_FILE": "/k.pem",
        "RMQ_TLS_KEY_PASSWORD": "pw",
        "RMQ_TLS_SERVER_HOSTNAME": "broker.example",
    }
    cfg = TLSConfig.from_env(env)
    assert cfg is not None
    assert (cfg.ca_file, cfg.cert_file, cfg.key_file, cfg.server_hostname) == (
        "/ca.pem", "/c.pem", "/k.pem", "broker.example"
    )  # fmt: skip
    assert cfg.key_password is not None and cfg.key_password.get_secret_value() == "pw"
    assert TLSConfig.from_env({"RMQ_TLS": "0", "RMQ_TLS_CA_FILE": "/ca.pem"}) is None
    assert TLSConfig.from_env({}) is None
    insecure = TLSConfig.from_env({"RMQ_TLS_INSECURE": "yes"})
    assert insecure is not None and not insecure.verify
    with pytest.raises(ConfigError, match="RMQ_TLS="):
        TLSConfig.from_env({"RMQ_TLS": "perhaps"})


def test_unreadable_files_are_config_errors(tmp_path: Path, certs: Certs) -> None:
    with pytest.raises(ConfigError, match="ca_file"):
        client_ssl_context(TLSConfig(ca_file=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match="client certificate") as info:
        client_ssl_context(
            TLSConfig(cert_file=certs.client_cert, key_file=certs.client_key_encrypted, key_password="wrong")
        )
    assert "wrong" not in str(info.value).replace("wrong password", "")
    ok = TLSConfig(
        cert_file=certs.client_cert, key_file=certs.client_key_encrypted, key_password=KEY_PASSWORD
    )
    client_ssl_context(ok)


# -- handshake errors ---------------------------------------------------------------------------------


def test_handshake_error_mapping() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_code, verify.verify_message = 20, "unable to get local issuer certificate"
    err = handshake_error(verify, "h:1")
    assert isinstance(err, TLSError) and isinstance(err, ConnectError) and not err.retriable
    assert (
        "unable to get local issuer certificate" in str(err) and "ca_file" in str(err) and "[h:1]" in str(err)
    )
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed")
    mismatch.verify_code, mismatch.verify_message = 62, "Hostname mismatch"
    assert "server_hostname" in str(handshake_error(mismatch, "h:1"))
    assert "disabled" in str(handshake_error(ConnectionResetError(104, "reset"), "h:1"))
    assert isinstance(handshake_error(ssl.SSLError(1, "WRONG_VERSION_NUMBER"), "h:1"), TLSError)
    assert handshake_error(ConnectionRefusedError(111, "refused"), "h:1") is None  # TCP-level


# -- ServerTLS ----------------------------------------------------------------------------------------


def test_server_tls_validation_and_repr(certs: Certs) -> None:
    with pytest.raises(ValueError, match="needs cert_file"):
        ServerTLS(mode="enforcing")
    with pytest.raises(ValueError, match="TLS mode"):
        ServerTLS(mode="strict", cert_file=certs.server)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs ca_file"):
        ServerTLS(cert_file=certs.server, client_auth="require")
    assert not ServerTLS(mode="disabled").active
    tls = ServerTLS(mode="permissive", cert_file=certs.server, key_password="hunter2")
    assert tls.active and "hunter2" not in repr(tls)
    assert tls.inner_client_context() is None  # plain is accepted: the cluster's own links stay plain
    enforcing = ServerTLS(mode="enforcing", cert_file=certs.server, ca_file=certs.ca, client_auth="require")
    assert enforcing.server_context().verify_mode == ssl.CERT_REQUIRED
    inner = enforcing.inner_client_context()
    assert inner is not None and inner.verify_mode == ssl.CERT_NONE


# -- CLI options --------------------------------------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_tls_arguments(p)
    return p.parse_args(argv)


def test_cli_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tls_options(_parse()) == {}  # the environment decides
    assert tls_options(_parse("--tls")) == {"tls": TLSConfig()}
    assert tls_options(_parse("--tls-ca", "/ca.pem")) == {"tls": TLSConfig(ca_file="/ca.pem")}
    assert tls_options(_parse("--tls-insecure")) == {"tls": TLSConfig(verify=False)}
    monkeypatch.setenv("RMQ_TLS_KEY_PASSWORD", "pw")
    opts = tls_options(_parse("--tls-cert", "/c.pem", "--tls-key", "/k.pem"))["tls"]
    assert opts.cert_file == "/c.pem" and opts.key_password.get_secret_value() == "pw"
    with pytest.raises(SystemExit, match="bad TLS options"):
        tls_options(_parse("--tls-insecure", "--tls-ca", "/ca.pem"))
    export_tls_env(_parse("--tls-ca", "/ca.pem"))
    assert ClientConfig().effective_tls() == TLSConfig(ca_file="/ca.pem")


# -- Spark source options -----------------------------------------------------------------------------


def test_spark_tls_options() -> None:
    from rmq_async.spark.options import parse_options

    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    assert parse_options(base, streaming=False).tls is None  # the executors' environment decides
    assert parse_options({**base, "tls": "false"}, streaming=False).tls is False
    assert parse_options({**base, "tls": "true"}, streaming=False).tls == TLSConfig()
    opts = parse_options(
        {**base, "tlsCaFile": "/ca.pem", "tlsCertFile": "/c.pem", "tlsKeyFile": "/k.pem",
         "tlsKeyPassword": "hunter2", "tlsServerHostname": "b.example"},
        streaming=True,
    )  # fmt: skip
    assert isinstance(opts.tls, TLSConfig) and opts.tls.ca_file == "/ca.pem"
    assert opts.tls.server_hostname == "b.example" and "hunter2" not in repr(opts)
    assert parse_options({**base, "tlsInsecure": "true"}, streaming=False).tls == TLSConfig(verify=False)
    with pytest.raises(ConfigError, match="'tls' is false"):
        parse_options({**base, "tls": "false", "tlsCaFile": "/ca.pem"}, streaming=False)
    with pytest.raises(ConfigError) as info:
        parse_options({**base, "tlsKeyPassword": "hunter2"}, streaming=False)
    assert "hunter2" not in str(info.value)
