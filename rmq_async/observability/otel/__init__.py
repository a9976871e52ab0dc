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

The parts: :mod:`.sampler` (the budgets), :mod:`.instruments` (:class:`Telemetry`: the histograms, and
the gauges and counters read at collection), :mod:`.observers` (:class:`SendObserver`,
:class:`ConsumeObserver`); here, the entry points that decide whether anything is observed at all.
"""

from __future__ import annotations

from typing import Any

from ._api import metrics as _metrics
from ._api import trace as _trace
from .instruments import Telemetry as Telemetry
from .observers import ConsumeObserver as ConsumeObserver
from .observers import SendObserver as SendObserver
from .sampler import Sampler as Sampler

__all__ = ["ConsumeObserver", "Sampler", "SendObserver", "Telemetry", "telemetry", "use_providers"]


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
