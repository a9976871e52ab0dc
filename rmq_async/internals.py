"""A window onto a client object's parts, for tests, benchmarks and diagnostic tools.

Not the public API (the public API is what the README documents; what :func:`internals` returns may
change between releases). A consumer's or a producer's parts are private to it; whatever needs to
look at them (a test checking the process queues after a rebalance, the CLI refreshing a route, the
benchmark harness sampling cached messages) asks :func:`internals` instead of reaching into the
object's attributes. Each object answers with a typed view of its own
(:class:`~rmq_async.consumer.internals.PushInternals`, ``LiteInternals``,
:class:`~rmq_async.producer.producer.ProducerInternals`).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["internals"]

_T_co = TypeVar("_T_co", covariant=True)


class _Inspectable(Protocol[_T_co]):
    def _internals(self) -> _T_co: ...


def internals(obj: _Inspectable[_T_co]) -> _T_co:
    """The parts of ``obj`` (a push consumer's: those of its current run)."""
    return obj._internals()
