"""What one queue's pull loop decides, without I/O (Java ``DefaultMQPushConsumerImpl.pullMessage`` and
its ``PullCallback``, ``PullAPIWrapper.processPullResult``): whether to pull now, the request, and what
an answer or a failure means. :class:`~.pulling.PullLoop` awaits, sends and applies what it is told.

Strategy. A :class:`PullPlanner` holds one queue's state in typed attributes (the :class:`Phase` of
the next pull, the narrowed width of a pull past a broken body, refusals in a row, failures at one
offset) and answers every question with a decision: a :class:`Step` when it carries nothing, a
:class:`Backoff` (seconds and why), or an object with the data to apply (:class:`PullRequestPlan`,
:class:`Deliver`, :class:`Advance` on the hot path: one of each per planner, refilled and returned
again, so a pull allocates nothing here; :class:`Drop`, :class:`Handle`, :class:`Skip` on rare paths).
Nothing here reads a clock (the loop passes the time), awaits or touches a socket; the process queue
and the address table are read, never written.

Flow control and the back-offs are :mod:`.flow` (shared with the pop loops of :mod:`.pop`): over a
threshold the planner answers :attr:`~.flow.Step.WAIT` and the loop awaits the queue's room. The
sink's own holds (an orderly lock lease, which Java polls every PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION;
a paused lite queue, the lite consumer's total buffer) are :attr:`Step.GATE`, awaited by the loop.
Failures back off ``Timing.pull_error_delay`` (PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION, 3 s); an ACL
refusal doubles it up to :data:`AUTH_MAX_BACKOFF`; a refused subscription pulls again after at most
50 ms once a heartbeat went out after the pull; a body refused as a whole doubles from twice the
delay up to ten delays, and at :data:`BROKEN_BODY_LIMIT` failures at one offset narrows the pull
(see :mod:`.pulling`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final, Literal, Protocol

from ..client.api import PullResult
from ..client.instance import MASTER_ID
from ..errors import AuthError, BrokerError, ProtocolError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import SubscriptionData
from ..protocol.codes import PullSysFlag, ResponseCode
from ..protocol.mq import MessageQueue
from ..protocol.pull import PullStatus
from ..protocol.stored import BrokenBodyError, MessageExt, PulledMessages, Undecodable, salvage_ids
from .flow import _GO, _STOP, AUTH_MAX_BACKOFF, Backoff, FlowControl, Held, Step, Why

__all__ = [
    "AUTH_MAX_BACKOFF",
    "BROKEN_BODY_LIMIT",
    "BROKEN_BODY_SKIP_AT",
    "Advance",
    "Backoff",
    "Deliver",
    "Drop",
    "FlowControl",
    "Handle",
    "Narrowing",
    "Phase",
    "PullPlanner",
    "PullRequestPlan",
    "Skip",
    "Step",
    "Why",
    "filter_tags",
]

log = logging.getLogger("rmq_async.consumer")

#: a body refused as a whole this many times at one offset: the pull is narrowed to its failing
#: message, which is then handled as an undecodable one
BROKEN_BODY_LIMIT = 3
#: a push consumer skips a broken message that nothing names (no trusted commit-log offset, so the
#: broker cannot move it) at this many failures at its offset (the back-off, doubling from twice the
#: pull error delay, reaches its cap of 10 pull error delays on the way: 72 s on the Java timing)
BROKEN_BODY_SKIP_AT = 6
#: pull refusals that mean "the broker has not seen our latest heartbeat yet": the group's
#: subscription (24, 25) or, for a SQL92 one, its filter data (27, 28: ``ConsumerFilterManager``)
_SUBSCRIPTION_BEHIND = frozenset(
    {
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.FILTER_DATA_NOT_EXIST,
        ResponseCode.FILTER_DATA_NOT_LATEST,
    }
)


class Phase(Enum):
    """Where the next :meth:`PullPlanner.next` starts."""

    #: flow control first
    FLOW = "flow"
    #: the sink's gate let the pull go: the subscription and the address next
    READY = "ready"
    #: the route was refreshed: the master's address (or any) now, or back off
    ROUTED = "routed"


class Narrowing(Enum):
    """How wide the next pull is, past a body refused as a whole (one broken message is pulled alone)."""

    #: ``batch_size`` messages
    FULL = "full"
    #: fewer; the answer restores the full width
    NARROWED = "narrowed"
    #: the good messages before a broken one; the answer narrows to that one alone
    GOOD_ONES_FIRST = "good ones first"


# the members the hot path reads, looked up once: reading one off its Enum class costs about 0.1 us
# on CPython 3.11, more than the rest of a planner's answer
_FLOW: Final = Phase.FLOW
_ROUTED: Final = Phase.ROUTED
_FULL: Final = Narrowing.FULL
_FOUND: Final = PullStatus.FOUND
_OFFSET_ILLEGAL: Final = PullStatus.OFFSET_ILLEGAL


@dataclass(frozen=True, slots=True)
class Drop:
    """OFFSET_ILLEGAL (push): drop the queue with ``offset`` as its committed offset; the loop ends."""

    offset: int


@dataclass(frozen=True, slots=True)
class Handle:
    """A broken message named (or, lite pull, not): pull on from ``next_offset``, hand ``record`` to
    the undecodable path."""

    record: Undecodable
    next_offset: int


@dataclass(frozen=True, slots=True)
class Skip:
    """A broken message nothing names, refused too often: skip it (``why``), pass over ``offset`` and
    pull on from ``next_offset``."""

    record: Undecodable
    offset: int
    next_offset: int
    why: str


class PullRequestPlan:
    """Send ``header`` to ``addr`` (the planner's own, refilled for every pull)."""

    __slots__ = ("addr", "header")

    def __init__(self, header: H.PullMessageRequestHeader) -> None:
        self.addr = ""
        self.header = header


_NOTHING: tuple[Undecodable, ...] = ()
#: what a cleared :class:`Deliver` holds (never handed over, so never changed)
_NO_MESSAGES: list[MessageExt] = []


class Deliver:
    """FOUND: ``found`` as pulled, ``msgs`` after the tag filter, ``undecodable`` the records the
    decoder isolated; pull on from ``next_offset``. The loop clears it once the batch is handed over,
    so that the last of the consumers frees it (the planner's own, refilled for every FOUND)."""

    __slots__ = ("found", "latency", "msgs", "next_offset", "undecodable")

    def __init__(self) -> None:
        self.found = self.msgs = _NO_MESSAGES
        self.undecodable = _NOTHING
        self.next_offset = -1
        self.latency = 0.0

    def clear(self) -> None:
        self.found = self.msgs = _NO_MESSAGES
        self.undecodable = _NOTHING


class Advance:
    """Nothing to hand over: pull on from ``next_offset``; ``commit``: the queue is empty, so the
    committed offset moves there too (``correctTagsOffset``). The planner's own, refilled."""

    __slots__ = ("commit", "next_offset")

    def __init__(self) -> None:
        self.next_offset = -1
        self.commit = False


class Committed(Protocol):
    @property
    def value(self) -> int: ...


class Cache(Held, Protocol):
    """What the planner reads of a process queue."""

    @property
    def next_offset(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def offset(self) -> Committed: ...


class Route(Protocol):
    """The client's broker address table."""

    @property
    def broker_addrs(self) -> Mapping[str, Mapping[int, str]]: ...

    def broker_addr(self, broker_name: str, broker_id: int = ...) -> str | None:
        """``findBrokerAddressInSubscribe``: ``broker_id``'s address (default: the master's), else any."""


class SubscriptionTable(Protocol):
    def get(self, topic: str) -> SubscriptionData | None: ...


class PullPolicy(Protocol):
    """What of :class:`~.pulling.PullSettings` the planner follows."""

    @property
    def batch_size(self) -> int: ...
    @property
    def suspend_timeout(self) -> float: ...
    @property
    def lite_pull(self) -> bool: ...
    @property
    def post_subscription(self) -> bool: ...
    @property
    def commit_offset(self) -> bool: ...
    @property
    def correct_tags_offset(self) -> bool: ...
    @property
    def illegal_offset_drops(self) -> bool: ...


def filter_tags(sub: SubscriptionData, msgs: Sequence[MessageExt]) -> list[MessageExt]:
    """Re-filter by tag string: the broker filters by hash code only (``processPullResult``, with
    the subscription the pull was made with)."""
    if not sub.tags_set:
        return msgs if isinstance(msgs, list) else list(msgs)
    tags = set(sub.tags_set)
    return [m for m in msgs if m.tags in tags]


class PullPlanner:
    """The decisions of one queue's pull loop (one planner per loop run; a seek starts another).

    Per pull: :meth:`next` until it returns the :class:`PullRequestPlan` (the loop does what each
    :class:`Step` or :class:`Backoff` on the way says), then :meth:`on_result` or :meth:`on_error`."""

    __slots__ = (
        "_advance",
        "_commit",
        "_deliver",
        "_flags",
        "_lite",
        "_post_sub",
        "_sub",
        "broken",
        "broken_at",
        "broker_id",
        "denied",
        "denied_resource",
        "flow",
        "gates",
        "group",
        "mq",
        "narrowing",
        "phase",
        "plan",
        "route",
        "sent_at",
        "settings",
        "subscriptions",
        "to_dlq",
    )

    def __init__(
        self,
        mq: MessageQueue,
        group: str,
        settings: PullPolicy,
        flow: FlowControl,
        route: Route,
        subscriptions: SubscriptionTable,
        *,
        broker_id: int = 0,
        gates: bool = False,
        to_dlq: bool = True,
    ) -> None:
        s = settings
        lite = s.lite_pull
        post_sub = s.post_subscription or lite
        self.mq = mq
        self.group = group
        self.settings = settings
        self.flow = flow
        self.route = route
        self.subscriptions = subscriptions
        self.gates = gates  # the sink's gate is awaited before every pull
        self.to_dlq = to_dlq  # an undecodable message goes to the DLQ (not failed or skipped)
        self.broker_id = broker_id  # the node the last answer suggested
        self.phase = _FLOW
        self.narrowing = Narrowing.FULL
        self.denied = 0  # pulls refused by ACL in a row
        self.denied_resource: str | None = None
        self.broken = 0  # bodies refused as a whole in a row at offset broken_at
        self.broken_at = -1
        self.sent_at = 0.0  # when the last request was planned (its answer's latency)
        self._sub: SubscriptionData | None = None  # the subscription the last pull was made with
        self._lite = lite
        self._post_sub = post_sub
        self._commit = s.commit_offset
        self._flags = (  # the sys flag without and with a committed offset riding along
            PullSysFlag.build(commit_offset=False, suspend=True, subscription=post_sub, lite_pull=lite),
            PullSysFlag.build(commit_offset=True, suspend=True, subscription=post_sub, lite_pull=lite),
        )
        # one header for this queue's pulls, its per-pull fields set before each one (the request
        # is encoded when the pull starts, before it awaits anything)
        self.plan = PullRequestPlan(
            H.PullMessageRequestHeader(
                consumer_group=group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=-1,
                max_msg_nums=s.batch_size,
                sys_flag=self._flags[0],
                commit_offset=0,
                suspend_timeout_millis=int(s.suspend_timeout * 1000),
                sub_version=0,
                subscription="*" if lite else None,
                expression_type="TAG",
                bname=mq.broker_name,
            )
        )
        self._deliver = Deliver()
        self._advance = Advance()

    # -- before a pull -----------------------------------------------------------------------------

    def next(
        self, now: float, cache: Cache
    ) -> Literal[Step.STOP, Step.WAIT, Step.GATE, Step.ROUTE] | Backoff | PullRequestPlan:
        """The next thing to do towards a pull at ``now``: :attr:`Step.STOP`, :attr:`Step.WAIT` (then
        ask again), :attr:`Step.GATE`, :attr:`Step.ROUTE` (then ask again), a :class:`Backoff`
        (without a subscription or an address), or the request."""
        phase = self.phase
        if phase is _FLOW:
            step = self.flow.room(cache.dropped, cache.over_threshold() is not None)
            if step is not _GO:
                return step
            if self.gates:
                return Step.GATE
        mq = self.mq
        if phase is _ROUTED:
            self.phase = _FLOW
            addr = self.route.broker_addr(mq.broker_name)
            if addr is None:
                return self.flow.failed(Why.NO_ROUTE)
        else:
            sub = self._sub = self.subscriptions.get(mq.topic)
            if sub is None and not self._lite:
                # unsubscribed: the next rebalance drops the queue; if the topic is subscribed
                # again first, this loop must still be here to pull it (Java pulls later too)
                log.debug("no subscription for %s: pulling again later", mq.topic)
                self.phase = _FLOW
                return self.flow.failed(Why.NO_SUBSCRIPTION)
            addr = self.route.broker_addr(mq.broker_name, self.broker_id)
            if addr is None:
                self.phase = Phase.ROUTED
                return Step.ROUTE
            self.phase = _FLOW
        return self._request(now, cache, addr)

    def gated(self, passed: bool) -> None:
        """The sink's gate answered (False: not now, the queue is dropped or waits again)."""
        if passed:
            self.phase = Phase.READY

    def _request(self, now: float, cache: Cache, addr: str) -> PullRequestPlan:
        plan = self.plan
        header = plan.header
        commit_offset = cache.offset.value if self._commit else -1
        header.queue_offset = cache.next_offset
        # a slave must not take the commit (PullAPIWrapper clears the flag for one): 5.x slaves
        # would store it until the master's next sync
        if commit_offset > 0 and addr == self.route.broker_addrs[self.mq.broker_name].get(MASTER_ID):
            header.sys_flag, header.commit_offset = self._flags[1], commit_offset
        else:
            header.sys_flag, header.commit_offset = self._flags[0], 0
        sub = self._sub
        if sub is not None:
            etype = header.expression_type = sub.expression_type
            if not self._lite:
                header.sub_version = sub.sub_version
            else:  # lite pull: subVersion 0 for a tag subscription, the SQL92 one's own, as Java's
                header.sub_version = 0 if etype == "TAG" else sub.sub_version
            if self._post_sub:
                header.subscription = sub.sub_string
        plan.addr = addr
        self.sent_at = now
        return plan

    # -- the answer --------------------------------------------------------------------------------

    def allowed(self) -> str | None:
        """A pull was answered after ACL refusals (:attr:`denied`): the refused resource, to forget."""
        self.denied = 0
        return self.denied_resource

    def on_result(
        self, res: PullResult, now: float, cache: Cache
    ) -> Deliver | Advance | Drop | Literal[Step.STOP]:
        """The pull answered at ``now`` (``PullCallback.onSuccess``): :class:`Deliver` (FOUND),
        :class:`Advance` (NO_NEW_MSG, NO_MATCHED_MSG; OFFSET_ILLEGAL of lite pull), :class:`Drop`
        (OFFSET_ILLEGAL of push), or :attr:`Step.STOP` when the queue was dropped meanwhile."""
        narrowing = self.narrowing
        if narrowing is not _FULL:  # a narrowed pull (around a broken body) answered
            header = self.plan.header
            if narrowing is Narrowing.GOOD_ONES_FIRST:  # the good messages: now the broken one alone
                header.max_msg_nums = 1
                self.narrowing = Narrowing.NARROWED
                self.broken, self.broken_at = BROKEN_BODY_LIMIT, res.next_begin_offset
            else:
                header.max_msg_nums = self.settings.batch_size
                self.narrowing = Narrowing.FULL
        self.broker_id = res.suggest_which_broker_id
        if cache.dropped:
            return _STOP
        status = res.status
        if status is _FOUND:
            d = self._deliver
            found = d.found = res.messages
            # the tags are filtered with the subscription the pull was made with, as Java's
            # processPullResult does with its request's SubscriptionData
            sub = self._sub
            d.msgs = filter_tags(sub, found) if sub is not None and sub.tags_set else found
            # one test per batch: a decoder's batch carries its undecodable records (a plain list,
            # from a stub or a test, has none)
            d.undecodable = found.undecodable if type(found) is PulledMessages else _NOTHING
            d.next_offset = res.next_begin_offset
            d.latency = now - self.sent_at
            return d
        a = self._advance
        a.next_offset = res.next_begin_offset
        if status is not _OFFSET_ILLEGAL:  # NO_NEW_MSG, NO_MATCHED_MSG
            a.commit = self.settings.correct_tags_offset and cache.count == 0  # correctTagsOffset
            return a
        log.warning(
            "pull of %s at %d: offset illegal (%s), moving to %d",
            self.mq,
            cache.next_offset,
            res.remark,
            res.next_begin_offset,
        )
        if not self.settings.illegal_offset_drops:
            a.commit = False
            return a
        # drop the queue (persisting the corrected offset; orderly: unlock); the next rebalance, at
        # once, starts it again from there
        return Drop(res.next_begin_offset)

    # -- failures ----------------------------------------------------------------------------------

    def on_error(self, exc: RocketMQError) -> Literal[Step.HEARTBEAT, Step.BROKEN] | Backoff:
        """The pull failed (``PullCallback.onException``): a :class:`Backoff`, :attr:`Step.HEARTBEAT`
        (a refused subscription) or :attr:`Step.BROKEN` (a refused answer)."""
        mq = self.mq
        if isinstance(exc, AuthError):
            # refused by ACL: this queue backs off, the others go on
            self.denied += 1
            self.denied_resource = exc.resource
            return self.flow.denied(self.denied)
        if isinstance(exc, BrokerError):
            if exc.code in _SUBSCRIPTION_BEHIND:
                log.debug("pull of %s: %s", mq, exc)
                # the broker may not have seen our latest heartbeat yet: pull again soon once one
                # went out after this pull did (at most one such heartbeat per heartbeat interval:
                # when members subscribe differently every heartbeat replaces the group's
                # subscription on a real broker, and the refusals go on)
                return Step.HEARTBEAT
            log.warning("pull of %s failed: %s", mq, exc)
            return self.flow.failed()
        if isinstance(exc, ProtocolError):
            # a body (or frame) refused as a whole: the connection is suspect (closed, so the next
            # pull gets a fresh one), the pull is retried with a doubling back-off
            at = self.plan.header.queue_offset
            self.broken = self.broken + 1 if at == self.broken_at else 1
            self.broken_at = at
            if self.narrowing is Narrowing.GOOD_ONES_FIRST:
                self.narrowing = Narrowing.NARROWED
            log.warning(
                "pull of %s at %d: the answer is refused (%s): closing the connection, pulling again "
                "(failure %d at this offset)",
                mq,
                at,
                exc,
                self.broken,
            )
            return Step.BROKEN
        log.warning("pull of %s failed: %s", mq, exc)
        return self.flow.failed()

    def heartbeat(self, sent: bool) -> Backoff:
        """After :attr:`Step.HEARTBEAT`: whether a heartbeat has gone out since the pull."""
        return self.flow.resubscribed() if sent else self.flow.failed()

    def on_broken(self, exc: RocketMQError) -> Literal[Step.AGAIN] | Backoff | Handle | Skip:
        """After :attr:`Step.BROKEN`, the connection closed. From :data:`BROKEN_BODY_LIMIT` failures at
        one offset (a :class:`~..protocol.stored.BrokenBodyError`) the pull is narrowed: to the good
        messages before the broken one, else to the broken one alone (:attr:`Step.AGAIN`). A
        one-message body names the message (the decoder's record, else its fixed fields), to
        :class:`Handle`; when nothing names it, lite pull handles it at once (fails or skips) and a
        push consumer backs off until :data:`BROKEN_BODY_SKIP_AT`, then it is a :class:`Skip`."""
        failures = self.broken
        if failures < BROKEN_BODY_LIMIT or not isinstance(exc, BrokenBodyError):
            return self.flow.broken(failures)
        header = self.plan.header
        width = header.max_msg_nums
        if width > 1:
            n = exc.index
            width = header.max_msg_nums = n if 0 < n < width else 1
            self.narrowing = Narrowing.GOOD_ONES_FIRST if width == n else Narrowing.NARROWED
            return Step.AGAIN
        mq = self.mq
        at = self.broken_at
        # one message: the broker served the one at next_begin_offset - 1 (>= at: a tag filter may
        # pass over some), or at ``at`` when the answer did not say
        nbo = exc.next_begin_offset
        offset = nbo - 1 if nbo > at else at
        next_offset = max(offset + 1, nbo)
        rec = exc.record
        if (
            rec is None
            or rec.queue_id != mq.queue_id
            or rec.queue_offset != offset
            or rec.commit_log_offset < 0
        ):
            rec = salvage_ids(exc.body, mq.queue_id, offset, str(exc))
        if rec is None:
            why = "its fixed part does not read" if len(exc.body) < 36 else "its ids are not the pulled ones"
            rec = Undecodable(
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=offset,
                commit_log_offset=-1,  # none we can trust
                store_size=len(exc.body),
                sys_flag=0,
                reconsume_times=0,
                offset_msg_id="",
                msg_id=None,
                reason=f"broken framing: {exc} ({why}: no commit-log offset can be trusted)",
                broker_name=mq.broker_name,
            )
            if self.to_dlq:
                if failures < BROKEN_BODY_SKIP_AT:
                    log.error(
                        "group %s: %s: it cannot be moved to the DLQ; pulling it again with back-off "
                        "(failure %d, skipped at %d)",
                        self.group,
                        rec.describe(),
                        failures,
                        BROKEN_BODY_SKIP_AT,
                    )
                    return self.flow.broken(failures)
                self._full_width()
                return Skip(rec, offset, next_offset, f"its pull was refused {failures} times")
        else:
            rec = replace(
                rec,
                topic=rec.topic or mq.topic,
                reason=f"broken framing: {rec.reason}",
                broker_name=mq.broker_name,
            )
        self._full_width()  # past it: full pulls again
        return Handle(rec, next_offset)

    def _full_width(self) -> None:
        self.plan.header.max_msg_nums = self.settings.batch_size
        self.narrowing = Narrowing.FULL
