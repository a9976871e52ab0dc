"""Timer columns of the ``rocketmq`` sink: ``delay`` (seconds, or a day-time interval) and
``deliver_at`` (a timestamp) reach a 5.x broker as its timer properties and are stored in the topic
not before their time; a row with both is a row not sent; a 4.x broker refuses them by name."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle, cluster_in_portal

from rmq_async import Timing

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def rmq5() -> Iterator[ClusterHandle]:
    with cluster_in_portal(brokers=1, queues=4, timing=Timing.fast(), flavour=5) as handle:
        yield handle


def _write(df: Any, namesrv: str, topic: str, **opts: str) -> None:
    w = df.write.format("rocketmq").option("namesrv", namesrv).option("topic", topic).mode("append")
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def _read_until(spark: Any, namesrv: str, topic: str, n: int, timeout: float) -> list[Any]:
    """The topic's rows once it holds ``n`` (read again while the timers are due), or what it holds."""
    deadline = time.monotonic() + timeout
    while True:
        rows: list[Any] = (
            spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", topic).load().collect()
        )
        if len(rows) >= n or time.monotonic() > deadline:
            return rows


@pytest.mark.slow  # waits for the timers (about 14 s); .ci/run's `-m slow` step runs it
def test_delay_and_deliver_at_columns_are_timers(spark: Any, rmq5: ClusterHandle) -> None:
    topic = "SinkTimers"
    rmq5.create_topic(topic)
    body = "cast(keys as binary) as body"
    # a row without a timer first: the workers' start (seconds on a loaded machine) is then behind us
    _write(spark.sql("select 'now' as keys").selectExpr("keys", body), rmq5.namesrv, topic)
    sent = time.time()
    at_ms = round((sent + 8.0) * 1000)
    at = at_ms / 1000
    df = spark.sql(
        f"""
        select * from values
          ('d-num', cast(5.0 as double), cast(null as interval day to second), cast(null as timestamp)),
          ('d-interval', null, make_dt_interval(0, 0, 0, 5.5), null),
          ('at', null, null, timestamp_millis({at_ms}))
        as t(keys, delay_s, delay_i, deliver_at)
        """
    )
    numbers = df.where("keys != 'd-interval'").selectExpr("keys", body, "deliver_at", "delay_s as delay")
    intervals = df.where("keys = 'd-interval'").selectExpr("keys", body, "delay_i as delay")
    _write(numbers, rmq5.namesrv, topic)
    _write(intervals, rmq5.namesrv, topic)
    got = {r.keys: r for r in _read_until(spark, rmq5.namesrv, topic, 4, timeout=30)}
    assert set(got) == {"d-num", "d-interval", "at", "now"}
    due = {"d-num": sent + 5.0, "d-interval": sent + 5.5, "at": at}
    for key, when in due.items():
        stored = got[key].store_timestamp.timestamp()
        assert stored >= when - 1.0, f"{key} stored {when - stored:.3f}s before its time"  # 1 s wheel slot
        assert got[key].properties.get("TIMER_OUT_MS"), key
    assert got["d-num"].properties["TIMER_DELAY_SEC"] == "5"
    assert got["d-interval"].properties["TIMER_DELAY_MS"] == "5500"
    assert got["at"].properties["TIMER_DELIVER_MS"] == str(at_ms)
    assert "TIMER_OUT_MS" not in got["now"].properties
    assert got["now"].body == b"now"


def test_a_row_with_delay_and_deliver_at_is_not_sent(spark: Any, rmq5: ClusterHandle) -> None:
    rmq5.create_topic("SinkBothTimers")
    df = spark.sql(
        "select 'k-both' as keys, cast('x' as binary) as body, 1.5d as delay, "
        "current_timestamp() as deliver_at"
    )
    with pytest.raises(Exception, match=r"row 0 is not a message: Message delay: give deliver_at or delay"):
        _write(df, rmq5.namesrv, "SinkBothTimers")


def test_a_4x_broker_refuses_timer_rows(spark: Any, rmq: ClusterHandle) -> None:
    rmq.create_topic("SinkTimers4")
    df = spark.sql("select 'k-4' as keys, cast('x' as binary) as body, 2 as delay")
    with pytest.raises(Exception, match=r"does not support timer messages"):
        _write(df, rmq.namesrv, "SinkTimers4")
