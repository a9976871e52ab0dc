"""The observers a producer and a consumer hold when the application set a provider: what they
record at a send, at a pull's answer and around a handler call, within the budgets of
:class:`~rmq_async.config.OtelConfig`, and the spans that carry one trace across the broker (W3C
``traceparent`` in the message's user properties, consumer spans linked to the producer's)."""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ...config import OtelConfig
from ._api import propagate as _propagate
from ._api import trace as _trace
from .instruments import ConsumerCounts, ObservedQueue, OffsetReader, Telemetry
from .sampler import WINDOW, Sampler

__all__ = ["ConsumeObserver", "SendObserver"]

_SUCCESS_NAMES = frozenset({"CONSUME_SUCCESS", "SUCCESS", "COMMIT"})
#: watched messages (picked or traced) kept at most; more means they are not being consumed
_WATCH_MAX = 1 << 17
_PURGE_EVERY = 1.0  # seconds between looks for watched messages never consumed
_DEFAULT = OtelConfig()
_RAW = operator.attrgetter("raw_properties")
# flags of a watched message
_SAMPLED = 1  # its await and process times are recorded
_SPAN = 2  # its handler call gets a span (a sampled traceparent, or picked within the root budget)


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

    def start(self, topic: str, props: dict[str, str], message_type: str | None = None) -> tuple[float, Any]:
        """Before a send: its start, and its span (None without a tracer provider), whose context is
        injected into ``props`` (the message's properties as they will be sent). ``message_type``
        (``"transaction"`` for a half message) goes on the span as the semantic conventions'
        ``messaging.rocketmq.message.type``; the metrics carry no such label, as the 5.x clients'
        ``MetricLabels`` have none."""
        span = None
        tracer = self.t.tracer
        if tracer is not None:
            attributes = {
                "messaging.system": "rocketmq",
                "messaging.operation.type": "send",
                "messaging.destination.name": topic,
                "messaging.client.id": self.client_id,
            }
            if message_type is not None:
                attributes["messaging.rocketmq.message.type"] = message_type
            span = tracer.start_span(f"{topic} send", kind=_trace.SpanKind.PRODUCER, attributes=attributes)
            _propagate.inject(props, context=_trace.set_span_in_context(span))
        return time.perf_counter(), span

    def start_batch(self, topic: str, props: Sequence[dict[str, str]]) -> tuple[float, Any]:
        """Before a batch send (SEND_BATCH_MESSAGE: ``send_batch``, the accumulator's batches): one
        span for the batch (``messaging.batch.message_count``), whose context goes into every
        message's ``props`` so each consumer links to it."""
        token = self.start(topic, props[0] if props else {})
        span = token[1]
        if span is not None:
            span.set_attribute("messaging.batch.message_count", len(props))
            ctx = _trace.set_span_in_context(span)
            for p in props[1:]:
                _propagate.inject(p, context=ctx)
        return token

    def end(
        self,
        token: tuple[float, Any],
        topic: str,
        msg_id: str | None,
        error: BaseException | None,
        count: int = 1,
    ) -> None:
        """After a send of ``count`` messages (a batch's: each counted, and each its cost recorded
        within the budget, as the 5.x clients' ``doAfterSendMessage`` records one per message)."""
        start, span = token
        ok = error is None
        key = (topic, ok)
        sends = self.sends
        sends[key] = sends.get(key, 0) + count
        if self.t.metrics:
            s = self.sample
            s.tick(time.monotonic())  # a send is rare enough to read the clock: the window starts on time
            cost = (time.perf_counter() - start) * 1000
            for _ in range(count):
                s.countdown -= 1
                if s.countdown <= 0 and s.fire():
                    self.t.send_cost.record(cost, self.attrs(topic, ok))
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
        self._queues: dict[Any, ObservedQueue] = {}
        #: id(message) -> (message, when its pull answered, flags): the messages whose consumption is
        #: observed (the message is held, so its id is not reused while it is here)
        self._watch: dict[int, tuple[Any, float, int]] = {}
        #: a watched message not consumed after this long (its queue dropped, filtered out) is forgotten
        self._max_age = max(60.0, 2 * max_age)
        self._next_tick = time.monotonic() + WINDOW
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
    def stats(self) -> ConsumerCounts:
        return self._ctx.stats  # type: ignore[no-any-return]

    def store(self) -> OffsetReader | None:
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

    def live_queues(self) -> list[ObservedQueue]:
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

    def pulled(self, pq: ObservedQueue, msgs: Sequence[Any], rt: float) -> None:
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
        self._next_tick = now + WINDOW
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
