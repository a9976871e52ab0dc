"""``health()`` of both consumers: what is wrong, not just "running".

Strategy: nothing here asks the network. The client instance already records whether each name
server answered its last route lookup and each broker its last heartbeat (:mod:`..client.reach`), which
topics have no route and why; the rebalancer records the members it saw per topic; the process queues
know their last pull and the broker's max offset; the offset store the committed offsets. The pure
:func:`consumer_health` puts them together and applies the one readiness rule (:data:`READY_RULE`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client.reach import Reach
from ..protocol.codes import Perm
from ..protocol.mq import MessageQueue
from .process_queue import ProcessQueue
from .remote import Remote
from .stats import ConsumerStats

__all__ = ["READY_RULE", "ConsumerHealth", "QueueHealth", "UndecodableCounts", "consumer_health"]

READY_RULE = (
    "ready = running, and a name server answered the last route lookup, and every subscribed topic has "
    "a route, and for each subscribed topic this member owns a queue or the group has more members "
    "than the topic has queues (clustering; a broadcasting member owns them all), and no broker refused "
    "a subscription (a SQL92 one where property filters are off, or an expression it cannot compile)"
)


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """One owned queue."""

    #: the queue (topic, broker, queue id; the topic as the broker names it, namespace included)
    queue: MessageQueue
    #: messages pulled and not yet consumed (push) or not yet polled (lite pull)
    cached: int
    #: the bytes of those messages' bodies (what ``pull_threshold_size_for_queue`` bounds)
    cached_bytes: int
    #: the offset the next pull asks for
    next_offset: int
    #: the committed offset in memory (None: not known yet, before the first lookup)
    committed: int | None
    #: the queue's max offset the broker gave with the last pull (None: no pull answered yet)
    max_offset: int | None
    #: ``max_offset - committed`` (None when either is unknown: never a made-up 0)
    lag: int | None
    #: when a pull of this queue was last answered, seconds since the epoch (None: never)
    last_pull: float | None


@dataclass(frozen=True, slots=True)
class UndecodableCounts:
    """Messages no client can decode (a corrupt or unknown compressed body), see README."""

    #: found since the consumer was made
    total: int = 0
    #: moved to ``%DLQ%<group>`` (push consumers)
    moved_to_dlq: int = 0
    #: failed DLQ moves retried
    send_back_retries: int = 0
    #: pull answers refused as a whole (broken framing)
    broken_bodies: int = 0
    #: passed over without the DLQ (broken framing the broker could not move), each at ERROR: the
    #: stored message stays in the commit log
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    """What :meth:`PushConsumer.health` and :meth:`LitePullConsumer.health` return.

    ``ready`` follows :data:`READY_RULE`; ``reasons`` says what keeps it False. Times are seconds
    since the epoch. :meth:`as_dict` gives a JSON-ready dict (queues as strings).
    """

    #: see :data:`READY_RULE`
    ready: bool
    #: why ``ready`` is False (empty when ready)
    reasons: tuple[str, ...]
    #: started and not stopping
    running: bool
    #: the group (namespace included)
    group: str
    #: this client's id (None before the first start)
    client_id: str | None
    #: each name server: did it answer its last route lookup, since when it fails, the last error
    namesrvs: tuple[Reach, ...]
    #: each broker of the routes in use: did it answer its last heartbeat
    brokers: tuple[Reach, ...]
    #: subscribed topics with no route, with the reason (no such topic, no name server answered)
    unrouted_topics: Mapping[str, str]
    #: the owned queues of the subscribed (or assigned) topics
    queues: tuple[QueueHealth, ...]
    #: the owned queues of the group's retry topic ``%RETRY%<group>`` (push, clustering)
    retry_queues: tuple[QueueHealth, ...]
    #: the sum of ``queues``' lags (None when a queue's lag is unknown or no queue is owned)
    lag: int | None
    #: the group's members the last rebalance saw, per topic (clustering)
    members: Mapping[str, int]
    #: ACL refusals lately by resource (pulls, heartbeats, offset commits), logged once per interval
    auth_errors: tuple[Mapping[str, Any], ...] = ()
    #: messages that could not be decoded
    undecodable: UndecodableCounts = field(default_factory=UndecodableCounts)
    #: POP consumption (``client_rebalance=False``): popped, acked, invisible-time changes, revived
    #: messages seen again ..., and per pop queue the popped messages not settled yet; empty otherwise
    pop: Mapping[str, Any] = field(default_factory=dict)
    #: subscriptions a broker refused, by topic: why (CHECK_CLIENT_CONFIG, or pulls refused because the
    #: broker cannot filter by the subscription's type); cleared when a pull of the topic is answered
    refused_subscriptions: Mapping[str, str] = field(default_factory=dict)
    #: pulls refused because the broker cannot filter by the subscription's type, by topic
    filter_refused_pulls: Mapping[str, int] = field(default_factory=dict)

    @property
    def namesrv_reachable(self) -> bool:
        """True when some name server answered its last route lookup."""
        return any(r.reachable for r in self.namesrvs)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (queues as their strings)."""
        out = dataclasses.asdict(self)
        for key in ("queues", "retry_queues"):
            for q, src in zip(out[key], getattr(self, key), strict=True):
                q["queue"] = str(src.queue)
        out["unrouted_topics"] = dict(self.unrouted_topics)
        out["members"] = dict(self.members)
        out["refused_subscriptions"] = dict(self.refused_subscriptions)
        out["filter_refused_pulls"] = dict(self.filter_refused_pulls)
        out["namesrv_reachable"] = self.namesrv_reachable
        return out


def _readable_queues(client: Remote, topic: str) -> int | None:
    route = client.routes.get(topic)
    if route is None:
        return None
    return sum(qd.read_queue_nums for qd in route.queue_datas if qd.perm & Perm.READ)


def _queue(mq: MessageQueue, pq: ProcessQueue, committed: int, wall_minus_mono: float) -> QueueHealth:
    pulled = pq.max_offset >= 0  # set by every answered pull (-1 until the first)
    known = committed if committed >= 0 else None
    max_offset = pq.max_offset if pulled else None
    lag = max(0, max_offset - known) if max_offset is not None and known is not None else None
    return QueueHealth(
        queue=mq,
        cached=pq.count,
        cached_bytes=pq.msg_bytes,
        next_offset=pq.next_offset,
        committed=known,
        max_offset=max_offset,
        lag=lag,
        last_pull=pq.last_pull_time + wall_minus_mono if pulled else None,
    )


def consumer_health(
    *,
    running: bool,
    group: str,
    client: Remote | None,
    topics: set[str],
    retry_topic: str | None,
    pqs: Mapping[MessageQueue, ProcessQueue],
    committed: Callable[[MessageQueue], int],
    members: Mapping[str, int],
    clustering: bool,
    stats: ConsumerStats,
    pop: Mapping[str, Any] | None = None,
    popped_topics: set[str] | frozenset[str] = frozenset(),
    refused: Mapping[str, str] | None = None,
    filter_refused_pulls: Mapping[str, int] | None = None,
) -> ConsumerHealth:
    """Put one :class:`ConsumerHealth` together (no I/O). ``topics``: the user's topics (subscribed,
    or those of the assigned queues); ``committed(mq)``: the committed offset in memory, -1 unknown;
    ``refused``: refused subscriptions by topic, and ``filter_refused_pulls`` (``ctx.sql_checks``)."""
    wall_minus_mono = time.time() - time.monotonic()
    queues: list[QueueHealth] = []
    retry: list[QueueHealth] = []
    for mq, pq in sorted(pqs.items()):
        (retry if mq.topic == retry_topic else queues).append(_queue(mq, pq, committed(mq), wall_minus_mono))
    lags = [q.lag for q in queues]
    lag = sum(x for x in lags if x is not None) if lags and None not in lags else None
    reasons: list[str] = []
    if not running:
        reasons.append("not running")
    namesrvs: tuple[Reach, ...] = ()
    brokers: tuple[Reach, ...] = ()
    unrouted: dict[str, str] = {}
    auth: tuple[Mapping[str, Any], ...] = ()
    if client is not None:
        namesrvs = tuple(r.snapshot() for r in client.namesrv_reach.values())
        live = {addr for addrs in client.broker_addrs.values() for addr in addrs.values()}
        brokers = tuple(
            client.broker_reach[a].snapshot()
            if a in client.broker_reach
            else Reach(a, False, None, None, None)
            for a in sorted(live)
        )
        for topic in sorted(topics):
            if topic not in client.routes:
                unrouted[topic] = client.route_errors.get(topic, "no route looked up yet")
        auth = tuple(client.auth_errors.snapshot())
    if not any(r.reachable for r in namesrvs):
        errors = "; ".join(f"{r.addr}: {r.last_error or 'not asked yet'}" for r in namesrvs)
        reasons.append(f"no name server answered ({errors})" if namesrvs else "no client yet")
    for topic, why in unrouted.items():
        reasons.append(f"topic {topic!r} has no route: {why}")
    for topic, why in sorted((refused or {}).items()):
        reasons.append(f"subscription of topic {topic!r} refused: {why}")
    owned_topics = {q.queue.topic for q in queues} | popped_topics  # a popped topic owns no queue
    for topic in sorted(topics):
        if not running or topic in unrouted or topic in owned_topics or client is None:
            continue
        n = _readable_queues(client, topic)
        if clustering and topic in members and n is not None and members[topic] > n:
            continue  # more members than queues: this one may rightly own none
        reasons.append(f"no queue of topic {topic!r} owned ({members.get(topic, 0)} members, {n} queues)")
    undecodable = UndecodableCounts(
        total=stats.undecodable,
        moved_to_dlq=stats.undecodable_to_dlq,
        send_back_retries=stats.undecodable_retries,
        broken_bodies=stats.broken_bodies,
        skipped=stats.undecodable_skipped,
    )
    return ConsumerHealth(
        ready=not reasons,
        reasons=tuple(reasons),
        running=running,
        group=group,
        client_id=client.client_id if client is not None else None,
        namesrvs=namesrvs,
        brokers=brokers,
        unrouted_topics=unrouted,
        queues=tuple(queues),
        retry_queues=tuple(retry),
        lag=lag,
        members=dict(members),
        auth_errors=auth,
        undecodable=undecodable,
        pop=dict(pop or {}),
        refused_subscriptions=dict(refused or {}),
        filter_refused_pulls=dict(filter_refused_pulls or {}),
    )
