"""Integration fixtures: an embedded cluster on 127.0.0.1 on the fast timing profile."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster

_ids = itertools.count()


@pytest.fixture
def timing() -> Timing:
    return Timing.fast()


@pytest.fixture
async def cluster(timing: Timing) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as c:  # cross-task safe
        yield c


@pytest.fixture
def names() -> tuple[str, str]:
    """A fresh (topic, group) pair per test."""
    n = next(_ids)
    return f"ItTopic{n}", f"it_group_{n}"
