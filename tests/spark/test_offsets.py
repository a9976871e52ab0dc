"""Pure offset decisions and option parsing of the Spark source (no Spark needed to run them)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_async.errors import ConfigError
from rmq_async.spark.offsets import (
    DataLossError,
    Range,
    from_json,
    limit_offsets,
    resolve_start,
    split_for_min_partitions,
    split_range,
    to_json,
    trigger_ready,
)
from rmq_async.spark.options import parse_options

K = ("T", "broker-a", 0)


def test_resolve_start() -> None:
    assert resolve_start(K, 5, 0, 10, fail_on_data_loss=True) == (5, None)
    with pytest.raises(DataLossError, match=r"below the broker.s min offset 7.*failOnDataLoss"):
        resolve_start(K, 5, 7, 10, fail_on_data_loss=True)
    off, warning = resolve_start(K, 5, 7, 10, fail_on_data_loss=False)
    assert off == 7 and warning is not None and "2 messages were deleted" in warning
    with pytest.raises(DataLossError, match="past the broker's max offset"):
        resolve_start(K, 50, 0, 10, fail_on_data_loss=True)
    assert resolve_start(K, 50, 0, 10, fail_on_data_loss=False)[0] == 0


def test_json_round_trip() -> None:
    offs = {("T", "broker-a", 0): 3, ("T", "broker-b", 12): 0, ("U", "broker-a", 1): 7}
    assert to_json(offs) == {"T": {"broker-a": {"0": 3}, "broker-b": {"12": 0}}, "U": {"broker-a": {"1": 7}}}
    assert from_json(to_json(offs)) == offs
    assert from_json(to_json(offs), ["T"]) == offs  # the shape of several topics is never re-read
    # a one-topic query's checkpoint before several topics could be read
    assert from_json({"broker-a": {"0": 3}}, ["T"]) == {("T", "broker-a", 0): 3}


offsets = st.dictionaries(
    st.tuples(st.sampled_from("TU"), st.sampled_from("ab"), st.integers(0, 7)),
    st.integers(0, 100),
    min_size=1,
)


@given(offsets, st.data(), st.one_of(st.none(), st.integers(1, 300)))
def test_limit_offsets_bounds_rows(
    start: dict[tuple[str, str, int], int], data: st.DataObject, limit: int | None
) -> None:
    latest = {k: v + data.draw(st.integers(0, 50)) for k, v in start.items()}
    ends = limit_offsets(start, latest, limit)
    assert all(start[k] <= ends[k] <= latest[k] for k in start)
    total = sum(ends[k] - start[k] for k in start)
    avail = sum(latest[k] - start[k] for k in start)
    assert total == (avail if limit is None else min(avail, limit))


def test_split_range() -> None:
    r = Range("T", "broker-a", 1, 10, 35)
    assert split_range(r, None) == [r]
    parts = split_range(r, 10)
    assert [(p.start, p.end) for p in parts] == [(10, 20), (20, 30), (30, 35)]


def test_split_for_min_partitions_as_kafka() -> None:
    a, b = Range("T", "broker-a", 0, 0, 100), Range("T", "broker-a", 1, 50, 60)
    assert split_for_min_partitions([a, b, Range("T", "broker-a", 2, 7, 7)], None) == [a, b]
    assert split_for_min_partitions([a, b], 2) == [a, b]
    parts = split_for_min_partitions([a, b], 8)  # 100/110*8 -> 7 pieces, 10/110*8 -> 1
    assert [(p.queue_id, p.start, p.end) for p in parts] == [
        (0, 0, 14), (0, 14, 28), (0, 28, 42), (0, 42, 56), (0, 56, 70), (0, 70, 85), (0, 85, 100),
        (1, 50, 60),
    ]  # fmt: skip


ranges = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 1000), st.integers(0, 400)), min_size=1, max_size=8
)


@given(ranges, st.integers(1, 40))
def test_split_for_min_partitions_covers_each_range_once(rs: list[tuple[int, int, int]], k: int) -> None:
    given_ranges = [Range("T", "b", i, s, s + n) for i, (_, s, n) in enumerate(rs)]  # one range per queue
    parts = split_for_min_partitions(given_ranges, k)
    for r in given_ranges:
        mine = sorted((p.start, p.end) for p in parts if p.queue_id == r.queue_id)
        want = [r.start, r.end] if r.end > r.start else []
        assert [b for piece in mine for b in piece][:1] + [b for piece in mine for b in piece][-1:] == want
        assert all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    assert all(p.end > p.start for p in parts)
    nonempty = sum(r.end > r.start for r in given_ranges)
    assert len(parts) >= min(k, nonempty) or len(parts) >= nonempty


def test_trigger_ready() -> None:
    assert trigger_ready(0, None, 0.0, 900.0)
    assert not trigger_ready(5, 10, 1.0, 900.0)
    assert trigger_ready(10, 10, 1.0, 900.0)
    assert trigger_ready(0, 10, 900.0, 900.0)  # the delay passed: whatever there is


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        ({"topic": "T"}, "'namesrv' is required"),
        ({"namesrv": "nohost", "topic": "T"}, "'namesrv'"),
        ({"namesrv": "h:1"}, "'topic' .or 'topicPattern'. is required"),
        ({"namesrv": "h:1", "topic": " , "}, "'topic' .or 'topicPattern'. is required"),
        ({"namesrv": "h:1", "topic": "T", "topicPattern": "T.*"}, "cannot be combined"),
        ({"namesrv": "h:1", "topicPattern": "T(["}, "'topicPattern': not a regular expression"),
        ({"namesrv": "h:1", "topic": "T,U", "startingOffsets": '{"b": {"0": 1}}'}, "must map broker names"),
        ({"namesrv": "h:1", "topic": "T", "maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger'"),
        ({"namesrv": "h:1", "topic": "T", "startingOffsets": "{bad"}, "'startingOffsets': not valid JSON"),
        ({"namesrv": "h:1", "topic": "T", "startingOffsets": '{"b": {"x": 1}}'}, "must be integers"),
        ({"namesrv": "h:1", "topic": "T", "endingOffsets": "latest"}, "batch reads only"),
        ({"namesrv": "h:1", "topic": "T", "startingTimestamp": "now"}, "'startingTimestamp'"),
        ({"namesrv": "h:1", "topic": "T", "colour": "red"}, "unknown option"),
        ({"namesrv": "h:1", "topic": "T", "maxTriggerDelay": "5m"}, "needs minOffsetsPerTrigger"),
        ({"namesrv": "h:1", "topic": "T", "minOffsetsPerTrigger": "9", "maxTriggerDelay": "x"}, "duration"),
        ({"namesrv": "h:1", "topic": "T", "pullsInFlight": "65"}, "at most 64"),
        ({"namesrv": "h:1", "topic": "T", "minPartitions": "0"}, "'minPartitions'"),
        ({"namesrv": "h:1", "topic": "T", "includeProperties": "no"}, "'includeProperties'"),
        ({"namesrv": "h:1", "topic": "T", "gcFreeze": "sometimes"}, "'gcFreeze'"),
    ],
)
def test_bad_options(opts: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_options(opts, streaming=True)


def test_good_options() -> None:
    o = parse_options(
        {"NAMESRV": "127.0.0.1:9876", "topic": "T", "startingOffsets": '{"broker-a": {"0": 5, "1": -2}}',
         "failOnDataLoss": "False", "maxRecordsPerTrigger": "100", "tags": "A || B"},
        streaming=True,
    )  # fmt: skip
    assert o.starting == {("T", "broker-a", 0): 5, ("T", "broker-a", 1): -2}
    assert o.topics == ("T",) and o.topic_pattern is None and o.subject == "topic T"
    many = parse_options(
        {
            "namesrv": "h:1",
            "topic": "A, B,A",
            "startingOffsets": '{"A": {"b": {"0": 3}}, "B": {"b": {"1": -1}}}',
        },
        streaming=True,
    )
    assert many.topics == ("A", "B") and many.subject == "topics A, B"
    assert many.starting == {("A", "b", 0): 3, ("B", "b", 1): -1}
    pat = parse_options({"namesrv": "h:1", "topicPattern": "Orders-.*"}, streaming=False)
    assert pat.topics == () and pat.matches("Orders-eu") and not pat.matches("xOrders-eu")
    assert not pat.matches("Orders")  # the whole name must match (Kafka's subscribePattern)
    assert not o.fail_on_data_loss and o.max_records_per_trigger == 100 and o.tags == "A || B"
    assert parse_options({"namesrv": "h:1", "topic": "T"}, streaming=False).starting == "earliest"
    o = parse_options(
        {"namesrv": "h:1", "topic": "T", "minOffsetsPerTrigger": "500", "maxTriggerDelay": "90s",
         "minPartitions": "16", "pullsInFlight": "8", "includeProperties": "false"},
        streaming=True,
    )  # fmt: skip
    assert (o.min_offsets_per_trigger, o.max_trigger_delay, o.min_partitions) == (500, 90.0, 16)
    assert o.pulls_in_flight == 8 and not o.include_properties
    d = parse_options({"namesrv": "h:1", "topic": "T"}, streaming=True)
    assert (d.max_trigger_delay, d.pulls_in_flight, d.include_properties) == (900.0, 16, True)
    assert d.min_partitions is None
    with pytest.raises(ConfigError, match="streaming reads only"):
        parse_options({"namesrv": "h:1", "topic": "T", "minOffsetsPerTrigger": "5"}, streaming=False)


def test_min_offsets_per_trigger_in_the_stream_reader() -> None:
    """latestOffset holds a micro-batch back until minOffsetsPerTrigger messages are there or
    maxTriggerDelay has passed since the last one (the first one is never held, as Kafka's)."""
    import time

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rmq_async.spark.source import RocketMQStreamReader

    opts = {"namesrv": "h:1", "topic": "T", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "1h"}
    reader = RocketMQStreamReader(parse_options(opts, streaming=True))
    bounds = {K: (0, 4)}
    reader._bounds = lambda: bounds  # type: ignore[method-assign]
    start = to_json({K: 0})
    assert reader.latestOffset(start, ReadAllAvailable()) == to_json({K: 4})  # the first batch
    bounds = {K: (0, 8)}
    assert reader.latestOffset(to_json({K: 4}), ReadAllAvailable()) == to_json({K: 4})  # 4 < 10: wait
    reader._last_trigger = time.time() - 3601
    assert reader.latestOffset(to_json({K: 4}), ReadAllAvailable()) == to_json({K: 8})  # the delay passed
    bounds = {K: (0, 20)}
    assert reader.latestOffset(to_json({K: 8}), ReadAllAvailable()) == to_json({K: 20})  # 12 >= 10
    bounds = {K: (0, 21)}
    reader.prepareForTriggerAvailableNow()  # availableNow: 1 < 10, read all the same
    assert reader.latestOffset(to_json({K: 20}), ReadAllAvailable()) == to_json({K: 21})
