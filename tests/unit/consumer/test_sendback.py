"""The retry path on its own: send-back, its fallback send to %RETRY%group, the orderly path to the
DLQ, and the original topic shown for a retried message."""

from __future__ import annotations

from support.consumer_context import StubApi, StubProducer, make_context

from rmq_async.consumer.sendback import reset_retry_topic, send_back, send_to_dlq
from rmq_async.protocol.codes import Prop
from rmq_async.protocol.stored import MessageExt


def _msg(**props: str) -> MessageExt:
    return MessageExt("T", b"x", properties=props, queue_offset=3, commit_log_offset=77, reconsume_times=2)


async def test_send_back_and_its_fallback_send() -> None:
    api, producer = StubApi(), StubProducer()
    c = make_context(api=api, producer=producer)
    assert await send_back(c, _msg(), 0)
    assert api.sent_back == [77] and producer.sent == [] and c.stats.sent_back == 1
    api.send_back_ok = False
    assert await send_back(c, _msg(), 0)  # refused by the broker: sent to %RETRY%g instead
    (m,) = producer.sent
    assert m.topic == "%RETRY%g" and m.delay_level == 5  # 3 + reconsume times
    assert m.properties[Prop.RETRY_TOPIC] == "T" and m.properties[Prop.RECONSUME_TIME] == "3"
    assert m.properties[Prop.MAX_RECONSUME_TIMES] == "16"
    producer.ok = False
    assert not await send_back(c, _msg(), 0)  # every path failed: the caller keeps the message
    assert c.stats.sent_back == 2


async def test_orderly_dlq_send_carries_the_maximum() -> None:
    producer = StubProducer()
    c = make_context(producer=producer, orderly=True)
    assert await send_to_dlq(c, _msg(**{Prop.DELAY_TIME_LEVEL: "3"}), 2)
    (m,) = producer.sent
    assert m.topic == "%RETRY%g" and m.properties[Prop.RECONSUME_TIME] == "2"
    # the stored delay level is replaced by the send's own: 3 + reconsume times
    assert m.properties[Prop.MAX_RECONSUME_TIMES] == "2" and m.properties[Prop.DELAY_TIME_LEVEL] == "5"
    producer.ok = False
    assert not await send_to_dlq(c, _msg(), 2)


def test_a_retried_message_shows_its_original_topic_without_the_namespace() -> None:
    retried = MessageExt("%RETRY%ns%g", b"x", properties={Prop.RETRY_TOPIC: "ns%T"})
    plain = MessageExt("ns%T", b"x")
    reset_retry_topic([retried, plain], "%RETRY%ns%g", "ns")
    assert (retried.topic, plain.topic) == ("T", "T")
