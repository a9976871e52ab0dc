"""Flow control and back-offs, shared by the pull loops (:mod:`.pull_plan`) and the pop loops
(:mod:`.pop`): whether a queue may be pulled (popped) now, and how long it waits after a failure.
Sans-IO: decisions only; the loops await.

Over a threshold (the process queue's count and size, a topic's limits split over its queues, the
span of concurrent consumption) the answer is :attr:`Step.WAIT` and the loop awaits the queue's room,
resuming the moment consumption frees some, instead of sleeping Java's 50 ms
PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL. Failures back off ``Timing.pull_error_delay``
(PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION, 3 s); an ACL refusal doubles it up to
:data:`AUTH_MAX_BACKOFF`; a refused subscription pulls again after at most
:data:`RESUBSCRIBED_DELAY` once a heartbeat went out; a body refused as a whole doubles from twice
the delay up to ten delays.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, Protocol

__all__ = ["AUTH_MAX_BACKOFF", "RESUBSCRIBED_DELAY", "Backoff", "FlowControl", "Held", "Step", "Why"]

#: seconds: the longest wait between two pulls of a queue refused by ACL
AUTH_MAX_BACKOFF = 30.0
#: seconds: the longest wait before pulling again once a heartbeat went out for a refused subscription
RESUBSCRIBED_DELAY = 0.05


class Step(Enum):
    """A decision without data."""

    #: the queue is dropped (or the consumer stops): the loop ends
    STOP = "stop"
    #: over a flow-control threshold: await the queue's room
    WAIT = "wait"
    #: room: pull (pop) now
    GO = "go"
    #: await the sink's gate (:meth:`PullPlanner.gated` takes its answer)
    GATE = "gate"
    #: no address for the queue's broker: refresh the topic's route, then ask again
    ROUTE = "route"
    #: the subscription was refused: send a heartbeat, then :meth:`PullPlanner.heartbeat`
    HEARTBEAT = "heartbeat"
    #: the answer was refused as a whole: count it, close the connection, then
    #: :meth:`PullPlanner.on_broken`
    BROKEN = "broken"
    #: pull again at once (narrowed past a broken body)
    AGAIN = "again"


class Why(Enum):
    """What a :class:`Backoff` waits for."""

    NO_SUBSCRIPTION = "no subscription"
    NO_ROUTE = "no route"
    DENIED = "denied"
    RESUBSCRIBED = "resubscribed"
    FAILED = "failed"
    BROKEN_BODY = "broken body"


# the members the hot path reads, looked up once: reading one off its Enum class costs about 0.1 us
# on CPython 3.11, more than the rest of a planner's answer
_STOP: Final = Step.STOP
_WAIT: Final = Step.WAIT
_GO: Final = Step.GO


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait ``seconds`` before the next pull (pop)."""

    seconds: float
    reason: Why


class Held(Protocol):
    """What flow control reads of a queue."""

    @property
    def dropped(self) -> bool: ...

    def over_threshold(self) -> str | None: ...


class FlowControl:
    """Whether a queue may be pulled (popped) now, and how long it waits after a failure."""

    __slots__ = ("error_delay",)

    def __init__(self, error_delay: float) -> None:
        self.error_delay = error_delay  # Timing.pull_error_delay

    @staticmethod
    def room(stopped: bool, full: bool) -> Literal[Step.STOP, Step.WAIT, Step.GO]:
        """STOP once the queue is dropped (the consumer stops), WAIT while it is over a threshold."""
        if stopped:
            return _STOP
        return _WAIT if full else _GO

    def failed(self, why: Why = Why.FAILED) -> Backoff:
        return Backoff(self.error_delay, why)

    def denied(self, times: int) -> Backoff:
        """The ``times``-th ACL refusal in a row: doubling, up to :data:`AUTH_MAX_BACKOFF`."""
        return Backoff(min(AUTH_MAX_BACKOFF, self.error_delay * 2 ** min(times, 8)), Why.DENIED)

    def broken(self, times: int) -> Backoff:
        """The ``times``-th refused body at one offset: doubling, up to ten error delays."""
        d = self.error_delay
        return Backoff(min(AUTH_MAX_BACKOFF, 10 * d, d * 2 ** min(times, 8)), Why.BROKEN_BODY)

    def resubscribed(self) -> Backoff:
        return Backoff(min(RESUBSCRIBED_DELAY, self.error_delay), Why.RESUBSCRIBED)
