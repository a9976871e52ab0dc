"""Deprecated: OpenTelemetry support is :mod:`rmq_async.observability.otel`; this module re-exports
its names so that an application calling ``rmq_async.otel.use_providers(...)`` (the path of earlier
releases) keeps working, and warns once, when first imported."""

from __future__ import annotations

import warnings

from .observability.otel import ConsumeObserver as ConsumeObserver
from .observability.otel import Sampler as Sampler
from .observability.otel import SendObserver as SendObserver
from .observability.otel import Telemetry as Telemetry
from .observability.otel import telemetry as telemetry
from .observability.otel import use_providers as use_providers

__all__ = ["ConsumeObserver", "Sampler", "SendObserver", "Telemetry", "telemetry", "use_providers"]

warnings.warn(
    "rmq_async.otel is deprecated: import from rmq_async.observability.otel",
    DeprecationWarning,
    stacklevel=2,
)
