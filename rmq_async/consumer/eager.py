"""Start a task whose first step runs at once, in its creator, as that task (``eager_start``).

Python 3.12 has it built in (``asyncio.Task(coro, eager_start=True)``). Python 3.11 has not; there the
same is done by hand, with a *host*: a task parked on a future of its own. The coroutine's first step
runs here, in a copy of the creator's context (as a new task's), with ``asyncio.current_task()``
switched to the host (``asyncio.tasks``' ``_enter_task`` / ``_leave_task``, the functions a task's own
step calls). A coroutine that finishes in that step leaves the host parked, for the next one (no task
is made: coroutines done so, one after the other, share one ``current_task()``); one that suspends is
handed to the host, woken to await what that step awaited and to step the coroutine on from there, in
its context, and the next start parks a new host. So a handler sees the same on both:
``current_task()``, cancel scopes, timeouts and context variables entered in its first step belong to
the task that goes on with it. Per start on Python 3.11 with uvloop, this costs about what 3.12's
``eager_start`` does (1.3 against 1.15 us for a coroutine that returns at once, against 5-7 us with a
task made each time).

Where those two functions are missing (another Python implementation), :data:`EAGER` is False and
callers keep their non-eager path.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["EAGER", "EagerStarter"]

_enter: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None
_leave: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None
_enter = getattr(asyncio.tasks, "_enter_task", None)
_leave = getattr(asyncio.tasks, "_leave_task", None)

#: a task can be started eagerly here (always on 3.12+, on 3.11 when asyncio has the two functions)
EAGER: bool = sys.version_info >= (3, 12) or (_enter is not None and _leave is not None)

_NONE = object()


class _Host(Coroutine[Any, Any, None]):
    """The coroutine of a host task (Python 3.11): parked (``coro`` None) it awaits ``waiter``; given
    a coroutine that suspended in its eager first step (:meth:`give`), the next ``send`` returns what
    that step yielded (the future it waits on) and later ones step the coroutine in its context; the
    task ends with the coroutine."""

    __slots__ = ("context", "coro", "first", "loop", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.coro: Coroutine[Any, Any, None] | None = None
        self.context: contextvars.Context | None = None
        self.first: Any = _NONE  # what the eager step yielded, until the task takes it
        self.waiter: asyncio.Future[None] | None = None

    def give(self, coro: Coroutine[Any, Any, None], context: contextvars.Context, first: Any) -> None:
        self.coro, self.context, self.first = coro, context, first
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        # (no waiter: the task's first step has not run yet, and takes ``first`` when it does)

    def send(self, value: Any) -> Any:
        first = self.first
        if first is not _NONE:
            self.first = _NONE
            return first
        coro = self.coro
        if coro is None:  # parked
            waiter = self.waiter = self.loop.create_future()
            waiter._asyncio_future_blocking = True  # (as Future.__await__ yields it to its task)
            return waiter
        assert self.context is not None
        return self.context.run(coro.send, value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if val is None else val
        if isinstance(exc, type):
            exc = exc()
        if tb is not None:
            exc = exc.with_traceback(tb)
        first = self.first
        if first is not _NONE:
            # cancelled before its step took the future the eager step waits on: that future is
            # given up, as a task's cancel() gives up the one it waits on
            self.first = _NONE
            if isinstance(first, asyncio.Future):
                first.cancel()
        coro = self.coro
        if coro is None:  # parked: cancelled (the starter's close, the loop's shutdown)
            raise exc
        assert self.context is not None
        return self.context.run(coro.throw, exc)

    def close(self) -> None:
        coro, self.coro = self.coro, None
        if coro is not None:
            coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("the coroutine of a host task is not awaitable")

    @property
    def __name__(self) -> str:  # (what the task's repr shows)
        coro = self.coro
        return "parked host" if coro is None else getattr(coro, "__qualname__", "hosted coroutine")


class EagerStarter:
    """Starts coroutines eagerly on one running loop (:meth:`start`); :meth:`close` once done with it
    (Python 3.11: ends the parked host)."""

    __slots__ = ("_host", "_hosted", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._host: asyncio.Task[None] | None = None  # parked (Python 3.11)
        self._hosted: _Host | None = None  # its coroutine

    def start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run ``coro``'s first step now, as a new task on the loop, from inside the running task.
        None: it finished in that step (an exception it raised propagates here, as
        ``task.result()`` raises it); else the task, which goes on by itself."""
        loop = self._loop
        if sys.version_info >= (3, 12):
            task = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg, unused-ignore]
            if task.done():
                task.result()
                return None
            return task
        assert _enter is not None and _leave is not None
        outer = asyncio.current_task(loop)
        host, hosted = self._host, self._hosted
        spare = host is not None and host is outer  # started from a first step run as the host
        if host is None or hosted is None or host.done() or host.cancelling() or spare:
            # (a host cancelled while parked is not used: that cancellation would reach the next)
            hosted = _Host(loop)
            host = asyncio.Task(hosted, loop=loop, context=contextvars.Context())
            host._log_destroy_pending = False  # type: ignore[attr-defined]  # (parked: nothing lost)
            if not spare:
                self._host, self._hosted = host, hosted
        context = contextvars.copy_context()
        if outer is not None:
            _leave(loop, outer)
        _enter(loop, host)
        try:
            first = context.run(coro.send, None)
        except BaseException as exc:
            if spare:
                host.cancel()  # (parked for this one only)
            if isinstance(exc, StopIteration):
                return None
            raise
        finally:
            _leave(loop, host)
            if outer is not None:
                _enter(loop, outer)
        hosted.give(coro, context, first)
        host._log_destroy_pending = True  # type: ignore[attr-defined]  # (as any task's, from here)
        if not spare:
            self._host = self._hosted = None  # the next start parks a new one
        return host

    def close(self) -> None:
        """End the parked host (Python 3.11); coroutines already handed to hosts go on."""
        host, self._host, self._hosted = self._host, None, None
        if host is not None and not host.done():
            host.cancel()
