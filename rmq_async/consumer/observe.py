"""Consume observers: the typed seam through which the message trace and OpenTelemetry watch handler
calls (Java's ``ConsumeMessageHook`` pair), without taking the consume services off their plain path.

Strategy: an observer is wrapped around the handler (:func:`observed`), so the service still sees the
handler's own result and its own exceptions and keeps acknowledging plain successes in groups; the
observer sees each call's batch, its result or the exception that left it (a handler that raised,
the consume deadline's cancellation), at a sync ``before`` (its token) and a sync ``after``. Without
observers the services call the handler itself: nothing is added per message. An observer that
samples (OpenTelemetry: ``after_optional``) and has nothing to watch in a call returns None from
``before``: that call gets the handler's own awaitable, no wrapper coroutine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ..protocol.stored import MessageExt

__all__ = ["HandlerObserver", "observed", "observed_plain"]


class HandlerObserver(Protocol):
    """An observer may also say ``after_optional = True``: its ``after`` does nothing for a call whose
    ``before`` returned None, so such a call is not wrapped at all (sampling observers); with a
    ``watching_ids`` mapping too (``id(message)`` -> anything), ``before`` is called only for a batch
    with a message in it."""

    def before(self, batch: list[MessageExt]) -> object:
        """Before the handler gets ``batch``: a token handed back to :meth:`after`."""
        ...

    def after(
        self, token: object, batch: list[MessageExt], result: object, error: BaseException | None
    ) -> None:
        """After the call: its result (None when it raised) or ``error`` (what left the handler)."""
        ...


_Handler = Callable[[list[MessageExt], Any], Awaitable[Any]]


def observed(handler: _Handler, observers: Sequence[HandlerObserver]) -> _Handler:
    """``handler`` watched by ``observers`` (``handler`` itself when there is none)."""
    if not observers:
        return handler
    if len(observers) == 1 and getattr(observers[0], "after_optional", False):
        (o,) = observers
        before, after = o.before, o.after

        watching: dict[int, Any] | None = getattr(o, "watching_ids", None)

        def sampled(batch: list[MessageExt], ctx: Any) -> Awaitable[Any]:
            # most calls are not observed: no coroutine of ours around the handler's
            if watching is not None:  # the observer's watched messages by id: asked first, inline
                if not watching:
                    return handler(batch, ctx)
                for m in batch:
                    if id(m) in watching:
                        break
                else:
                    return handler(batch, ctx)
            token = before(batch)
            if token is None:
                return handler(batch, ctx)
            return _watched(handler, after, token, batch, ctx)

        return sampled
    if len(observers) == 1:
        (o,) = observers
        before, after = o.before, o.after

        def one(batch: list[MessageExt], ctx: Any) -> Awaitable[Any]:
            return _watched(handler, after, before(batch), batch, ctx)

        return one
    obs = tuple(observers)

    async def many(batch: list[MessageExt], ctx: Any) -> Any:
        tokens = [o.before(batch) for o in obs]
        try:
            result = await handler(batch, ctx)
        except BaseException as exc:
            _tell(obs, tokens, batch, None, exc)
            raise
        _tell(obs, tokens, batch, result, None)
        return result

    return many


def _tell(
    obs: Sequence[HandlerObserver],
    tokens: list[object],
    batch: list[MessageExt],
    result: object,
    error: BaseException | None,
) -> None:
    """Each observer's ``after`` with its token: the call's result, or what left the handler."""
    for o, t in zip(obs, tokens, strict=True):
        o.after(t, batch, result, error)


async def _watched(
    handler: Any, after: Callable[..., None], token: object, batch: list[MessageExt], ctx: Any
) -> Any:
    """``handler(batch, ctx)`` with ``after`` told its result or its exception (one observer)."""
    try:
        result = await handler(batch, ctx)
    except BaseException as exc:
        after(token, batch, None, exc)
        raise
    after(token, batch, result, None)
    return result


def observed_plain(
    handler: Callable[[list[MessageExt], Any], Any], observers: Sequence[HandlerObserver]
) -> Callable[[list[MessageExt], Any], Any]:
    """:func:`observed` for a plain (not async) handler, which the concurrent service calls inline:
    the wrapper is a plain function too, and a sampling observer with nothing to watch in a call adds
    no more than the test that says so."""
    if not observers:
        return handler
    obs = tuple(observers)
    watching: dict[int, Any] | None = None
    if len(obs) == 1 and getattr(obs[0], "after_optional", False):
        watching = getattr(obs[0], "watching_ids", None)
    optional = all(getattr(o, "after_optional", False) for o in obs)

    def plain(batch: list[MessageExt], ctx: Any) -> Any:
        if watching is not None and (not watching or watching.keys().isdisjoint(map(id, batch))):
            return handler(batch, ctx)  # (as observed: the watched ids asked first)
        tokens = [o.before(batch) for o in obs]
        if optional and all(t is None for t in tokens):
            return handler(batch, ctx)
        try:
            result = handler(batch, ctx)
        except BaseException as exc:
            _tell(obs, tokens, batch, None, exc)
            raise
        _tell(obs, tokens, batch, result, None)
        return result

    return plain
