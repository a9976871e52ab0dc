"""``python -m rmq_async.bench.worker ROLE PARAMS_JSON``: one measured run in a fresh process.

Strategy: the harness execs one worker per run, so every run starts with a clean heap (peak RSS means
something), its own event loop (``params["loop"]``: asyncio or uvloop) and no state left over from the
previous run. The worker dies with its parent, runs one role (a scenario, or the helper roles
``pace`` and ``member``), optionally under cProfile (``params["profile"]``: a pstats file to write),
and prints its result as the last stdout line (JSON): ``{"skipped": why}`` when the scenario cannot
run on this build, ``{"error": ...}`` (exit 1) when it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from .machine import die_with_parent

__all__ = ["ROLES", "main"]


def _roles() -> dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
    from . import latency, lite, scenarios

    return {
        "push": scenarios.run_push,
        "push-plain": scenarios.run_push,
        "push-sleep": scenarios.run_push,
        "push-cpu": scenarios.run_push,
        "push-orderly": scenarios.run_push,
        "backlog": scenarios.run_push,
        "raw-pull": scenarios.raw_pull,
        "lite-pull": lite.lite_pull,
        "latency": latency.latency,
        "rebalance": latency.rebalance,
        "pace": latency.pace,
        "member": latency.member,
    }


ROLES = (
    "push",
    "push-plain",
    "push-sleep",
    "push-cpu",
    "push-orderly",
    "backlog",
    "raw-pull",
    "lite-pull",
    "latency",
    "rebalance",
    "pace",
    "member",
)


def _run_on(loop: str, fn: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await fn()

    if loop == "uvloop":
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    role, params = argv[0], json.loads(argv[1])
    die_with_parent(params.get("parent_pid"))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from .scenarios import Skipped

    fn = _roles()[role]
    params.setdefault("scenario", role)
    prof: Any = None
    if params.get("profile"):
        import cProfile

        prof = cProfile.Profile()

    async def body() -> dict[str, Any]:
        if prof is not None:
            prof.enable()
        try:
            return await fn(params)
        finally:
            if prof is not None:
                prof.disable()

    try:
        result = _run_on(params.get("loop", "asyncio"), body)
    except Skipped as exc:
        print(json.dumps({"skipped": str(exc)}), flush=True)
        return 0
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    finally:
        if prof is not None:
            prof.dump_stats(params["profile"])
    _print_result(json.dumps(result))
    return 0


def _print_result(line: str) -> None:
    """The result line (up to a few hundred KB with latency samples), written whole: an event loop's
    child-process plumbing may have left stdout non-blocking, and a partial write then cut the line
    (uvloop latency runs ended with half a JSON line, even after making the descriptor blocking
    again), so it goes straight to the descriptor, waiting for room whenever the pipe is full."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    with contextlib.suppress(OSError):
        os.set_blocking(fd, True)
    view = memoryview((line + "\n").encode())
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[n:]


if __name__ == "__main__":
    sys.exit(main())
