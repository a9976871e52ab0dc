"""The client objects say what they are in repr(): group, topics, state; never a secret."""

from __future__ import annotations

from rmq_async import ClientConfig, Credentials, LitePullConsumer, Producer, PushConsumer
from rmq_async.consumer.stats import ConsumerStats

SECRET = "s3cr3t-never-shown"


async def _handler(msgs: object, ctx: object) -> None:
    return None


def _config() -> ClientConfig:
    return ClientConfig(
        namesrv_addr="127.0.0.1:9876", credentials=Credentials(access_key="AK", secret_key=SECRET)
    )


def test_a_push_consumer_repr_names_group_topics_and_state() -> None:
    c = PushConsumer(
        "g_repr", client_config=_config(), handler=_handler, subscriptions={"T1": "a || b", "T2": "*"}
    )
    text = repr(c)
    assert text.startswith("<PushConsumer ") and "'g_repr'" in text
    assert "T1" in text and "T2" in text and "not started" in text
    assert "%RETRY%" not in text and "0x" not in text and SECRET not in text


def test_a_lite_consumer_and_a_producer_repr_name_group_and_state() -> None:
    lite = LitePullConsumer("g_lite_repr", client_config=_config())
    assert repr(lite).startswith("<LitePullConsumer ") and "'g_lite_repr'" in repr(lite)
    assert "not started" in repr(lite) and SECRET not in repr(lite)
    p = Producer("g_prod_repr", client_config=_config())
    assert repr(p).startswith("<Producer ") and "'g_prod_repr'" in repr(p) and "127.0.0.1:9876" in repr(p)
    assert "not running" in repr(p) and SECRET not in repr(p) and "0x" not in repr(p)


def test_consumer_stats_repr_shows_the_counts() -> None:
    s = ConsumerStats()
    s.pulled("T", 5, 0.01)
    s.consumed("T", 4, 0.01, ok=True)
    s.consumed("T", 1, 0.01, ok=False)
    assert (
        repr(s)
        == "<ConsumerStats pulled=5 consumed_ok=4 consumed_failed=1 sent_back=0 to_dlq=0 topics=['T']>"
    )
