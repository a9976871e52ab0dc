"""Reliability suite fixtures and hooks: the ``reliability`` marker, ledgers, proxied brokers, report.

Strategy: fixtures only; the scenario helpers live in ``scenario.py``. At session end the rows that
scenarios recorded are saved under ``.pytest_cache/rmq_reliability/`` (only when reliability scenarios
ran); ``tests/reliability/README.md`` is written only on request (``python -m tests.reliability.report``
or ``RMQ_WRITE_RELIABILITY_REPORT=1``, see ``report.py``).
``RMQ_RELIABILITY_PROFILE=long`` selects the long profile (see the README).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from rmq_async import Timing

from .report import save_results
from .scenario import PROFILE, RESULTS, Ledger

_ids = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


def _uvloop_loop() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The scenarios that also run over TLS (those taking ``transport``) run on asyncio and on uvloop
    (pytest-asyncio parametrizes them by these loop factories: ids ``asyncio`` / ``uvloop``); the
    others on asyncio only, as before."""
    if "transport" in getattr(item, "fixturenames", ()):
        return {"asyncio": asyncio.new_event_loop, "uvloop": _uvloop_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
def ledger(request: pytest.FixtureRequest) -> Ledger:
    return Ledger(request.node.name)


@pytest.fixture
def names() -> tuple[str, str]:
    n = next(_ids)
    return f"RelTopic{n}", f"rel_group_{n}"


@pytest.fixture
def timing() -> Timing:
    return Timing.fast()


@pytest.fixture(params=["plain", "tls"])
def transport(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """``EmbeddedCluster`` arguments for a scenario run plain and again over TLS: a TLS-only
    (``enforcing``) cluster, every client switched on by ``RMQ_TLS`` / ``RMQ_TLS_CA_FILE``."""
    if request.param == "plain":
        return {}
    from support.tls import make_certs

    certs = make_certs(tmp_path_factory.mktemp("certs"))
    monkeypatch.setenv("RMQ_TLS", "1")
    monkeypatch.setenv("RMQ_TLS_CA_FILE", certs.ca)
    return {"tls": certs.server_tls("enforcing")}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if RESULTS:  # untracked (.pytest_cache/) unless RMQ_WRITE_RELIABILITY_REPORT=1: see report.py
        save_results(RESULTS, PROFILE)
