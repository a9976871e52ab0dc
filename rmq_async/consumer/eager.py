"""Start a task whose first step runs at once, in its creator, as that task (``eager_start``).

Python 3.12 has it built in (``asyncio.Task(coro, eager_start=True)``). Python 3.11 has not; there the
same is done by hand: the task is made first (its context a copy of the creator's, as any task's),
its first step is run here with ``asyncio.current_task()`` switched to it (``asyncio.tasks``'
``_enter_task`` / ``_leave_task``, the functions a task's own step calls), and the task's coroutine
is a :class:`_Resume` that hands the task what that step awaited and steps the coroutine on from
there. A coroutine that finishes in its first step leaves the task one empty step to run. So a
handler sees the same on both: cancel scopes, timeouts and context variables entered in its first
step belong to the task that goes on with it.

Where those two functions are missing (another Python implementation), :data:`EAGER` is False and
callers keep their non-eager path.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["EAGER", "start_eagerly"]

_enter: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None
_leave: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None
_enter = getattr(asyncio.tasks, "_enter_task", None)
_leave = getattr(asyncio.tasks, "_leave_task", None)

#: a task can be started eagerly here (always on 3.12+, on 3.11 when asyncio has the two functions)
EAGER: bool = sys.version_info >= (3, 12) or (_enter is not None and _leave is not None)

_NOT_STARTED = object()


class _Resume(Coroutine[Any, Any, None]):
    """The coroutine of a task started by :func:`start_eagerly` on Python 3.11: the first ``send``
    returns what the coroutine yielded in its eager first step (the future it waits on), later ones
    step the coroutine itself; finished in that first step, the first ``send`` ends the task."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self.coro: Coroutine[Any, Any, None] | None = coro
        self.first: Any = _NOT_STARTED  # what the eager step yielded, until the task takes it

    def send(self, value: Any) -> Any:
        first = self.first
        if first is not _NOT_STARTED:
            self.first = _NOT_STARTED
            return first
        if self.coro is None:
            raise StopIteration
        return self.coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if val is None else val
        if isinstance(exc, type):
            exc = exc()
        if tb is not None:
            exc = exc.with_traceback(tb)
        first = self.first
        if first is not _NOT_STARTED:
            # cancelled before its first step took the future the eager step waits on: that future
            # is given up, as a task's cancel() gives up the one it waits on
            self.first = _NOT_STARTED
            if isinstance(first, asyncio.Future):
                first.cancel()
        if self.coro is None:
            raise exc
        return self.coro.throw(exc)

    def close(self) -> None:
        coro, self.coro = self.coro, None
        if coro is not None:
            coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("the coroutine of an eagerly started task is not awaitable")


def start_eagerly(
    coro: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop
) -> asyncio.Task[None] | None:
    """Run ``coro``'s first step now, as a new task on ``loop`` (the running one), from inside the
    running task. None: it finished in that step (an exception it raised propagates here, as
    ``task.result()`` raises it); else the task, which goes on by itself."""
    if sys.version_info >= (3, 12):
        task = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg, unused-ignore]
        if task.done():
            task.result()
            return None
        return task
    assert _enter is not None and _leave is not None
    resume = _Resume(coro)
    context = contextvars.copy_context()
    task: asyncio.Task[None] = asyncio.Task(resume, loop=loop, context=context)
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave(loop, outer)
    _enter(loop, task)
    try:
        resume.first = context.run(coro.send, None)
    except StopIteration:
        resume.coro = None
        return None
    except BaseException:
        resume.coro = None
        raise
    finally:
        _leave(loop, task)
        if outer is not None:
            _enter(loop, outer)
    return task
