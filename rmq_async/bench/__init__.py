"""Benchmark harness behind ``rmq-async bench`` (see :mod:`rmq_async.bench.cli`).

Strategy: a synchronous harness (``cli``) starts the embedded cluster in an exec'd child, preloads a
topic (``cluster``), and execs one worker process per measured run (``worker``), which runs a scenario
(``scenarios``, ``lite``, ``latency``) on the asyncio or uvloop loop and prints a JSON result; the
harness aggregates and reports (``report``) with machine facts (``machine``).
"""

from __future__ import annotations

from .cli import DEFAULT_SUITE, FULL_SUITE, add_arguments, run, run_worker

__all__ = ["DEFAULT_SUITE", "FULL_SUITE", "add_arguments", "run", "run_worker"]
