"""Configuration models: every tunable, with the Java client's and broker's defaults.

All timers of the client and of the embedded broker live in one :class:`Timing` model, so that tests
can run everything on :meth:`Timing.fast` (about 1/20 of the defaults) while users keep the Java
defaults. Its invariants are checked at construction:

* ``pull_timeout > suspend_timeout + held_pull_check_interval + margin``: a held pull is only answered
  at the broker's next hold check, so a shorter timeout fails against a real broker;
* ``lock_renew_interval < lock_lease < broker_lock_expiry``: a lease is renewed before it lapses, and
  the client stops trusting it before the broker frees the lock.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .protocol.strategies import NAME_ONLY_STRATEGIES, canonical_strategy

__all__ = [
    "CONSUMER_OPTION_DEFAULTS",
    "DEFAULT_DELAY_LEVELS",
    "FAST_DELAY_LEVELS",
    "ClientConfig",
    "ConfigModel",
    "ConsumeFrom",
    "ConsumerConfig",
    "Credentials",
    "LitePullConfig",
    "MessageModel",
    "OtelConfig",
    "ProducerConfig",
    "TLSConfig",
    "Timing",
    "TraceConfig",
    "client_settings",
    "consume_timestamp",
    "epoch_millis",
    "namesrv_addresses",
    "parse_delay_levels",
]

#: broker ``messageDelayLevel`` default (MessageStoreConfig.java)
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: the same 18 levels, about 1/20, for tests
FAST_DELAY_LEVELS = "50ms 250ms 500ms 1500ms 3s 6s 9s 12s 15s 18s 21s 24s 27s 30s 60s 90s 180s 360s"
#: ``DefaultMQPushConsumerImpl.popDelayLevel``: a POP consumer's failed message becomes visible again
#: after the Nth of these (N = its reconsume times; the last repeats)
DEFAULT_POP_DELAY_LEVELS = "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: the same 16, about 1/20, for tests
FAST_POP_DELAY_LEVELS = "500ms 1500ms 3s 6s 9s 12s 15s 18s 21s 24s 27s 30s 60s 90s 180s 360s"

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LEVEL = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> tuple[float, ...]:
    """``"1s 5s 1m"`` -> ``(1.0, 5.0, 60.0)`` seconds; level 1 is the first item."""
    out = []
    for item in text.split():
        m = _LEVEL.match(item)
        if not m:
            raise ValueError(f"bad delay level {item!r}: expected a number with ms, s, m, h or d (e.g. '5s')")
        out.append(float(m.group(1)) * _UNITS[m.group(2)])
    if not out:
        raise ValueError("delay levels must not be empty")
    return tuple(out)


#: fields whose invalid input is never echoed in a ConfigError (it may be a secret)
_SECRET_FIELDS = frozenset({"credentials", "secret_key", "security_token", "key_password"})


def _config_error(model: str, exc: ValidationError) -> ConfigError:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{model}.{loc}" if loc else model
        got = "(hidden)" if _SECRET_FIELDS & {str(p) for p in err["loc"]} or model == "Credentials" else None
        if isinstance(err.get("input"), Mapping) and _SECRET_FIELDS & set(err["input"]):
            got = "(hidden)"  # a model-level error echoes the whole input, secrets included
        lines.append(f"{where}: {err['msg']} (got {got or repr(err.get('input'))})")
    return ConfigError("; ".join(lines))


class ConfigModel(BaseModel):
    """Base of every config model: frozen, no unknown fields, errors raised as ConfigError."""

    # defer_build: a model's validator is built at its first use, not at import (``import rmq_async``
    # in a Spark planning process or a CLI start does not pay for models it never uses)
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False, defer_build=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic turns True into 1: a bool where a number is expected is a mistake
        if isinstance(v, bool) and info.field_name is not None:
            ann = cls.model_fields[info.field_name].annotation
            if ann in (int, float):
                raise ValueError(f"expected a number, got the bool {v}")
        return v

    def __init__(self, /, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _config_error(type(self).__name__, exc) from None


class Timing(ConfigModel):
    """Every timer of the client and the embedded broker, in seconds.

    Defaults are the Java ones. Use :meth:`fast` in tests (client and embedded broker alike).
    """

    # client
    heartbeat_interval: float = Field(default=30.0, gt=0, description="heartbeatBrokerInterval")
    route_refresh_interval: float = Field(default=30.0, gt=0, description="pollNameServerInterval")
    rebalance_interval: float = Field(default=20.0, gt=0, description="RebalanceService waitInterval")
    persist_interval: float = Field(default=5.0, gt=0, description="persistConsumerOffsetInterval")
    lock_renew_interval: float = Field(default=20.0, gt=0, description="REBALANCE_LOCK_INTERVAL")
    lock_lease: float = Field(
        default=30.0, gt=0, description="REBALANCE_LOCK_MAX_LIVE_TIME (client-side lease)"
    )
    suspend_timeout: float = Field(
        default=15.0, gt=0, description="BROKER_SUSPEND_MAX_TIME_MILLIS (long-poll hold)"
    )
    pull_timeout: float = Field(default=30.0, gt=0, description="CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND")
    request_timeout: float = Field(default=3.0, gt=0, description="default RPC timeout (sendMsgTimeout 3 s)")
    pull_error_delay: float = Field(default=3.0, ge=0, description="PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION")
    suspend_current_queue: float = Field(default=1.0, ge=0, description="suspendCurrentQueueTimeMillis")
    orderly_time_slice: float = Field(default=60.0, gt=0, description="MAX_TIME_CONSUME_CONTINUOUSLY")
    local_retry_delay: float = Field(default=5.0, ge=0, description="submitConsumeRequestLater delay")
    consume_timeout: float = Field(default=15 * 60.0, gt=0, description="consumeTimeout (15 min)")
    shutdown_timeout: float = Field(
        default=30.0, ge=0, description="awaitTerminationMillisWhenShutdown (bounded)"
    )
    # broker / name server
    broker_lock_expiry: float = Field(
        default=60.0, gt=0, description="rocketmq.broker.rebalance.lockMaxLiveTime"
    )
    held_pull_check_interval: float = Field(default=5.0, gt=0, description="PullRequestHoldService check")
    channel_idle_timeout: float = Field(
        default=120.0, gt=0, description="ClientHousekeepingService channel expiry"
    )
    broker_expiry: float = Field(default=120.0, gt=0, description="name server BROKER_CHANNEL_EXPIRED_TIME")
    broker_register_interval: float = Field(default=30.0, gt=0, description="registerNameServerPeriod")
    delay_levels: str = Field(default=DEFAULT_DELAY_LEVELS, description="messageDelayLevel")
    #: slack added to the pull timeout invariant
    pull_timeout_margin: float = Field(default=1.0, ge=0, description="seconds added to the pull timeout")
    # POP consumption (5.x)
    pop_invisible_time: float = Field(
        default=60.0, gt=0, le=300, description="popInvisibleTime (Java: 5 s .. 300 s)"
    )
    pop_delay_levels: str = Field(default=DEFAULT_POP_DELAY_LEVELS, description="popDelayLevel")
    pop_revive_interval: float = Field(default=1.0, gt=0, description="PopReviveService scan (broker)")
    # transactional messages (broker)
    transaction_check_interval: float = Field(
        default=60.0, gt=0, description="transactionCheckInterval: the half-message check-back period"
    )
    transaction_timeout: float = Field(
        default=6.0, ge=0, description="transactionTimeOut: a half message's age before its first check"
    )
    transaction_check_max: int = Field(
        default=15, ge=1, description="transactionCheckMax: checks of a half message before it is dropped"
    )

    @field_validator("delay_levels", "pop_delay_levels")
    @classmethod
    def _check_levels(cls, v: str) -> str:
        parse_delay_levels(v)
        return v

    @model_validator(mode="after")
    def _invariants(self) -> Self:
        need = self.suspend_timeout + self.held_pull_check_interval + self.pull_timeout_margin
        if self.pull_timeout <= need:
            raise ValueError(
                f"pull_timeout ({self.pull_timeout}s) must exceed suspend_timeout ({self.suspend_timeout}s) "
                f"+ held_pull_check_interval ({self.held_pull_check_interval}s) "
                f"+ pull_timeout_margin ({self.pull_timeout_margin}s): a held pull is answered only at "
                "the broker's next hold check"
            )
        if not self.lock_renew_interval < self.lock_lease < self.broker_lock_expiry:
            raise ValueError(
                f"need lock_renew_interval ({self.lock_renew_interval}s) < lock_lease ({self.lock_lease}s) "
                f"< broker_lock_expiry ({self.broker_lock_expiry}s)"
            )
        return self

    @property
    def delay_level_seconds(self) -> tuple[float, ...]:
        return parse_delay_levels(self.delay_levels)

    @property
    def pop_delay_seconds(self) -> tuple[float, ...]:
        return parse_delay_levels(self.pop_delay_levels)

    @classmethod
    def fast(cls, **overrides: Any) -> Timing:
        """The test profile: about 1/20 of the Java timers, shared by client and embedded broker."""
        values: dict[str, Any] = dict(
            heartbeat_interval=1.5,
            route_refresh_interval=1.5,
            rebalance_interval=1.0,
            persist_interval=0.25,
            lock_renew_interval=1.0,
            lock_lease=1.5,
            suspend_timeout=0.75,
            pull_timeout=2.0,
            request_timeout=3.0,
            pull_error_delay=0.15,
            suspend_current_queue=0.05,
            orderly_time_slice=3.0,
            local_retry_delay=0.25,
            consume_timeout=45.0,
            shutdown_timeout=5.0,
            broker_lock_expiry=3.0,
            held_pull_check_interval=0.25,
            channel_idle_timeout=6.0,
            broker_expiry=6.0,
            broker_register_interval=1.5,
            delay_levels=FAST_DELAY_LEVELS,
            pull_timeout_margin=0.5,
            pop_invisible_time=3.0,
            pop_delay_levels=FAST_POP_DELAY_LEVELS,
            pop_revive_interval=0.05,
            transaction_check_interval=0.2,
            transaction_timeout=0.3,
        )
        values.update(overrides)
        return cls(**values)

    @classmethod
    def default(cls) -> Timing:
        return cls()


_RETRY_DLQ = ("%RETRY%", "%DLQ%")
#: ``TopicValidator.SYSTEM_TOPIC_SET`` and the client's own producer group: never namespaced
_SYSTEM_RESOURCES = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CLIENT_INNER_PRODUCER",
    }
)


def _split_retry_dlq(resource: str) -> tuple[str, str]:
    for prefix in _RETRY_DLQ:
        if resource.startswith(prefix):
            return prefix, resource[len(prefix) :]
    return "", resource


def wrap_namespace(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.wrapNamespace``."""
    if not namespace or not resource:
        return resource
    if resource in _SYSTEM_RESOURCES or resource.startswith(("rmq_sys_", "CID_RMQ_SYS_")):
        return resource
    prefix, name = _split_retry_dlq(resource)
    if name.startswith(f"{namespace}%"):
        return resource
    return f"{prefix}{namespace}%{name}"


def unwrap_namespace(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.withoutNamespace``."""
    if not namespace or not resource:
        return resource
    prefix, name = _split_retry_dlq(resource)
    if name.startswith(f"{namespace}%"):
        return prefix + name[len(namespace) + 1 :]
    return resource


#: environment variables read by :meth:`Credentials.from_env` (when ``ClientConfig.credentials`` is None)
ENV_ACCESS_KEY, ENV_SECRET_KEY, ENV_SECURITY_TOKEN = "RMQ_ACCESS_KEY", "RMQ_SECRET_KEY", "RMQ_SECURITY_TOKEN"


class Credentials(ConfigModel):
    """ACL credentials (Java ``SessionCredentials``): every request is signed with them (ACL 1.0 rule).

    The secret key and the security token are :class:`pydantic.SecretStr`: a repr, ``str()``, a log
    line or ``model_dump()`` shows ``**********``; only the signer reads them. The access key is not a
    secret (brokers name it in their refusals).
    """

    access_key: str = Field(min_length=1, description="AccessKey (not a secret: brokers name it)")
    secret_key: SecretStr = Field(description="SecretKey: signs the requests, never shown")
    security_token: SecretStr | None = Field(default=None, description="SecurityToken (STS), if any")

    @field_validator("secret_key")
    @classmethod
    def _check_secret(cls, v: SecretStr) -> SecretStr:
        if not v.get_secret_value():
            raise ValueError("the secret key must not be empty")
        return v

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        """From ``RMQ_ACCESS_KEY`` / ``RMQ_SECRET_KEY`` (/ ``RMQ_SECURITY_TOKEN``); None when no access key
        is set. An access key without a secret key is a :class:`ConfigError` (naming the variable only)."""
        env = os.environ if environ is None else environ
        ak = env.get(ENV_ACCESS_KEY)
        if not ak:
            return None
        sk = env.get(ENV_SECRET_KEY)
        if not sk:
            raise ConfigError(f"{ENV_ACCESS_KEY} is set but {ENV_SECRET_KEY} is not (or is empty)")
        token = env.get(ENV_SECURITY_TOKEN) or None
        return cls(access_key=ak, secret_key=SecretStr(sk), security_token=token and SecretStr(token))


#: environment variables read by :meth:`TLSConfig.from_env` (when ``ClientConfig.tls`` is None); they
#: mirror the Java client's ``-Dtls.enable=true`` and ``tls.client.*`` properties
ENV_TLS = "RMQ_TLS"  # tls.enable
ENV_TLS_CA_FILE = "RMQ_TLS_CA_FILE"  # tls.client.trustCertPath
ENV_TLS_INSECURE = "RMQ_TLS_INSECURE"  # tls.test.mode.enable (trust any server)
ENV_TLS_CERT_FILE = "RMQ_TLS_CERT_FILE"  # tls.client.certPath
ENV_TLS_KEY_FILE = "RMQ_TLS_KEY_FILE"  # tls.client.keyPath
ENV_TLS_KEY_PASSWORD = "RMQ_TLS_KEY_PASSWORD"  # tls.client.keyPassword
ENV_TLS_SERVER_HOSTNAME = "RMQ_TLS_SERVER_HOSTNAME"
_ENV_TRUE, _ENV_FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"", "0", "false", "no", "off"})


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _ENV_TRUE:
        return True
    if value in _ENV_FALSE:
        return False
    raise ConfigError(f"{name}={env[name]!r}: expected 1/true/yes/on or 0/false/no/off")


class TLSConfig(ConfigModel):
    """TLS for every connection of a client, to name servers and brokers alike (Java ``useTLS``).

    Python's conventions: the server's certificate is verified, against the system's trust store or
    ``ca_file``, and must name the host dialed (``server_hostname`` overrides the name checked and sent
    as SNI; ``check_hostname=False`` checks the chain only, as the Java client does). ``verify=False``
    trusts any server, as Java's test mode (``tls.test.mode.enable``) does: for tests only.
    ``cert_file`` + ``key_file`` (+ ``key_password``) present a client certificate (mutual TLS).
    """

    verify: bool = Field(default=True, description="verify the server's certificate (False: tests only)")
    ca_file: str | None = Field(default=None, description="tls.client.trustCertPath; None: the system store")
    check_hostname: bool = Field(default=True, description="check the certificate names the server")
    cert_file: str | None = Field(
        default=None, description="tls.client.certPath (PEM chain, may hold the key)"
    )
    key_file: str | None = Field(default=None, description="tls.client.keyPath (PEM)")
    key_password: SecretStr | None = Field(default=None, description="tls.client.keyPassword")
    server_hostname: str | None = Field(
        default=None, description="the name the certificate must carry (None: the address's host)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.key_file or self.key_password) and not self.cert_file:
            raise ValueError("key_file and key_password need cert_file (the client certificate)")
        if not self.verify and self.ca_file:
            raise ValueError("ca_file is not used with verify=False: drop one of them")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TLSConfig | None:
        """From ``RMQ_TLS=1`` and ``RMQ_TLS_CA_FILE``, ``RMQ_TLS_INSECURE``, ``RMQ_TLS_CERT_FILE``,
        ``RMQ_TLS_KEY_FILE``, ``RMQ_TLS_KEY_PASSWORD``, ``RMQ_TLS_SERVER_HOSTNAME``; None unless
        ``RMQ_TLS`` (or ``RMQ_TLS_INSECURE``) is on."""
        env = os.environ if environ is None else environ
        insecure = _env_flag(env, ENV_TLS_INSECURE)
        if not (_env_flag(env, ENV_TLS) or insecure):
            return None
        cert = env.get(ENV_TLS_CERT_FILE) or None
        password = (env.get(ENV_TLS_KEY_PASSWORD) or None) if cert else None  # only a client key has one
        return cls(
            verify=not insecure,
            ca_file=env.get(ENV_TLS_CA_FILE) or None,
            cert_file=cert,
            key_file=env.get(ENV_TLS_KEY_FILE) or None,
            key_password=SecretStr(password) if password else None,
            server_hostname=env.get(ENV_TLS_SERVER_HOSTNAME) or None,
        )


class TraceConfig(ConfigModel):
    """Message trace (Java ``enableMsgTrace`` / ``customizedTraceTopic``), off by default as in Java.

    Producers write a ``Pub`` record per send, push consumers a ``SubBefore`` and a ``SubAfter`` per
    handler call (POP included; a delivery of ``deliveries()`` from its hand-out to its settling), lite
    pull consumers both at once per ``poll`` (as Java's), batched by an inner producer to ``topic``
    (None: ``RMQ_SYS_TRACE_TOPIC``), readable by ``mqadmin queryMsgTraceById`` and the dashboard. A
    full queue drops records (counted), it never slows consumption; shutdown flushes what is queued
    within ``flush_timeout`` seconds."""

    enabled: bool = False
    topic: str | None = Field(default=None, min_length=1, max_length=127)
    #: contexts queued at most (Java: 2048)
    queue_size: int = Field(default=2048, ge=1)
    #: contexts per send round (Java's batchNum, capped at 20)
    batch_size: int = Field(default=20, ge=1, le=20)
    #: characters of records per trace message (Java: 128000)
    max_message_size: int = Field(default=128000, ge=1024, le=4 * 1024 * 1024)
    #: seconds a context may wait before it is sent even without a full batch (Java: 5 s)
    flush_interval: float = Field(default=1.0, gt=0)
    flush_timeout: float = Field(default=5.0, gt=0)
    #: the share of the event loop's time the dispatcher may take while records keep coming (it rests
    #: after each send round in proportion); 1: no rest. Records it cannot send are dropped, counted
    loop_share: float = Field(default=0.1, gt=0, le=1)


class OtelConfig(ConfigModel):
    """OpenTelemetry recording budgets (used only when the application set a provider).

    Counters and gauges are never budgeted: they are plain counts read when the reader collects. Each
    histogram of a client records at most ``histogram_rate`` values a second (a uniform-in-time sample,
    so a histogram's count is the number of samples, not of messages: the counters count those);
    consumer spans of messages without a sampled W3C ``traceparent`` are started at most
    ``root_span_rate`` times a second. A message whose ``traceparent`` is sampled always gets its
    consumer span. None: no budget (every value, every span)."""

    histogram_rate: int | None = Field(
        default=200, ge=1, description="values a histogram records per second and client at most; None: all"
    )
    root_span_rate: int | None = Field(
        default=100,
        ge=0,
        description="consumer spans per second and client for messages without a sampled traceparent "
        "(0: none); None: every one",
    )


#: a name server's host: a name or IPv4 address, or an IPv6 one (bracketed or not: Java cuts at the
#: last ':')
_NAMESRV_HOST = re.compile(r"[A-Za-z0-9._\-]+|\[?[0-9A-Fa-f:.]+\]?", re.ASCII)
_NAMESRV_FORM = "host:port, several separated by ';' (host:port;host:port)"


def namesrv_addresses(value: str) -> list[str]:
    """The name server addresses of ``namesrv_addr`` (or ``NAMESRV_ADDR``): ``host:port`` separated
    by ``;``, as Java; ValueError saying the form expected otherwise (a bad address would only fail
    later, as a DNS error in the background). ``http://host:port`` is Java's name server endpoint
    (``ClientConfig.getNamesrvAddr``, ``NAMESRV_ENDPOINT_PATTERN``): one address, the part after the
    last ``/``. (Java's other HTTP way, the ``WSADDR`` address server asked when no address is set,
    is not supported: no address is a ConfigError.)"""
    value = value.strip()
    if value.startswith("http://"):
        if ";" in value:
            raise ValueError(
                f"an http:// name server endpoint is one address, http://host:port (as Java's), got {value!r}"
            )
        value = value[value.rindex("/") + 1 :]
    addrs = [a.strip() for a in value.split(";") if a.strip()]
    if not addrs:
        raise ValueError(f"namesrv_addr is empty: expected {_NAMESRV_FORM}")
    for a in addrs:
        if "," in a:
            raise ValueError(
                f"name server addresses are separated by ';', not ',': {a!r} (expected {_NAMESRV_FORM})"
            )
        host, sep, port = a.rpartition(":")
        if not sep or not _NAMESRV_HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad name server address {a!r}: expected {_NAMESRV_FORM}")
    return addrs


class ClientConfig(ConfigModel):
    """What every client (consumer or producer) needs to reach a cluster (Java ``ClientConfig``).

    ``namesrv_addr`` is ``"host:port"`` or several separated by ``;``. When it is None the
    ``NAMESRV_ADDR`` environment variable is used, as the Java client does.
    """

    namesrv_addr: str | None = Field(
        default=None, description="name server(s), host:port[;host:port...]; None: $NAMESRV_ADDR"
    )
    client_ip: str | None = Field(default=None, description="defaults to this host's address")
    instance_name: str = Field(
        default="DEFAULT",
        min_length=1,
        description="the client id's instance part (DEFAULT: a consumer takes pid#time, as Java)",
    )
    unit_name: str | None = Field(default=None, description="Java unitName (unit-set deployments)")
    namespace: str | None = Field(
        default=None, description="groups and topics go on the wire as namespace%name (withNamespace)"
    )
    timing: Timing = Field(default_factory=Timing, description="every timer (Java's defaults)")
    serialize_type: Literal["JSON", "ROCKETMQ"] = Field(
        default="JSON", description="how request headers are encoded"
    )
    language: Literal[
        "JAVA",
        "CPP",
        "DOTNET",
        "PYTHON",
        "DELPHI",
        "ERLANG",
        "RUBY",
        "OTHER",
        "HTTP",
        "GO",
        "PHP",
        "OMS",
        "RUST",
    ] = Field(default="PYTHON", description="the language code in request headers")
    #: the header ``version``: 409 is the 4.9.8 client's; name servers format routes and brokers forward
    #: admin requests by it
    version: int = Field(default=409, ge=0, le=32767, description="the header version (409: 4.9.8's)")
    #: pull and lite-pull clients are "stream" clients: ``@STREAM`` id suffix and ``ReqT`` on requests
    stream: bool = Field(default=False, description="a pull client (@STREAM id suffix, ReqT on requests)")
    #: consecutive request timeouts after which a connection is considered half-open and closed
    max_timeouts: int = Field(
        default=3, ge=1, description="request timeouts in a row before a connection is closed as half-open"
    )
    #: ACL credentials; None: from ``RMQ_ACCESS_KEY`` / ``RMQ_SECRET_KEY`` / ``RMQ_SECURITY_TOKEN`` if set,
    #: else requests go unsigned (see :meth:`effective_credentials`)
    credentials: Credentials | None = Field(
        default=None, description="ACL keys; None: from $RMQ_ACCESS_KEY ..."
    )
    #: TLS for every connection; None: from ``RMQ_TLS`` and the other ``RMQ_TLS_*`` variables if set,
    #: else plain TCP (see :meth:`effective_tls`); True: ``TLSConfig()``; False: plain, whatever the env
    tls: TLSConfig | Literal[False] | None = Field(
        default=None, description="TLS for every connection; None: from $RMQ_TLS ...; False: plain TCP"
    )
    #: message trace (off by default); ``True`` is ``TraceConfig(enabled=True)``
    trace: TraceConfig = Field(default_factory=TraceConfig, description="message trace (off by default)")
    #: OpenTelemetry recording budgets (nothing is recorded unless the application set a provider)
    otel: OtelConfig = Field(
        default_factory=OtelConfig, description="OpenTelemetry budgets: histogram values, root spans a second"
    )

    @field_validator("namesrv_addr")
    @classmethod
    def _check_namesrv(cls, v: str | None) -> str | None:
        return None if v is None else ";".join(namesrv_addresses(v))

    def namesrv_list(self) -> list[str]:
        addr = self.namesrv_addr or os.environ.get("NAMESRV_ADDR")
        if not addr:
            raise ConfigError(
                "no name server address: pass namesrv_addr='host:port', set NAMESRV_ADDR, "
                "or start rmq_async.EmbeddedCluster and use its namesrv_addr"
            )
        try:
            return namesrv_addresses(addr)
        except ValueError as exc:  # NAMESRV_ADDR, read now: the same rule as namesrv_addr=
            raise ConfigError(f"NAMESRV_ADDR: {exc}") from None

    def effective_credentials(self) -> Credentials | None:
        """``credentials``, else those of the environment (:meth:`Credentials.from_env`), else None."""
        return self.credentials if self.credentials is not None else Credentials.from_env()

    @field_validator("tls", mode="before")
    @classmethod
    def _tls_shorthand(cls, v: Any) -> Any:
        return TLSConfig() if v is True else v

    @field_validator("trace", mode="before")
    @classmethod
    def _trace_shorthand(cls, v: Any) -> Any:
        if v is True or v is False:
            return TraceConfig(enabled=v)
        return v

    def effective_tls(self) -> TLSConfig | None:
        """``tls``, else that of the environment (:meth:`TLSConfig.from_env`), else None (plain TCP)."""
        if self.tls is False:
            return None
        return self.tls if self.tls is not None else TLSConfig.from_env()

    def with_namespace(self, resource: str) -> str:
        """``NamespaceUtil.wrapNamespace``: ``ns%resource``, the retry/DLQ prefix kept in front; system
        topics and groups, and names that already carry the namespace, unchanged."""
        return wrap_namespace(self.namespace, resource)

    def without_namespace(self, resource: str) -> str:
        """``NamespaceUtil.withoutNamespace``: the name as the user gave it."""
        return unwrap_namespace(self.namespace, resource)


#: epoch milliseconds below this are before 1973-03-03: plainly seconds
_MS_FLOOR = 100_000_000_000
#: and from this on after the year 2286: plainly not milliseconds (a yyyyMMddHHmmss as a number?)
_MS_CEILING = 10_000_000_000_000


def epoch_millis(ms: int) -> int:
    """``ms``, milliseconds since the epoch, if it can be: ValueError with a hint for seconds (before
    1973) or a ``yyyyMMddHHmmss`` given as a number (after 2286). The one rule of the consumer configs
    and the command line's ``--timestamp``."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValueError(f"an epoch timestamp in milliseconds must be an int >= 0, got {ms!r}")
    if ms < _MS_FLOOR:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms))
        raise ValueError(
            f"{ms} is milliseconds since the epoch, i.e. {time.gmtime(ms / 1000).tm_year}: if you meant "
            f"seconds ({when} UTC), give {ms * 1000}"
        )
    if ms >= _MS_CEILING:
        raise ValueError(
            f"{ms} milliseconds since the epoch is after the year 2286: a Java consumeTimestamp "
            f"(yyyyMMddHHmmss) is given as a string ({str(ms)!r})"
        )
    return ms


def consume_timestamp(value: str | int) -> str | int:
    """A ``consume_timestamp``: epoch milliseconds (an int, :func:`epoch_millis`) or Java's
    ``consumeTimestamp``, a ``yyyyMMddHHmmss`` string; ValueError saying which form is expected."""
    if isinstance(value, int):
        return epoch_millis(value)
    if len(value) != 14 or not value.isdigit():
        raise ValueError(
            f"expected yyyyMMddHHmmss (Java consumeTimestamp) or epoch milliseconds as an int, got {value!r}"
        )
    try:
        time.strptime(value, "%Y%m%d%H%M%S")
    except ValueError:
        raise ValueError(f"not a valid yyyyMMddHHmmss time: {value!r}") from None
    return value


def client_settings(
    client_config: ClientConfig | None,
    *,
    namesrv_addr: str | None = None,
    timing: Timing | None = None,
    instance_name: str | None = None,
) -> ClientConfig:
    """The client settings of a consumer or producer from its keyword arguments, the same rule for
    each: ``client_config`` (else one made of ``namesrv_addr``), with ``timing`` and ``instance_name``
    replacing its own when given."""
    if client_config is None:
        client_config = ClientConfig(namesrv_addr=namesrv_addr, timing=timing or Timing())
    elif timing is not None:
        client_config = client_config.model_copy(update={"timing": timing})
    if instance_name is not None:
        client_config = client_config.model_copy(update={"instance_name": instance_name})
    return client_config


#: where a group with no committed offset starts (Java's ``ConsumeFromWhere``)
ConsumeFrom = Literal["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"]
#: ``CLUSTERING``: the group's members share the queues; ``BROADCASTING``: each gets every message
MessageModel = Literal["CLUSTERING", "BROADCASTING"]


class ConsumerConfig(ConfigModel):
    """``DefaultMQPushConsumer`` settings with the Java defaults (timers live in :class:`Timing`)."""

    group: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[%|a-zA-Z0-9_-]+$",
        description="the consumer group: letters, digits, _ - % |, up to 255 characters",
    )
    message_model: MessageModel = Field(
        default="CLUSTERING",
        description="CLUSTERING: the group's members share the queues; BROADCASTING: each gets every message",
    )
    consume_from_where: ConsumeFrom = Field(
        default="CONSUME_FROM_LAST_OFFSET",
        description="where a group with no committed offset starts (one with offsets goes on from them)",
    )
    consume_timestamp: str | int | None = Field(
        default=None,
        description="CONSUME_FROM_TIMESTAMP: yyyyMMddHHmmss (Java consumeTimestamp) or epoch milliseconds; "
        "None: half an hour before the consumer was made",
    )
    allocate_strategy: str = Field(
        default="AVG", description="AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, MACHINE_ROOM"
    )
    pull_batch_size: int = Field(default=32, ge=1, le=1024, description="messages per pull")
    consume_batch_max_size: int = Field(default=1, ge=1, le=1024, description="consumeMessageBatchMaxSize")
    pull_threshold_for_queue: int = Field(
        default=1000, ge=1, le=65535, description="cached messages per queue before its pulls wait"
    )
    pull_threshold_size_for_queue: int = Field(
        default=100, ge=1, le=1024, description="MiB of cached bodies per queue before its pulls wait"
    )
    pull_threshold_for_topic: int = Field(
        default=-1, ge=-1, le=6553500, description="-1: no topic-level limit"
    )
    pull_threshold_size_for_topic: int = Field(default=-1, ge=-1, le=102400, description="MiB; -1: no limit")
    consume_concurrently_max_span: int = Field(
        default=2000, ge=1, le=65535, description="offsets between a queue's oldest and newest cached message"
    )
    max_reconsume_times: int = Field(
        default=-1, ge=-1, description="-1: 16 for concurrent, unbounded for orderly"
    )
    concurrency: int = Field(
        default=20, ge=1, le=10000, description="handlers running at once (consumeThreadMin)"
    )
    post_subscription_when_pull: bool = Field(
        default=False, description="send the subscription with every pull (Java postSubscriptionWhenPull)"
    )
    unit_mode: bool = Field(default=False, description="Java unitMode (unit-set deployments)")
    rebalance_stability_window: float = Field(
        default=0.0,
        ge=0,
        description="seconds a new member list must stay unchanged before allocation uses it (0: off)",
    )
    #: orderly: seconds a consume task keeps a queue before yielding (MAX_TIME_CONSUME_CONTINUOUSLY)
    #: (the time slice itself is ``Timing.orderly_time_slice``)
    #: orderly: seconds a rebalance waits for a queue's running handler before dropping it (Java's
    #: ``consumeLock.tryLock(1000 ms)``); past it, the queue is unlocked once the handler has ended
    orderly_drop_wait: float = Field(
        default=1.0, ge=0, description="orderly: seconds a rebalance waits for a queue's running handler"
    )
    offset_store_dir: str | None = Field(
        default=None, description="broadcasting: local offsets dir (~/.rocketmq_offsets)"
    )
    auto_commit: bool = Field(
        default=True,
        description="commit consumed offsets in the background (persist timer, pulls, rebalance, stop); "
        "False: only commit() (and seeks) commit",
    )
    stage_sample: int = Field(
        default=0,
        ge=0,
        description="record where the time of every Nth pulled batch goes, stage by stage "
        "(PushConsumer.stages); 0: off, nothing recorded and nothing paid",
    )

    @field_validator("allocate_strategy")
    @classmethod
    def _check_strategy(cls, v: str) -> str:
        try:
            canonical, _ = canonical_strategy(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if canonical not in NAME_ONLY_STRATEGIES:
            raise ValueError(
                f"allocation strategy {canonical} needs arguments: pass the strategy object "
                "(rmq_async.consumer.allocate), not its name"
            )
        return v

    @field_validator("consume_timestamp")
    @classmethod
    def _check_timestamp(cls, v: str | int | None) -> str | int | None:
        return None if v is None else consume_timestamp(v)

    @field_validator("pull_threshold_for_topic", "pull_threshold_size_for_topic")
    @classmethod
    def _check_topic_thresholds(cls, v: int) -> int:
        if v == 0:
            raise ValueError("must be -1 (no topic-level limit) or >= 1")
        return v

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    def effective_max_reconsume_times(self, orderly: bool) -> int:
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return 2**31 - 1 if orderly else 16

    @property
    def retry_topic(self) -> str:
        return f"%RETRY%{self.group}"


#: the keyword options of :class:`~rmq_async.PushConsumer` (every field but ``group``) and their defaults
CONSUMER_OPTION_DEFAULTS: dict[str, object] = {
    name: f.default for name, f in ConsumerConfig.model_fields.items() if name != "group"
}


class LitePullConfig(ConfigModel):
    """``DefaultLitePullConsumer`` settings as :class:`~rmq_async.LitePullConsumer` takes them (the same
    names and units as :class:`ConsumerConfig` and Java: seconds, MiB, epoch milliseconds);
    :meth:`consumer_config` is what the consumer parts it shares with the push consumer read."""

    group: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[%|a-zA-Z0-9_-]+$",
        description="the consumer group: letters, digits, _ - % |, up to 255 characters",
    )
    auto_commit: bool = Field(default=True, description="commit what earlier polls returned, at a poll")
    auto_commit_interval: float = Field(default=5.0, ge=0, description="seconds between auto commits")
    consume_from_where: ConsumeFrom = Field(
        default="CONSUME_FROM_LAST_OFFSET",
        description="where a group with no committed offset starts (one with offsets goes on from them)",
    )
    consume_timestamp_ms: int | None = Field(
        default=None, ge=0, description="epoch milliseconds; None: half an hour before the consumer was made"
    )

    @field_validator("consume_timestamp_ms")
    @classmethod
    def _check_timestamp_ms(cls, v: int | None) -> int | None:
        return None if v is None else epoch_millis(v)

    allocate_strategy: str = Field(
        default="AVG", description="AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, MACHINE_ROOM"
    )
    pull_batch_size: int = Field(default=10, ge=1, description="messages per pull")
    pull_threshold_for_queue: int = Field(
        default=1000, ge=1, description="buffered messages per queue before its pulls wait"
    )
    pull_threshold_size_for_queue: int = Field(
        default=100, ge=1, le=1024, description="MiB, as ConsumerConfig's"
    )
    pull_threshold_for_all: int = Field(
        default=10000, ge=1, description="buffered messages of all queues before pulls wait"
    )
    on_undecodable: Literal["fail", "skip"] = Field(
        default="fail",
        description="a message that cannot be decoded: fail (poll raises UndecodableMessageError naming its "
        "offset after the messages before it; the queue stays until a seek) or skip (an ERROR record)",
    )

    @field_validator("allocate_strategy")
    @classmethod
    def _check_strategy(cls, v: str) -> str:
        return ConsumerConfig._check_strategy(v)

    def consumer_config(self, group: str) -> ConsumerConfig:
        """The settings the shared consumer parts read, for ``group`` (as it goes on the wire, with
        its namespace). The batch size and the thresholds stay the lite consumer's own (its pull
        settings and poll buffer)."""
        return ConsumerConfig(
            group=group,
            consume_from_where=self.consume_from_where,
            consume_timestamp=self.consume_timestamp_ms,
            allocate_strategy=self.allocate_strategy,
        )


class ProducerConfig(ConfigModel):
    """``DefaultMQProducer`` settings with the Java defaults."""

    group: str = Field(
        default="DEFAULT_PRODUCER",
        min_length=1,
        max_length=255,
        pattern=r"^[%|a-zA-Z0-9_-]+$",
        description="the producer group (transactions and the broker's producer table use it)",
    )
    send_timeout: float = Field(default=3.0, gt=0, description="sendMsgTimeout")
    retries: int = Field(default=2, ge=0, description="retryTimesWhenSendFailed")
    max_message_size: int = Field(
        default=4 * 1024 * 1024, gt=0, le=4 * 1024 * 1024, description="bytes of body a send allows"
    )
    compress_threshold: int = Field(default=4 * 1024, ge=0, description="compressMsgBodyOverHowmuch")
    #: ``compressLevel``: zlib 1-9, ZSTD 1-22 (LZ4 ignores it, as in Java)
    compress_level: int = Field(default=5, ge=1, le=22, description="zlib 1-9, ZSTD 1-22 (LZ4: unused)")
    #: ``compressType`` (5.x): ZLIB, LZ4 or ZSTD. A 4.x cluster (its name server's routes lack 5.x's
    #: ``enableActingMaster``) gets zlib whatever is set here: 4.x consumers read only zlib reliably
    compress_type: Literal["ZLIB", "LZ4", "ZSTD"] = Field(
        default="ZLIB", description="bodies of compress_threshold bytes or more (a 4.x cluster: zlib)"
    )
    default_topic_queue_nums: int = Field(
        default=4, ge=1, description="queues of a topic the broker auto-creates"
    )
    create_topic_key: str = Field(
        default="TBW102", min_length=1, description="the topic whose route auto-creates new topics"
    )
    #: ``sendLatencyFaultEnable`` (MQFaultStrategy): avoid a broker that was slow or failed for a
    #: while, by the two tables below (off by default, as in Java)
    send_latency_fault_enable: bool = Field(
        default=False, description="avoid slow or failed brokers for a while (MQFaultStrategy)"
    )
    latency_max: tuple[int, ...] = Field(
        default=(50, 100, 550, 1800, 3000, 5000, 15000), description="latency thresholds, ms (latencyMax)"
    )
    not_available_duration: tuple[int, ...] = Field(
        default=(0, 0, 2000, 5000, 6000, 10000, 30000),
        description="how long a broker at each latency threshold is avoided, ms (notAvailableDuration)",
    )
    #: ``autoBatch`` (5.x ProduceAccumulator): concurrent small sends to one topic (and queue, tag,
    #: WAIT) go out as one batch; each send still returns its own result
    auto_batch: bool = Field(default=False, description="batch concurrent small sends (autoBatch)")
    batch_max_delay: float = Field(
        default=0.01, gt=0, description="how long a batch waits for more sends, s (batchMaxDelayMs 10)"
    )
    batch_max_bytes: int = Field(
        default=32 * 1024, gt=0, description="body bytes that close a batch (batchMaxBytes)"
    )
    total_batch_max_bytes: int = Field(
        default=32 * 1024 * 1024, gt=0, description="body bytes held in batches at once (totalBatchMaxBytes)"
    )

    @field_validator("compress_type", mode="before")
    @classmethod
    def _compress_type_name(cls, v: Any) -> Any:
        return v.strip().upper() if isinstance(v, str) else v  # CompressionType.of: any case

    @model_validator(mode="after")
    def _check_compress_level(self) -> Self:
        if self.compress_type == "ZLIB" and self.compress_level > 9:
            raise ValueError(f"compress_level {self.compress_level} is above zlib's 9")
        return self

    @model_validator(mode="after")
    def _check_fault_tables(self) -> Self:
        both = "ProducerConfig.latency_max and ProducerConfig.not_available_duration"
        if len(self.latency_max) != len(self.not_available_duration) or not self.latency_max:
            raise ValueError(f"{both} must be non-empty and as long as each other")
        if any(v < 0 for v in (*self.latency_max, *self.not_available_duration)):
            raise ValueError(f"{both} take no negative value")
        if list(self.latency_max) != sorted(self.latency_max):
            raise ValueError("ProducerConfig.latency_max must be in ascending order")
        return self
