"""LitePullConsumer: the Java ``DefaultLitePullConsumer``, asyncio-native.

A facade over the push consumer's parts: a :class:`ConsumerContext`, a :class:`QueueTable` of process
queues, one :class:`PullLoop` task per owned queue (with the lite pull request: sysFlag with the
lite-pull bit and the subscription, subVersion 0, a 20 s long poll capped by the pull timeout), the
:class:`Rebalancer` in subscribe mode (one start-offset rule with the push consumer), and a
:class:`PollBuffer` as the pull loops' sink: a bounded per-queue buffer, served round robin, that a
pull awaits room in (per-queue and total thresholds) on an event every ``poll`` sets, never a timer.

``poll`` hands out batches and records, per queue, the offset after the last message handed out (the
consume offset); ``commit`` copies consume offsets into the offset store's memory and the persist
timer writes them (oneway 15), as the Java client does. A seek discards the queue's buffered batches
and cancels its pull loop (a long poll in flight is stale) and starts a new one at the new offset.

Wire facts (``lite-pull.jsonl``): ``@STREAM`` client id and ``ReqT`` (``ClientConfig(stream=True)``),
heartbeat CONSUME_ACTIVELY, pulls with sysFlag 22 and subVersion 0, seek checks the range with 31
then 30.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, Literal

import anyio
import anyio.abc

from ..client.instance import ClientInstance, pid_instance_name
from ..config import ClientConfig, LitePullConfig, Timing, client_settings, unwrap_namespace, wrap_namespace
from ..errors import AuthError, ClientError, ConfigError, MQClientError, RocketMQError
from ..lifecycle import Supervisor
from ..producer.producer import trace_producer
from ..protocol.bodies import ConsumerData
from ..protocol.command import RemotingCommand
from ..protocol.filter import Selector
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt, UndecodableMessageError
from .allocate import strategy_by_name
from .brokercheck import check_in_brokers
from .context import ConsumerContext, Subscriptions
from .health import ConsumerHealth, consumer_health
from .internals import LiteInternals
from .lite_offsets import LiteOffsets
from .lite_run import LiteRun, PollLimits, build_lite_run
from .offset_store import RemoteOffsetStore
from .process_queue import PollState
from .pulling import PullSettings
from .rebalancer import RebalanceSettings, RebalanceSignals, StartOffsets
from .stats import ConsumerStats
from .types import RebalanceListener

__all__ = ["LitePullConsumer"]

log = logging.getLogger("rmq_async.consumer.lite")

ConsumeFrom = Literal["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"]


class LitePullConsumer:
    """``async with LitePullConsumer("group", namesrv_addr=...) as c:`` (or ``await c.start()`` ...
    ``await c.stop()``) then ``c.assign([...])`` or ``await c.subscribe("Topic", "TagA || TagB")``, and
    ``msgs = await c.poll(timeout)`` or ``async for msg in c``. Options have the push consumer's names
    and units (``pull_threshold_size_for_queue`` in MiB); ``health()`` as the push consumer's;
    ``beginning_offsets``, ``end_offsets`` and ``offsets_for_times`` over a set of queues.

    ``auto_commit`` (default True) commits what earlier polls returned at most every
    ``auto_commit_interval`` seconds, at the start of a poll; otherwise call :meth:`commit`.

    ``on_assigned`` / ``on_revoked`` (settable attributes too): ``fn(topic, queues)``, plain or async,
    as the push consumer's, called after a rebalance (subscribe mode) gave or took queues, in the
    user's names (Java's ``MessageQueueListener``); what they raise is logged. A stopped consumer may
    be started again (:meth:`start`).

    ``on_undecodable``: a message that cannot be decoded (a corrupt or unknown compressed body) makes
    ``poll`` raise :class:`~rmq_async.UndecodableMessageError` naming its queue and offset once the
    messages before it were returned (``"fail"``, the default; the queue stays at that offset until
    a seek past it), or is logged at ERROR and passed over (``"skip"``). ``stats.undecodable`` counts
    them.
    """

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        client_config: ClientConfig | None = None,
        timing: Timing | None = None,
        instance_name: str | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        consume_from_where: ConsumeFrom = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp_ms: int | None = None,
        allocate_strategy: str = "AVG",
        pull_batch_size: int = 10,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_all: int = 10000,
        on_undecodable: Literal["fail", "skip"] = "fail",
        require_namesrv: bool = False,
        on_assigned: RebalanceListener | None = None,
        on_revoked: RebalanceListener | None = None,
    ) -> None:
        options = LitePullConfig(  # checked as a PushConsumer's options are (ConfigError)
            group=group,
            auto_commit=auto_commit,
            auto_commit_interval=auto_commit_interval,
            consume_from_where=consume_from_where,
            consume_timestamp_ms=consume_timestamp_ms,
            allocate_strategy=allocate_strategy,
            pull_batch_size=pull_batch_size,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            pull_threshold_for_all=pull_threshold_for_all,
            on_undecodable=on_undecodable,
        )
        self.on_undecodable = options.on_undecodable
        # start() fails when no name server answers (default: look in the background, as Java)
        self.require_namesrv = require_namesrv
        # the client settings from the keywords, by the rule of the other clients; a lite consumer's
        # requests are a stream client's (``ReqT``)
        self.client_config = client_settings(
            client_config, namesrv_addr=namesrv_addr, timing=timing, instance_name=instance_name
        ).model_copy(update={"stream": True})
        self.timing = self.client_config.timing
        # a namespace (Java's withNamespace): the group, topics and queues go on the wire as ``ns%name``;
        # every method takes and returns the plain names, as Java's DefaultLitePullConsumer does
        self.namespace = self.client_config.namespace or None
        self.group = self.client_config.with_namespace(group)
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self._strategy = strategy_by_name(allocate_strategy)
        self.pull_batch_size = pull_batch_size
        self._ctx = ctx = ConsumerContext(
            group=self.group,
            config=options.consumer_config(self.group),
            client_config=self.client_config,
            subscriptions=Subscriptions(None),
        )
        self._observers = ctx.observation.observers  # (the context's list: trace, OpenTelemetry once started)
        self._limits = PollLimits(
            max_queue_count=pull_threshold_for_queue,
            max_queue_bytes=options.pull_threshold_size_for_queue << 20,  # MiB, as the push consumer
            max_total=pull_threshold_for_all,
        )
        self._pull = PullSettings.for_lite_pull(pull_batch_size, self.timing, options.on_undecodable)
        self.suspend_timeout = self._pull.suspend_timeout
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self._signals = RebalanceSignals()
        self._settings = RebalanceSettings(
            strategy=self._strategy,
            # Java's lite consumer too fixes its default consumeTimestamp when it is made
            start_offsets=StartOffsets(consume_from_where, consume_timestamp_ms),
            # RebalanceLitePullImpl.messageQueueChanged: no subscription version bump, no heartbeat
            announce_changes=False,
            on_assigned=partial(self._tell, "on_assigned"),
            on_revoked=partial(self._tell, "on_revoked"),
        )
        self._run = self._new_run()
        #: the offsets side (seek, commit, committed), made when the consumer starts
        self._offsets: LiteOffsets | None = None
        self._mode: Literal["none", "assign", "subscribe"] = "none"
        self._assigned: set[MessageQueue] = set()
        self._closed = False
        self._ran = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of 'async with'
        self._life = Supervisor(f"lite pull consumer {self.group}")
        self._instance: ClientInstance | None = None

    def _new_run(self) -> LiteRun:
        self._ctx.new_run()
        return build_lite_run(
            self._ctx,
            limits=self._limits,
            auto_commit=self.auto_commit,
            pull=self._pull,
            settings=self._settings,
            signals=self._signals,
        )

    def _tell(
        self, which: Literal["on_assigned", "on_revoked"], topic: str, queues: set[MessageQueue]
    ) -> Awaitable[None] | None:
        """A rebalance's news for the user's listener, in the user's names (no namespace)."""
        fn: RebalanceListener | None = getattr(self, which)
        if fn is None or topic.startswith("%RETRY%"):
            return None
        return fn(unwrap_namespace(self.namespace, topic), {self._out(mq) for mq in queues})

    # -- lifecycle ----------------------------------------------------------------------------------

    def _check_loop(self) -> None:
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            raise ClientError(
                f"lite pull consumer {self.group!r} was started in another event loop: use it and close "
                "it in the same one (one asyncio.run() around 'async with'); each asyncio.run() makes a "
                "new loop"
            )

    def __repr__(self) -> str:
        """Group, how it owns queues (subscribe or assign) and which topics, and its state; nothing of
        the settings (credentials live there)."""
        if self._closed:
            state = "stopped"
        elif self._ctx.started:
            state = "running"
        else:
            state = "not started"
        topics = sorted(self._ctx.subscriptions.expressions() or {mq.topic for mq in self._assigned})
        return f"<LitePullConsumer group={self.group!r} mode={self._mode} topics={topics} {state}>"

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def start(self) -> None:
        """Connect and register the group (what entering ``async with`` does); then :meth:`assign` or
        :meth:`subscribe`, and :meth:`poll`. :meth:`stop` ends it. A stopped consumer may be started
        again, on a new run: its subscriptions (or assigned queues) are taken up again from the
        committed offsets; buffered messages and pauses are gone."""
        if self._life.running:
            raise ClientError("lite pull consumer already started")
        if self._ran:
            self._run = self._new_run()
            self._offsets = None
        self._ran = True
        self._closed = False
        self._loop = asyncio.get_running_loop()
        try:
            await self._life.start(self._main)
        except BaseException:
            self._closed = True  # a failed start leaves nothing running
            raise

    async def _main(self, ready: Callable[[], None], stopping: asyncio.Event) -> None:
        """The consumer's life, in its supervisor's task: the client instance and the task group are
        held by ``async with`` here, so :meth:`start` and :meth:`close` may come from different tasks."""
        name = self.client_config.instance_name
        instance_name = pid_instance_name() if name == "DEFAULT" else name
        async with ClientInstance(self.client_config, instance_name=instance_name) as client:
            store = RemoteOffsetStore(client, self.group)
            self._ctx.attach(client, store, trace_senders=partial(trace_producer, self.client_config, client))
            self._instance = client
            run = self._run
            self._offsets = LiteOffsets(
                table=run.table,
                buffer=run.buffer,
                client=client,
                store=store,
                timing=self.timing,
                name_in=self._in,
                start_pull=run.start_pull,
                start_offset=run.rebalancer.compute_pull_from_where,
            )
            client.register_consumer(self)
            # with ACL keys: a wrong or unknown key, or a group without SUB, fails here (AuthError)
            await client.check_access("TBW102")  # the default topic: its route names the brokers
            if self.require_namesrv:
                # "no such topic" is an answer; no answer at all is what the check below is for
                with contextlib.suppress(RocketMQError):
                    await client.update_route("TBW102")
                if not any(r.reachable for r in client.namesrv_reach.values()):
                    errors = "; ".join(f"{r.addr}: {r.last_error}" for r in client.namesrv_reach.values())
                    raise MQClientError(f"no name server answered (require_namesrv=True): {errors}")
            client.auth_errors.add_listener(lambda _err: run.buffer.wake())  # poll() raises it
            async with anyio.create_task_group() as tg:
                self._ctx.set_task_group(tg)
                tg.start_soon(self._offsets.persist_loop)
                await self._take_up(tg)
                ready()
                await stopping.wait()
                try:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown(client)
                finally:
                    tg.cancel_scope.cancel()
                    self._ctx.set_task_group(None)

    async def _take_up(self, tg: anyio.abc.TaskGroup) -> None:
        """A consumer started again: what the last run owned, again (assign mode: the same queues;
        subscribe mode: a rebalance)."""
        if self._mode == "assign":
            await self._own(self._assigned)
        elif self._mode == "subscribe":
            await self._client.update_route_quietly(self._ctx.subscriptions.topics())
            await self._client.send_heartbeat_to_all_brokers(raise_auth=True)
            tg.start_soon(self._run.rebalancer.run)

    async def _shutdown(self, client: ClientInstance) -> None:
        table = self._run.table
        table.stop_pulling()
        offsets = self._offsets
        if self.auto_commit and offsets is not None:
            offsets.commit_memory(None)
        with anyio.move_on_after(self.timing.request_timeout * 2):
            await self._ctx.offset_store.persist_all(list(table.pqs), sync=True)
        client.unregister_consumer_local(self.group)
        with anyio.move_on_after(self.timing.request_timeout * 2):
            await client.unregister_everywhere(consumer_group=self.group)

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def stop(self) -> None:
        """What leaving ``async with`` does: :meth:`close`."""
        await self.close()

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        """``async for msg in consumer``: the polled messages one by one, until the consumer is closed
        (auto commit as with :meth:`poll`)."""
        return self._messages()

    async def _messages(self) -> AsyncIterator[MessageExt]:
        while not self._closed:
            for msg in await self.poll(self.suspend_timeout, max_messages=self.pull_batch_size):
                yield msg

    async def close(self) -> None:
        """Stop pulling, commit (with auto commit), persist offsets synchronously, unregister."""
        ctx = self._ctx
        if self._closed or not ctx.started:
            return
        self._check_loop()
        self._closed = True
        ctx.stopping = True
        self._run.buffer.wake()
        await self._life.stop()

    @property
    def _client(self) -> ClientInstance:
        """(internal) The client instance (routes, connections) while running."""
        if not self._ctx.started or self._closed:
            raise ClientError("lite pull consumer is not running (use 'async with')")
        assert self._instance is not None
        return self._instance

    def _internals(self) -> LiteInternals:
        """(for :func:`~rmq_async.consumer.internals.internals`)"""
        run = self._run
        return LiteInternals(
            ctx=self._ctx,
            table=run.table,
            rebalancer=run.rebalancer,
            settings=self._settings,
            ended=self._life.ended(),
            instance=self._instance,
            buffer=run.buffer,
            offsets=self._offsets,
        )

    def _running_offsets(self) -> LiteOffsets:
        offsets = self._offsets
        if offsets is None or self._closed:
            raise ClientError("lite pull consumer is not running (use 'async with')")
        return offsets

    # -- offsets (LiteOffsets) ------------------------------------------------------------------------

    async def beginning_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The min offset of each queue (as aiokafka's ``beginning_offsets``), asked concurrently."""
        return await self._running_offsets().beginning_offsets(queues)

    async def end_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The max offset of each queue: the offset the next message will get (``end_offsets``)."""
        return await self._running_offsets().end_offsets(queues)

    async def offsets_for_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """For each queue, :meth:`offset_for_timestamp` at its timestamp (milliseconds since the epoch),
        asked concurrently (as aiokafka's ``offsets_for_times``, which answers offsets only here)."""
        return await self._running_offsets().offsets_for_times(timestamps)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first offset still stored (the broker's min offset)."""
        return await self._running_offsets().min_offset(mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the queue's next message will get (the broker's max offset)."""
        return await self._running_offsets().max_offset(mq)

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The broker's answer to SEARCH_OFFSET_BY_TIMESTAMP for ``mq`` at ``timestamp_ms``, as Java's
        ``offsetForTimestamp``: a 5.x broker answers the first offset stored at or after it, a 4.9.8
        broker the offset whose store time is nearest (it may be an older message)."""
        return await self._running_offsets().offset_for_timestamp(mq, timestamp_ms)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next; buffered messages of it are discarded. The offset must lie
        in [min offset, max offset] (checked with the broker, as Java does)."""
        await self._running_offsets().seek(mq, offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`min_offset` next."""
        await self._running_offsets().seek_to_begin(mq)

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`max_offset` next: only messages sent from now on."""
        await self._running_offsets().seek_to_end(mq)

    async def seek_to_committed(self, mq: MessageQueue) -> None:
        """Read ``mq`` from its :meth:`committed` offset next (aiokafka's ``seek_to_committed``), or,
        never committed, where a queue without an offset starts (``consume_from_where``)."""
        await self._running_offsets().seek_to_committed(mq)

    def position(self, mq: MessageQueue) -> int:
        """The consume offset of ``mq``: the offset after the last message poll() returned."""
        return self._running_offsets().position(mq)

    def highwater(self, mq: MessageQueue) -> int | None:
        """The broker's max offset of ``mq`` as its last pull answer said, None before one answered: as
        aiokafka's ``highwater``, no I/O (:meth:`max_offset` asks the broker)."""
        return self._running_offsets().highwater(mq)

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None, *, sync: bool = False) -> None:
        """Commit the consume offsets of every owned queue (or ``offsets``) to the offset store's
        memory; the persist timer writes them to the brokers. ``sync=True`` writes them now."""
        await self._running_offsets().commit(offsets, sync=sync)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The committed offset of ``mq``: the one committed in this consumer's memory (not yet written by
        the persist timer), else the broker's (None: never committed). As Java's ``committed``
        (``MEMORY_FIRST_THEN_STORE``), and without overwriting a pending commit with the broker's value."""
        return await self._running_offsets().committed(mq)

    @property
    def stats(self) -> ConsumerStats:
        """Pull statistics and the count of undecodable messages (``undecodable``)."""
        return self._ctx.stats

    @property
    def queues(self) -> dict[MessageQueue, PollState]:
        """The buffer of each owned queue (as the broker names it)."""
        buffer = self._run.buffer
        return {mq: buffer.state(pq) for mq, pq in self._run.table.pqs.items()}

    def health(self) -> ConsumerHealth:
        """As :meth:`PushConsumer.health`: ``ready`` and why not, name servers and brokers reached,
        topics without a route, owned queues with their last pull and lag (``max_offset`` minus the
        committed offset; None when unknown). The topics are the subscribed ones, or those of the
        assigned queues. No I/O."""
        ctx = self._ctx
        running = ctx.started and not self._closed
        assigned = {mq.topic for mq in self._assigned}
        topics = assigned if self._mode == "assign" else ctx.subscriptions.topics()
        store = self._ctx.offset_store if ctx.has_offset_store else None
        return consumer_health(
            running=running,
            group=self.group,
            client=ctx.client if ctx.started else None,
            topics=topics,
            retry_topic=None,
            pqs=self._run.table.pqs,
            committed=store.read_memory if store is not None else lambda mq: -1,
            members=self._signals.members,
            clustering=True,
            stats=ctx.stats,
            refused=ctx.sql_checks.refused,
            filter_refused_pulls=ctx.sql_checks.pulls_refused,
        )

    def _task_group(self) -> anyio.abc.TaskGroup:
        tg = self._ctx.task_group
        if tg is None or self._closed:
            raise ClientError("lite pull consumer is not running (use 'async with')")
        return tg

    # -- names with and without the namespace ---------------------------------------------------------

    def _in(self, mq: MessageQueue) -> MessageQueue:
        """A queue as the user names it -> as the broker does (idempotent)."""
        if not self.namespace:
            return mq
        return MessageQueue(wrap_namespace(self.namespace, mq.topic), mq.broker_name, mq.queue_id)

    def _out(self, mq: MessageQueue) -> MessageQueue:
        if not self.namespace:
            return mq
        return MessageQueue(unwrap_namespace(self.namespace, mq.topic), mq.broker_name, mq.queue_id)

    # -- assign / subscribe ---------------------------------------------------------------------------

    async def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``queues`` (no group rebalance). Each starts at the group's committed offset,
        else by ``consume_from_where``."""
        if self._mode == "subscribe":
            raise ClientError("assign() and subscribe() cannot be mixed")
        self._mode = "assign"
        self._task_group()
        self._assigned = {self._in(mq) for mq in queues}
        await self._own(self._assigned)

    async def _own(self, target: set[MessageQueue]) -> None:
        """Assign mode: own exactly ``target`` (the broker's names)."""
        for topic in sorted({mq.topic for mq in target}):
            await self._client.update_route(topic)
        await self._client.send_heartbeat_to_all_brokers(raise_auth=True)  # ACL: fail at once
        run = self._run
        table = run.table
        for mq in sorted(set(table.pqs) - target):
            await table.drop(mq)
        for mq in sorted(target - set(table.pqs)):
            pq = table.make_queue(mq)
            pq.next_offset = await run.rebalancer.compute_pull_from_where(mq)
            table.start(pq)
            run.start_pull(pq)

    async def subscribe(self, topic: str, expression: Selector | str = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (a plain string) or a :class:`Selector`
        (``Selector.sql(...)``: the brokers of the topic are asked first, and a refusal raises
        :class:`~rmq_async.errors.SubscriptionRefused`, keeping the previous subscription); queues are
        shared out among the group's members by the allocation strategy and rebalanced when members
        come and go."""
        if self._mode == "assign":
            raise ClientError("assign() and subscribe() cannot be mixed")
        if not topic or topic.startswith("%"):
            raise ConfigError(f"cannot subscribe to topic {topic!r}")
        topic = self.client_config.with_namespace(topic)
        tg = self._task_group()
        sub = self._ctx.subscriptions.make(topic, expression)
        if sub.expression_type != "TAG":  # checkClientInBroker (Java: at start)
            await self._client.update_route_quietly([topic])
            await check_in_brokers(self._ctx, [sub])
        self._ctx.subscriptions.store(sub)
        first = self._mode != "subscribe"
        self._mode = "subscribe"
        await self._client.update_route_quietly([topic])
        await self._client.send_heartbeat_to_all_brokers(raise_auth=True)  # ACL: fail at once
        if first:
            tg.start_soon(self._run.rebalancer.run)
        else:
            self.rebalance_now()

    async def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (subscribe mode): its queues are dropped now (with auto commit,
        what poll() returned of them committed first) and its buffered messages discarded."""
        topic = self.client_config.with_namespace(topic)
        subs = self._ctx.subscriptions
        if topic not in subs:
            return
        subs.remove(topic)
        table = self._run.table
        for mq in sorted(mq for mq in table.pqs if mq.topic == topic):
            await table.drop(mq)
        if self._ctx.started and not self._closed:
            await self._client.send_heartbeat_to_all_brokers()

    @property
    def subscriptions(self) -> dict[str, str]:
        """``{topic: expression}`` as subscribed (the user's names, as :meth:`subscribe` takes them)."""
        return {
            unwrap_namespace(self.namespace, t): e for t, e in self._ctx.subscriptions.expressions().items()
        }

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer owns now."""
        return {self._out(mq) for mq in self._run.table.pqs}

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (``fetchMessageQueues``)."""
        topic = self.client_config.with_namespace(topic)
        await self._client.update_route(topic)
        return [self._out(mq) for mq in await self._client.subscribe_queues(topic)]

    # -- polling ----------------------------------------------------------------------------------------

    async def poll(self, timeout: float = 5.0, *, max_messages: int | None = None) -> list[MessageExt]:
        """The next messages: one pulled batch, or with ``max_messages`` up to that many (a batch cut
        to fit; its rest is returned by the next polls, and only what was returned is committed); an
        empty list after ``timeout`` seconds without data."""
        if max_messages is not None and max_messages < 1:
            raise ConfigError(f"max_messages must be >= 1 (or None: one pulled batch), not {max_messages}")
        self._check_loop()
        offsets = self._offsets
        if (
            offsets is not None
            and self.auto_commit
            and time.monotonic() - offsets.last_commit >= self.auto_commit_interval
        ):
            offsets.commit_memory(None)
        buffer = self._run.buffer
        out: list[MessageExt] = []
        with anyio.move_on_after(timeout):
            while not out:
                self._client  # noqa: B018 - raises once closed
                buffer.take(out, max_messages)
                if not out:
                    if (undecodable := buffer.failure()) is not None:
                        raise UndecodableMessageError(undecodable)
                    if (refused := self._refusal()) is not None:
                        raise refused
                    await buffer.wait_changed()
        if self.namespace:
            for m in out:
                m.topic = unwrap_namespace(self.namespace, m.topic)
        if self._observers and out:  # trace (as Java's poll: SubBefore, SubAfter) and OpenTelemetry
            self._ctx.observation.polled(out)
        return out

    def _refusal(self) -> AuthError | None:
        """The current ACL refusal of the group or of an owned queue's topic (poll raises it when it
        has nothing else to return: the allowed queues' messages come first)."""
        errors = self._client.auth_errors
        if not errors:
            return None
        return errors.current({f"group:{self.group}"} | {f"topic:{mq.topic}" for mq in self._run.table.pqs})

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop pulling ``queues`` and hold back their buffered messages until :meth:`resume`."""
        run = self._run
        for mq in queues:
            pq = run.table.pqs.get(self._in(mq))
            if pq is not None:
                run.buffer.pause(pq)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        """Pull ``queues`` again and hand out their buffered messages (after :meth:`pause`)."""
        run = self._run
        for mq in queues:
            pq = run.table.pqs.get(self._in(mq))
            if pq is not None:
                run.buffer.resume(pq)
        run.buffer.wake()

    def paused(self) -> set[MessageQueue]:
        """The queues paused now."""
        return {self._out(mq) for mq, st in self.queues.items() if st.paused}

    # -- rebalance (subscribe mode) ---------------------------------------------------------------------

    def rebalance_now(self) -> None:
        """Rebalance the subscribed topics at once."""
        self._signals.wake()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance (subscribe mode)."""
        await self._signals.wait_rebalanced()

    # -- ConsumerHandle ---------------------------------------------------------------------------------

    def _consumer_data(self) -> ConsumerData:
        """(internal, for the client instance) This consumer in a heartbeat."""
        subs = self._ctx.subscriptions.data() if self._mode == "subscribe" else []
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            # Java's DefaultLitePullConsumerImpl.consumeFromWhere() reports LAST whatever it was set
            # to (the setting only picks this member's start offsets); the broker keeps one value per
            # group, so a different one would flip what admin tools show for a mixed group
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=subs,
            unit_mode=False,
        )

    def _subscribed_topics(self) -> set[str]:
        """(internal, for the client instance) The subscribed and assigned topics."""
        return self._ctx.subscriptions.topics() | {mq.topic for mq in self._assigned}

    async def _handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """(internal, for the client instance) Brokers' requests: none answered by a lite consumer."""
        return None
