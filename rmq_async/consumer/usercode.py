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

A handler may also *swallow* our cancellation (``except CancelledError: pass`` in a loop). In the
run's anyio task group that would hold ``stop()`` for ever, and spin the process: anyio delivers a
scope's cancellation again at every turn of the event loop until the task leaves the scope. So the
tasks that run handlers live in :class:`HandlerTasks`, an asyncio task group in a task of its own:
shutdown cancels each of them once (asyncio's way) and waits a grace; a task still running then is
abandoned (logged), its handler's innermost cancel scope shielded (:meth:`HandlerTasks.guard`) so
that no deadline keeps cancelling it, and the stop goes on without its batch (not committed).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from ..lifecycle import Supervisor

__all__ = [
    "HandlerTasks",
    "awaitable_handler",
    "call_maybe_async",
    "call_user",
    "check_handler",
    "is_async",
    "stray_cancel",
    "user_failure",
]

log = logging.getLogger("rmq_async.consumer")


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is an ``async def`` function (or an object with an ``async def __call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)  # an object with an ``async def __call__``


def check_handler(handler: object, what: str = "handler") -> None:
    """Refuse, with :class:`~rmq_async.errors.ConfigError`, a handler that cannot work: not callable,
    or not callable with the two positional arguments ``(msgs, ctx)``. ``None`` passes (no handler:
    :meth:`deliveries`). An ``async def`` handler is awaited; a plain function is called (see
    :func:`awaitable_handler`)."""
    from ..errors import ConfigError  # errors sits at the bottom: no cycle

    if handler is None:
        return
    if not callable(handler):
        raise ConfigError(f"{what} must be a function (msgs, ctx), got {type(handler).__name__}")
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


def awaitable_handler(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as the services await it: itself when it is async; a plain function wrapped, its
    result awaited when it is awaitable (a ``lambda msgs, ctx: coro(msgs)``) and returned as it is
    otherwise."""
    if is_async(fn):
        return fn

    async def call(msgs: Any, ctx: Any) -> Any:
        result = fn(msgs, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    call.__qualname__ = getattr(fn, "__qualname__", call.__qualname__)
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


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


async def _reraise(exc: BaseException) -> None:
    raise exc


class HandlerTasks:
    """The tasks of one consumer run that call its handler (concurrent workers, orderly drive tasks,
    POP batches), apart from the run's task group so that a stop can give up on a handler that swallows
    cancellation (see the module docstring). ``async with``: open for the run; :meth:`close` at
    shutdown."""

    __slots__ = ("_adopted", "_closed", "_group", "_guards", "_life", "_tasks", "_tg")

    def __init__(self, group: str) -> None:
        self._group = group
        self._life = Supervisor(f"handlers of group {group!r}")
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._adopted: set[asyncio.Task[Any]] = set()  # started outside the group (see adopt)
        self._guards: set[anyio.CancelScope] = set()
        self._closed = False

    async def __aenter__(self) -> HandlerTasks:
        await self._life.start(self._run)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            ready()
            await stopping.wait()
            self._tg = None
            for task in self._tasks:
                task.cancel()  # once: a handler that swallows it is not cancelled again
            if self._adopted:
                await asyncio.wait(set(self._adopted))  # (the group waits for its own)

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> bool:
        """Run ``fn(*args)`` here; False (nothing started) once closed."""
        if self._tg is None:
            return False
        task = self._tg.create_task(fn(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def adopt(self, task: asyncio.Task[Any]) -> bool:
        """Take in ``task``, a handler's task started outside the group (eagerly, see
        :meth:`.ConcurrentConsumeService.take_now`), as if the group had started it: a stop cancels
        it once with the others, waits for it and counts it if it outlives the grace; its failure
        fails the group. False (nothing done) once closed."""
        tg = self._tg
        if tg is None:
            return False
        self._tasks.add(task)
        self._adopted.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            self._adopted.discard(t)
            exc = None if t.cancelled() else t.exception()
            if exc is not None:
                if self._tg is not None:
                    self._tg.create_task(_reraise(exc))
                else:
                    log.error("consumer group %s: a handler task failed", self._group, exc_info=exc)

        task.add_done_callback(done)
        return True

    def ended(self) -> asyncio.Future[None] | None:
        """What completes when the tasks ended (with the error of one that failed: the run's too)."""
        return self._life.ended()

    @contextmanager
    def guard(self) -> Iterator[None]:
        """The innermost cancel scope around a handler call: shielded if the call is abandoned, so
        that the deadline scopes around it stop cancelling a task nobody waits for."""
        with anyio.CancelScope() as scope:
            self._guards.add(scope)
            try:
                yield
            finally:
                self._guards.discard(scope)

    async def watch(self) -> None:
        """Raise, in the caller's task (one of the run's task group), what ended these tasks with an
        error: the run fails with it, as it would have with the tasks in its own group."""
        ended = self._life.ended()
        if ended is not None:
            await asyncio.shield(ended)

    async def close(self, grace: float = 1.0) -> int:
        """Cancel every task once and wait up to ``grace`` seconds for them to end; the number of tasks
        abandoned (still running: a handler swallowed the cancellation), logged as an ERROR."""
        if self._closed or not self._life.running:
            return 0
        self._closed = True
        with anyio.move_on_after(grace):
            await self._life.stop()
        left = len(self._tasks)
        if left:
            for scope in self._guards:
                scope.shield = True
            log.error(
                "consumer group %s: %d handler task(s) swallowed cancellation and still run after the "
                "shutdown grace: abandoned, their messages are not committed (consumed again)",
                self._group,
                left,
            )
        return left
