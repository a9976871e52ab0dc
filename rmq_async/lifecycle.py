"""One lifecycle for the long-lived objects (producer, lite pull consumer, ...): a supervisor task.

An object that owns task groups and connections does not enter them by hand in ``start()`` and leave
them in ``stop()``: a cancel scope must be left in the task that entered it, and an ASGI application
runs its startup and shutdown hooks in different tasks (``RuntimeError: Attempted to exit cancel scope
in a different task``). Instead the object hands :meth:`Supervisor.start` a coroutine function
``run(ready, stopping)`` that holds everything it owns in ``async with`` blocks, calls ``ready()``
once it is running, awaits ``stopping.wait()`` and returns after its shutdown. The supervisor runs it
in a task of its own:

- ``start()`` returns when ``ready()`` was called, or raises what ``run`` raised before that (and
  then nothing is left running); the caller's cancellation while it waits cancels the start;
- ``stop()`` sets ``stopping`` and awaits the end of ``run``, from any task of the same event loop,
  and may be called again (it then returns at once); what ``run`` raises after ``ready()`` is raised
  by ``stop()``;
- cancellation is never swallowed: a cancelled ``stop()`` still leaves ``run`` to finish its
  shutdown (it is shielded), and a ``run`` that ends on its own before ``stop()`` is reported by
  ``stop()`` (``done()`` says so before).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from .errors import ClientError

__all__ = ["Run", "Supervisor"]

#: ``run(ready, stopping)``: the object's whole life, from start to the end of its shutdown
Run = Callable[[Callable[[], None], asyncio.Event], Coroutine[Any, Any, None]]


class Supervisor:
    """The task that runs one object's life (see the module docstring). One run at a time; a
    stopped supervisor may be started again."""

    __slots__ = ("_name", "_stopping", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    def __repr__(self) -> str:
        state = "idle" if self._task is None else ("ended" if self._task.done() else "running")
        return f"<Supervisor {self._name} {state}>"

    @property
    def running(self) -> bool:
        """Started and not stopped (``run`` may have ended on its own: see :meth:`done`)."""
        return self._task is not None

    def done(self) -> bool:
        """Whether ``run`` has ended (on its own, or after :meth:`stop`)."""
        return self._task is not None and self._task.done()

    def cancelled(self) -> bool:
        """Whether ``run`` ended by a cancellation that was not :meth:`stop`'s caller's (the event
        loop closing, say)."""
        return self._task is not None and self._task.cancelled()

    def ended(self) -> asyncio.Future[None] | None:
        """What completes when ``run`` ends (with its error, if any); None when not started. For a
        watcher (a test waiting for a condition fails at once if the run dies meanwhile)."""
        return self._task

    async def start(self, run: Run) -> None:
        if self._task is not None:
            raise ClientError(f"{self._name} is already started")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        stopping = asyncio.Event()

        def set_ready() -> None:
            if not ready.done():
                ready.set_result(None)

        async def main() -> None:
            try:
                await run(set_ready, stopping)
            except BaseException as exc:
                if ready.done():
                    raise
                ready.set_exception(exc if isinstance(exc, Exception) else ClientError(repr(exc)))
                if not isinstance(exc, Exception):
                    raise
                return
            if not ready.done():
                ready.set_exception(ClientError(f"{self._name} ended before it was running"))

        task = loop.create_task(main(), name=f"rmq_async {self._name}")
        self._task, self._stopping = task, stopping
        try:
            await asyncio.shield(ready)
        except BaseException:
            # a failed start (nothing is left running) or our caller's cancellation (cancel the run)
            self._task = self._stopping = None
            if not task.done():
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.gather(task, return_exceptions=True))
            raise

    async def stop(self) -> None:
        task, stopping = self._task, self._stopping
        if task is None or stopping is None:
            return
        if task.get_loop() is not asyncio.get_running_loop():
            if task.done():  # its loop has ended (asyncio.run cancelled it there): nothing to stop
                self._task = self._stopping = None
            raise ClientError(
                f"{self._name} was started in another event loop: start and stop it in the same one "
                "(one asyncio.run() around both, e.g. an 'async with' block)"
            )
        stopping.set()
        try:
            await asyncio.shield(task)  # our cancellation leaves the shutdown running
        finally:
            if task.done():
                self._task = self._stopping = None
