"""examples/fastapi_app.py: the consumer lives in the ASGI lifespan, /health reports it and /metrics
serves its OpenTelemetry metrics (the consumer's lag among them) in the Prometheus text format."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
import pytest
from support.integration import produce

from rmq_async.embedded import EmbeddedCluster
from rmq_async.observability import otel

ROOT = Path(__file__).resolve().parents[2]


async def test_fastapi_app_lifespan_and_health(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch, names: tuple[str, str]
) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("opentelemetry.exporter.prometheus")
    from fastapi import Response
    from opentelemetry.sdk.metrics import MeterProvider

    # the example sets the global MeterProvider, which OpenTelemetry allows once per process: here it
    # is given to rmq_async alone (and shut down after), so other tests keep running without one
    providers: list[MeterProvider] = []

    def set_meter_provider(provider: MeterProvider) -> None:
        providers.append(provider)
        otel.use_providers(provider)

    monkeypatch.setattr("opentelemetry.metrics.set_meter_provider", set_meter_provider)

    topic, group = names
    monkeypatch.setenv("NAMESRV_ADDR", cluster.namesrv_addr)
    monkeypatch.setenv("TOPIC", topic)
    monkeypatch.setenv("GROUP", group)
    spec = importlib.util.spec_from_file_location("fastapi_app_example", ROOT / "examples" / "fastapi_app.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fastapi_app_example"] = mod
    try:
        spec.loader.exec_module(mod)
        await produce(cluster.namesrv_addr, topic, 5)
        async with mod.lifespan(mod.app):
            mod.consumer.rebalance_now()
            with anyio.fail_after(10):
                await mod.consumer.wait_rebalanced()  # the queues are owned now
            resp = Response()
            health = await mod.health(resp)
            assert health["running"] is True and health["ready"], health["reasons"]
            assert resp.status_code != 503
            with anyio.fail_after(10):
                while mod.processed < 5:  # noqa: ASYNC110 (the example's counter, no event)
                    await anyio.sleep(0.02)
            text = (await mod.prometheus_metrics()).body.decode()
            lag = [line for line in text.splitlines() if line.startswith("rocketmq_consumer_lag{")]
            assert lag and all(
                f'topic="{topic}"' in line and f'consumer_group="{group}"' in line for line in lag
            )
            assert {line.rsplit(" ", 1)[1] for line in lag} == {"0.0"}, lag  # all 5 consumed and committed
            # the handler calls were recorded for the group: one per message (batches of one, the default)
            counts = [
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("rocketmq_process_time") and "_count{" in line and f'"{group}"' in line
            ]
            assert sum(counts) == 5, (counts, text)
        resp = Response()
        health = await mod.health(resp)
        assert health["running"] is False and resp.status_code == 503
    finally:
        sys.modules.pop("fastapi_app_example", None)
        otel.use_providers()
        for provider in providers:
            provider.shutdown()
