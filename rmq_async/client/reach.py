"""Whether a peer (a name server, a broker) answered lately: what ``health()`` reports.

A :class:`Reachability` is fed by the requests the client makes anyway (route lookups, heartbeats):
``ok()`` when the peer answered (any answer, an error code included: it is there), ``failed(exc)``
when it did not (refused, timed out, closed). No probe of its own, no clock but ``time.time()`` for
the wall-clock stamps a probe shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["Reach", "Reachability"]


@dataclass(frozen=True, slots=True)
class Reach:
    """One peer's state as ``health()`` shows it (times: seconds since the epoch)."""

    #: the peer's address
    addr: str
    #: True when its last request was answered (False: the last one failed; also before any request)
    reachable: bool
    #: when it last answered (None: never)
    last_ok: float | None
    #: why its last request failed (None when the last one was answered)
    last_error: str | None
    #: since when its requests fail (the first failure after its last answer; None when reachable)
    failing_since: float | None


class Reachability:
    """The running record of one peer."""

    __slots__ = ("addr", "failing_since", "last_error", "last_ok")

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self.failing_since: float | None = None

    def ok(self) -> None:
        self.last_ok = time.time()
        self.last_error = self.failing_since = None

    def failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.failing_since is None:
            self.failing_since = time.time()

    @property
    def reachable(self) -> bool:
        return self.last_ok is not None and self.last_error is None

    def snapshot(self) -> Reach:
        return Reach(self.addr, self.reachable, self.last_ok, self.last_error, self.failing_since)
