"""The OpenTelemetry SDK with in-memory readers, as the OpenTelemetry tests set it up (test dependency)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind


class InMemorySDK:
    """A ``MeterProvider`` with an in-memory reader and a ``TracerProvider`` exporting to memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.exporter = InMemorySpanExporter()
        self.tp = TracerProvider()
        self.tp.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.mp = MeterProvider(metric_readers=[self.reader])

    def counts(self, group: str | None = None) -> dict[str, int]:
        """By instrument: histogram counts and counter values summed over its points (only the points
        of ``group``'s consumer when given)."""
        data = self.reader.get_metrics_data()
        assert data is not None
        out: dict[str, int] = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    pts: list[Any] = list(m.data.data_points)
                    for p in pts:
                        if group is not None and dict(p.attributes or {}).get("consumer_group") != group:
                            continue
                        out[m.name] = out.get(m.name, 0) + (p.count if hasattr(p, "count") else p.value)
        return out

    def consumer_spans(self) -> list[Any]:
        return [s for s in self.exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]

    def producer_span_ids(self) -> set[int]:
        return {s.context.span_id for s in self.exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER}

    def shutdown(self) -> None:
        self.mp.shutdown()
        self.tp.shutdown()
