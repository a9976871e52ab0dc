"""OpenTelemetry metrics and spans, optional (``pip install 'rmq_async[otel]'``: ``opentelemetry-api``).

Strategy: nothing here runs unless the application has set a ``MeterProvider`` or a
``TracerProvider`` (``opentelemetry.metrics.set_meter_provider`` / ``trace.set_tracer_provider``, or
an instrumentation such as FastAPI's doing it) before a producer or consumer starts: :func:`telemetry`
returns None when the API is not installed or only its default no-op providers are there, and then the
producer, the pull loop and the consume path keep their plain paths (one ``is None`` test per send or
per pull; no observer is installed on the consumer).

Metrics are named after the RocketMQ 5.x clients' (apache/rocketmq-clients), in milliseconds, with
the attributes ``topic``, ``consumer_group`` and ``client_id`` (never a message key or body).
Histograms: ``rocketmq_send_cost_time`` (+ ``invocation_status``), ``rocketmq_delivery_latency``
(broker store time to the pull's answer), ``rocketmq_await_time`` (the pull's answer to the handler
call, or to the hand-out of a delivery or a poll), ``rocketmq_process_time`` (the handler call, or a
delivery's hand-out to its settling; + ``invocation_status``), ``rocketmq_pull_latency``. Observed when
read (callbacks at collection, over plain counts the clients keep anyway): the gauges
``rocketmq_consumer_cached_messages`` / ``_bytes`` per topic and ``rocketmq_consumer_lag`` per queue (the
broker's max offset at the last pull minus the committed offset; + ``broker``, ``queue_id``), and the
counters ``rocketmq_consumer_pulled_messages``, ``rocketmq_consumer_processed_messages`` (+
``invocation_status``), ``rocketmq_consumer_send_backs``, ``rocketmq_consumer_dlq_moves``,
``rocketmq_consumer_decode_failures`` and ``rocketmq_producer_sends`` (+ ``invocation_status``).

Budgets (:class:`~rmq_async.config.OtelConfig`): the SDK's ``Histogram.record`` costs about 5 us and a
span 9 us, more than the whole consume path of a message, so histograms record a sample: at most
``histogram_rate`` values a second per histogram and client, picked by :class:`Sampler` (every k-th
call with a random phase, k set from the rate of the last second: a uniform-in-time sample at a couple
of integer operations per unsampled call). The consume side picks its sample once per pulled batch,
in the pull loop: the picked messages get their delivery latency at once, and their await and process
times when a handler takes them; the counts of messages come from the counters, a histogram's count is
its number of samples.

Spans: a PRODUCER span ``<topic> send`` per send whose W3C ``traceparent`` (and ``tracestate``) go into
the message's user properties; a CONSUMER span ``<topic> process`` per handler call (a delivery, or
``<topic> receive`` per lite-pull ``poll``), linked to the producer spans of its messages, so one trace
crosses the broker. A message whose ``traceparent`` has the sampled flag always gets its span; others
get one within ``root_span_rate`` a second; either way the span is started through the application's
tracer, whose sampler decides whether it is recorded.
"""

from __future__ import annotations

import math
import operator
import random
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from ...config import OtelConfig

__all__ = ["ConsumeObserver", "Sampler", "SendObserver", "Telemetry", "telemetry", "use_providers"]

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError:  # pragma: no cover - the extra is not installed
    _metrics = None  # type: ignore[assignment]

_SUCCESS_NAMES = frozenset({"CONSUME_SUCCESS", "SUCCESS", "COMMIT"})
_SEND_BUCKETS = (1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0)
_AWAIT_BUCKETS = (1.0, 5.0, 20.0, 100.0, 1000.0, 5000.0, 10000.0)
_PROCESS_BUCKETS = (1.0, 5.0, 10.0, 100.0, 1000.0, 10000.0, 60000.0)
#: watched messages (picked or traced) kept at most; more means they are not being consumed
_WATCH_MAX = 1 << 17
#: seconds: a sampler's budget window (a tenth of the rate per tenth of a second, so that a budget is
#: spread over the second even before the rate is known, e.g. in the first one; 1 s below 100/s)
_WINDOW = 0.1
_PURGE_EVERY = 1.0  # seconds between looks for watched messages never consumed
_DEFAULT = OtelConfig()
_RAW = operator.attrgetter("raw_properties")
# flags of a watched message
_SAMPLED = 1  # its await and process times are recorded
_SPAN = 2  # its handler call gets a span (a sampled traceparent, or picked within the root budget)


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


class Sampler:
    """Picks at most ``rate`` calls a second (None: every call), uniformly in time.

    The caller counts down: ``s.countdown -= 1`` and, when it reaches 0, asks :meth:`fire` whether
    this call is picked (:meth:`picks` does it for a batch). :meth:`fire` re-arms the countdown with a
    stride drawn around ``k`` (uniform in 1..2k-1, so no position in a periodic pattern, e.g. the
    first message of each pulled batch, is favoured), where ``k`` is the last window's calls divided by
    the budget; within a window (a tenth of a second: ``rate / 10`` picks; one second below 100/s) at
    most its share of ``rate`` fires are picked. The clock is read only when the
    budget of the window is spent (then ``k`` doubles while the window lasts, so the reads stay rare)
    and by :meth:`tick`, which a caller with a clock at hand (the pull loop, once per pulled batch)
    calls to start the next window on time: an unpicked call costs a decrement and a comparison.
    """

    __slots__ = ("armed", "cap", "countdown", "left", "seen", "stride", "t0", "t_end", "window")

    def __init__(self, rate: int | None) -> None:
        self.window = _WINDOW if rate is not None and rate >= 100 else 1.0
        #: picks per window; None: every call
        self.cap = None if rate is None else int(rate * self.window)
        self.stride = 1
        self.countdown = self.armed = 1
        self.seen = 0  # calls of this window counted at the re-arms
        self.t0 = time.monotonic()
        self.t_end = self.t0 + self.window
        self.left = (1 << 62) if self.cap is None else self.cap

    def _arm(self) -> None:
        k = self.stride
        self.seen += self.armed
        self.countdown = self.armed = k if k == 1 else 1 + int(random.random() * (2 * k - 1))

    def fire(self) -> bool:
        """The countdown reached 0: is this call picked? (re-arms the countdown)"""
        self._arm()
        if self.left > 0:
            self.left -= 1
            return True
        if self.cap is None:
            return True
        now = time.monotonic()
        if now >= self.t_end:
            self._next_window(now)
            if self.left > 0:
                self.left -= 1
                return True
            return False
        self.stride *= 2  # over budget: fire (and read the clock) less often until the window ends
        return False

    def tick(self, now: float) -> None:
        """A clock reading: start the next window if this one is over (a rate that fell is seen)."""
        if now >= self.t_end and self.cap is not None:
            self._next_window(now)

    def _next_window(self, now: float) -> None:
        assert self.cap is not None
        calls = self.seen + self.armed - self.countdown
        elapsed = now - self.t0
        if self.cap == 0:
            self.stride = 1 << 30
        elif elapsed > 0:
            self.stride = max(1, math.ceil(calls * self.window / elapsed / self.cap))
        self.t0, self.t_end = now, now + self.window
        self.left = self.cap
        self.seen = 0
        self.armed = 0
        self._arm()

    def picks(self, n: int) -> list[int]:
        """The picked ones of ``n`` calls at once (their indices)."""
        cd = self.countdown
        if cd > n:
            self.countdown = cd - n
            return []
        out: list[int] = []
        i = cd - 1
        while True:
            self.countdown = 0
            if self.fire():
                out.append(i)
            nxt = i + self.countdown
            if nxt >= n:
                self.countdown -= n - 1 - i
                return out
            i = nxt


def _remote_context(tp: str, ts: str | None) -> Any:
    """The producer's span context from a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``)
    and ``tracestate``; None when it is not valid."""
    if len(tp) < 55 or tp[2] != "-" or tp[35] != "-" or tp[52] != "-" or tp[:2] == "ff":
        return None
    if tp[:2] == "00" and len(tp) != 55:
        return None
    try:
        trace_id, span_id, flags = int(tp[3:35], 16), int(tp[36:52], 16), int(tp[53:55], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    state = _trace.TraceState.from_header([ts]) if ts else None
    return _trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=_trace.TraceFlags(flags), trace_state=state
    )


def _sampled_parent(m: Any) -> bool:
    """Does ``m`` carry a W3C ``traceparent`` with the sampled flag? (the raw properties are searched
    first: no dict is built for the messages without one)"""
    if "traceparent" not in m.raw_properties and m.raw_properties:
        return False
    tp = m.get_property("traceparent")
    return tp is not None and len(tp) >= 55 and tp[54] in "13579bdfBDF"


def _links(batch: Sequence[Any]) -> list[Any]:
    links = []
    for m in batch:
        tp = m.get_property("traceparent")
        if tp:
            sc = _remote_context(tp, m.get_property("tracestate"))
            if sc is not None:
                links.append(_trace.Link(sc))
    return links


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
    topics: dict[str, Any]


class Telemetry:
    """The instruments of one (meter provider, tracer provider) pair, shared by every client."""

    def __init__(self, meter_provider: Any, tracer_provider: Any) -> None:
        self.consumers: weakref.WeakSet[ConsumeObserver] = weakref.WeakSet()
        self.producers: weakref.WeakSet[SendObserver] = weakref.WeakSet()
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


class SendObserver:
    """A producer's send metrics (``rocketmq_send_cost_time`` within its budget, every send counted)
    and its spans."""

    __slots__ = ("__weakref__", "_attrs", "client_id", "sample", "sends", "t")

    def __init__(self, t: Telemetry, client_id: str, config: OtelConfig = _DEFAULT) -> None:
        self.t = t
        self.client_id = client_id
        self._attrs: dict[tuple[str, bool], dict[str, str]] = {}
        #: (topic, ok) -> sends (read by ``rocketmq_producer_sends``)
        self.sends: dict[tuple[str, bool], int] = {}
        self.sample = Sampler(config.histogram_rate)
        t.producers.add(self)

    def attrs(self, topic: str, ok: bool) -> dict[str, str]:
        key = (topic, ok)
        attrs = self._attrs.get(key)
        if attrs is None:
            status = "success" if ok else "failure"
            attrs = {"topic": topic, "client_id": self.client_id, "invocation_status": status}
            self._attrs[key] = attrs
        return attrs

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
        key = (topic, ok)
        sends = self.sends
        sends[key] = sends.get(key, 0) + 1
        if self.t.metrics:
            s = self.sample
            s.tick(time.monotonic())  # a send is rare enough to read the clock: the window starts on time
            s.countdown -= 1
            if s.countdown <= 0 and s.fire():
                self.t.send_cost.record((time.perf_counter() - start) * 1000, self.attrs(topic, ok))
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
    """A consumer's metrics and spans. The pull side (:meth:`pulled`, :meth:`received`: once per
    pulled or popped batch) picks the messages to watch: a sample within the histogram budget (their
    delivery latency recorded at once) and, with a tracer, those with a sampled ``traceparent`` and a
    sample within the root span budget. The consume side (:meth:`before` / :meth:`after` around a
    handler call or a delivery, :meth:`polled` for a lite-pull poll) looks its messages up among the
    watched ones: for a batch with none (most of them) that is all it does."""

    __slots__ = (
        "__weakref__",
        "_attrs",
        "_ctx",
        "_max_age",
        "_next_purge",
        "_next_tick",
        "_queues",
        "_status_attrs",
        "_watch",
        "client_id",
        "group",
        "polled_counts",
        "pull_sample",
        "root_sample",
        "sample",
        "t",
        "tracing",
    )

    def __init__(
        self,
        t: Telemetry,
        group: str,
        client_id: str,
        ctx: _ConsumerSide,
        config: OtelConfig = _DEFAULT,
        max_age: float = 900.0,
    ) -> None:
        self.t = t
        self.group = group
        self.client_id = client_id
        self._ctx = ctx
        self._attrs: dict[str | None, dict[str, str]] = {}
        self._status_attrs: dict[tuple[str, bool], dict[str, str]] = {}
        self._queues: dict[Any, _Queue] = {}
        #: id(message) -> (message, when its pull answered, flags): the messages whose consumption is
        #: observed (the message is held, so its id is not reused while it is here)
        self._watch: dict[int, tuple[Any, float, int]] = {}
        #: a watched message not consumed after this long (its queue dropped, filtered out) is forgotten
        self._max_age = max(60.0, 2 * max_age)
        self._next_tick = time.monotonic() + _WINDOW
        self._next_purge = self._next_tick + _PURGE_EVERY
        #: topic -> messages returned by lite-pull polls (``rocketmq_consumer_processed_messages``)
        self.polled_counts: dict[str, int] = {}
        self.sample = Sampler(config.histogram_rate) if t.metrics else None
        self.pull_sample = Sampler(config.histogram_rate)
        #: with a tracer: messages with a sampled traceparent get a span, others within the budget
        self.tracing = t.tracer is not None
        rate = config.root_span_rate
        self.root_sample = Sampler(rate) if self.tracing and rate != 0 else None
        t.consumers.add(self)

    #: ``after`` does nothing for a call ``before`` returned None for (:mod:`rmq_async.consumer.observe`)
    after_optional = True

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

    def status_attrs(self, topic: str, ok: bool) -> dict[str, str]:
        a = self._status_attrs.get((topic, ok))
        if a is None:
            a = dict(self.attrs(topic), invocation_status="success" if ok else "failure")
            self._status_attrs[(topic, ok)] = a
        return a

    def live_queues(self) -> list[_Queue]:
        return [pq for pq in self._queues.values() if not pq.dropped]

    def watching(self) -> int:
        """How many messages are watched now (tests)."""
        return len(self._watch)

    @property
    def watching_ids(self) -> dict[int, tuple[Any, float, int]]:
        """The watched messages by ``id``: the handler wrapper asks it before calling :meth:`before`
        (:mod:`rmq_async.consumer.observe`)."""
        return self._watch

    # -- the pull side ---------------------------------------------------------------------------------

    def pulled(self, pq: _Queue, msgs: Sequence[Any], rt: float) -> None:
        """A pull found messages (the pull loop, once per answered pull)."""
        self._queues[pq.mq] = pq
        self.received(pq.mq.topic, msgs, rt)

    def received(self, topic: str, msgs: Sequence[Any], rt: float) -> None:
        """Messages came (a pull's or a pop's answer, ``rt`` its round trip): pick those to watch."""
        now = time.monotonic()
        if now >= self._next_tick:
            self._tick(now)
        watch = self._watch
        s = self.sample
        if s is not None:
            attrs = self.attrs(topic)
            p = self.pull_sample
            p.countdown -= 1
            if p.countdown <= 0 and p.fire():
                self.t.pull_latency.record(rt * 1000, attrs)
            picked = s.picks(len(msgs))
            if picked:
                now_ms = time.time() * 1000
                record = self.t.delivery_latency.record
                for i in picked:
                    m = msgs[i]
                    record(max(0.0, now_ms - m.store_timestamp), attrs)
                    watch[id(m)] = (m, now, _SAMPLED)
        if self.tracing:
            r = self.root_sample
            if r is not None:
                for i in r.picks(len(msgs)):
                    m = msgs[i]
                    w = watch.get(id(m))
                    watch[id(m)] = (m, now, _SPAN | (w[2] if w is not None else 0))
            # one search of the batch's property strings (C loops): most batches carry no traceparent
            if "traceparent" in "\x02".join(map(_RAW, msgs)):
                for m in msgs:
                    if not _sampled_parent(m):
                        continue
                    w = watch.get(id(m))
                    watch[id(m)] = (m, now, _SPAN | (w[2] if w is not None else 0))

    def _tick(self, now: float) -> None:
        """Once a window: the samplers see the time; once a second, watched messages never consumed
        are forgotten."""
        self._next_tick = now + _WINDOW
        for s in (self.sample, self.pull_sample, self.root_sample):
            if s is not None:
                s.tick(now)
        if now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY
        watch = self._watch
        if len(watch) > _WATCH_MAX:
            watch.clear()
        elif watch:
            old = now - self._max_age
            for k in [k for k, w in watch.items() if w[1] < old]:
                del watch[k]

    # -- the consume side ------------------------------------------------------------------------------

    def before(self, batch: list[Any]) -> object:
        """Before a handler call (an observer, :mod:`rmq_async.consumer.observe`) or a delivery's
        hand-out: None unless a message of ``batch`` is watched (then: await times, the span)."""
        watch = self._watch
        if not watch:
            return None
        hits = None
        for m in batch:
            w = watch.pop(id(m), None)
            if w is not None:
                if hits is None:
                    hits = [w]
                else:
                    hits.append(w)
        if hits is None:
            return None
        return self._begin(batch, hits, "process")

    def _begin(self, batch: list[Any], hits: list[tuple[Any, float, int]], op: str) -> tuple[Any, ...]:
        now = time.monotonic()
        topic = batch[0].topic
        sampled = 0
        spans = False
        if self.t.metrics:
            record = self.t.await_time.record
            attrs = self.attrs(topic)
            for _, t0, flags in hits:
                if flags & _SAMPLED:
                    sampled += 1
                    record((now - t0) * 1000, attrs)
        for _, _, flags in hits:
            spans = spans or bool(flags & _SPAN)
        span = None
        tracer = self.t.tracer
        if spans and tracer is not None:
            span = tracer.start_span(
                f"{topic} {op}",
                kind=_trace.SpanKind.CONSUMER,
                links=_links(batch),
                attributes={
                    "messaging.system": "rocketmq",
                    "messaging.operation.type": op,
                    "messaging.destination.name": topic,
                    "messaging.consumer.group.name": self.group,
                    "messaging.batch.message_count": len(batch),
                },
            )
        return (topic, now, span, sampled)

    def after(self, token: object, batch: list[Any], result: object, error: BaseException | None) -> None:
        """After the handler call (or the delivery's settling): process time, the span's end."""
        if token is None:
            return
        assert isinstance(token, tuple)
        topic, t0, span, sampled = token
        name = getattr(result, "value", "CONSUME_SUCCESS") if result is not None else "CONSUME_SUCCESS"
        ok = error is None and name in _SUCCESS_NAMES
        if sampled:
            took = (time.monotonic() - t0) * 1000
            attrs = self.status_attrs(topic, ok)
            record = self.t.process_time.record
            for _ in range(sampled):
                record(took, attrs)
        if span is not None:
            if error is not None:
                span.record_exception(error)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(error).__name__))
            elif not ok:
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(name)))
            span.end()

    def polled(self, batch: list[Any]) -> None:
        """A lite-pull ``poll`` returns ``batch``: counted; await times of its watched messages and a
        ``receive`` span (no process time: what the application does next is not seen)."""
        polled = self.polled_counts
        for m in batch:
            polled[m.topic] = polled.get(m.topic, 0) + 1
        watch = self._watch
        if not watch:
            return
        hits = [w for w in (watch.pop(id(m), None) for m in batch) if w is not None]
        if hits:
            span = self._begin(batch, hits, "receive")[2]
            if span is not None:
                span.end()
