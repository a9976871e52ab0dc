"""ConsumerContext and Subscriptions on their own."""

from __future__ import annotations

import anyio
import pytest

from rmq_async.config import ClientConfig, ConsumerConfig, Timing
from rmq_async.consumer.context import ConsumerContext, Subscriptions
from rmq_async.errors import ClientError


def _ctx(**kw: object) -> ConsumerContext:
    return ConsumerContext(
        group="g",
        config=ConsumerConfig(group="g", **kw),
        client_config=ClientConfig(namesrv_addr="127.0.0.1:9876", timing=Timing()),
        subscriptions=Subscriptions("%RETRY%g"),
    )


def test_subscriptions_put_get_and_the_retry_topic_made_once() -> None:
    subs = Subscriptions("%RETRY%g")
    a = subs.put("T", "TagA || TagB")
    assert subs.get("T") is a and a.tags_set == ["TagA", "TagB"] and "T" in subs and len(subs) == 1
    retry = subs.get("%RETRY%g")
    assert retry is not None and retry.sub_string == "*" and subs.get("%RETRY%g") is retry
    assert subs.topics() == {"T", "%RETRY%g"}
    subs.put("A", None)
    assert [s.topic for s in subs.data()] == ["A", "T", "%RETRY%g"]
    assert subs.expressions() == {"T": "TagA || TagB", "A": "*"}
    subs.remove("T")
    assert subs.get("T") is None and subs.topics() == {"A", "%RETRY%g"}


def test_subscriptions_without_a_retry_topic() -> None:
    subs = Subscriptions(None)
    subs.put("T", "*")
    assert subs.topics() == {"T"} and [s.topic for s in subs.data()] == ["T"]
    assert subs.get("%RETRY%g") is None


def test_context_identity_and_the_max_reconsume_times() -> None:
    c = _ctx()
    assert (c.group, c.retry_topic, c.namespace, c.clustering) == ("g", "%RETRY%g", None, True)
    assert c.max_reconsume_times == 16
    assert _ctx(max_reconsume_times=3).max_reconsume_times == 3


def test_resources_before_a_run_raise_and_nothing_is_started() -> None:
    c = _ctx()
    for name in ("client", "offset_store", "inner_producer"):
        with pytest.raises(ClientError, match="not started"):
            getattr(c, name)
    assert not c.started and not c.has_offset_store and c.task_group is None

    async def never() -> None:
        raise AssertionError("started outside a run")

    assert c.start_soon(never) is False


async def test_start_soon_runs_in_the_task_group_and_a_new_run_keeps_the_consume_timeout() -> None:
    c = _ctx()
    ran = anyio.Event()

    async def task() -> None:
        ran.set()

    async with anyio.create_task_group() as tg:
        c.set_task_group(tg)
        assert c.start_soon(task)
    assert ran.is_set()
    c.deadlines.set_timeout(42.0)
    old = c.deadlines
    c.stopping = True
    c.new_run()
    assert c.deadlines is not old and c.deadlines.timeout == 42.0
    assert not c.stopping and c.task_group is None and not c.started
