"""The OpenTelemetry API, imported once for the modules of this package, or None for each name when
the ``otel`` extra is not installed: every module here imports without it (the producer and the
consumer import the observers unconditionally), and nothing that uses these names runs then, as
:func:`~rmq_async.observability.otel.telemetry` returns None."""

from __future__ import annotations

__all__ = ["CallbackOptions", "Observation", "metrics", "propagate", "trace"]

try:
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError:  # pragma: no cover - the extra is not installed
    metrics = propagate = trace = None  # type: ignore[assignment]
    CallbackOptions = Observation = None  # type: ignore[assignment, misc]
