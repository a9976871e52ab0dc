"""rmq_async.producer.fault: Java's MQFaultStrategy thresholds and the filtered queue selection."""

from __future__ import annotations

from rmq_async import ProducerConfig
from rmq_async.producer.fault import LatencyFaultTolerance, select_queue
from rmq_async.protocol.mq import MessageQueue

QUEUES = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(2)]


def _fault() -> LatencyFaultTolerance:
    cfg = ProducerConfig()
    return LatencyFaultTolerance(cfg.latency_max, cfg.not_available_duration)


def test_the_not_available_durations_are_javas_5x_defaults() -> None:
    f = _fault()
    assert [f.not_available_ms(ms) for ms in (0, 49, 100, 549, 550, 1800, 3000, 5000, 14999, 15000)] == [
        0, 0, 0, 0, 2000, 5000, 6000, 10000, 10000, 30000,
    ]  # fmt: skip


def test_a_failed_broker_is_avoided_for_its_duration_then_used_again() -> None:
    f = _fault()
    f.update("broker-a", 3, 100.0, isolation=True, reachable=True)  # a connection failure: 10 s
    assert not f.is_available("broker-a", 109.99) and f.is_available("broker-a", 110.0)
    for counter in range(8):
        assert select_queue(QUEUES, counter, None, f, 105.0).broker_name == "broker-b"
    assert {select_queue(QUEUES, c, None, f, 110.0).broker_name for c in range(4)} == {"broker-a", "broker-b"}


def test_an_error_answer_makes_a_broker_unreachable_until_a_send_to_it_works() -> None:
    f = _fault()
    f.update("broker-a", 1, 0.0, isolation=True, reachable=False)
    f.update("broker-b", 600, 0.0, isolation=False, reachable=True)  # slow: 2 s
    # neither is available: the reachable one, then (not the last broker) any
    assert select_queue(QUEUES, 0, None, f, 1.0).broker_name == "broker-b"
    assert select_queue(QUEUES, 0, "broker-b", f, 1.0) == QUEUES[0]  # nothing passes: the plain next
    f.update("broker-a", 5, 20.0, isolation=False, reachable=True)
    assert f.is_reachable("broker-a") and select_queue(QUEUES, 0, None, f, 20.0).broker_name == "broker-a"


def test_without_fault_tolerance_only_the_last_broker_is_avoided() -> None:
    assert select_queue(QUEUES, 0, "broker-a", None, 0.0).broker_name == "broker-b"
    assert [select_queue(QUEUES, c, None, None, 0.0) for c in range(4)] == QUEUES
