"""A consumer living in an ASGI app's lifespan, with a health endpoint for a readiness probe and its
metrics for Prometheus at /metrics.

    pip install fastapi uvicorn 'rmq_async[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus
    NAMESRV_ADDR=127.0.0.1:9876 uvicorn examples.fastapi_app:app
    curl -s localhost:8000/metrics | grep rocketmq_consumer_lag

The consumer starts and stops with the app, never blocks the loop, and runs on whatever loop the
server runs (uvicorn uses uvloop when it is installed). Metrics go through OpenTelemetry: the app sets
a MeterProvider whose reader is the OpenTelemetry Prometheus exporter, and rmq_async's instruments
(rocketmq_consumer_lag per queue, cached messages, delivery/await/process times, send-backs ...) are
served with everything else the app records. Set the provider before the consumer starts; without one,
rmq_async records nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer

# the OpenTelemetry Prometheus exporter: a reader that prometheus_client's registry collects from
metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))

processed = 0


async def handle(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
    global processed
    for _m in msgs:
        processed += 1  # a real app would await its database here
    return ConsumeResult.SUCCESS


consumer = PushConsumer(
    os.environ.get("GROUP", "web_app_group"),
    namesrv_addr=os.environ.get("NAMESRV_ADDR"),
    handler=handle,
    subscriptions={os.environ.get("TOPIC", "WebAppTopic"): "*"},
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with consumer:
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health(response: Response) -> dict[str, object]:
    h = consumer.health()  # ready: running, routes found, queues owned (h.reasons says what is not)
    if not h.ready:
        response.status_code = 503
    return {**h.as_dict(), "processed": processed}


@app.get("/metrics")
async def prometheus_metrics() -> Response:
    """Prometheus text format: rocketmq_consumer_lag{topic,broker,queue_id,...} and the others."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
