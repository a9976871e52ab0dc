"""PushConsumer: the Java ``DefaultMQPushConsumer`` machinery, asyncio-native.

Shape: ``start()`` launches one supervisor task that owns the client instance and ONE task group in
which everything runs: a pull loop per owned queue (each in its own cancel scope, cancelled when the
queue is dropped), the rebalance timer (woken at once by NOTIFY_CONSUMER_IDS_CHANGED), the
offset-persist timer, the expired-message cleaner and the consume workers. ``stop()`` asks the
supervisor to shut down in order: stop pulling, let running handlers finish (bounded), persist offsets
synchronously, unregister, close connections. Because the supervisor owns the group, ``start()`` and
``stop()`` may be called from different tasks (an ASGI lifespan, a test fixture).

The facade builds the parts of a run with one function, :func:`build_push_run`, each given what it
uses through its constructor: the consume service (:class:`ConcurrentConsumeService` or
:class:`OrderlyConsumeService`), the :class:`QueueTable`, the :class:`PullLoop` feeding the service,
the :class:`Rebalancer` (its signals and settings outlive a run), the POP service and the admin
answers. None of them sees this class. Its life is a :class:`~rmq_async.lifecycle.Supervisor` run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio

from ..client.api import SendResult
from ..client.instance import INNER_PRODUCER_GROUP, ClientInstance, pid_instance_name
from ..config import (
    CONSUMER_OPTION_DEFAULTS,
    ClientConfig,
    ConsumeFrom,
    ConsumerConfig,
    MessageModel,
    Timing,
    client_settings,
)
from ..errors import ClientError, ConfigError, MQClientError
from ..lifecycle import Supervisor
from ..producer.producer import Producer, ProducerConfig, trace_producer
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.command import RemotingCommand
from ..protocol.filter import Selector
from ..protocol.mq import MessageQueue
from ..protocol.reply import create_reply_message
from ..protocol.stored import MessageExt
from .allocate import strategy_by_name
from .brokercheck import check_in_brokers, check_while_running
from .context import ConsumerContext, Subscriptions, subscriptions_of
from .control import Queues
from .delivery import DeliveryStream
from .health import ConsumerHealth, consumer_health
from .internals import PushInternals
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from .pauses import Target
from .push_run import PushRun, build_push_run
from .rebalancer import RebalanceSettings, RebalanceSignals, StartOffsets
from .stages import StageRecorder
from .stats import ConsumerStats
from .subcheck import SubscriptionChecker
from .types import Handler, Hook, OrderlyHandler, RebalanceListener
from .usercode import HandlerTasks, check_handler

__all__ = ["PushConsumer", "RebalanceListener"]

log = logging.getLogger("rmq_async.consumer")


class PushConsumer:
    """An asyncio push consumer (Java's ``DefaultMQPushConsumer``)::

        async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
            ...  # None is SUCCESS

        async with PushConsumer("group", namesrv_addr="127.0.0.1:9876", handler=handler,
                                subscriptions={"Topic": "TagA || TagB"}) as c:
            ...  # c.subscribe("Other") adds a topic while running

    Subscribe before entering (``subscriptions=`` or :meth:`subscribe`). ``handler`` is an
    ``async def handler(msgs, ctx)`` or a plain ``def handler(msgs, ctx)`` (checked here:
    :class:`~rmq_async.ConfigError`); a plain one is called by the pulling task itself, without a
    hand-off to a consume worker (the cheapest path for handlers that do no I/O; the consuming
    guide says what it means). Without a handler, iterate :meth:`deliveries` instead.

    Options (Java's names in snake case; units: seconds, counts, MiB where said): ``message_model``
    (``"CLUSTERING"``: the group shares the queues; ``"BROADCASTING"``: every member gets every
    message), ``consume_from_where`` (where a group with no committed offset starts, default
    ``"CONSUME_FROM_LAST_OFFSET"``), ``consume_timestamp`` (for ``CONSUME_FROM_TIMESTAMP``: epoch
    milliseconds or ``yyyyMMddHHmmss``; default half an hour ago), ``allocate_strategy`` (``"AVG"``),
    ``pull_batch_size`` (32 messages per pull), ``consume_batch_max_size`` (1 message per handler
    call), ``pull_threshold_for_queue`` (1000 cached messages per queue before pulls wait),
    ``pull_threshold_size_for_queue`` (100 MiB), ``pull_threshold_for_topic`` and
    ``pull_threshold_size_for_topic`` (-1: no topic limit; MiB), ``consume_concurrently_max_span``
    (2000 offsets between the oldest and newest cached message), ``max_reconsume_times`` (-1: 16
    concurrently, unbounded orderly; then the DLQ), ``concurrency`` (20 handlers at once),
    ``post_subscription_when_pull``, ``unit_mode``, ``rebalance_stability_window`` (0 s: off),
    ``orderly_drop_wait`` (1 s), ``offset_store_dir`` (broadcasting: local offsets, default
    ``~/.rocketmq_offsets``), ``auto_commit`` (True; False: offsets reach the broker only by
    :meth:`commit` and seeks, see there), ``stage_sample`` (0: off; N: every Nth pulled batch is
    timed stage by stage, socket read to settled, see :attr:`stages`). ``require_namesrv=True``:
    :meth:`start` raises ``MQClientError`` when no name server answers (default False: as Java, it
    starts and keeps looking the routes up in the background; :meth:`health` says so). Or pass them all as
    ``config=ConsumerConfig(...)``. Timers live in ``timing=Timing(...)``.

    ``orderly=True`` consumes each queue strictly in offset order, one batch at a time, under a broker
    lock (clustering); the handler gets an ``OrderlyContext`` and returns an ``OrderlyResult``
    (see :mod:`rmq_async.consumer.orderly`).

    ``client_rebalance=False`` (Java's ``setClientRebalance(false)``, 5.x brokers): the brokers
    assign instead of the members. A topic whose group was switched to POP (``rmq-async admin
    set-consume-mode --mode POP``, ``mqadmin setConsumeMode``) is popped: any member gets messages of
    any queue, so a group may have more members than queues; each message is acked, or made visible
    again later on failure (``Timing.pop_invisible_time``, Java's pop delay levels), and nothing
    commits offsets. Other topics, and the group's retry topic, are consumed as before. Concurrent
    handlers only (see :mod:`rmq_async.consumer.pop`).
    """

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        handler: Handler | OrderlyHandler | None = None,
        subscriptions: dict[str, Selector | str] | None = None,
        config: ConsumerConfig | None = None,
        client_config: ClientConfig | None = None,
        timing: Timing | None = None,
        instance_name: str | None = None,
        on_assigned: RebalanceListener | None = None,
        on_revoked: RebalanceListener | None = None,
        orderly: bool = False,
        require_namesrv: bool = False,
        message_model: MessageModel = "CLUSTERING",
        consume_from_where: ConsumeFrom = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp: str | int | None = None,
        allocate_strategy: str = "AVG",
        pull_batch_size: int = 32,
        consume_batch_max_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_topic: int = -1,
        pull_threshold_size_for_topic: int = -1,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        concurrency: int = 20,
        post_subscription_when_pull: bool = False,
        unit_mode: bool = False,
        rebalance_stability_window: float = 0.0,
        orderly_drop_wait: float = 1.0,
        offset_store_dir: str | None = None,
        client_rebalance: bool = True,
        auto_commit: bool = True,
        stage_sample: int = 0,
    ) -> None:
        options: dict[str, Any] = {k: v for k, v in locals().items() if k in CONSUMER_OPTION_DEFAULTS}
        changed = sorted(k for k, v in options.items() if v != CONSUMER_OPTION_DEFAULTS[k])
        if config is not None and changed:
            raise ConfigError(f"pass options either in config= or as keywords, not both: {changed}")
        self.config = config or ConsumerConfig(group=group, **options)
        # the client settings from the keywords, by the rule the producer and the lite consumer use
        client_config = client_settings(
            client_config, namesrv_addr=namesrv_addr, timing=timing, instance_name=instance_name
        )
        self.client_config = client_config
        self.timing = client_config.timing
        # a namespace (Java's ``withNamespace``) prefixes the group and the topics on the wire: ``ns%G``,
        # ``ns%T``, ``%RETRY%ns%G``; handlers see their messages' topics without it
        group = client_config.with_namespace(self.config.group)
        retry_topic = f"%RETRY%{group}"
        check_handler(handler)  # ConfigError now rather than every message failing until the DLQ
        self.handler = handler
        # [orderly] per-queue ordering under broker lock leases (``MessageListenerOrderly``)
        self.orderly = orderly
        # [pop] False: the broker assigns (5.x); its POP-mode queues are popped (consumer/pop.py)
        self._client_rebalance = client_rebalance
        if not client_rebalance and (orderly or handler is None):
            raise ConfigError("client_rebalance=False (POP) needs a concurrent handler (no orderly POP)")
        # start() fails when no name server answers (default: keep looking in the background, as Java)
        self._require_namesrv = require_namesrv
        self._strategy = strategy_by_name(self.config.allocate_strategy)
        self._ctx = ConsumerContext(
            group=group,
            config=self.config,
            client_config=client_config,
            subscriptions=Subscriptions(retry_topic if self.config.clustering else None),
            orderly=orderly,
        )
        self._subcheck = SubscriptionChecker(self._ctx)
        self._signals = RebalanceSignals()
        self._settings = RebalanceSettings(
            strategy=self._strategy,
            start_offsets=StartOffsets(self.config.consume_from_where, self.config.consume_timestamp),
            on_assigned=on_assigned,
            on_revoked=on_revoked,
            on_new_members=self._subcheck.check,
            new_members=self._subcheck.new_members,
        )
        self._life = Supervisor(f"consumer {group!r}")
        self._instance: ClientInstance | None = None  # the current run's
        self._ran = False
        self._gave_up = False
        self._run = self._new_run()
        for topic, expr in subscriptions_of(subscriptions).items():
            self.subscribe(topic, expr)

    def _new_run(self) -> PushRun:
        self._ctx.new_run()
        return build_push_run(
            self._ctx,
            self.handler,
            orderly=self.orderly,
            pop=not self._client_rebalance,
            settings=self._settings,
            signals=self._signals,
        )

    # -- the shared state, by the names it has always had -------------------------------------------

    @property
    def group(self) -> str:
        """The consumer group as it goes on the wire (``namespace%group`` with a namespace)."""
        return self._ctx.group

    @property
    def retry_topic(self) -> str:
        """``%RETRY%<group>``: where failed messages come back from (clustering)."""
        return self._ctx.retry_topic

    @property
    def namespace(self) -> str | None:
        """``ClientConfig.namespace`` (None without one)."""
        return self._ctx.namespace

    @property
    def max_reconsume_times(self) -> int:
        """Retries before the DLQ in effect: ``max_reconsume_times``, or 16 (concurrent) / unbounded
        (orderly) for -1."""
        return self._ctx.max_reconsume_times

    @property
    def stats(self) -> ConsumerStats:
        """Counters: pulled, consumed, failed, per topic; undecodable messages."""
        return self._ctx.stats

    @property
    def stages(self) -> StageRecorder | None:
        """Where the time of every ``stage_sample``-th pulled batch went (None when ``stage_sample``
        is 0): broker store -> socket read -> decoded -> queued -> picked by a worker -> handler
        entered -> settled, and when the queue's next pull went out; ``stages.summary()`` gives
        per-interval percentiles in ms (see :mod:`rmq_async.consumer.stages`)."""
        return self._ctx.stages

    @property
    def before_hooks(self) -> list[Hook]:
        """Append ``fn(msgs, ctx)`` (plain or async) to run before each handler call."""
        return self._ctx.before_hooks

    @property
    def after_hooks(self) -> list[Hook]:
        """Append ``fn(msgs, ctx, result)`` (plain or async) to run after each handler call; what it
        raises is logged."""
        return self._ctx.after_hooks

    @property
    def running(self) -> bool:
        """Started, and not stopping."""
        return self._ctx.running

    @property
    def on_assigned(self) -> RebalanceListener | None:
        """``fn(topic, queues)`` (plain or async) called after a rebalance gave this member queues."""
        return self._settings.on_assigned

    @on_assigned.setter
    def on_assigned(self, fn: RebalanceListener | None) -> None:
        self._settings.on_assigned = fn

    @property
    def on_revoked(self) -> RebalanceListener | None:
        """``fn(topic, queues)`` (plain or async) called after a rebalance took queues away (their
        offsets committed first), and at :meth:`stop` with the queues still owned (before their offsets
        are committed). Neither listener sees the retry topic."""
        return self._settings.on_revoked

    @on_revoked.setter
    def on_revoked(self, fn: RebalanceListener | None) -> None:
        self._settings.on_revoked = fn

    # -- public API -------------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: Selector | str | None = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (``"*"`` or ``"TagA || TagB"``, a plain string)
        or a :class:`Selector` (``Selector.sql("a > 5")``: a SQL92 filter over message properties,
        which the brokers must enable; asked at :meth:`start`, or in the background when running).

        All members of a group must subscribe alike: the broker filters by the group's last registered
        subscription.
        """
        if not topic or topic.startswith("%RETRY%"):
            raise ConfigError(f"cannot subscribe to topic {topic!r}")
        self._ctx.subscriptions.put(self.client_config.with_namespace(topic), expression)
        if self.running:
            self.rebalance_now()
            self._ctx.start_soon(self._after_subscription_change)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its queues are dropped (offsets committed) at the next rebalance,
        at once when running."""
        self._ctx.subscriptions.remove(self.client_config.with_namespace(topic))
        if self.running:
            self.rebalance_now()

    @property
    def subscriptions(self) -> dict[str, str]:
        """``{topic: expression}`` as subscribed (topics as on the wire)."""
        return self._ctx.subscriptions.expressions()

    @property
    def _client(self) -> ClientInstance:
        """(internal) The client instance of the current run (routes, connections)."""
        if self._instance is None:
            raise ClientError("consumer is not started")
        return self._instance

    @property
    def client_id(self) -> str:
        """This member's client id (``ip@instance``), as the broker lists it."""
        return self._client.client_id

    def assignment(self) -> set[MessageQueue]:
        """The queues this member owns now (the retry topic's included)."""
        return self._run.table.assignment()

    # -- control: pause, seek, offsets, commit (consumer/control.py) ----------------------------------

    def pause(self, targets: Target | Iterable[Target]) -> None:
        """Stop pulling topics (every queue of them, those assigned later too) and queues, until
        :meth:`resume` (Java's ``suspend()``, aiokafka's ``pause``): their cached messages are still
        consumed, a pull already out is not applied; heartbeats and rebalancing go on and the queues
        stay owned. Kept across a stop and start. POP-consumed topics pause their pop loops (what a
        pop already out brings is consumed); one queue of a broker popped as a whole (queue id -1)
        is refused (:class:`~rmq_async.ConfigError`)."""
        self._run.control.pause(targets)

    def resume(self, targets: Target | Iterable[Target]) -> None:
        """Pull paused topics (and the queues of them paused one by one) and queues again; a queue
        paused with its topic is resumed with the topic (:class:`~rmq_async.ConfigError` otherwise)."""
        self._run.control.resume(targets)

    def paused(self) -> set[Target]:
        """The topics and queues paused now (as the broker names them)."""
        return self._run.control.paused()

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume owned queue ``mq`` from ``offset`` (in [min, max], asked of the broker; else
        :class:`~rmq_async.ConfigError`) on: its cached messages are dropped (results of handlers still
        running are not committed), ``offset`` is committed to the broker at once, and pulls start
        there. A queue not owned: :class:`~rmq_async.ClientError` (as aiokafka and Java's lite
        consumer; change a group's offsets with ``rmq-async admin reset-offset``)."""
        await self._run.control.seek(mq, offset)

    async def seek_to_beginning(self, queues: Queues = None) -> None:
        """:meth:`seek` to the min offset: a queue, queues, a topic's owned queues, or (None) every
        owned queue but the retry topic's."""
        await self._run.control.seek_to_beginning(queues)

    async def seek_to_end(self, queues: Queues = None) -> None:
        """:meth:`seek` to the max offset (only messages sent from now on); queues as
        :meth:`seek_to_beginning`."""
        await self._run.control.seek_to_end(queues)

    async def seek_to_timestamp(self, queues: Queues, timestamp_ms: int) -> None:
        """:meth:`seek` to the offset the broker finds for ``timestamp_ms`` (epoch milliseconds;
        SEARCH_OFFSET_BY_TIMESTAMP); queues as :meth:`seek_to_beginning`."""
        await self._run.control.seek_to_timestamp(queues, timestamp_ms)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` as its broker has it (QUERY_CONSUMER_OFFSET), owned
        or not; None when it has none (a broker answers 0 for a queue whose first message it still
        stores, as Java's); broadcasting: this member's offset file."""
        return await self._run.control.committed(mq)

    def position(self, mq: MessageQueue) -> int:
        """The offset the next pull of owned queue ``mq`` asks for (ClientError when not owned)."""
        return self._run.control.position(mq)

    async def end_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The max offset of each queue (GET_MAX_OFFSET: the offset its next message gets), asked
        concurrently."""
        return await self._run.control.end_offsets(queues)

    async def reply(self, message: MessageExt, body: bytes) -> SendResult:
        """Answer the request ``message`` (sent with ``Producer.request``) with ``body``: the reply
        (:func:`~rmq_async.create_reply_message`: to the request's cluster's reply topic, with its
        correlation id) goes out through this consumer's inner producer as SEND_REPLY_MESSAGE_V2,
        and the broker pushes it to the requester. A message that is not a request:
        :class:`~rmq_async.ClientError`."""
        return await self._ctx.inner_producer.send(create_reply_message(message, body))

    async def commit(self) -> None:
        """Commit every owned queue's offset now and return once its broker has it: the smallest
        offset still being consumed (what the persist timer writes). With ``auto_commit=False`` it is
        the only commit of consumption: no persist timer, no offset riding along the pulls, nothing at
        a rebalance or at :meth:`stop` (a revoked queue's messages since the last commit go to its
        next owner again), as aiokafka's ``enable_auto_commit=False``."""
        await self._run.control.commit()

    def set_consume_timeout(self, seconds: float) -> None:
        """Change the consume timeout; applies at once to handlers already running."""
        if seconds <= 0:
            raise ConfigError("consume timeout must be > 0")
        self._ctx.deadlines.set_timeout(seconds)
        self._run.service.set_timeout(seconds)

    @property
    def stopping(self) -> bool:
        """:meth:`stop` has begun."""
        return self._ctx.stopping

    def rebalance_now(self) -> None:
        """Rebalance at once rather than at the next ``rebalance_interval``."""
        self._signals.wake()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance."""
        await self._signals.wait_rebalanced()

    def health(self) -> ConsumerHealth:
        """For a readiness probe: ``ready`` (:data:`~rmq_async.consumer.health.READY_RULE`) and why
        not (``reasons``), the name servers and brokers reached or not (last error, since when), the
        subscribed topics without a route, the owned queues with their last pull and lag (None when
        unknown), the retry topic's queues apart, ACL refusals and undecodable messages. No I/O."""
        ctx = self._ctx
        store = ctx.offset_store if ctx.has_offset_store else None
        return consumer_health(
            running=self.running,
            group=self.group,
            client=ctx.client if ctx.started else None,
            topics=self._subscribed_topics() - {self.retry_topic},
            retry_topic=self.retry_topic,
            pqs=self._run.table.pqs,
            committed=store.read_memory if store is not None else lambda mq: -1,
            members=self._signals.members,
            clustering=self.config.clustering,
            stats=ctx.stats,
            pop=self._run.pop.snapshot() if self._run.pop is not None else None,
            popped_topics=self._run.pop.topics() if self._run.pop is not None else frozenset(),
            refused=ctx.sql_checks.refused,
            filter_refused_pulls=ctx.sql_checks.pulls_refused,
        )

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start (heartbeats, rebalance, pulling); returns once running. A stopped consumer may be
        started again: it rejoins its group and goes on from the committed offsets."""
        if self._life.running:
            raise ClientError("consumer already started")
        if not len(self._ctx.subscriptions):
            raise ClientError("subscribe to at least one topic before starting the consumer")
        if self._ran:
            self._run = self._new_run()
        self._ran = True
        if self.handler is None:
            self._run.service.open_deliveries()
        self.client_config.namesrv_list()  # fail fast on a missing address
        await self._life.start(self._main)

    async def stop(self) -> None:
        """Stop pulling, let running handlers finish (``Timing.shutdown_timeout``), commit the offsets
        (not with ``auto_commit=False``), release orderly locks, unregister; returns when done. Call it
        in the event loop that started the consumer (a :class:`~rmq_async.ClientError` says so
        otherwise)."""
        life = self._life
        try:
            await life.stop()
        except Exception as exc:
            if isinstance(exc, ClientError) and "another event loop" in str(exc):
                raise
            log.exception("consumer %s stopped with an error", self.group)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not life.cancelled() or (task is not None and task.cancelling()):
                raise  # our caller is cancelled
            log.warning("consumer %s: its supervisor task was cancelled", self.group)
            await life.stop()  # (ended: forgets it)

    @property
    def stopped_cleanly(self) -> bool:
        """False when the last :meth:`stop` gave up waiting for running handlers (they were still
        running after ``Timing.shutdown_timeout`` seconds and were cancelled; their messages were not
        committed and come again). True before any stop."""
        return not self._gave_up

    def __repr__(self) -> str:
        """Group, topics (the retry topic left out), model, kind and state; nothing of the settings
        (credentials live there)."""
        ctx = self._ctx
        if not self._ran:
            state = "not started"
        elif ctx.running:
            state = "running"
        elif self._life.running:
            state = "stopping" if ctx.stopping else "starting"
        else:
            state = "stopped"
        kind = "orderly" if self.orderly else "pop" if not self._client_rebalance else "concurrently"
        topics = sorted(t for t in self.subscriptions if t != self.retry_topic)
        return (
            f"<PushConsumer group={self.group!r} topics={topics} {self.config.message_model} {kind} {state}>"
        )

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @asynccontextmanager
    async def deliveries(self) -> AsyncIterator[DeliveryStream]:
        """``async with consumer.deliveries() as stream: async for d in stream: ...; await d.ack()``."""
        if self.handler is not None:
            raise ClientError("this consumer has a handler; deliveries() is for consumers without one")
        if not self._life.running:  # misuse, not configuration: nothing would ever feed the stream
            raise ClientError("consumer is not started: start it ('async with consumer') before deliveries()")
        stream = self._run.service.open_deliveries()
        try:
            yield stream
        finally:
            await stream.release_unsettled()

    def _internals(self) -> PushInternals:
        """(for :func:`~rmq_async.consumer.internals.internals`)"""
        run = self._run
        return PushInternals(
            ctx=self._ctx,
            table=run.table,
            rebalancer=run.rebalancer,
            settings=self._settings,
            ended=self._life.ended(),
            instance=self._instance,
            run=run,
            subcheck=self._subcheck,
        )

    def _instance_name(self) -> str:
        name = self.client_config.instance_name
        if name == "DEFAULT" and self.config.clustering:
            return pid_instance_name()
        return name

    async def _main(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        """The consumer's life, in its supervisor's task: the client instance and the task group are
        held by ``async with`` here, so :meth:`start` and :meth:`stop` may come from different tasks."""
        try:
            await self._serve(ready, stopping)
        finally:
            self._ctx.running = False

    async def _serve(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        ctx = self._ctx
        run = self._run
        async with ClientInstance(self.client_config, instance_name=self._instance_name()) as client:
            store: OffsetStore
            if self.config.clustering:
                store = RemoteOffsetStore(client, self.group)
            else:
                store = LocalFileOffsetStore(self.config.offset_store_dir, client.client_id, self.group)
            producer = Producer(
                config=ProducerConfig(group=INNER_PRODUCER_GROUP),
                client_config=self.client_config,
                client=client,
            )
            ctx.attach(client, store, producer, partial(trace_producer, self.client_config, client))
            self._instance = client
            await store.load()
            await producer.start()
            client.register_consumer(self)
            # at once: a name server that does not answer costs one request timeout, not one per topic
            for topic, exc in sorted((await client.update_routes(self._subscribed_topics())).items()):
                # the broker creates %RETRY%group on our first heartbeat: not worth a warning
                level = logging.DEBUG if topic == self.retry_topic else logging.WARNING
                log.log(level, "no route for %r yet (%s): will retry at the next route refresh", topic, exc)
            if self._require_namesrv and not any(r.reachable for r in client.namesrv_reach.values()):
                errors = "; ".join(f"{r.addr}: {r.last_error}" for r in client.namesrv_reach.values())
                raise MQClientError(f"no name server answered (require_namesrv=True): {errors}")
            # SQL92 subscriptions: a broker with property filters off, or one that cannot compile the
            # expression, fails start() with SubscriptionRefused (checkClientInBroker)
            await check_in_brokers(ctx, ctx.subscriptions.sql())
            # a heartbeat refused by ACL (the group's or a topic's SUB) fails start() with AuthError
            await client.send_heartbeat_to_all_brokers(raise_auth=True)
            async with HandlerTasks(self.group) as handlers, anyio.create_task_group() as tg:
                ctx.set_task_group(tg)
                ctx.set_handler_tasks(handlers)
                tg.start_soon(handlers.watch)
                tg.start_soon(ctx.deadlines.run)
                await run.service.run(tg)
                tg.start_soon(self._persist_loop)
                tg.start_soon(run.rebalancer.run)
                ctx.running = True
                ready()
                await stopping.wait()
                try:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown(handlers)
                finally:
                    tg.cancel_scope.cancel()
                    ctx.set_task_group(None)
                    ctx.set_handler_tasks(None)

    async def _shutdown(self, handlers: HandlerTasks) -> None:
        ctx = self._ctx
        log.info("consumer %s (%s) shutting down", self.group, self._client.client_id)
        ctx.stopping = True
        ctx.running = False
        self._run.table.stop_pulling()  # keep the process queues for the offsets
        service = self._run.service
        service.close()
        if self._run.pop is not None:  # [pop] stop popping; what was popped and not consumed comes back
            self._run.pop.close()
        with anyio.move_on_after(self.timing.shutdown_timeout) as waited:
            await service.wait_idle()
            if self._run.pop is not None:
                await self._run.pop.wait_idle()
        # what still runs is cancelled; a handler swallowing that is abandoned (logged), uncommitted
        self._gave_up = await handlers.close() > 0 or waited.cancelled_caught
        with anyio.move_on_after(self.timing.shutdown_timeout):
            await self._run.rebalancer.revoke_all()  # the listener, before offsets and locks go
        mqs = list(self._run.table.pqs)
        if self.config.auto_commit:  # (manual commit: only commit() commits)
            with anyio.move_on_after(self.timing.request_timeout * 2):
                await self._ctx.offset_store.persist_all(mqs, sync=True)
        # [orderly] offsets are on the broker: release the queue locks (sync 42)
        await service.shutdown()
        self._client.unregister_consumer_local(self.group)
        with anyio.move_on_after(self.timing.request_timeout * 2):
            await self._client.unregister_everywhere(consumer_group=self.group)
        self._run.table.drop_all()
        if service.deliveries is not None:
            service.deliveries.close()

    # -- ConsumerHandle (for the client instance) -----------------------------------------------------

    def _subscribed_topics(self) -> set[str]:
        """(internal, for the client instance) The topics subscribed, the retry topic included."""
        return self._ctx.subscriptions.topics()

    def _subscription(self, topic: str) -> SubscriptionData | None:
        """(internal) The subscription of ``topic`` as it goes on the wire."""
        return self._ctx.subscriptions.get(topic)

    def _consumer_data(self) -> ConsumerData:
        """(internal, for the client instance) This consumer in a heartbeat."""
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_PASSIVELY",
            message_model=self.config.message_model,
            consume_from_where=self.config.consume_from_where,
            subscription_data_set=self._ctx.subscriptions.data(),
            unit_mode=self.config.unit_mode,
        )

    async def _handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """(internal, for the client instance) Answer a broker's request about this group."""
        return await self._run.admin.handle(cmd)

    async def _after_subscription_change(self) -> None:
        await self._client.update_route_quietly(self._subscribed_topics())
        # running: a refusal is logged and shown by health(); the topic's pulls are refused meanwhile
        await check_while_running(self._ctx, self._ctx.subscriptions.sql())
        await self._client.send_heartbeat_to_all_brokers()

    # -- timers and rebalance ---------------------------------------------------------------------------

    async def _persist_loop(self) -> None:
        if not self.config.auto_commit:
            return
        while True:
            await anyio.sleep(self.timing.persist_interval)
            await self._ctx.offset_store.persist_all(list(self.assignment()))
