"""``EagerStarter``: a coroutine's first step runs in its creator, as the new task (Python 3.12's
``eager_start``; done by hand on 3.11, with a parked host task). What the consume service relies on is
checked on both event loops: a coroutine that does not suspend is done within the call, and starts
that finish so leave no task behind once the starter is closed (3.11: one parked host, reused); one
that suspends goes on as the task that ran its first step (``current_task()``, a timeout or a cancel
scope entered there, context variables set there); the creator stays itself; a failure in the first
step is raised to the creator; a cancellation before the task's next step reaches the coroutine; a
start from inside a first step works too."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from rmq_async.consumer.eager import EAGER, EagerStarter

pytestmark = pytest.mark.skipif(not EAGER, reason="no eager task start on this Python")

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="unset")


def _loops() -> list[Any]:
    out: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dev dependency
        return out
    out.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    return out


@pytest.fixture(params=_loops())
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    def go(main: Coroutine[Any, Any, None]) -> None:
        loop = request.param()
        try:
            loop.run_until_complete(asyncio.wait_for(main, 10))
        finally:
            loop.close()

    return go


def test_a_coroutine_that_does_not_suspend_is_done_within_the_call_as_its_own_task(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    seen: list[object] = []

    async def body() -> None:
        seen.append(asyncio.current_task())
        _var.set("inner")

    async def main() -> None:
        outer = asyncio.current_task()
        before = len(asyncio.all_tasks())
        starter = EagerStarter(asyncio.get_running_loop())
        assert starter.start(body()) is None
        assert len(seen) == 1 and seen[0] is not None and seen[0] is not outer
        assert asyncio.current_task() is outer
        assert _var.get() == "unset"  # the task's own copy of the context
        await asyncio.sleep(0)
        during = len(asyncio.all_tasks())
        for _ in range(50):
            assert starter.start(body()) is None
            await asyncio.sleep(0)
        assert len(seen) == 51 and len(asyncio.all_tasks()) == during <= before + 1  # (a host, reused)
        starter.close()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == before  # nothing left running

    run(main())


def test_a_coroutine_that_suspends_goes_on_as_the_task_that_ran_its_first_step(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    firsts: list[object] = []
    after: list[tuple[object, str]] = []
    gate: list[asyncio.Future[None]] = []

    async def body() -> None:
        firsts.append(asyncio.current_task())
        _var.set("inner")
        fut = asyncio.get_running_loop().create_future()
        gate.append(fut)
        await fut
        after.append((asyncio.current_task(), _var.get()))

    async def main() -> None:
        outer = asyncio.current_task()
        task = EagerStarter(asyncio.get_running_loop()).start(body())
        assert task is not None and not task.done()
        assert firsts == [task]  # the first step ran as the task, here
        assert asyncio.current_task() is outer and _var.get() == "unset"
        gate[0].set_result(None)
        await task
        assert after == [(task, "inner")]

    run(main())


def test_a_timeout_entered_in_the_first_step_cancels_the_task_not_its_creator(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    outcome: list[str] = []

    async def body() -> None:
        try:
            with anyio.fail_after(0.05):
                await anyio.sleep_forever()
        except TimeoutError:
            outcome.append("timed out")

    async def main() -> None:
        task = EagerStarter(asyncio.get_running_loop()).start(body())
        assert task is not None
        await task  # the creator is not cancelled meanwhile
        assert outcome == ["timed out"]
        await asyncio.sleep(0.1)  # (past the deadline: nothing cancels the creator later either)

    run(main())


def test_an_asyncio_timeout_entered_in_the_first_step_is_the_task_s(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    outcome: list[str] = []

    async def quick() -> None:
        async with asyncio.timeout(0.05):  # noqa: ASYNC100 (entered and left in the first step)
            pass

    async def body() -> None:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        except TimeoutError:
            outcome.append("timed out")

    async def main() -> None:
        starter = EagerStarter(asyncio.get_running_loop())
        assert starter.start(quick()) is None
        task = starter.start(body())
        assert task is not None
        await task
        assert outcome == ["timed out"] and not task.cancelled() and task.cancelling() == 0
        await asyncio.sleep(0.1)  # nothing cancels the creator later
        starter.close()

    run(main())


def test_a_host_cancelled_while_parked_is_not_used_again(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    gate: list[asyncio.Future[None]] = []
    done: list[str] = []

    async def quick() -> None:
        pass

    async def body() -> None:
        fut = asyncio.get_running_loop().create_future()
        gate.append(fut)
        await fut
        done.append("done")

    async def main() -> None:
        starter = EagerStarter(asyncio.get_running_loop())
        before = asyncio.all_tasks()
        assert starter.start(quick()) is None
        await asyncio.sleep(0)  # (3.11: the host parked)
        for t in asyncio.all_tasks() - before:
            t.cancel()  # (the parked host) as a shutdown that cancels every task would
        task = starter.start(body())
        assert task is not None
        gate[0].set_result(None)
        await task  # not cancelled by what was meant for the parked host
        assert done == ["done"]
        starter.close()

    run(main())


def test_a_failure_in_the_first_step_is_raised_to_the_creator(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    async def body() -> None:
        raise LookupError("boom")

    async def main() -> None:
        outer = asyncio.current_task()
        with pytest.raises(LookupError, match="boom"):
            EagerStarter(asyncio.get_running_loop()).start(body())
        assert asyncio.current_task() is outer
        await asyncio.sleep(0)

    run(main())


def test_a_task_cancelled_before_its_next_step_delivers_the_cancellation_to_the_coroutine(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    events: list[str] = []
    waited: list[asyncio.Future[None]] = []

    async def body() -> None:
        fut = asyncio.get_running_loop().create_future()
        waited.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        finally:
            events.append("finally")

    async def main() -> None:
        task = EagerStarter(asyncio.get_running_loop()).start(body())
        assert task is not None
        task.cancel()  # before the loop ran any step of it
        with pytest.raises(asyncio.CancelledError):
            await task
        assert events == ["cancelled", "finally"] and task.cancelled()
        assert waited[0].cancelled()  # the future its first step waited on is given up

    run(main())


def test_a_task_cancelled_while_it_waits_delivers_the_cancellation_to_the_coroutine(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    events: list[str] = []

    async def body() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            events.append("finally")

    async def main() -> None:
        task = EagerStarter(asyncio.get_running_loop()).start(body())
        assert task is not None
        await asyncio.sleep(0)  # its first step took the sleep's future
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert events == ["finally"]

    run(main())


def test_a_coroutine_that_yields_to_the_loop_and_returns_a_result_path_ends_cleanly(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    steps: list[int] = []

    async def body() -> None:
        for k in range(3):
            steps.append(k)
            await asyncio.sleep(0)

    async def main() -> None:
        task = EagerStarter(asyncio.get_running_loop()).start(body())
        assert task is not None and steps == [0]
        await task
        assert steps == [0, 1, 2] and task.result() is None

    run(main())


def test_a_start_from_inside_a_first_step_runs_as_a_task_of_its_own(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    tasks: dict[str, object] = {}
    gate: list[asyncio.Future[None]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        starter = EagerStarter(loop)

        async def inner() -> None:
            tasks["inner"] = asyncio.current_task()
            fut = loop.create_future()
            gate.append(fut)
            await fut
            tasks["inner after"] = asyncio.current_task()

        async def outer() -> None:
            tasks["outer"] = asyncio.current_task()
            tasks["inner task"] = starter.start(inner())
            assert asyncio.current_task() is tasks["outer"]  # back as itself

        assert starter.start(outer()) is None
        t = tasks["inner task"]
        assert isinstance(t, asyncio.Task) and not t.done()
        assert tasks["inner"] is t is not tasks["outer"]
        gate[0].set_result(None)
        await t
        assert tasks["inner after"] is t
        again = starter.start(inner())  # the parked host is still good for the next start
        assert again is not None and again is not t
        gate[1].set_result(None)
        await again
        starter.close()

    run(main())
