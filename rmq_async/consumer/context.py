"""ConsumerContext: what the consumer's parts share, built once by a facade (PushConsumer,
LitePullConsumer) and handed to everything below it: the consume services, the queue table, the
pull loop, the rebalancer and the admin answers. None of them sees the facade.

It holds the consumer's identity (group, retry topic, namespace), its settings, the per-run resources
(the client instance as a narrow :class:`~.remote.Remote`, the offset store, the inner producer as a
:class:`~.remote.Sender`, the task group), the subscriptions, statistics, hooks, the
consume-deadline tracker (the one owner of the consume timeout) and the run state; the message trace
and OpenTelemetry are its :class:`~.observation.Observation`, apart. It imports neither the client
instance nor the producer: the facade hands it what the run uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import anyio.abc

from ..config import ClientConfig, ConsumerConfig, Timing
from ..errors import ClientError, ConfigError
from ..observability.trace.dispatcher import TraceSender
from ..protocol.bodies import SubscriptionData
from ..protocol.filter import SQL92, SUB_ALL, TAG, Selector, parse_tag_expression
from ..protocol.message import check_topic
from ..protocol.stored import MessageExt
from .deadlines import DeadlineTracker
from .observation import Observation
from .offset_store import OffsetStore
from .pauses import Pauses
from .remote import Remote, Sender
from .sendback import send_back
from .stages import StageObserver, StageRecorder
from .stats import ConsumerStats
from .types import Hook
from .usercode import HandlerTasks

__all__ = ["ConsumerContext", "SqlChecks", "Subscriptions", "subscriptions_of"]


def subscriptions_of(value: object) -> dict[str, Selector | str]:
    """A facade's ``subscriptions=``, checked for its shape: ``{topic: expression}`` (a tag expression
    string, a :class:`Selector`, or None for ``*``); ConfigError saying so otherwise (a list of topics
    used to fail with an AttributeError)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            "subscriptions must be a dict {topic: expression} (e.g. {'T': '*'}), got "
            f"{type(value).__name__}"
        )
    for topic, expr in value.items():
        if not isinstance(topic, str) or not (expr is None or isinstance(expr, (str, Selector))):
            raise ConfigError(
                "subscriptions must map topic names (str) to a tag expression (str) or a Selector, got "
                f"{topic!r}: {expr!r}"
            )
    return dict(value)


class Subscriptions:
    """The subscribed topics with their filters (tag expressions or SQL92 selectors), as the
    ``SubscriptionData`` heartbeats register and pulls carry. ``retry_topic`` (clustering push
    consumers) is subscribed implicitly with ``*`` (a tag subscription, also beside SQL92 ones, as
    Java's), made once so its version stays put."""

    __slots__ = ("_last_version", "_retry", "_subs", "retry_topic")

    def __init__(self, retry_topic: str | None) -> None:
        self._subs: dict[str, SubscriptionData] = {}
        self.retry_topic = retry_topic
        self._retry: SubscriptionData | None = None
        self._last_version = 0

    def _new_version(self) -> int:
        """``subVersion``: the time in ms (Java's ``SubscriptionData`` default), strictly increasing
        here so two changes within one millisecond still replace each other on the broker."""
        v = self._last_version = max(int(time.time() * 1000), self._last_version + 1)
        return v

    def make(self, topic: str, selector: Selector | str | None) -> SubscriptionData:
        """The subscription of ``topic`` (``FilterAPI.build``), not stored: a plain string is a tag
        expression, checked (:func:`~..protocol.filter.check_tag_expression`); a SQL92 selector is
        sent as written, without tags or codes. Every call makes a new ``subVersion``. A topic name
        the producer would refuse (:func:`~..protocol.message.check_topic`) is a ConfigError: nothing
        could ever be sent to it, and the consumer would wait for its route for ever."""
        try:
            check_topic(topic)
        except ValueError as exc:
            raise ConfigError(f"cannot subscribe to topic {topic!r}: {exc}") from None
        sel = Selector.of(selector)
        tags: list[str]
        codes: list[int]
        if sel.expression_type == SQL92:
            sub_string, tags, codes = sel.expression, [], []
        else:
            sub_string, tags, codes = parse_tag_expression(sel.expression)
        return SubscriptionData(
            topic=topic,
            sub_string=sub_string,
            tags_set=tags,
            code_set=codes,
            sub_version=self._new_version(),
            expression_type=sel.expression_type,
        )

    def store(self, sub: SubscriptionData) -> None:
        self._subs[sub.topic] = sub

    def put(self, topic: str, selector: Selector | str | None) -> SubscriptionData:
        """Subscribe ``topic``: :meth:`make`, stored."""
        sub = self._subs[topic] = self.make(topic, selector)
        return sub

    def remove(self, topic: str) -> None:
        self._subs.pop(topic, None)

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, topic: object) -> bool:
        return topic in self._subs

    def expressions(self) -> dict[str, str]:
        """topic -> expression of the user's subscriptions (the retry topic not included)."""
        return {t: s.sub_string for t, s in self._subs.items()}

    def selectors(self) -> dict[str, Selector]:
        """topic -> selector of the user's subscriptions (the retry topic not included)."""
        out: dict[str, Selector] = {}
        for t, s in self._subs.items():
            out[t] = Selector(SQL92 if s.expression_type == SQL92 else TAG, s.sub_string)
        return out

    def sql(self) -> list[SubscriptionData]:
        """The SQL92 subscriptions (those the brokers are asked about: CHECK_CLIENT_CONFIG)."""
        return [self._subs[t] for t in sorted(self._subs) if self._subs[t].expression_type == SQL92]

    def retry(self) -> SubscriptionData:
        sub = self._retry
        if sub is None:
            assert self.retry_topic is not None
            sub = self._retry = SubscriptionData(
                topic=self.retry_topic,
                sub_string=SUB_ALL,
                tags_set=[],
                code_set=[],
                sub_version=self._new_version(),
            )
        return sub

    def get(self, topic: str) -> SubscriptionData | None:
        sub = self._subs.get(topic)
        if sub is None and topic == self.retry_topic:
            return self.retry()
        return sub

    def topics(self) -> set[str]:
        """Every topic to rebalance and keep routes for (the retry topic included)."""
        topics = set(self._subs)
        if self.retry_topic is not None:
            topics.add(self.retry_topic)
        return topics

    def data(self) -> list[SubscriptionData]:
        """What a heartbeat registers: the subscriptions by topic, then the retry topic's."""
        subs = [self._subs[t] for t in sorted(self._subs)]
        if self.retry_topic is not None:
            subs.append(self.retry())
        return subs


class SqlChecks:
    """What the brokers said of the consumer's SQL92 subscriptions (:mod:`.brokercheck`), for
    ``health()``: the topics not checked yet (no route when asked: checked again once the route
    appears), the refusals by topic (CHECK_CLIENT_CONFIG, or pulls refused because the broker cannot
    filter by the subscription's type), and how many pulls were refused so, by topic."""

    __slots__ = ("pulls_refused", "refused", "unchecked")

    def __init__(self) -> None:
        self.unchecked: set[str] = set()
        self.refused: dict[str, str] = {}
        self.pulls_refused: dict[str, int] = {}


class ConsumerContext:
    """The shared state of one consumer. The per-run resources are set by :meth:`attach` when a run
    starts; reading one before raises :class:`ClientError`."""

    def __init__(
        self,
        *,
        group: str,
        config: ConsumerConfig,
        client_config: ClientConfig,
        subscriptions: Subscriptions,
        orderly: bool = False,
        stats: ConsumerStats | None = None,
    ) -> None:
        self.group = group
        self.retry_topic = f"%RETRY%{group}"
        # a namespace (Java's ``withNamespace``) prefixes the group and the topics on the wire
        self.namespace = client_config.namespace or None
        self.config = config
        self.client_config = client_config
        self.timing: Timing = client_config.timing
        self.clustering = config.clustering
        self.orderly = orderly
        self.max_reconsume_times = config.effective_max_reconsume_times(orderly=orderly)
        self.subscriptions = subscriptions
        self.stats = stats or ConsumerStats()
        #: what the user paused (push consumers; it outlives a run)
        self.pauses = Pauses()
        #: the brokers' answers to the SQL92 subscriptions (checked at start, and when a route appears)
        self.sql_checks = SqlChecks()
        self.before_hooks: list[Hook] = []
        self.after_hooks: list[Hook] = []
        #: the message trace and OpenTelemetry (:mod:`.observation`): what watches handler calls and
        #: pulls; the services call ``observation.observed(handler)``
        self.observation = Observation(group, client_config, self.timing.consume_timeout)
        #: where the time of sampled pulled batches goes (``ConsumerConfig.stage_sample``); None: off
        self.stages: StageRecorder | None = None
        if config.stage_sample:
            self.stages = StageRecorder(config.stage_sample)
            self.observation.observers.append(StageObserver(self.stages))
        #: per-message consume deadlines; its ``timeout`` is THE consume timeout
        self.deadlines = DeadlineTracker(self.timing.consume_timeout)
        #: a graceful stop has begun: start nothing new
        self.stopping = False
        self.running = False
        self._client: Remote | None = None
        self._offset_store: OffsetStore | None = None
        self._inner_producer: Sender | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._handlers: HandlerTasks | None = None

    # -- runs -----------------------------------------------------------------------------------------

    def new_run(self) -> None:
        """A fresh run state (a stopped consumer starting again); the consume timeout is kept."""
        self.deadlines = DeadlineTracker(self.deadlines.timeout)
        self.stopping = False
        self.running = False
        self._client = self._offset_store = self._inner_producer = None
        self._tg = None
        self._handlers = None

    def attach(
        self,
        client: Remote,
        offset_store: OffsetStore,
        inner_producer: Sender | None = None,
        trace_senders: Callable[[str], TraceSender] | None = None,
    ) -> None:
        """The run's resources, once per run: the client instance (as :class:`~.remote.Remote`), the
        offset store, the inner producer (push consumers: send-back and DLQ sends) and the factory of
        inner trace producers (message trace)."""
        self._client = client
        self._offset_store = offset_store
        self._inner_producer = inner_producer
        self.observation.start_run(self.start_soon, trace_senders, client.client_id, self)

    def set_task_group(self, tg: anyio.abc.TaskGroup | None) -> None:
        self._tg = tg

    def set_handler_tasks(self, handlers: HandlerTasks | None) -> None:
        """Where the run's handler-calling tasks go (:meth:`start_handler`), apart from its task group."""
        self._handlers = handlers

    @property
    def client(self) -> Remote:
        if self._client is None:
            raise ClientError("consumer is not started")
        return self._client

    @property
    def started(self) -> bool:
        return self._client is not None

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise ClientError("consumer is not started")
        return self._offset_store

    @property
    def has_offset_store(self) -> bool:
        return self._offset_store is not None

    @property
    def inner_producer(self) -> Sender:
        if self._inner_producer is None:
            raise ClientError("consumer is not started")
        return self._inner_producer

    @property
    def task_group(self) -> anyio.abc.TaskGroup | None:
        return self._tg

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> bool:
        """Run ``fn(*args)`` in the consumer's task group; False (nothing started) outside a run."""
        tg = self._tg
        if tg is None:
            return False
        tg.start_soon(fn, *args)
        return True

    def start_handler(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> bool:
        """Run ``fn(*args)``, a task that calls the handler, among the run's :class:`HandlerTasks`
        (which a stop may abandon; once they are closed, nothing starts); False without them: the
        caller then uses its task group (a service run on its own, in tests)."""
        if self._handlers is None:
            return False
        self._handlers.start_soon(fn, *args)
        return True

    def adopt_handler_task(self, task: asyncio.Task[Any]) -> bool:
        """Put ``task`` (a handler's, started outside the run's tasks) among the run's
        :class:`HandlerTasks` (:meth:`HandlerTasks.adopt`); False without them (or once closed)."""
        return self._handlers is not None and self._handlers.adopt(task)

    def guard(self) -> AbstractContextManager[None]:
        """The innermost cancel scope around a handler call (:meth:`HandlerTasks.guard`)."""
        return nullcontext() if self._handlers is None else self._handlers.guard()

    # -- shared operations --------------------------------------------------------------------------

    async def send_back(self, m: MessageExt, delay_level: int) -> bool:
        return await send_back(self, m, delay_level)
