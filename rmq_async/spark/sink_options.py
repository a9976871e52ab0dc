"""Options and input columns of the ``rocketmq`` Spark sink, validated once on the driver.

Strategy: as the source's (:mod:`.options`), Spark's case-insensitive string options become a frozen,
picklable :class:`SinkOptions` and anything wrong raises :class:`ConfigError` naming the option (or
the column) before a task runs; the connection options (namesrv, ACL, TLS) are parsed by the same
functions as the source's. :func:`check_columns` checks the DataFrame's schema against what a row
may carry (a row is a message): ``body`` (binary or string), ``topic``, ``keys``, ``tags``,
``properties`` (map of strings), ``queue_id``, ``delay_level``, and the timer columns of 5.x brokers:
``delay`` (seconds as a number, or a day-time interval) and ``deliver_at`` (a timestamp); other
columns are left alone, so a
source's rows can be written as they are read (their ``queue_id`` then pins each message to the
queue id it was read from, as the Kafka sink's ``partition`` column does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..config import ClientConfig, Credentials, ProducerConfig, TLSConfig
from ..errors import ConfigError
from .options import credentials_option, namesrv_option, tls_option

__all__ = ["ROLES", "SinkColumns", "SinkOptions", "check_columns", "parse_sink_options"]

_KNOWN = {
    "namesrv", "topic", "namespace", "group", "sendtimeout", "retries", "batchsize", "sendsinflight",
    "maxbytesinflight", "failonsenderror", "uniqkeycolumn", "path", "checkpointlocation", "queryname",
    "accesskey", "secretkey", "securitytoken",
    "tls", "tlscafile", "tlsinsecure", "tlscertfile", "tlskeyfile", "tlskeypassword", "tlsserverhostname",
}  # fmt: skip

#: Spark's day-time interval types (``DayTimeIntervalType``), as ``simpleString`` spells them
_DAY_TIME_INTERVALS = tuple(
    f"interval {a}" if a == b else f"interval {a} to {b}"
    for i, a in enumerate(("day", "hour", "minute", "second"))
    for b in ("day", "hour", "minute", "second")[i:]
)
#: the columns a row may carry, and the Spark types each takes (``simpleString`` of the type)
_COLUMN_TYPES = {
    "topic": ("string",),
    "body": ("binary", "string"),
    "keys": ("string",),
    "tags": ("string",),
    "properties": ("map<string,string>",),
    "queue_id": ("int", "bigint", "smallint", "tinyint"),
    "delay_level": ("int", "bigint", "smallint", "tinyint"),
    "delay": ("double", "float", "int", "bigint", "smallint", "tinyint", *_DAY_TIME_INTERVALS),
    "deliver_at": ("timestamp",),
}
#: what a row's message is made of: the columns, and the uniqKeyColumn's values
ROLES = (*_COLUMN_TYPES, "uniq_key")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What a writer needs on the driver and in the Python workers (plain data: picklable)."""

    namesrv: str
    #: option topic: the topic of every row (over the topic column, as the Kafka sink's option)
    topic: str | None
    namespace: str | None
    group: str
    send_timeout: float
    retries: int
    #: messages per send request (SEND_BATCH_MESSAGE when > 1; rows of one topic and queue)
    batch_size: int
    #: send requests in flight per task
    sends_in_flight: int
    #: bodies of the sends in flight per task, at most (a send bigger than this goes alone)
    max_bytes_in_flight: int
    fail_on_send_error: bool
    #: a column whose value becomes the message's ``UNIQ_KEY`` (its message id): a row sent twice
    #: (a task run again) then has one id, by which consumers drop the repeat
    uniq_key_column: str | None
    credentials: Credentials | None = None
    tls: TLSConfig | Literal[False] | None = None

    def client_config(self) -> ClientConfig:
        return ClientConfig(
            namesrv_addr=self.namesrv, credentials=self.credentials, tls=self.tls, namespace=self.namespace
        )

    def producer_config(self) -> ProducerConfig:
        return ProducerConfig(group=self.group, send_timeout=self.send_timeout, retries=self.retries)


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """The message columns of the written DataFrame: each role of :data:`ROLES` present, and the
    name of its column as Spark spells it."""

    names: dict[str, str]
    #: the body column is a string (sent as its UTF-8 bytes)
    body_is_text: bool


def _fail(name: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"rocketmq sink option '{name}': {why} (got {value!r})")


def _int(opts: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise _fail(name, value, f"expected an integer from {lo} to {hi}") from None
    if not lo <= n <= hi:
        raise _fail(name, value, f"expected an integer from {lo} to {hi}")
    return n


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
}


def _bytes(opts: Mapping[str, str], name: str, default: int) -> int:
    """``16m``, ``512k``, ``1g`` or plain bytes."""
    value = opts.get(name.lower())
    if value is None:
        return default
    t = value.strip().lower()
    num = t.rstrip("bgkm")
    unit = t[len(num) :]
    try:
        n = int(num) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise _fail(name, value, "expected a size such as 16m, 512k or 1048576") from None
    if n <= 0:
        raise _fail(name, value, "expected a size > 0")
    return n


def _seconds(opts: Mapping[str, str], name: str, default: float) -> float:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        secs = float(value)
    except ValueError:
        raise _fail(name, value, "expected seconds") from None
    if secs <= 0:
        raise _fail(name, value, "expected seconds > 0")
    return secs


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate Spark's options (keys in any case) for a batch or a streaming write."""
    opts = {k.lower(): v for k, v in raw.items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise ConfigError(f"rocketmq sink: unknown option(s) {unknown}")
    namesrv = namesrv_option(opts, "sink")
    topic = opts.get("topic") or None
    namespace = opts.get("namespace") or None
    fail = opts.get("failonsenderror", "true").strip().lower()
    if fail not in ("true", "false"):
        raise _fail("failOnSendError", opts["failonsenderror"], "expected true or false")
    try:
        out = SinkOptions(
            namesrv=namesrv,
            topic=topic,
            namespace=namespace,
            group=opts.get("group", "rmq_async_spark_sink"),
            send_timeout=_seconds(opts, "sendTimeout", 3.0),
            retries=_int(opts, "retries", 2, 0, 16),
            batch_size=_int(opts, "batchSize", 32, 1, 1024),
            sends_in_flight=_int(opts, "sendsInFlight", 16, 1, 256),
            max_bytes_in_flight=_bytes(opts, "maxBytesInFlight", 16 << 20),
            fail_on_send_error=fail == "true",
            uniq_key_column=opts.get("uniqkeycolumn") or None,
            credentials=credentials_option(opts, "sink"),
            tls=tls_option(opts, "sink"),
        )
        out.client_config()  # the namespace, as a client takes it
        out.producer_config()  # the group
    except ConfigError:
        raise
    except ValueError as exc:  # pydantic: a group or namespace a client refuses
        raise ConfigError(f"rocketmq sink options: {exc}") from None
    if topic is not None:
        _check_topic(topic)
    return out


def _check_topic(topic: str) -> None:
    from ..protocol.message import Message

    try:
        Message(topic, b"-")
    except ValueError as exc:
        raise _fail("topic", topic, str(exc)) from None


def check_columns(opts: SinkOptions, types: Mapping[str, str]) -> SinkColumns:
    """The message columns of a DataFrame whose columns have the Spark ``types`` (``simpleString``),
    or :class:`ConfigError` naming the column that cannot be written."""
    lower = {name.lower(): name for name in types}
    if types.get(lower.get("deliver_at", "")) == "timestamp_ntz":
        raise ConfigError(
            f"rocketmq sink column '{lower['deliver_at']}': a timestamp without a time zone is no instant: "
            "cast it to timestamp (the session time zone then applies)"
        )
    if "body" not in lower:
        raise ConfigError(
            f"rocketmq sink: the DataFrame needs a 'body' column (binary or string), got {list(types)}"
        )
    if opts.topic is None and "topic" not in lower:
        raise ConfigError("rocketmq sink: no 'topic' column and no 'topic' option: which topic to write?")
    if opts.uniq_key_column is not None and opts.uniq_key_column.lower() not in lower:
        raise _fail("uniqKeyColumn", opts.uniq_key_column, f"no such column in {list(types)}")
    names: dict[str, str] = {}
    for col, allowed in _COLUMN_TYPES.items():
        if col not in lower:
            continue
        got = types[lower[col]]
        if got not in allowed:
            raise ConfigError(
                f"rocketmq sink column '{lower[col]}': expected {' or '.join(allowed)}, got {got}"
            )
        names[col] = lower[col]
    if opts.uniq_key_column is not None:
        names["uniq_key"] = lower[opts.uniq_key_column.lower()]
    return SinkColumns(names=names, body_is_text=types[lower["body"]] == "string")
