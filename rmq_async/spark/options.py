"""Options of the ``rocketmq`` Spark data source, validated once on the driver.

Strategy: Spark hands options over as a case-insensitive map of strings; :func:`parse_options` turns
them into a frozen, picklable :class:`SourceOptions` and raises :class:`ConfigError` naming the option
and the value for anything wrong, before any query runs. Offsets given as JSON use the checkpoint's
own shape, keyed by topic as the Kafka source's: ``{"<topic>": {"<broker name>": {"<queue id>":
offset}}}``, with -2 for earliest and -1 for latest; a query of one topic also takes the shape of a
single topic's offsets, ``{"<broker name>": {"<queue id>": offset}}`` (what its checkpoints held before
several topics could be read).

The topics read: ``topic`` (one, or a comma-separated list) or ``topicPattern`` (a regular expression
that must match a whole topic name, Kafka's ``subscribePattern``), resolved against the name server's
topic list when a query is planned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import SecretStr

from ..config import ClientConfig, Credentials, TLSConfig, wrap_namespace
from ..errors import ConfigError
from ..protocol.filter import Selector, parse_tag_expression
from ..protocol.message import check_topic

__all__ = [
    "EARLIEST", "LATEST", "QueueKey", "SourceOptions", "credentials_option", "namesrv_option",
    "parse_offsets_json", "parse_options", "tls_option",
]  # fmt: skip

#: a queue of a topic read: (topic, broker name, queue id)
QueueKey = tuple[str, str, int]
EARLIEST = -2
LATEST = -1

_KNOWN = {
    "namesrv", "topic", "topicpattern", "startingoffsets", "endingoffsets", "startingoffsetsbytimestamp",
    "startingtimestamp", "maxrecordspertrigger", "maxrecordsperpartition", "failondataloss", "tags",
    "group", "namespace", "commitoffsets", "pullbatchsize", "requesttimeout", "path", "pullsinflight",
    "includeproperties",
    "minpartitions", "minoffsetspertrigger", "maxtriggerdelay", "sql", "onundecodable",
    "accesskey", "secretkey", "securitytoken", "gcfreeze",
    "tls", "tlscafile", "tlsinsecure", "tlscertfile", "tlskeyfile", "tlskeypassword", "tlsserverhostname",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything a reader needs, on the driver and on executors (plain data: picklable)."""

    namesrv: str
    #: the topics named by option topic (empty with topicPattern)
    topics: tuple[str, ...]
    #: option topicPattern: topics whose whole name matches it, looked up at each planning
    topic_pattern: str | None
    starting: str | dict[QueueKey, int]  # "earliest" | "latest" | per queue
    ending: str | dict[QueueKey, int]
    starting_by_timestamp: dict[QueueKey, int] | None
    starting_timestamp: int | None
    max_records_per_trigger: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    tags: str
    group: str
    commit_offsets: bool
    pull_batch_size: int
    request_timeout: float
    #: pulls in flight per input partition (option pullsInFlight; more in flight, more answers per
    #: socket read and wake-up: 16 cost the Python workers about 0.6 us a row less than 8)
    pulls_in_flight: int = 16
    #: fill the properties column (option includeProperties; false leaves it null)
    include_properties: bool = True
    #: at least this many input partitions, large ranges split (option minPartitions, as Kafka's)
    min_partitions: int | None = None
    #: streaming: wait for this many new messages before a micro-batch (option minOffsetsPerTrigger)...
    min_offsets_per_trigger: int | None = None
    #: ... but no longer than this many seconds (option maxTriggerDelay, default 15m, as Kafka's)
    max_trigger_delay: float = 900.0
    #: ACL keys (options accessKey, secretKey, securityToken): pickled to the executors with the rest;
    #: the secret shows as ``**********`` in every repr. None: the executors' RMQ_* variables, if any.
    credentials: Credentials | None = None
    #: TLS (options tls, tlsCaFile, tlsInsecure, tlsCertFile, tlsKeyFile, tlsKeyPassword,
    #: tlsServerHostname); False: plain (tls=false); None: the executors' RMQ_TLS* variables, if any
    tls: TLSConfig | Literal[False] | None = None
    #: a SQL92 filter over message properties instead of tags (option sql; the broker filters it and
    #: must run with enablePropertyFilter=true)
    sql: str | None = None
    #: a message of the range that cannot be decoded (option onUndecodable): "fail" the query naming it
    #: (the default, as failOnDataLoss), or "skip" it with an ERROR record
    on_undecodable: Literal["fail", "skip"] = "fail"
    #: freeze a Python worker's heap after its first partition (option gcFreeze): pyspark's daemon
    #: runs a full gc.collect() after every task of a reused worker, which then walks only what the
    #: worker allocated since (see :func:`~rmq_async.spark.bridge.freeze_worker_heap`)
    gc_freeze: bool = True
    #: option namespace: the topics and the group go on the wire as ``namespace%name``, as a
    #: consumer's with ``ClientConfig(namespace=...)``; the rows, the options and the checkpoint
    #: name topics without it
    namespace: str | None = None

    @property
    def subject(self) -> str:
        """The topics read, for messages: ``topic A``, ``topics A, B`` or ``topics matching 're'``."""
        if self.topic_pattern is not None:
            return f"topics matching {self.topic_pattern!r}"
        return ("topic " if len(self.topics) == 1 else "topics ") + ", ".join(self.topics)

    def matches(self, topic: str) -> bool:
        """``topic`` is one of those this query reads."""
        if self.topic_pattern is None:
            return topic in self.topics
        return re.fullmatch(self.topic_pattern, topic) is not None


def _fail(name: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"rocketmq source option '{name}': {why} (got {value!r})")


def parse_offsets_json(
    name: str, text: str, topics: Sequence[str] = (), *, allow_special: bool = True
) -> dict[QueueKey, int]:
    """``{"T": {"broker-a": {"0": 12, "1": -2}}}`` -> ``{("T", "broker-a", 0): 12, ("T", "broker-a", 1):
    -2}``.

    When ``topics`` is exactly one topic, the shape of one topic's offsets (``{"broker-a": {"0":
    12}}``, a value two levels down is a number) is read as that topic's."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise _fail(name, text, f"not valid JSON ({exc})") from None
    shape = '{"<topic>": {"<broker name>": {"<queue id>": <offset>}}}'
    if not isinstance(raw, dict) or not raw:
        raise _fail(name, text, f"expected {shape}")
    if len(topics) == 1 and _one_topic_shape(raw):
        raw = {topics[0]: raw}
    out: dict[QueueKey, int] = {}
    for topic, brokers in raw.items():
        if not isinstance(brokers, dict) or not all(isinstance(q, dict) for q in brokers.values()):
            raise _fail(
                name, text, f"topic {topic!r} must map broker names to {{queue id: offset}} ({shape})"
            )
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                where = f"queue {topic}/{broker}/{qid}"
                if not str(qid).isdigit() or isinstance(off, bool) or not isinstance(off, int):
                    raise _fail(name, text, f"{where}: ids and offsets must be integers")
                if off < (EARLIEST if allow_special else 0):
                    raise _fail(name, text, f"{where}: offset {off} is invalid")
                out[(str(topic), str(broker), int(qid))] = off
    return out


def _one_topic_shape(raw: Mapping[str, object]) -> bool:
    """``{"broker": {"qid": offset}}``: every value a dict of non-dicts."""
    return all(
        isinstance(v, dict) and v and not any(isinstance(x, dict) for x in v.values()) for v in raw.values()
    )


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise _fail(name, value, "expected a positive integer") from None
    if n <= 0:
        raise _fail(name, value, "expected a positive integer")
    return n


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise _fail(name, value, "expected true or false")
    return v == "true"


def _offsets(
    opts: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...], topics: Sequence[str]
) -> str | dict[QueueKey, int]:
    value = opts.get(name.lower(), default).strip()
    if value.lower() in allowed:
        return value.lower()
    if value.startswith("{"):
        return parse_offsets_json(name, value, topics)
    raise _fail(name, value, f"expected {' or '.join(repr(a) for a in allowed)} or a JSON object per queue")


def namesrv_option(opts: Mapping[str, str], who: str = "source") -> str:
    """Option namesrv (keys lower-cased), checked as a client's name server list."""
    namesrv = opts.get("namesrv")
    if not namesrv:
        raise ConfigError(f"rocketmq {who} option 'namesrv' is required (host:port of a name server)")
    try:
        ClientConfig(namesrv_addr=namesrv)
    except ConfigError as exc:
        raise ConfigError(f"rocketmq {who} option 'namesrv': {exc} (got {namesrv!r})") from None
    return namesrv


def credentials_option(opts: Mapping[str, str], who: str = "source") -> Credentials | None:
    """accessKey + secretKey (+ securityToken); errors name the options, never their values."""
    ak, sk, token = opts.get("accesskey"), opts.get("secretkey"), opts.get("securitytoken")
    if not ak:
        if sk or token:
            raise ConfigError(f"rocketmq {who} option 'secretKey'/'securityToken' needs 'accessKey'")
        return None
    if not sk:
        raise ConfigError(f"rocketmq {who} option 'accessKey' needs 'secretKey'")
    try:
        return Credentials(
            access_key=ak, secret_key=SecretStr(sk), security_token=SecretStr(token) if token else None
        )
    except ConfigError as exc:
        raise ConfigError(f"rocketmq {who} ACL options: {exc}") from None


def tls_option(opts: Mapping[str, str], who: str = "source") -> TLSConfig | Literal[False] | None:
    """The TLS options; any ``tls*`` option but ``tls=false`` turns TLS on. The key password is never
    echoed (it reaches the executors as a SecretStr)."""
    names = ("tlscafile", "tlsinsecure", "tlscertfile", "tlskeyfile", "tlskeypassword", "tlsserverhostname")
    on = _bool(opts, "tls", False) if "tls" in opts else None
    if on is False:
        if any(n in opts for n in names):
            raise ConfigError(f"rocketmq {who} option 'tls' is false but other tls* options are set")
        return False
    if not on and not any(n in opts for n in names):
        return None
    try:
        return TLSConfig(
            verify=not _bool(opts, "tlsInsecure", False),
            ca_file=opts.get("tlscafile") or None,
            cert_file=opts.get("tlscertfile") or None,
            key_file=opts.get("tlskeyfile") or None,
            key_password=SecretStr(pw) if (pw := opts.get("tlskeypassword")) else None,
            server_hostname=opts.get("tlsserverhostname") or None,
        )
    except ConfigError as exc:
        raise ConfigError(f"rocketmq {who} TLS options: {exc}") from None


def parse_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate Spark's options (keys in any case) for a batch or a streaming read."""
    opts = {k.lower(): v for k, v in raw.items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise ConfigError(f"rocketmq source: unknown option(s) {unknown}")
    namesrv = namesrv_option(opts)
    topics, pattern = _topics(opts)
    starting = _offsets(
        opts, "startingOffsets", "latest" if streaming else "earliest", ("earliest", "latest"), topics
    )
    if streaming and "endingoffsets" in opts:
        raise _fail("endingOffsets", opts["endingoffsets"], "is for batch reads only")
    ending = _offsets(opts, "endingOffsets", "latest", ("latest",), topics)
    by_ts = None
    if "startingoffsetsbytimestamp" in opts:
        by_ts = parse_offsets_json(
            "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"], topics, allow_special=False
        )
    ts_value = opts.get("startingtimestamp")
    starting_ts = None
    if ts_value is not None:
        try:
            starting_ts = int(ts_value)
        except ValueError:
            raise _fail("startingTimestamp", ts_value, "expected epoch milliseconds") from None
        if starting_ts < 0:
            raise _fail("startingTimestamp", ts_value, "expected epoch milliseconds")
    max_trigger = _positive_int(opts, "maxRecordsPerTrigger")
    if max_trigger is not None and not streaming:
        raise _fail("maxRecordsPerTrigger", max_trigger, "is for streaming reads only")
    tags = opts.get("tags", "*")
    parse_tag_expression(tags)
    sql = opts.get("sql")
    if sql is not None:
        if "tags" in opts:
            raise _fail("sql", sql, "cannot be combined with tags")
        try:
            Selector.sql(sql)
        except ConfigError as exc:
            raise _fail("sql", sql, str(exc)) from None
    batch = _positive_int(opts, "pullBatchSize") or 32
    if batch > 1024:
        raise _fail("pullBatchSize", batch, "must be at most 1024")
    timeout_s = opts.get("requesttimeout", "10")
    try:
        timeout = float(timeout_s)
    except ValueError:
        raise _fail("requestTimeout", timeout_s, "expected seconds") from None
    if timeout <= 0:
        raise _fail("requestTimeout", timeout_s, "expected seconds > 0")
    min_trigger = _positive_int(opts, "minOffsetsPerTrigger")
    if min_trigger is not None and not streaming:
        raise _fail("minOffsetsPerTrigger", min_trigger, "is for streaming reads only")
    delay_s = opts.get("maxtriggerdelay", "15m")
    delay = _duration(delay_s)
    if delay is None:
        raise _fail("maxTriggerDelay", delay_s, "expected a duration such as 30s, 5m, 1h or 500ms")
    if "maxtriggerdelay" in opts and min_trigger is None:
        raise _fail("maxTriggerDelay", delay_s, "needs minOffsetsPerTrigger")
    inflight = _positive_int(opts, "pullsInFlight") or 16
    if inflight > 64:
        raise _fail("pullsInFlight", inflight, "must be at most 64")
    namespace = opts.get("namespace") or None
    for topic in topics if namespace is not None else ():
        try:  # what goes on the wire must be a topic name (Validators.checkTopic)
            check_topic(wrap_namespace(namespace, topic))
        except ValueError as exc:
            raise _fail("namespace", namespace, f"with topic {topic!r}: {exc}") from None
    return SourceOptions(
        namesrv=namesrv,
        topics=topics,
        topic_pattern=pattern,
        starting=starting,
        ending=ending,
        starting_by_timestamp=by_ts,
        starting_timestamp=starting_ts,
        max_records_per_trigger=max_trigger,
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        tags=tags,
        group=opts.get("group", "rmq_async_spark"),
        commit_offsets=_bool(opts, "commitOffsets", False),
        pull_batch_size=batch,
        request_timeout=timeout,
        credentials=credentials_option(opts),
        tls=tls_option(opts),
        pulls_in_flight=inflight,
        include_properties=_bool(opts, "includeProperties", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        min_offsets_per_trigger=min_trigger,
        max_trigger_delay=delay,
        sql=sql,
        on_undecodable=_undecodable_policy(opts),
        gc_freeze=_bool(opts, "gcFreeze", True),
        namespace=namespace,
    )


def _topics(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """Options topic (a comma-separated list) and topicPattern: exactly one of them."""
    topic, pattern = opts.get("topic"), opts.get("topicpattern")
    if topic is not None and pattern is not None:
        raise ConfigError("rocketmq source options 'topic' and 'topicPattern' cannot be combined")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail("topicPattern", pattern, f"not a regular expression ({exc})") from None
        if not pattern:
            raise _fail("topicPattern", pattern, "is empty")
        return (), pattern
    names = tuple(dict.fromkeys(t.strip() for t in (topic or "").split(",") if t.strip()))
    if not names:
        raise ConfigError("rocketmq source option 'topic' (or 'topicPattern') is required")
    return names, None


def _undecodable_policy(opts: Mapping[str, str]) -> Literal["fail", "skip"]:
    value = opts.get("onundecodable")
    if value is None:
        return "fail"
    v = value.strip().lower()
    if v == "fail":
        return "fail"
    if v == "skip":
        return "skip"
    raise _fail("onUndecodable", value, "expected fail or skip")


_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> float | None:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"1h"`` or plain seconds, as seconds; None if invalid."""
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = t[len(num) :].strip() or "s"
    try:
        value = float(num)
    except ValueError:
        return None
    if unit not in _UNITS or value < 0:
        return None
    return value * _UNITS[unit]
