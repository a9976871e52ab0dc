"""Fixtures for the embedded broker tests: a fresh in-process cluster on the fast timing profile."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient

_ids = itertools.count()


@pytest.fixture
def timing() -> Timing:
    return Timing.fast()


@pytest.fixture
async def cluster(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as c:
        yield c


@pytest.fixture
async def broker(cluster: EmbeddedCluster) -> AsyncIterator[RawClient]:
    async with RawClient(cluster.brokers[0].addr) as c:
        yield c


@pytest.fixture
async def namesrv(cluster: EmbeddedCluster) -> AsyncIterator[RawClient]:
    async with RawClient(cluster.namesrv_addr) as c:
        yield c


@pytest.fixture
def topic() -> str:
    return f"EmbT{next(_ids)}"
