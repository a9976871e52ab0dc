"""The event loop's own timeline, recorded in every Python process that starts with this directory on
``PYTHONPATH`` and ``LOOP_PROBE`` set (the bench's worker processes inherit both): where a message's
time goes between two stage stamps, callback by callback.

    PYTHONPATH=benchmarks/loop_probe LOOP_PROBE=/tmp/probe \\
        rmq-async bench latency --rate 20000 --seconds 30 --runs 1 --loop asyncio --no-plots
    python benchmarks/loop_probe/analyze.py /tmp/probe.<pid of the latency worker>

Recorded (asyncio's pure-Python loop only: uvloop runs its callbacks in C, out of reach): each
callback the loop runs (``Handle._run``: wall start and end, the thread's CPU time it used, what it
was: a task's coroutine or the callback's name), each selector call (wall start and end, events
returned), each garbage collection (``gc.callbacks``), and at exit every live ``StageRecorder``'s
samples (``rmq_async.consumer.stages``). Written at exit as ``$LOOP_PROBE.<pid>`` (a pickle). The
probe costs about a microsecond a callback; the figures it gives are for comparing, not quoting.
"""

from __future__ import annotations

import os

if os.environ.get("LOOP_PROBE"):
    import asyncio.events
    import atexit
    import gc
    import pickle
    import selectors
    import sys
    import time
    from typing import Any

    _OUT = os.environ["LOOP_PROBE"]
    _LIMIT = 5_000_000
    _wall = time.perf_counter_ns
    _cpu = time.thread_time_ns
    #: (kind, start_ns, end_ns, label id or events, cpu_ns): kind 1 a callback, 0 a selector call
    EVENTS: list[tuple[int, int, int, int, int]] = []
    LABELS: dict[str, int] = {}
    GCS: list[tuple[int, int, int]] = []  # (start_ns, end_ns, generation)
    _gc_start = [0]

    def _label(cb: Any) -> int:
        owner = getattr(cb, "__self__", None)
        if isinstance(owner, asyncio.Task):
            coro = owner.get_coro()
            key = f"task {getattr(coro, '__qualname__', type(coro).__name__)}"
        elif owner is not None and not isinstance(owner, type):
            key = f"{type(owner).__name__}.{getattr(cb, '__name__', '?')}"
        else:
            key = getattr(cb, "__qualname__", None) or type(cb).__name__
        got = LABELS.get(key)
        if got is None:
            got = LABELS[key] = len(LABELS)
        return got

    _run = asyncio.events.Handle._run

    def _timed_run(self: asyncio.events.Handle) -> None:
        t0, c0 = _wall(), _cpu()
        _run(self)
        t1, c1 = _wall(), _cpu()
        if len(EVENTS) < _LIMIT:
            EVENTS.append((1, t0, t1, _label(self._callback), c1 - c0))  # type: ignore[attr-defined]

    asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]
    _select = selectors.EpollSelector.select

    def _timed_select(self: selectors.EpollSelector, timeout: float | None = None) -> Any:
        t0 = _wall()
        ready = _select(self, timeout)
        if len(EVENTS) < _LIMIT:
            EVENTS.append((0, t0, _wall(), len(ready), 0))
        return ready

    selectors.EpollSelector.select = _timed_select  # type: ignore[method-assign]

    def _on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _gc_start[0] = _wall()
        else:
            GCS.append((_gc_start[0], _wall(), int(info.get("generation", -1))))

    gc.callbacks.append(_on_gc)

    def _dump() -> None:
        samples: list[dict[str, int]] = []
        stages = sys.modules.get("rmq_async.consumer.stages")
        if stages is not None:
            for obj in gc.get_objects():
                if type(obj) is stages.StageRecorder:
                    samples += [s.as_dict() for s in obj.samples]
        record = {"argv": sys.argv, "events": EVENTS, "labels": LABELS, "gcs": GCS, "samples": samples}
        with open(f"{_OUT}.{os.getpid()}", "wb") as f:
            pickle.dump(record, f)

    atexit.register(_dump)
