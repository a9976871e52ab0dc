"""PushConsumer: the Java ``DefaultMQPushConsumer`` machinery, asyncio-native.

Shape: ``start()`` launches one supervisor task that owns the client instance and ONE task group in
which everything runs: a pull loop per owned queue (each in its own cancel scope, cancelled when the
queue is dropped), the rebalance timer (woken at once by NOTIFY_CONSUMER_IDS_CHANGED), the
offset-persist timer, the expired-message cleaner and the consume workers. ``stop()`` asks the
supervisor to shut down in order: stop pulling, let running handlers finish (bounded), persist offsets
synchronously, unregister, close connections. Because the supervisor owns the group, ``start()`` and
``stop()`` may be called from different tasks (an ASGI lifespan, a test fixture).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ..client.instance import INNER_PRODUCER_GROUP, ClientInstance, pid_instance_name
from ..config import ClientConfig, ConsumerConfig, Timing
from ..errors import ClientError, ConfigError, RocketMQError
from ..producer.producer import Producer, ProducerConfig
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.command import RemotingCommand
from ..protocol.filter import SUB_ALL, parse_tag_expression
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from . import admin
from .allocate import strategy_by_name
from .concurrently import ConcurrentConsumeService, ConsumeContext, ConsumeResult, Handler, send_back
from .deadlines import DeadlineTracker
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from .orderly import OrderlyConsumeService, OrderlyContext, OrderlyHandler, OrderlyResult  # [orderly]
from .process_queue import ProcessQueue
from .pulling import PullLoop
from .rebalance import StabilityWindow
from .rebalancer import PushRebalancer
from .stats import ConsumerStats
from .subcheck import SubscriptionChecker
from .usercode import call_maybe_async, call_user

__all__ = ["PushConsumer", "RebalanceListener"]

log = logging.getLogger("rmq_async.consumer")

RebalanceListener = Callable[[str, set[MessageQueue]], "Awaitable[None] | None"]
Hook = Callable[..., "Awaitable[None] | None"]


class PushConsumer:
    """An asyncio push consumer.

    ``async with PushConsumer("group", namesrv_addr=..., handler=fn) as c: c.subscribe(...)`` or
    subscribe first (``subscriptions={"Topic": "TagA || TagB"}``) and enter. ``handler`` is an
    ``async def handler(msgs, ctx) -> ConsumeResult | None``; without a handler, iterate
    :meth:`deliveries` instead.

    ``orderly=True`` consumes each queue strictly in offset order, one batch at a time, under a broker
    lock (clustering); the handler gets an ``OrderlyContext`` and returns an ``OrderlyResult``
    (see :mod:`rmq_async.consumer.orderly`).
    """

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        handler: Handler | OrderlyHandler | None = None,
        subscriptions: dict[str, str] | None = None,
        config: ConsumerConfig | None = None,
        client_config: ClientConfig | None = None,
        timing: Timing | None = None,
        instance_name: str | None = None,
        on_assigned: RebalanceListener | None = None,
        on_revoked: RebalanceListener | None = None,
        orderly: bool = False,
        **options: Any,
    ) -> None:
        if config is not None and options:
            raise ConfigError(f"pass options either in config= or as keywords, not both: {sorted(options)}")
        self.config = config or ConsumerConfig(group=group, **options)
        if client_config is None:
            client_config = ClientConfig(namesrv_addr=namesrv_addr, timing=timing or Timing())
        elif timing is not None:
            client_config = client_config.model_copy(update={"timing": timing})
        if instance_name is not None:
            client_config = client_config.model_copy(update={"instance_name": instance_name})
        self.client_config = client_config
        self.timing = client_config.timing
        # a namespace (Java's ``withNamespace``) prefixes the group and the topics on the wire: ``ns%G``,
        # ``ns%T``, ``%RETRY%ns%G``; handlers see their messages' topics without it
        self.namespace = client_config.namespace or None
        self.group = client_config.with_namespace(self.config.group)
        self.retry_topic = f"%RETRY%{self.group}"
        self.handler = handler
        # [orderly] per-queue ordering under broker lock leases (``MessageListenerOrderly``)
        self.orderly = orderly
        self.max_reconsume_times = self.config.effective_max_reconsume_times(orderly=orderly)
        self.strategy = strategy_by_name(self.config.allocate_strategy)
        self._subs: dict[str, SubscriptionData] = {}
        self.running = False
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.before_hooks: list[Hook] = []
        self.after_hooks: list[Hook] = []
        self.stats = ConsumerStats()
        self.subcheck = SubscriptionChecker(self)
        self.rebalancer = PushRebalancer(self)
        self._client: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._inner_producer: Producer | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._rebalance_wakeup = anyio.Event()
        self._rebalanced = anyio.Event()
        self._deliveries: Any = None
        self._ran = False
        self._new_run(self.timing.consume_timeout)
        for topic, expr in (subscriptions or {}).items():
            self.subscribe(topic, expr)

    def _new_run(self, consume_timeout: float) -> None:
        """The state of one start .. stop: a stopped consumer starts again on a fresh one (its process
        queues, workers and timers are gone; subscriptions, hooks, listeners and stats stay)."""
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self.deadlines = DeadlineTracker(consume_timeout)
        self.stability = StabilityWindow(self.config.rebalance_stability_window)
        self._stop = anyio.Event()
        self._stopping = False
        self.running = False
        self.consume_service: Any
        if self.orderly:  # [orderly]
            self.consume_service = OrderlyConsumeService(self, self.handler)  # type: ignore[arg-type]
        else:
            self.consume_service = ConcurrentConsumeService(self, self.handler)  # type: ignore[arg-type]
        if consume_timeout != self.timing.consume_timeout:
            self.consume_service.set_timeout(consume_timeout)  # set_consume_timeout() outlives a stop
        self.puller = PullLoop(self)
        self._deliveries = None  # start() makes the stream of a consumer without a handler

    # -- public API -------------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (``"*"`` or ``"TagA || TagB"``).

        All members of a group must subscribe alike: the broker filters by the group's last registered
        subscription.
        """
        if not topic or topic.startswith("%RETRY%"):
            raise ConfigError(f"cannot subscribe to topic {topic!r}")
        topic = self.client_config.with_namespace(topic)
        sub_string, tags, codes = parse_tag_expression(expression)
        self._subs[topic] = SubscriptionData(
            topic=topic,
            sub_string=sub_string,
            tags_set=tags,
            code_set=codes,
            sub_version=int(time.time() * 1000),
        )
        if self.running:
            self.rebalance_now()
            if self._tg is not None:
                self._tg.start_soon(self._after_subscription_change)

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(self.client_config.with_namespace(topic), None)
        if self.running:
            self.rebalance_now()

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: s.sub_string for t, s in self._subs.items()}

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientError("consumer is not started")
        return self._client

    @property
    def client_id(self) -> str:
        return self.client.client_id

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise ClientError("consumer is not started")
        return self._offset_store

    @property
    def inner_producer(self) -> Producer:
        if self._inner_producer is None:
            raise ClientError("consumer is not started")
        return self._inner_producer

    def assignment(self) -> set[MessageQueue]:
        return {mq for mq, pq in self.pqs.items() if not pq.dropped}

    def set_consume_timeout(self, seconds: float) -> None:
        """Change the consume timeout; applies at once to handlers already running."""
        if seconds <= 0:
            raise ConfigError("consume timeout must be > 0")
        self.deadlines.set_timeout(seconds)
        self.consume_service.set_timeout(seconds)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def rebalance_now(self) -> None:
        self._rebalance_wakeup.set()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance."""
        await self._rebalanced.wait()

    def health(self) -> dict[str, Any]:
        """For a readiness probe: running state, owned queues, and lag per queue."""
        queues = []
        for mq, pq in sorted(self.pqs.items()):
            committed = self._offset_store.read_memory(mq) if self._offset_store else -1
            lag = max(0, pq.max_offset - committed) if pq.max_offset >= 0 and committed >= 0 else None
            queues.append(
                {
                    "queue": str(mq),
                    "cached": pq.count,
                    "next_offset": pq.next_offset,
                    "committed": committed,
                    "lag": lag,
                }
            )
        return {
            "running": self.running,
            "group": self.group,
            "client_id": self._client.client_id if self._client else None,
            "queues": queues,
            "lag": sum(q["lag"] or 0 for q in queues),
        }

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start (heartbeats, rebalance, pulling); returns once running. A stopped consumer may be
        started again: it rejoins its group and goes on from the committed offsets."""
        if self._supervisor is not None:
            raise ClientError("consumer already started")
        if not self._subs:
            raise ClientError("subscribe to at least one topic before starting the consumer")
        if self._ran:
            self._new_run(self.deadlines.timeout)
        self._ran = True
        if self.handler is None and self._deliveries is None:
            from .delivery import DeliveryStream

            self._deliveries = DeliveryStream(self)
        self.client_config.namesrv_list()  # fail fast on a missing address
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._supervisor = loop.create_task(self._supervise(), name=f"rmq_async consumer {self.group}")
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        sup = self._supervisor
        if sup is None:
            return
        self._stop.set()
        try:
            await asyncio.shield(sup)
        except Exception:
            log.exception("consumer %s stopped with an error", self.group)
        finally:
            self._supervisor = None

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @asynccontextmanager
    async def deliveries(self) -> AsyncIterator[Any]:
        """``async with consumer.deliveries() as stream: async for d in stream: ...; await d.ack()``."""
        if self.handler is not None:
            raise ClientError("this consumer has a handler; deliveries() is for consumers without one")
        from .delivery import DeliveryStream

        if self._deliveries is None:
            self._deliveries = DeliveryStream(self)
        try:
            yield self._deliveries
        finally:
            await self._deliveries.release_unsettled()

    async def _supervise(self) -> None:
        assert self._ready is not None
        try:
            await self._run()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else ClientError(str(exc)))
                return
            raise
        finally:
            self.running = False

    def _instance_name(self) -> str:
        name = self.client_config.instance_name
        if name == "DEFAULT" and self.config.clustering:
            return pid_instance_name()
        return name

    async def _run(self) -> None:
        async with ClientInstance(self.client_config, instance_name=self._instance_name()) as client:
            self._client = client
            if self.config.clustering:
                self._offset_store = RemoteOffsetStore(client, self.group)
            else:
                self._offset_store = LocalFileOffsetStore(
                    self.config.offset_store_dir, client.client_id, self.group
                )
            await self._offset_store.load()
            self._inner_producer = Producer(
                config=ProducerConfig(group=INNER_PRODUCER_GROUP),
                client_config=self.client_config,
                client=client,
            )
            await self._inner_producer.start()
            client.register_consumer(self)
            for topic in self.subscribed_topics():
                try:
                    await client.update_route(topic)
                except RocketMQError as exc:
                    # the broker creates %RETRY%group on our first heartbeat: not worth a warning
                    level = logging.DEBUG if topic == self.retry_topic else logging.WARNING
                    log.log(
                        level, "no route for %r yet (%s): will retry at the next route refresh", topic, exc
                    )
            await client.send_heartbeat_to_all_brokers()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self.deadlines.run)
                await self.consume_service.run(tg)
                tg.start_soon(self._persist_loop)
                tg.start_soon(self.rebalancer.run)
                self.running = True
                assert self._ready is not None
                self._ready.set_result(None)
                await self._stop.wait()
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                tg.cancel_scope.cancel()
            self._tg = None

    async def _shutdown(self) -> None:
        log.info("consumer %s (%s) shutting down", self.group, self.client.client_id)
        self._stopping = True
        self.running = False
        for pq in self.pqs.values():
            if pq.scope is not None:
                pq.scope.cancel()  # stop pulling; keep the process queues for the offsets
        self.consume_service.close()
        with anyio.move_on_after(self.timing.shutdown_timeout):
            await self.consume_service.wait_idle()
        mqs = list(self.pqs)
        with anyio.move_on_after(self.timing.request_timeout * 2):
            await self.offset_store.persist_all(mqs, sync=True)
        if self.orderly:  # [orderly] offsets are on the broker: release the queue locks (sync 42)
            await self.consume_service.shutdown()
        self.client.unregister_consumer_local(self.group)
        with anyio.move_on_after(self.timing.request_timeout * 2):
            await self.client.unregister_everywhere(consumer_group=self.group)
        for pq in self.pqs.values():
            pq.drop()
        if self._deliveries is not None:
            self._deliveries.close()

    # -- ConsumerHandle (for the client instance) -----------------------------------------------------

    def subscribed_topics(self) -> set[str]:
        topics = set(self._subs)
        if self.config.clustering:
            topics.add(self.retry_topic)
        return topics

    def subscription(self, topic: str) -> SubscriptionData | None:
        if topic == self.retry_topic and self.config.clustering:
            sub = self._subs.get(topic)
            if sub is None:
                sub = self._subs_retry()
            return sub
        return self._subs.get(topic)

    def _subs_retry(self) -> SubscriptionData:
        sub = getattr(self, "_retry_sub", None)
        if sub is None:
            sub = SubscriptionData(
                topic=self.retry_topic,
                sub_string=SUB_ALL,
                tags_set=[],
                code_set=[],
                sub_version=int(time.time() * 1000),
            )
            self._retry_sub = sub
        return sub

    def consumer_data(self) -> ConsumerData:
        subs = [self._subs[t] for t in sorted(self._subs)]
        if self.config.clustering:
            subs.append(self._subs_retry())
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_PASSIVELY",
            message_model=self.config.message_model,
            consume_from_where=self.config.consume_from_where,
            subscription_data_set=subs,
            unit_mode=self.config.unit_mode,
        )

    async def handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return await admin.handle(self, cmd)

    async def _after_subscription_change(self) -> None:
        await self.client.update_route_quietly(self.subscribed_topics())
        await self.client.send_heartbeat_to_all_brokers()

    # -- hooks ----------------------------------------------------------------------------------------

    async def hooks_before(self, batch: list[MessageExt], ctx: ConsumeContext | OrderlyContext) -> None:
        for h in self.before_hooks:
            await call_maybe_async(h, batch, ctx)

    async def hooks_after(
        self,
        batch: list[MessageExt],
        ctx: ConsumeContext | OrderlyContext,
        result: ConsumeResult | OrderlyResult,
    ) -> None:
        for h in self.after_hooks:
            await call_user("after-consume hook", h, batch, ctx, result)

    # -- consumption plumbing ---------------------------------------------------------------------------

    async def before_pull(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may pull now (orderly mode checks its broker lock lease here)."""
        if self.orderly:  # [orderly] waits until the lease is valid; False once the queue is dropped
            return bool(await self.consume_service.before_pull(pq))
        return True

    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self.orderly:  # [orderly] the orderly service feeds handlers and deliveries alike
            self.consume_service.submit(pq, msgs)
        elif self._deliveries is not None:
            self._deliveries.submit(pq, msgs)
        else:
            self.consume_service.submit(pq, msgs)

    async def send_back(self, m: MessageExt, delay_level: int) -> bool:
        return await send_back(self, m, delay_level)

    def retry_locally(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """``submitConsumeRequestLater``: consume ``msgs`` again after a delay (they stay in ``pq``)."""
        self.stats.local_retries += len(msgs)

        async def later() -> None:
            await anyio.sleep(self.timing.local_retry_delay)
            if not pq.dropped and not self._stopping:
                self.dispatch(pq, msgs)

        if self._tg is not None:
            self._tg.start_soon(later)

    # -- timers ---------------------------------------------------------------------------------------

    async def _persist_loop(self) -> None:
        while True:
            await anyio.sleep(self.timing.persist_interval)
            await self.offset_store.persist_all(list(self.assignment()))

    async def do_rebalance(self) -> None:
        """One rebalance of every subscribed topic (``RebalanceImpl.doRebalance``)."""
        await self.rebalancer.do_rebalance()

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """``computePullFromWhere``: the committed offset, else by consume_from_where."""
        return await self.rebalancer.compute_pull_from_where(mq)

    async def drop_queue(self, mq: MessageQueue, *, offset: int | None = None) -> None:
        """``removeUnnecessaryMessageQueue``: stop the queue, persist its offset, forget it (and in
        orderly mode release its broker lock). ``offset`` replaces the committed offset first (an
        illegal pull offset, a reset from an admin tool) and is then persisted synchronously."""
        pq = self.pqs.pop(mq, None)
        if pq is None:
            return
        idle = True
        if self.orderly:  # [orderly] bounded wait for the running handler, then drop
            idle = await self.consume_service.drop(pq, self.config.orderly_drop_wait)
        else:
            pq.drop()
        if offset is not None:
            # after the drop, as Java's resetOffset: a handler finishing during the wait must not
            # commit over the new offset
            self.offset_store.update(mq, offset, increase_only=False)
        try:
            await self.offset_store.persist(mq, sync=self.orderly or offset is not None)
        except RocketMQError as exc:
            log.warning("persisting the offset of dropped %s failed: %s", mq, exc)
        self.offset_store.remove(mq)
        if self.orderly:  # [orderly] persisted: now the next owner may lock it (oneway 42)
            await self.consume_service.unlock_dropped(pq, idle)

    def filter_tags(self, sub: SubscriptionData, msgs: Sequence[MessageExt]) -> list[MessageExt]:
        """Re-filter by tag string: the broker filters by hash code only (``processPullResult``, with
        the subscription the pull was made with)."""
        if not sub.tags_set:
            return msgs if isinstance(msgs, list) else list(msgs)
        tags = set(sub.tags_set)
        return [m for m in msgs if m.tags in tags]
