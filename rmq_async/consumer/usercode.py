"""Running user code (handlers, hooks, listeners) without letting it stop the consumer.

A handler is allowed to fail: what it raises is a failed consume, logged and retried. The one
exception that needs care is ``CancelledError``: it is how anyio and asyncio unwind a task, so it must
pass through when *we* cancel (a consume deadline, a lost lock lease, shutdown). But a handler can also
raise one without anybody cancelling its task: it awaited a future or a task that its owner cancelled
(a shared fetch, a connection's waiter, ``asyncio.wait_for`` on someone else's work). Left alone, that
stray ``CancelledError`` leaves the worker as if it had been cancelled, and anyio then cancels the
task group it runs in: the consumer's whole group (pull loops, rebalance, offsets) ends without a
shutdown. :func:`stray_cancel` tells the two apart: a cancellation is ours when the task has a pending
cancel request (``Task.cancelling()``, which every ``Task.cancel()`` raises, anyio's included) or an
enclosing anyio cancel scope was cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["call_maybe_async", "call_user", "check_handler", "stray_cancel", "user_failure"]

log = logging.getLogger("rmq_async.consumer")


def _is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)  # an object with an ``async def __call__``


def check_handler(handler: object, what: str = "handler") -> None:
    """Refuse, with :class:`~rmq_async.errors.ConfigError`, a handler that cannot work: not callable,
    not ``async`` (a plain function's result cannot be awaited: every message would fail until the
    DLQ), or not callable with the two positional arguments ``(msgs, ctx)``. ``None`` passes (no
    handler: :meth:`deliveries`)."""
    from ..errors import ConfigError  # errors sits at the bottom: no cycle

    if handler is None:
        return
    if not callable(handler):
        raise ConfigError(f"{what} must be an async function (msgs, ctx), got {type(handler).__name__}")
    if not _is_async(handler):
        raise ConfigError(
            f"{what} {getattr(handler, '__qualname__', handler)!r} is not async: define it with "
            "'async def handler(msgs, ctx)' (blocking work inside: 'await anyio.to_thread.run_sync(fn)')"
        )
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):  # no signature to read (some builtins): let it be
        return
    try:
        sig.bind(None, None)
    except TypeError as exc:
        raise ConfigError(
            f"{what} {getattr(handler, '__qualname__', handler)!r} must take two positional arguments "
            f"(msgs, ctx): {sig} ({exc})"
        ) from None


def stray_cancel() -> bool:
    """Whether a ``CancelledError`` caught now in the current task was raised by user code on its own:
    nothing cancelled this task and no enclosing cancel scope is cancelled."""
    task = asyncio.current_task()
    if task is None or task.cancelling():
        return False
    return anyio.current_effective_deadline() != -math.inf


def user_failure(exc: BaseException) -> str | None:
    """What user code raising ``exc`` means: a failure to log and retry, described by the string
    returned, or None for an exception that must propagate (a cancellation of ours, KeyboardInterrupt,
    SystemExit). Call it in the ``except`` block, in the task that ran the user code."""
    if isinstance(exc, Exception):
        return type(exc).__name__
    if isinstance(exc, asyncio.CancelledError) and stray_cancel():
        return "CancelledError although nothing cancelled it (an awaited future cancelled by its owner?)"
    return None


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> None:
    """Call a plain or ``async`` callable and await what it returns if that is awaitable."""
    res = fn(*args)
    if inspect.isawaitable(res):
        await res


async def call_user(what: str, fn: Callable[..., Any], *args: Any) -> bool:
    """Call a plain or ``async`` callable of the user's (a hook, a rebalance listener); what it raises,
    a stray ``CancelledError`` included, is logged as ``what`` and not propagated. True when it
    returned normally."""
    try:
        await call_maybe_async(fn, *args)
        return True
    except BaseException as exc:
        failure = user_failure(exc)
        if failure is None:
            raise
        log.error("%s raised %s", what, failure, exc_info=exc)
    return False
