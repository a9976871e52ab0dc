"""The instruments of one (meter provider, tracer provider) pair: the histograms the observers
record, and the gauges and counters, observed when the SDK collects, that read the plain counts the
clients keep anyway (nothing is recorded per message for them).

What they read of the observers is stated here as protocols, so that this module does not import
the observers (which record into its histograms)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ._api import CallbackOptions, Observation

__all__ = [
    "ConsumerCounts",
    "ObservedConsumer",
    "ObservedProducer",
    "ObservedQueue",
    "OffsetReader",
    "Telemetry",
]

_SEND_BUCKETS = (1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0)
_AWAIT_BUCKETS = (1.0, 5.0, 20.0, 100.0, 1000.0, 5000.0, 10000.0)
_PROCESS_BUCKETS = (1.0, 5.0, 10.0, 100.0, 1000.0, 10000.0, 60000.0)


class ObservedQueue(Protocol):
    """What the gauges read of a process queue."""

    mq: Any
    dropped: bool
    max_offset: int
    msg_bytes: int

    @property
    def count(self) -> int: ...


class OffsetReader(Protocol):
    """What the lag gauge reads of a consumer's offset store."""

    def read_memory(self, mq: Any) -> int: ...


class ConsumerCounts(Protocol):
    """What the counters read of a consumer's statistics (``ConsumerStats``)."""

    sent_back: int
    to_dlq: int
    undecodable: int
    undecodable_to_dlq: int
    topics: dict[str, Any]


class ObservedConsumer(Protocol):
    """What the gauges and counters read of a consume observer."""

    @property
    def stats(self) -> ConsumerCounts: ...
    @property
    def polled_counts(self) -> dict[str, int]: ...
    def store(self) -> OffsetReader | None: ...
    def attrs(self, topic: str | None) -> dict[str, str]: ...
    def status_attrs(self, topic: str, ok: bool) -> dict[str, str]: ...
    def live_queues(self) -> list[ObservedQueue]: ...


class ObservedProducer(Protocol):
    """What ``rocketmq_producer_sends`` reads of a send observer."""

    @property
    def sends(self) -> dict[tuple[str, bool], int]: ...
    def attrs(self, topic: str, ok: bool) -> dict[str, str]: ...


class Telemetry:
    """The instruments of one (meter provider, tracer provider) pair, shared by every client."""

    def __init__(self, meter_provider: Any, tracer_provider: Any) -> None:
        self.consumers: weakref.WeakSet[ObservedConsumer] = weakref.WeakSet()
        self.producers: weakref.WeakSet[ObservedProducer] = weakref.WeakSet()
        self.tracer = tracer_provider.get_tracer("rmq_async") if tracer_provider is not None else None
        self.metrics = meter_provider is not None
        if meter_provider is None:
            return
        m = meter_provider.get_meter("rmq_async")

        def h(name: str, description: str, buckets: tuple[float, ...]) -> Any:
            # the buckets of the 5.x clients (an advisory: the application's views may override it)
            return m.create_histogram(name, "ms", description, explicit_bucket_boundaries_advisory=buckets)

        self.send_cost = h("rocketmq_send_cost_time", "send duration (answered or failed)", _SEND_BUCKETS)
        self.delivery_latency = h(
            "rocketmq_delivery_latency", "broker store time to the pull's answer", _SEND_BUCKETS
        )
        self.await_time = h("rocketmq_await_time", "the pull's answer to the handler call", _AWAIT_BUCKETS)
        self.process_time = h("rocketmq_process_time", "handler call duration", _PROCESS_BUCKETS)
        self.pull_latency = h(
            "rocketmq_pull_latency", "pull request round trip (found messages)", _SEND_BUCKETS
        )
        m.create_observable_gauge("rocketmq_consumer_cached_messages", [self._cached_messages], "{message}")
        m.create_observable_gauge("rocketmq_consumer_cached_bytes", [self._cached_bytes], "By")
        m.create_observable_gauge(
            "rocketmq_consumer_lag", [self._lag], "{message}", "max offset - committed offset"
        )
        m.create_observable_counter(
            "rocketmq_consumer_pulled_messages", [self._pulled], "{message}", "messages pulled or popped"
        )
        m.create_observable_counter(
            "rocketmq_consumer_processed_messages",
            [self._processed],
            "{message}",
            "messages settled by handlers (or deliveries), or returned by lite-pull polls",
        )
        m.create_observable_counter("rocketmq_consumer_send_backs", [self._send_backs], "{message}")
        m.create_observable_counter("rocketmq_consumer_dlq_moves", [self._dlq_moves], "{message}")
        m.create_observable_counter("rocketmq_consumer_decode_failures", [self._decode_failures], "{message}")
        m.create_observable_counter(
            "rocketmq_producer_sends", [self._sends], "{send}", "sends answered or failed"
        )

    # -- observed when read --------------------------------------------------------------------------

    def _per_topic(self, value: str) -> Iterator[Observation]:
        for c in list(self.consumers):
            sums: dict[str, int] = {}
            for pq in c.live_queues():
                n = pq.count if value == "count" else pq.msg_bytes
                sums[pq.mq.topic] = sums.get(pq.mq.topic, 0) + n
            for topic, n in sums.items():
                yield Observation(n, c.attrs(topic))

    def _cached_messages(self, options: CallbackOptions) -> Iterable[Observation]:
        return list(self._per_topic("count"))

    def _cached_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        return list(self._per_topic("bytes"))

    def _lag(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for c in list(self.consumers):
            store = c.store()
            if store is None:
                continue
            for pq in c.live_queues():
                committed = store.read_memory(pq.mq)
                if pq.max_offset >= 0 and committed >= 0:
                    attrs = dict(c.attrs(pq.mq.topic), broker=pq.mq.broker_name, queue_id=pq.mq.queue_id)
                    out.append(Observation(max(0, pq.max_offset - committed), attrs))
        return out

    def _pulled(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for c in list(self.consumers):
            for topic, t in list(c.stats.topics.items()):
                out.append(Observation(t.pulled, c.attrs(topic)))
        return out

    def _processed(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for c in list(self.consumers):
            counts: dict[tuple[str, bool], int] = {}
            for topic, t in list(c.stats.topics.items()):
                counts[(topic, True)] = t.consumed_ok
                counts[(topic, False)] = t.consumed_failed
            for topic, n in list(c.polled_counts.items()):
                counts[(topic, True)] = counts.get((topic, True), 0) + n
            for (topic, ok), n in counts.items():
                out.append(Observation(n, c.status_attrs(topic, ok)))
        return out

    def _counter(self, pick: Any) -> list[Observation]:
        return [Observation(pick(c.stats), c.attrs(None)) for c in list(self.consumers)]

    def _send_backs(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.sent_back)

    def _dlq_moves(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.to_dlq + s.undecodable_to_dlq)

    def _decode_failures(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.undecodable)

    def _sends(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for p in list(self.producers):
            for key, n in list(p.sends.items()):
                out.append(Observation(n, p.attrs(*key)))
        return out
