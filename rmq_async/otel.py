"""OpenTelemetry metrics and spans, optional (``pip install 'rmq_async[otel]'``: ``opentelemetry-api``).

Strategy: nothing here runs unless the application has set a ``MeterProvider`` or a
``TracerProvider`` (``opentelemetry.metrics.set_meter_provider`` / ``trace.set_tracer_provider``, or
an instrumentation such as FastAPI's doing it) before a producer or consumer starts: :func:`telemetry`
returns None when the API is not installed or only its default no-op providers are there, and then the
producer, the pull loop and the consume path keep their plain paths (one ``is None`` test per send or
per pull; no hook is installed on the consumer).

Metrics are named after the RocketMQ 5.x clients' (apache/rocketmq-clients), in milliseconds, with
the attributes ``topic``, ``consumer_group`` and ``client_id`` (never a message key or body):
``rocketmq_send_cost_time`` (+ ``invocation_status``), ``rocketmq_delivery_latency`` (broker store time
to the pull's answer), ``rocketmq_await_time`` (the pull's answer to the handler call),
``rocketmq_process_time`` (the handler call, + ``invocation_status``), ``rocketmq_pull_latency``;
observed when read: ``rocketmq_consumer_cached_messages`` / ``_bytes`` per topic, ``rocketmq_consumer_lag``
per queue (the broker's max offset at the last pull minus the committed offset; + ``broker``,
``queue_id``), and the counters ``rocketmq_consumer_send_backs``, ``rocketmq_consumer_dlq_moves``,
``rocketmq_consumer_decode_failures``.

Spans: a PRODUCER span ``<topic> send`` per send whose W3C ``traceparent`` (and ``tracestate``) go into
the message's user properties; a CONSUMER span ``<topic> process`` per handler call, linked to the
producer spans extracted from its messages, so one trace crosses the broker.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

__all__ = ["ConsumeObserver", "SendObserver", "Telemetry", "telemetry", "use_providers"]

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError:  # pragma: no cover - the extra is not installed
    _metrics = None  # type: ignore[assignment]

_PENDING_MAX = 65536
_SUCCESS_NAMES = frozenset({"CONSUME_SUCCESS", "SUCCESS", "COMMIT"})
_SEND_BUCKETS = (1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0)
_AWAIT_BUCKETS = (1.0, 5.0, 20.0, 100.0, 1000.0, 5000.0, 10000.0)
_PROCESS_BUCKETS = (1.0, 5.0, 10.0, 100.0, 1000.0, 10000.0, 60000.0)


def _meter_provider_set() -> bool:
    p = _metrics.get_meter_provider()
    return type(p).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")


def _tracer_provider_set() -> bool:
    p = _trace.get_tracer_provider()
    return not isinstance(p, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


_cache: tuple[object, object, Telemetry] | None = None
_override: tuple[Any, Any] | None = None


def use_providers(meter_provider: Any = None, tracer_provider: Any = None) -> None:
    """Use these providers instead of the global ones for clients started from now on (tests, or an
    application that keeps its providers local); with no argument, back to the global ones."""
    global _override
    _override = (
        None if meter_provider is None and tracer_provider is None else (meter_provider, tracer_provider)
    )


def telemetry() -> Telemetry | None:
    """The instruments for the providers the application set, or None (nothing to do)."""
    global _cache
    if _metrics is None:
        return None
    if _override is not None:
        mp, tp = _override
    else:
        mp = _metrics.get_meter_provider() if _meter_provider_set() else None
        tp = _trace.get_tracer_provider() if _tracer_provider_set() else None
    if mp is None and tp is None:
        return None
    if _cache is not None and _cache[0] is mp and _cache[1] is tp:
        return _cache[2]
    t = Telemetry(mp, tp)
    _cache = (mp, tp, t)
    return t


class _Queue(Protocol):
    """What the gauges read of a process queue."""

    mq: Any
    dropped: bool
    max_offset: int
    msg_bytes: int

    @property
    def count(self) -> int: ...


class _OffsetStore(Protocol):
    def read_memory(self, mq: Any) -> int: ...


class _Stats(Protocol):
    sent_back: int
    to_dlq: int
    undecodable: int
    undecodable_to_dlq: int


class Telemetry:
    """The instruments of one (meter provider, tracer provider) pair, shared by every client."""

    def __init__(self, meter_provider: Any, tracer_provider: Any) -> None:
        self.consumers: weakref.WeakSet[ConsumeObserver] = weakref.WeakSet()
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
        m.create_observable_counter("rocketmq_consumer_send_backs", [self._send_backs], "{message}")
        m.create_observable_counter("rocketmq_consumer_dlq_moves", [self._dlq_moves], "{message}")
        m.create_observable_counter("rocketmq_consumer_decode_failures", [self._decode_failures], "{message}")

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

    def _counter(self, pick: Any) -> list[Observation]:
        return [Observation(pick(c.stats), c.attrs(None)) for c in list(self.consumers)]

    def _send_backs(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.sent_back)

    def _dlq_moves(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.to_dlq + s.undecodable_to_dlq)

    def _decode_failures(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._counter(lambda s: s.undecodable)


class SendObserver:
    """A producer's send metric and spans."""

    __slots__ = ("_attrs", "client_id", "t")

    def __init__(self, t: Telemetry, client_id: str) -> None:
        self.t = t
        self.client_id = client_id
        self._attrs: dict[tuple[str, bool], dict[str, str]] = {}

    def start(self, topic: str, props: dict[str, str]) -> tuple[float, Any]:
        """Before a send: its start, and its span (None without a tracer provider), whose context is
        injected into ``props`` (the message's properties as they will be sent)."""
        span = None
        tracer = self.t.tracer
        if tracer is not None:
            span = tracer.start_span(
                f"{topic} send",
                kind=_trace.SpanKind.PRODUCER,
                attributes={
                    "messaging.system": "rocketmq",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": topic,
                    "messaging.client.id": self.client_id,
                },
            )
            _propagate.inject(props, context=_trace.set_span_in_context(span))
        return time.perf_counter(), span

    def end(
        self, token: tuple[float, Any], topic: str, msg_id: str | None, error: BaseException | None
    ) -> None:
        start, span = token
        ok = error is None
        if self.t.metrics:
            key = (topic, ok)
            attrs = self._attrs.get(key)
            if attrs is None:
                status = "success" if ok else "failure"
                attrs = {"topic": topic, "client_id": self.client_id, "invocation_status": status}
                self._attrs[key] = attrs
            self.t.send_cost.record((time.perf_counter() - start) * 1000, attrs)
        if span is not None:
            if msg_id is not None:
                span.set_attribute("messaging.message.id", msg_id)
            if error is not None:
                span.record_exception(error)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(error).__name__))
            span.end()


class _ConsumerSide(Protocol):
    """What a consume observer reads of the consumer (its ``ConsumerContext``)."""

    @property
    def stats(self) -> Any: ...
    @property
    def has_offset_store(self) -> bool: ...
    @property
    def offset_store(self) -> Any: ...


class ConsumeObserver:
    """A consumer's metrics (pull, delivery, await, process; the observed gauges and counters) and its
    process spans; ``pulled`` is called by the pull loop, ``before`` / ``after`` observe handler calls."""

    __slots__ = (
        "__weakref__",
        "_attrs",
        "_ctx",
        "_queues",
        "_recv",
        "_status_attrs",
        "client_id",
        "group",
        "t",
    )

    def __init__(self, t: Telemetry, group: str, client_id: str, ctx: _ConsumerSide) -> None:
        self.t = t
        self.group = group
        self.client_id = client_id
        self._ctx = ctx
        self._attrs: dict[str | None, dict[str, str]] = {}
        self._queues: dict[Any, _Queue] = {}
        self._recv: dict[int, float] = {}
        self._status_attrs: dict[tuple[str, bool], dict[str, str]] = {}
        t.consumers.add(self)

    @property
    def stats(self) -> _Stats:
        return self._ctx.stats  # type: ignore[no-any-return]

    def store(self) -> _OffsetStore | None:
        return self._ctx.offset_store if self._ctx.has_offset_store else None

    def attrs(self, topic: str | None) -> dict[str, str]:
        a = self._attrs.get(topic)
        if a is None:
            a = {"consumer_group": self.group, "client_id": self.client_id}
            if topic is not None:
                a["topic"] = topic
            self._attrs[topic] = a
        return a

    def live_queues(self) -> list[_Queue]:
        return [pq for pq in self._queues.values() if not pq.dropped]

    def pulled(self, pq: _Queue, msgs: Iterable[Any], rt: float) -> None:
        """A pull found messages (the pull loop, once per answered pull)."""
        self._queues[pq.mq] = pq
        if not self.t.metrics:
            return
        attrs = self.attrs(pq.mq.topic)
        self.t.pull_latency.record(rt * 1000, attrs)
        now_ms = time.time() * 1000
        now = time.monotonic()
        recv = self._recv
        if len(recv) > _PENDING_MAX:
            recv.clear()
        record = self.t.delivery_latency.record
        for m in msgs:
            record(max(0.0, now_ms - m.store_timestamp), attrs)
            recv[id(m)] = now

    def before(self, batch: list[Any]) -> object:
        """Before a handler call (an observer, :mod:`.consumer.observe`): await times, the span."""
        if not batch:
            return None
        now = time.monotonic()
        first = batch[0]
        if self.t.metrics:
            attrs = self.attrs(first.topic)
            recv = self._recv
            record = self.t.await_time.record
            for m in batch:
                t0 = recv.pop(id(m), None)
                if t0 is not None:
                    record((now - t0) * 1000, attrs)
        span = None
        tracer = self.t.tracer
        if tracer is not None:
            links = []
            for m in batch:
                parent = m.get_property("traceparent")
                if parent:
                    carrier = {"traceparent": parent, "tracestate": m.get_property("tracestate") or ""}
                    sc = _trace.get_current_span(_propagate.extract(carrier)).get_span_context()
                    if sc.is_valid:
                        links.append(_trace.Link(sc))
            span = tracer.start_span(
                f"{first.topic} process",
                kind=_trace.SpanKind.CONSUMER,
                links=links,
                attributes={
                    "messaging.system": "rocketmq",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": first.topic,
                    "messaging.consumer.group.name": self.group,
                    "messaging.batch.message_count": len(batch),
                },
            )
        return (first.topic, now, span)

    def after(self, token: object, batch: list[Any], result: object, error: BaseException | None) -> None:
        if not isinstance(token, tuple):
            return
        topic, t0, span = token
        name = getattr(result, "value", "CONSUME_SUCCESS") if result is not None else "CONSUME_SUCCESS"
        ok = error is None and name in _SUCCESS_NAMES
        if self.t.metrics:
            attrs = self._status_attrs.get((topic, ok))
            if attrs is None:
                attrs = dict(self.attrs(topic), invocation_status="success" if ok else "failure")
                self._status_attrs[(topic, ok)] = attrs
            self.t.process_time.record((time.monotonic() - t0) * 1000, attrs)
        if span is not None:
            if error is not None:
                span.record_exception(error)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(error).__name__))
            elif not ok:
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(name)))
            span.end()
