"""A consumer living in an ASGI app's lifespan, with a health endpoint for a readiness probe.

    pip install fastapi uvicorn
    NAMESRV_ADDR=127.0.0.1:9876 uvicorn examples.fastapi_app:app

The consumer starts and stops with the app, never blocks the loop, and runs on whatever loop the
server runs (uvicorn uses uvloop when it is installed).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response

from rmq_async import ConsumeContext, ConsumeResult, MessageExt, PushConsumer

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
