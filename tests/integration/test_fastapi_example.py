"""examples/fastapi_app.py: the consumer lives in the ASGI lifespan and /health reports it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
import pytest
from support.integration import produce

from rmq_async import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


async def test_fastapi_app_lifespan_and_health(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch, names: tuple[str, str]
) -> None:
    pytest.importorskip("fastapi")
    from fastapi import Response

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
        resp = Response()
        health = await mod.health(resp)
        assert health["running"] is False and resp.status_code == 503
    finally:
        sys.modules.pop("fastapi_app_example", None)
