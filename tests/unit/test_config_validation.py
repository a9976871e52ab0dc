"""Every invalid value of every config model is rejected at construction, naming the field.

Strategy: the table is derived from the models themselves (each field's annotated constraints give the
values just past its bounds, its type gives a value of the wrong type), plus hand-written rows for the
constraints the annotations cannot express (patterns, cross-field invariants, enumerations checked
elsewhere). A completeness test fails when a field is added without any row. Rows that the models
accept today although the Java client (or the wire) would not are marked xfail(strict=True): they are
defects the lead fixes, and the xfail then turns into a failure to remove.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, cast

import annotated_types as at
import pytest
from pydantic import BaseModel

from rmq_async.config import ClientConfig, ConsumerConfig, LitePullConfig, ProducerConfig, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.errors import ConfigError
from rmq_async.internals import internals

MODELS: dict[type[BaseModel], dict[str, Any]] = {
    Timing: {},
    ClientConfig: {},
    ConsumerConfig: {"group": "g"},
    LitePullConfig: {"group": "g"},
    ProducerConfig: {},
}


def _bound_violations(meta: list[Any], is_int: bool) -> list[Any]:
    out: list[Any] = []
    step = 1 if is_int else 1e-9
    for m in meta:
        if isinstance(m, at.Gt):
            out.append(m.gt)
        elif isinstance(m, at.Ge):
            out.append(cast(float, m.ge) - step)
        elif isinstance(m, at.Lt):
            out.append(m.lt)
        elif isinstance(m, at.Le):
            out.append(cast(float, m.le) + step)
        elif isinstance(m, at.MinLen) and m.min_length > 0:
            out.append("x" * (m.min_length - 1))
        elif isinstance(m, at.MaxLen):
            out.append("x" * (m.max_length + 1))
    return out


def _wrong_type(annotation: Any) -> Any:
    text = str(annotation)
    if "Timing" in text:
        return 5
    if text in ("<class 'float'>", "<class 'int'>"):
        return "abc"
    if text == "<class 'bool'>":
        return "maybe"
    if "int" in text:  # a union with int: 5 is valid
        return [5]
    if "Literal" in text:
        return "NOT_A_CHOICE"
    return 5  # str and str | None: pydantic does not turn an int into a str


def _derived_rows() -> list[Any]:
    rows = []
    for model in MODELS:
        for name, field in model.model_fields.items():
            is_int = field.annotation is int
            values = [*_bound_violations(field.metadata, is_int), _wrong_type(field.annotation)]
            if field.annotation is float and any(isinstance(m, (at.Gt, at.Ge)) for m in field.metadata):
                values.append(math.nan)
            for v in values:
                rows.append(pytest.param(model, name, v, id=f"{model.__name__}.{name}={v!r}"[:80]))
    return rows


#: (model, field, invalid value): constraints beyond the annotations
EXTRA: list[Any] = [
    pytest.param(ConsumerConfig, "group", "has space", id="group-pattern"),
    pytest.param(ConsumerConfig, "group", "a/b", id="group-slash"),
    pytest.param(LitePullConfig, "group", "has space", id="lite-group-pattern"),
    pytest.param(LitePullConfig, "allocate_strategy", "NOPE", id="lite-allocate-unknown"),
    pytest.param(LitePullConfig, "pull_batch_size", True, id="lite-batch-bool"),
    pytest.param(ClientConfig, "namesrv_addr", "nohost", id="namesrv-noport"),
    pytest.param(ClientConfig, "namesrv_addr", "h:0", id="namesrv-port0"),
    pytest.param(ClientConfig, "namesrv_addr", "h:70000", id="namesrv-port-big"),
    pytest.param(ClientConfig, "namesrv_addr", " ; ", id="namesrv-empty"),
    pytest.param(ClientConfig, "namesrv_addr", "1.2.3.4:9876;:9876", id="namesrv-second-bad"),
    pytest.param(Timing, "delay_levels", "1s 5x", id="delay-unit"),
    pytest.param(Timing, "delay_levels", "", id="delay-empty"),
    pytest.param(Timing, "delay_levels", "-1s", id="delay-negative"),
    # constraints that need validators beyond the annotations
    pytest.param(
        ConsumerConfig,
        "allocate_strategy",
        "NOPE",
        id="allocate-unknown",
    ),
    pytest.param(
        ConsumerConfig,
        "consume_timestamp",
        "garbage",
        id="timestamp-garbage",
    ),
    pytest.param(
        ConsumerConfig,
        "consume_timestamp",
        "2024130199",
        id="timestamp-short",
    ),
    pytest.param(
        ConsumerConfig,
        "consume_timestamp",
        -5,
        id="timestamp-negative",
    ),
    pytest.param(
        ConsumerConfig,
        "pull_threshold_for_topic",
        0,
        id="topic-threshold-0",
    ),
    pytest.param(
        ConsumerConfig,
        "pull_threshold_size_for_topic",
        0,
        id="topic-size-threshold-0",
    ),
    pytest.param(
        ConsumerConfig,
        "pull_batch_size",
        True,
        id="batch-bool",
    ),
    pytest.param(
        ConsumerConfig,
        "rebalance_stability_window",
        math.inf,
        id="window-inf",
    ),
    pytest.param(
        Timing,
        "heartbeat_interval",
        math.inf,
        id="heartbeat-inf",
    ),
    pytest.param(
        ProducerConfig,
        "send_timeout",
        math.inf,
        id="send-timeout-inf",
    ),
    pytest.param(
        ProducerConfig,
        "group",
        "bad group!",
        id="producer-group-pattern",
    ),
    pytest.param(
        ClientConfig,
        "language",
        "KLINGON",
        id="language-unknown",
    ),
]


def _construct(model: type[BaseModel], field: str, value: Any) -> None:
    kwargs = dict(MODELS[model])
    kwargs[field] = value
    model(**kwargs)


@pytest.mark.parametrize(("model", "field", "value"), _derived_rows() + EXTRA)
def test_invalid_value_rejected_naming_field(model: type[BaseModel], field: str, value: Any) -> None:
    try:
        _construct(model, field, value)
    except ConfigError as exc:
        assert f"{model.__name__}.{field}" in str(exc), str(exc)
        return
    raise AssertionError(f"{model.__name__}({field}={value!r}) was accepted")


def test_every_field_has_a_row() -> None:
    covered = {(r.values[0], r.values[1]) for r in _derived_rows()}
    missing = [f"{m.__name__}.{f}" for m in MODELS for f in m.model_fields if (m, f) not in covered]
    assert missing == []


def test_defaults_are_valid() -> None:
    for model, kwargs in MODELS.items():
        model(**kwargs)
    Timing.fast()


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"pull_timeout": 1.0}, ("pull_timeout", "suspend_timeout", "held_pull_check_interval")),
        ({"lock_renew_interval": 2.0}, ("lock_renew_interval", "lock_lease")),
        ({"broker_lock_expiry": 1.0}, ("lock_lease", "broker_lock_expiry")),
    ],
)
def test_cross_field_invariants_name_the_fields(overrides: dict[str, Any], names: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        Timing.fast(**overrides)
    for n in names:
        assert n in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"group": ""}, "group"),
        ({"group": "bad group"}, "group"),
        ({"group": "g", "pull_batch_size": 0}, "pull_batch_size"),
        ({"group": "g", "pull_threshold_size_for_queue": 0}, "pull_threshold_size_for_queue"),
        ({"group": "g", "auto_commit_interval": -1.0}, "auto_commit_interval"),
        ({"group": "g", "consume_from_where": "CONSUME_FROM_MIDDLE"}, "consume_from_where"),
        ({"group": "g", "consume_timestamp_ms": -1}, "consume_timestamp_ms"),
        ({"group": "g", "allocate_strategy": "NOPE"}, "allocate_strategy"),
    ],
)
def test_lite_pull_consumer_arguments_are_validated(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"LitePullConfig\.{field}"):
        LitePullConsumer(**kwargs)


def test_lite_pull_consumer_shares_a_validated_consumer_config() -> None:
    c = LitePullConsumer(
        "g",
        consume_from_where="CONSUME_FROM_TIMESTAMP",
        consume_timestamp_ms=1_700_000_000_000,
        allocate_strategy="AVG_BY_CIRCLE",
        pull_batch_size=2000,  # no upper bound, as Java's DefaultLitePullConsumer
        pull_threshold_size_for_queue=5,  # MiB, as the push consumer's
    )
    cfg = internals(c).ctx.config
    assert type(cfg) is ConsumerConfig and cfg.model_fields_set >= {"group", "consume_from_where"}
    assert (cfg.group, cfg.consume_from_where, cfg.consume_timestamp, cfg.allocate_strategy) == (
        "g",
        "CONSUME_FROM_TIMESTAMP",
        1_700_000_000_000,
        "AVG_BY_CIRCLE",
    )
    assert c.pull_batch_size == 2000 and internals(c).buffer.max_queue_bytes == 5 << 20


def test_unknown_field_rejected_by_name() -> None:
    with pytest.raises(ConfigError, match=r"ConsumerConfig\.pull_batch_sise"):
        ConsumerConfig(group="g", pull_batch_sise=5)  # type: ignore[call-arg]  # the typo is the test


def test_several_errors_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(group="", pull_batch_size=0)
    assert "ConsumerConfig.group" in str(info.value)
    assert "ConsumerConfig.pull_batch_size" in str(info.value)


@pytest.mark.parametrize(
    ("addr", "words"),
    [
        ("a:1,b:2", "separated by ';'"),
        ("https://x:9876", "host:port"),
        ("http://a:1;b:2", "one address"),
        ("ho st:1", "host:port"),
        ("1.2.3.4:9876;x/y:1", "host:port"),
    ],
)
def test_a_name_server_address_of_the_wrong_form_is_a_config_error_saying_the_form(
    addr: str, words: str
) -> None:
    with pytest.raises(ConfigError, match="host:port") as info:
        ClientConfig(namesrv_addr=addr)
    assert words in str(info.value)


def test_an_http_name_server_endpoint_is_read_as_java_reads_it() -> None:
    # ClientConfig.getNamesrvAddr: "http://..." (NAMESRV_ENDPOINT_PATTERN) is host:port after the last '/'
    assert ClientConfig(namesrv_addr="http://ns.example.com:9876").namesrv_list() == ["ns.example.com:9876"]
    assert ClientConfig(namesrv_addr="[::1]:9876;10.0.0.1:9876").namesrv_list() == [
        "[::1]:9876",
        "10.0.0.1:9876",
    ]


def test_a_bad_name_server_address_from_the_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "a:1,b:2")
    with pytest.raises(ConfigError, match="separated by ';'"):
        ClientConfig().namesrv_list()


@pytest.mark.parametrize("topic", ["bad topic", "a/b", "T" * 300, "naïve"])
def test_a_topic_the_producer_refuses_is_refused_at_subscribe(topic: str) -> None:
    from rmq_async import PushConsumer
    from rmq_async.protocol.message import Message

    with pytest.raises(ConfigError):  # the producer's rule (Validators.checkTopic)
        Message(topic, b"x")
    with pytest.raises(ConfigError, match="cannot subscribe"):
        PushConsumer("g_topics", namesrv_addr="127.0.0.1:1", subscriptions={topic: "*"})
    c = PushConsumer("g_topics", namesrv_addr="127.0.0.1:1")
    with pytest.raises(ConfigError, match="cannot subscribe"):
        c.subscribe(topic)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (1_796_151_755, "if you meant seconds"),  # seconds, not milliseconds
        (20_261_202_013_000, "yyyyMMddHHmmss"),  # Java's form given as a number
        ("1796151755000", "yyyyMMddHHmmss"),  # a str is Java's form only
    ],
)
def test_a_consume_timestamp_the_cli_refuses_is_refused_by_the_config(value: int | str, words: str) -> None:
    from rmq_async.cli.args import epoch_ms

    with pytest.raises(ConfigError, match=words):
        ConsumerConfig(group="g", consume_timestamp=value)
    if isinstance(value, int):
        with pytest.raises(ConfigError, match=words):
            LitePullConfig(group="g", consume_timestamp_ms=value)
    if words == "if you meant seconds":  # (on the command line 14 digits are Java's form)
        with pytest.raises(argparse.ArgumentTypeError, match=words):  # the same rule
            epoch_ms(str(value))


def test_consume_timestamps_of_both_forms_pass_the_config_and_the_cli() -> None:
    from rmq_async.cli.args import epoch_ms

    assert (
        ConsumerConfig(group="g", consume_timestamp=1_796_151_755_000).consume_timestamp == 1_796_151_755_000
    )
    assert ConsumerConfig(group="g", consume_timestamp="20261202013000").consume_timestamp == "20261202013000"
    assert epoch_ms("1796151755000") == 1_796_151_755_000
    assert epoch_ms("20261202013000") == "20261202013000"  # Java's yyyyMMddHHmmss, as the config takes it


@pytest.mark.parametrize(
    "given",
    [
        {"namesrv_addr": "127.0.0.1:1"},
        {"namesrv_addr": "127.0.0.1:1", "timing": Timing.fast(), "instance_name": "i1"},
        {"client_config": ClientConfig(namesrv_addr="127.0.0.1:2", instance_name="own")},
        {
            "client_config": ClientConfig(namesrv_addr="127.0.0.1:2", namespace="ns"),
            "timing": Timing.fast(),
            "instance_name": "i2",
        },
    ],
    ids=["address", "address+timing+name", "config", "config+timing+name"],
)
def test_every_client_takes_its_client_settings_by_one_rule(given: dict[str, Any]) -> None:
    """``client_config=`` / ``namesrv_addr=`` / ``timing=`` / ``instance_name=`` mean the same to the
    consumers as to the producer (``config.client_settings``); a lite consumer is a stream client."""
    from rmq_async import PushConsumer
    from rmq_async.config import client_settings

    expected = client_settings(
        given.get("client_config"), **{k: v for k, v in given.items() if k != "client_config"}
    )
    assert PushConsumer("g_rule", **given).client_config == expected
    lite = LitePullConsumer("g_rule", **given)
    assert lite.client_config == expected.model_copy(update={"stream": True})
