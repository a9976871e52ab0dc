"""Running a group's handler on a batch: the one place user code meets a batch of messages.

Every consume path calls the handler through an :class:`Invoker`: the concurrent service, the orderly
service, POP, and the broker's consume-directly request (``mqadmin consumeMessage``). The invoker owns
what those paths used to repeat and let drift apart:

- the before- and after-consume hooks (Java's ``ConsumeMessageHook``; the after-hooks get the
  normalised result, and their failures are logged, never propagated);
- the observers (the message trace, OpenTelemetry): :meth:`Invoker.handler` is the handler as the
  services call it, wrapped by them only when there are some;
- what a handler raising means (:meth:`Invoker.failed`): an ``Exception`` or a stray
  ``CancelledError`` is the user's failure, logged and retried; our own cancellation (the consume
  deadline, a lost lock lease, shutdown) propagates;
- what its answer means (:mod:`.outcome`): a concurrent result normalised by ``checked_result``, an
  orderly one by ``checked_orderly_result``; ``ack_index`` and ``delay_level`` are read by the
  settlement rule ``settle_plan`` that every concurrent-style path applies.

:meth:`Invoker.call` and :meth:`Invoker.call_orderly` are the whole call for the paths that take one
batch at a time (POP, consume-directly, orderly). The concurrent service runs batches back to back in
one cancel scope per worker, with plain successes acknowledged in groups; it calls the same pieces
(:meth:`~Invoker.handler`, :meth:`~Invoker.before`, :meth:`~Invoker.failed`, :meth:`~Invoker.checked`,
:meth:`~Invoker.after`) inline, so that a plain success costs no extra coroutine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import anyio

from ..protocol.stored import MessageExt
from .outcome import checked_orderly_result, checked_result
from .types import ConsumeContext, ConsumeResult, OrderlyContext, OrderlyResult
from .usercode import awaitable_handler, call_maybe_async, call_user, is_async, user_failure

if TYPE_CHECKING:
    from ..protocol.mq import MessageQueue
    from .context import ConsumerContext

__all__ = ["Call", "Invoker"]

log = logging.getLogger("rmq_async.consumer")

_SUSPEND = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
R = TypeVar("R", ConsumeResult, OrderlyResult)
_Handler = Callable[[list[MessageExt], Any], Awaitable[Any]]


class Call(NamedTuple, Generic[R]):
    """One call of a handler under a deadline: its normalised result (RECONSUME_LATER, or SUSPEND for
    an orderly handler, when it failed or was cut), whether the deadline cut it, the seconds it took,
    and what it raised (the user's failure, described; None when it returned)."""

    result: R
    timed_out: bool
    took: float
    error: str | None


class Invoker:
    """A consumer group's handler with its hooks and observers (see the module docstring). One per
    consume service; the hooks and observers are read at each call, so hooks registered after start
    apply from the next batch on."""

    __slots__ = ("_c", "group", "handler_fn", "plain_fn")

    def __init__(self, ctx: ConsumerContext, handler: Callable[..., Any] | None) -> None:
        self._c = ctx
        self.group = ctx.group
        #: the handler as awaited (a plain function wrapped: :func:`.usercode.awaitable_handler`)
        self.handler_fn: _Handler | None = None if handler is None else awaitable_handler(handler)
        #: a plain (not async) handler as it is, which the concurrent service may call inline
        self.plain_fn: Callable[..., Any] | None = None if handler is None or is_async(handler) else handler

    # -- the pieces --------------------------------------------------------------------------------

    @property
    def has_hooks(self) -> bool:
        c = self._c
        return bool(c.before_hooks or c.after_hooks)

    @property
    def has_after_hooks(self) -> bool:
        return bool(self._c.after_hooks)

    def handler(self, trace_timeout: float | None = None) -> _Handler:
        """The handler as a service calls it: itself, or wrapped by the observers when there are
        any (asked once per pulled batch). ``trace_timeout``: the seconds past which the trace labels a
        call TIME_OUT, when not the consume timeout (POP: the invisible time, as Java)."""
        assert self.handler_fn is not None
        wrapped: _Handler = self._c.observation.observed(self.handler_fn, trace_timeout)
        return wrapped

    def plain_handler(self) -> Callable[[list[MessageExt], ConsumeContext], Any] | None:
        """A plain handler as the concurrent service calls it inline (itself, or wrapped by the
        observers' plain variant), asked once per pulled batch; None when the handler is async or
        hooks are registered (they may be async: the batch then goes through a worker)."""
        fn = self.plain_fn
        c = self._c
        if fn is None or c.before_hooks or c.after_hooks:
            return None
        wrapped: Callable[[list[MessageExt], ConsumeContext], Any] = c.observation.observed(
            fn, None, plain=True
        )
        return wrapped

    async def before(self, batch: list[MessageExt], ctx: ConsumeContext | OrderlyContext) -> None:
        """The before-consume hooks; what they raise is the batch's failure (as Java: a hook that
        throws fails the consume)."""
        for h in self._c.before_hooks:
            await call_maybe_async(h, batch, ctx)

    async def after(
        self,
        batch: list[MessageExt],
        ctx: ConsumeContext | OrderlyContext,
        result: ConsumeResult | OrderlyResult,
    ) -> None:
        """The after-consume hooks, each given its own copy of the batch; their failures are logged."""
        for h in self._c.after_hooks:
            await call_user("after-consume hook", h, list(batch), ctx, result)

    def failed(self, exc: BaseException, mq: MessageQueue, batch: list[MessageExt]) -> str:
        """``exc`` left the handler (or a before-hook) consuming ``batch`` of ``mq``: log it as the
        user's failure, or re-raise it when it is ours (a cancellation we asked for,
        KeyboardInterrupt, SystemExit). Call it in the ``except`` block."""
        failure = user_failure(exc)
        if failure is None:
            raise exc
        log.error(
            "handler of group %s raised %s on %s (offsets %s, msg ids %s)",
            self.group,
            failure,
            mq,
            _offsets(batch),
            [m.msg_id for m in batch[:16]],
            exc_info=exc,
        )
        return repr(exc) if isinstance(exc, Exception) else failure

    def checked(self, result: object) -> ConsumeResult:
        """A concurrent handler's return value, normalised (:func:`.outcome.checked_result`)."""
        return checked_result(result, self.group)

    # -- whole calls -------------------------------------------------------------------------------

    async def call(
        self,
        batch: list[MessageExt],
        ctx: ConsumeContext,
        *,
        timeout: float,
        trace_timeout: float | None = None,
        observe: bool = True,
    ) -> Call[ConsumeResult]:
        """One concurrent-style call: hooks, the handler under a ``timeout`` deadline (cut: logged,
        RECONSUME_LATER), failures mapped, the result normalised, the after-hooks told. The handler
        gets its own list. ``observe=False``: not seen by the trace or OpenTelemetry (consume-directly,
        which Java does not trace either)."""
        return await self._timed(
            batch, ctx, timeout, self.checked, ConsumeResult.RECONSUME_LATER, trace_timeout, observe
        )

    async def call_orderly_timed(
        self, batch: list[MessageExt], ctx: OrderlyContext, *, timeout: float, observe: bool = True
    ) -> Call[OrderlyResult]:
        """:meth:`call` for an orderly handler (consume-directly): a failure or the deadline is
        SUSPEND_CURRENT_QUEUE_A_MOMENT."""

        def checked(result: object) -> OrderlyResult:
            return checked_orderly_result(result, self.group)

        return await self._timed(batch, ctx, timeout, checked, _SUSPEND, None, observe)

    async def _timed(
        self,
        batch: list[MessageExt],
        ctx: Any,
        timeout: float,
        checked: Callable[[object], R],
        fallback: R,
        trace_timeout: float | None,
        observe: bool,
    ) -> Call[R]:
        start = time.monotonic()
        result = fallback
        timed_out = False
        error: str | None = None
        try:
            with anyio.move_on_after(timeout) as scope, self._c.guard():
                given = list(batch)
                if self._c.before_hooks:
                    await self.before(given, ctx)
                handler = self.handler(trace_timeout) if observe else self.handler_fn
                assert handler is not None
                result = checked(await handler(given, ctx))
            if scope.cancelled_caught:
                timed_out = True
                log.warning(
                    "handler of group %s ran past its %.1fs deadline on %s (offsets %s): consumed again",
                    self.group,
                    timeout,
                    ctx.mq,
                    _offsets(batch),
                )
        except BaseException as exc:
            error = self.failed(exc, ctx.mq, batch)
        if self._c.after_hooks:
            await self.after(batch, ctx, result)
        return Call(result, timed_out, time.monotonic() - start, error)

    async def call_orderly(
        self,
        batch: list[MessageExt],
        ctx: OrderlyContext,
        deliver: Callable[[], Awaitable[OrderlyResult]] | None = None,
    ) -> OrderlyResult:
        """One orderly call, inside the caller's cancel scope (the lock lease's deadline): hooks, the
        handler (or ``deliver``, for a consumer without one: the ``async for`` stream), a failure
        mapped to SUSPEND_CURRENT_QUEUE_A_MOMENT, the result normalised. The after-hooks are the
        caller's (it tells them only once it knows the batch stands)."""
        try:
            if self._c.before_hooks:
                await self.before(batch, ctx)
            if deliver is not None:
                return await deliver()
            return checked_orderly_result(await self.handler()(batch, ctx), self.group)
        except BaseException as exc:
            self.failed(exc, ctx.mq, batch)
            return _SUSPEND


def _offsets(batch: list[MessageExt]) -> str:
    if not batch:
        return "-"
    first, last = batch[0].queue_offset, batch[-1].queue_offset
    return str(first) if first == last else f"{first}..{last}"
