"""LitePullConsumer: the Java ``DefaultLitePullConsumer``, asyncio-native.

Strategy: one task group (inside ``async with``) runs a pull task per owned queue, the offset-persist
timer and, in subscribe mode, the rebalance loop. Pulled batches go into a bounded buffer: a per-queue
deque plus a FIFO of queues that have data (round robin); a pull task awaits room (per-queue and
total thresholds, the push consumer's flow-control idea) on an event every ``poll`` sets, never on a
timer. ``poll`` hands out batches and records, per queue, the offset after the last message handed
out (the consume offset); ``commit`` copies consume offsets into the offset store's memory and the
persist timer writes them (oneway 15), as the Java client does. Seeks bump a per-queue generation:
batches pulled before the seek are discarded, and the queue's pull task is restarted at once.

Subscribe mode reuses the push consumer's pieces: :func:`allocate_topic` / :func:`diff`, the
allocation strategies and :class:`RemoteOffsetStore`. Wire facts (``lite-pull.jsonl``): ``@STREAM``
client id and ``ReqT`` (``ClientConfig(stream=True)``), heartbeat CONSUME_ACTIVELY, pulls with sysFlag
22 and subVersion 0, seek checks the range with 31 then 30.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import anyio
import anyio.abc

from ..client.api import PullStatus
from ..client.instance import ClientInstance, pid_instance_name
from ..config import ClientConfig, Timing, unwrap_namespace, wrap_namespace
from ..errors import BrokerError, ClientError, ConfigError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.codes import PullSysFlag, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.filter import parse_tag_expression
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .allocate import strategy_by_name
from .offset_store import RemoteOffsetStore
from .rebalance import allocate_topic, diff

__all__ = ["LitePullConsumer"]

log = logging.getLogger("rmq_async.consumer.lite")

ConsumeFrom = Literal["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"]


class _Queue:
    """Pull and poll state of one owned queue."""

    __slots__ = (
        "batches",
        "consume_offset",
        "count",
        "generation",
        "in_ready",
        "mq",
        "nbytes",
        "next_offset",
        "paused",
        "scope",
        "suggested",
    )

    def __init__(self, mq: MessageQueue, offset: int) -> None:
        self.mq = mq
        self.next_offset = offset  # where the next pull starts
        self.consume_offset = offset  # the offset after the last message poll() handed out
        self.generation = 0
        self.batches: deque[list[MessageExt]] = deque()
        self.count = 0
        self.nbytes = 0
        self.paused = False
        self.in_ready = False
        self.scope: anyio.CancelScope | None = None
        self.suggested = 0  # suggestWhichBrokerId: the node the last pull's broker told us to use


class LitePullConsumer:
    """``async with LitePullConsumer("group", namesrv_addr=...) as c:`` then ``c.assign([...])`` or
    ``c.subscribe("Topic", "TagA || TagB")``, and ``msgs = await c.poll(timeout)``.

    ``auto_commit`` (default True) commits what earlier polls returned at most every
    ``auto_commit_interval`` seconds, at the start of a poll; otherwise call :meth:`commit`.
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
        pull_threshold_size_for_queue: int = 100 << 20,
        pull_threshold_for_all: int = 10000,
    ) -> None:
        if not group:
            raise ConfigError("LitePullConsumer needs a consumer group")
        if pull_batch_size < 1 or pull_threshold_for_queue < 1 or pull_threshold_for_all < 1:
            raise ConfigError("pull_batch_size and the pull thresholds must be >= 1")
        if auto_commit_interval < 0:
            raise ConfigError("auto_commit_interval must be >= 0")
        if client_config is None:
            client_config = ClientConfig(namesrv_addr=namesrv_addr, timing=timing or Timing())
        elif timing is not None:
            client_config = client_config.model_copy(update={"timing": timing})
        update: dict[str, Any] = {"stream": True}
        if instance_name is not None:
            update["instance_name"] = instance_name
        self.client_config = client_config.model_copy(update=update)
        self.timing = self.client_config.timing
        # a namespace (Java's withNamespace): the group, topics and queues go on the wire as ``ns%name``;
        # every method takes and returns the plain names, as Java's DefaultLitePullConsumer does
        self.namespace = self.client_config.namespace or None
        self.group = self.client_config.with_namespace(group)
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.strategy = strategy_by_name(allocate_strategy)
        self.pull_batch_size = pull_batch_size
        self.max_queue_count = pull_threshold_for_queue
        self.max_queue_bytes = pull_threshold_size_for_queue
        self.max_total = pull_threshold_for_all
        t = self.timing
        # the Java lite consumer long-polls 20 s; never more than the pull timeout allows
        self.suspend_timeout = max(
            0.05, min(20.0, t.pull_timeout - t.held_pull_check_interval - t.pull_timeout_margin)
        )
        self._subs: dict[str, SubscriptionData] = {}
        self._mode: Literal["none", "assign", "subscribe"] = "none"
        self._assigned: set[MessageQueue] = set()
        self.queues: dict[MessageQueue, _Queue] = {}
        self._ready: deque[_Queue] = deque()
        self._total = 0
        self._changed = anyio.Event()  # data arrived, room freed, resume, close
        self._rebalance_wakeup = anyio.Event()
        self._rebalanced = anyio.Event()
        self._last_auto_commit = time.monotonic()
        self._client: ClientInstance | None = None
        self._store: RemoteOffsetStore | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------

    async def __aenter__(self) -> LitePullConsumer:
        name = self.client_config.instance_name
        client = ClientInstance(
            self.client_config, instance_name=pid_instance_name() if name == "DEFAULT" else name
        )
        await client.__aenter__()
        try:
            self._client = client
            self._store = RemoteOffsetStore(client, self.group)
            client.register_consumer(self)
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
            self._tg.start_soon(self._persist_loop)
        except BaseException:
            await client.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop pulling, commit (with auto commit), persist offsets synchronously, unregister."""
        if self._closed or self._client is None:
            return
        self._closed = True
        client, tg = self._client, self._tg
        self._wake()
        try:
            with anyio.CancelScope(shield=True):
                for q in self.queues.values():
                    if q.scope is not None:
                        q.scope.cancel()
                if self.auto_commit:
                    self._commit_memory(None)
                with anyio.move_on_after(self.timing.request_timeout * 2):
                    await self.offset_store.persist_all(list(self.queues), sync=True)
                client.unregister_consumer_local(self.group)
                with anyio.move_on_after(self.timing.request_timeout * 2):
                    await client.unregister_everywhere(consumer_group=self.group)
        finally:
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
            self._tg = None
            await client.__aexit__(None, None, None)

    @property
    def client(self) -> ClientInstance:
        if self._client is None or self._closed:
            raise ClientError("lite pull consumer is not running (use 'async with')")
        return self._client

    @property
    def offset_store(self) -> RemoteOffsetStore:
        if self._store is None:
            raise ClientError("lite pull consumer is not started")
        return self._store

    def _task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None or self._closed:
            raise ClientError("lite pull consumer is not running (use 'async with')")
        return self._tg

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
        target = {self._in(mq) for mq in queues}
        self._assigned = target
        for topic in sorted({mq.topic for mq in target}):
            await self.client.update_route(topic)
        await self.client.send_heartbeat_to_all_brokers()
        for mq in sorted(set(self.queues) - target):
            await self._drop(mq)
        for mq in sorted(target - set(self.queues)):
            await self._add(mq, await self._start_offset(mq))

    async def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic`` with a tag expression; queues are shared out among the group's
        members by the allocation strategy and rebalanced when members come and go."""
        if self._mode == "assign":
            raise ClientError("assign() and subscribe() cannot be mixed")
        if not topic or topic.startswith("%"):
            raise ConfigError(f"cannot subscribe to topic {topic!r}")
        topic = self.client_config.with_namespace(topic)
        tg = self._task_group()
        sub_string, tags, codes = parse_tag_expression(expression)
        self._subs[topic] = SubscriptionData(
            topic=topic, sub_string=sub_string, tags_set=tags, code_set=codes,
            sub_version=int(time.time() * 1000),
        )  # fmt: skip
        first = self._mode != "subscribe"
        self._mode = "subscribe"
        await self.client.update_route_quietly([topic])
        await self.client.send_heartbeat_to_all_brokers()
        if first:
            tg.start_soon(self._rebalance_loop)
        else:
            self.rebalance_now()

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer owns now."""
        return {self._out(mq) for mq in self.queues}

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (``fetchMessageQueues``)."""
        topic = self.client_config.with_namespace(topic)
        await self.client.update_route(topic)
        return [self._out(mq) for mq in await self.client.subscribe_queues(topic)]

    # -- polling ----------------------------------------------------------------------------------------

    async def poll(self, timeout: float = 5.0, *, max_messages: int | None = None) -> list[MessageExt]:
        """The next batch of messages (one pulled batch, more if ``max_messages`` allows and they are
        already buffered); an empty list after ``timeout`` seconds without data."""
        if self.auto_commit and time.monotonic() - self._last_auto_commit >= self.auto_commit_interval:
            self._commit_memory(None)
        limit = max_messages or 1
        out: list[MessageExt] = []
        with anyio.move_on_after(timeout):
            while not out:
                self.client  # noqa: B018 - raises once closed
                self._take(out, limit)
                if not out:
                    await self._wait_changed()
        if self.namespace:
            for m in out:
                m.topic = unwrap_namespace(self.namespace, m.topic)
        return out

    def _take(self, out: list[MessageExt], limit: int) -> None:
        skipped: list[_Queue] = []
        while self._ready and len(out) < limit:
            q = self._ready.popleft()
            q.in_ready = False
            if q.paused or not q.batches or self.queues.get(q.mq) is not q:
                if q.paused and q.batches:
                    skipped.append(q)
                continue
            batch = q.batches.popleft()
            q.count -= len(batch)
            q.nbytes -= sum(len(m.body) for m in batch)
            self._total -= len(batch)
            q.consume_offset = batch[-1].queue_offset + 1
            out.extend(batch)
            if q.batches:
                q.in_ready = True
                self._ready.append(q)
        for q in skipped:
            q.in_ready = True
            self._ready.append(q)
        if out:
            self._wake()

    def _wake(self) -> None:
        ev, self._changed = self._changed, anyio.Event()
        ev.set()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop pulling ``queues`` and hold back their buffered messages until :meth:`resume`."""
        for mq in queues:
            q = self.queues.get(self._in(mq))
            if q is not None:
                q.paused = True

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            q = self.queues.get(self._in(mq))
            if q is not None and q.paused:
                q.paused = False
                if q.batches and not q.in_ready:
                    q.in_ready = True
                    self._ready.append(q)
        self._wake()

    def paused(self) -> set[MessageQueue]:
        return {self._out(mq) for mq, q in self.queues.items() if q.paused}

    # -- seeking ----------------------------------------------------------------------------------------

    def _owned(self, mq: MessageQueue) -> _Queue:
        q = self.queues.get(self._in(mq))
        if q is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        return q

    async def _addr(self, mq: MessageQueue) -> str:
        return await self.client.master_addr(mq.broker_name, mq.topic)

    async def min_offset(self, mq: MessageQueue) -> int:
        mq = self._in(mq)
        return await self.client.api.get_min_offset(await self._addr(mq), mq, self.timing.request_timeout)

    async def max_offset(self, mq: MessageQueue) -> int:
        mq = self._in(mq)
        return await self.client.api.get_max_offset(await self._addr(mq), mq, self.timing.request_timeout)

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The broker's answer to SEARCH_OFFSET_BY_TIMESTAMP for ``mq`` at ``timestamp_ms``, as Java's
        ``offsetForTimestamp``: a 5.x broker answers the first offset stored at or after it, a 4.9.8
        broker the offset whose store time is nearest (it may be an older message)."""
        mq = self._in(mq)
        addr = await self._addr(mq)
        return await self.client.api.search_offset(addr, mq, timestamp_ms, self.timing.request_timeout)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next; buffered messages of it are discarded. The offset must lie
        in [min offset, max offset] (checked with the broker, as Java does)."""
        self._owned(mq)
        lo = await self.min_offset(mq)
        hi = await self.max_offset(mq)
        if not lo <= offset <= hi:
            raise ConfigError(f"seek offset {offset} of {mq} is outside the queue's range [{lo}, {hi}]")
        self._reset(self._owned(mq), offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        self._owned(mq)
        self._reset(self._owned(mq), await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        self._owned(mq)
        self._reset(self._owned(mq), await self.max_offset(mq))

    def _reset(self, q: _Queue, offset: int) -> None:
        self._discard(q)
        q.generation += 1
        q.next_offset = q.consume_offset = offset
        if q.scope is not None:
            q.scope.cancel()  # the running pull (maybe long-polling) is stale
        self._task_group().start_soon(self._pull_loop, q)

    def _discard(self, q: _Queue) -> None:
        self._total -= q.count
        q.batches.clear()
        q.count = q.nbytes = 0
        self._wake()

    def position(self, mq: MessageQueue) -> int:
        """The consume offset of ``mq``: the offset after the last message poll() returned."""
        return self._owned(mq).consume_offset

    # -- committing -------------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None, *, sync: bool = False) -> None:
        """Commit the consume offsets of every owned queue (or ``offsets``) to the offset store's
        memory; the persist timer writes them to the brokers. ``sync=True`` writes them now."""
        mqs = self._commit_memory(offsets)
        if sync:
            await self.offset_store.persist_all(mqs, sync=True)

    def _commit_memory(self, offsets: Mapping[MessageQueue, int] | None) -> list[MessageQueue]:
        self._last_auto_commit = time.monotonic()
        store = self.offset_store
        if offsets is None:
            items = {m: q.consume_offset for m, q in self.queues.items()}
        else:
            # as Java's commit(Map): only queues this consumer owns (another member's, or one just
            # rebalanced away, must not be overwritten), and no negative offset
            items = {}
            for m, off in offsets.items():
                mq = self._in(m)
                if mq not in self.queues or off < 0:
                    log.warning("commit of %s at %d ignored: not an owned queue or a negative offset", m, off)
                    continue
                items[mq] = off
        for mq, off in items.items():
            store.update(mq, off, increase_only=False)
        return list(items)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The committed offset of ``mq``: the one committed in this consumer's memory (not yet written by
        the persist timer), else the broker's (None: never committed). As Java's ``committed``
        (``MEMORY_FIRST_THEN_STORE``), and without overwriting a pending commit with the broker's value."""
        mq = self._in(mq)
        local = self.offset_store.read_memory(mq)
        if local >= 0:
            return local
        return await self.offset_store.query_store(mq)

    async def _persist_loop(self) -> None:
        while True:
            await anyio.sleep(self.timing.persist_interval)
            await self.offset_store.persist_all(list(self.queues))

    # -- queues -----------------------------------------------------------------------------------------

    async def _start_offset(self, mq: MessageQueue) -> int:
        stored = await self.offset_store.read_store(mq)
        if stored is not None and stored >= 0:
            return stored
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return await self.min_offset(mq)
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            ts = self.consume_timestamp_ms or int((time.time() - 1800) * 1000)
            return await self.offset_for_timestamp(mq, ts)
        return await self.max_offset(mq)

    async def _add(self, mq: MessageQueue, offset: int) -> None:
        q = _Queue(mq, offset)
        self.queues[mq] = q
        self._task_group().start_soon(self._pull_loop, q)

    async def _drop(self, mq: MessageQueue) -> None:
        q = self.queues.pop(mq, None)
        if q is None:
            return
        if q.scope is not None:
            q.scope.cancel()
        self._discard(q)
        if self.auto_commit:
            self.offset_store.update(mq, q.consume_offset, increase_only=False)
        try:
            await self.offset_store.persist(mq, sync=True)
        except RocketMQError as exc:
            log.warning("persisting the offset of dropped %s failed: %s", mq, exc)
        self.offset_store.remove(mq)

    def _has_room(self, q: _Queue) -> bool:
        return (
            self._total < self.max_total
            and q.count < self.max_queue_count
            and q.nbytes < self.max_queue_bytes
        )

    async def _pull_loop(self, q: _Queue) -> None:
        with anyio.CancelScope() as scope:
            q.scope = scope
            gen = q.generation
            try:
                while self.queues.get(q.mq) is q and q.generation == gen and not self._closed:
                    if q.paused or not self._has_room(q):
                        await self._wait_changed()
                        continue
                    await self._pull_once(q, gen)
            finally:
                if q.scope is scope:
                    q.scope = None

    async def _pull_once(self, q: _Queue, gen: int) -> None:
        client, mq = self._client, q.mq
        assert client is not None
        sub = self._subs.get(mq.topic)
        # the node the broker suggested last (a slave while the master's data is not in memory), else
        # the master, else any (PullAPIWrapper.pullKernelImpl)
        addr = client.broker_addr(mq.broker_name, q.suggested)
        if addr is None:
            await client.update_route_quietly([mq.topic])
            addr = client.broker_addr(mq.broker_name, q.suggested)
            if addr is None:
                await anyio.sleep(self.timing.pull_error_delay)
                return
        header = H.PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=q.next_offset,
            max_msg_nums=self.pull_batch_size,
            sys_flag=PullSysFlag.build(commit_offset=False, suspend=True, subscription=True, lite_pull=True),
            commit_offset=0,
            suspend_timeout_millis=int(self.suspend_timeout * 1000),
            sub_version=0,
            subscription=sub.sub_string if sub is not None else "*",
            expression_type="TAG",
            bname=mq.broker_name,
        )
        try:
            res = await client.api.pull(addr, header, self.timing.pull_timeout, broker_name=mq.broker_name)
        except BrokerError as exc:
            if exc.code not in (ResponseCode.SUBSCRIPTION_NOT_LATEST, ResponseCode.SUBSCRIPTION_NOT_EXIST):
                log.warning("pull of %s failed: %s", mq, exc)
            await anyio.sleep(self.timing.pull_error_delay)
            return
        except RocketMQError as exc:
            log.warning("pull of %s failed: %s", mq, exc)
            await anyio.sleep(self.timing.pull_error_delay)
            return
        q.suggested = res.suggest_which_broker_id
        if q.generation != gen or self.queues.get(mq) is not q:
            return  # seeked or dropped meanwhile
        if res.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("pull of %s at %d: offset illegal (%s), moving to %d",
                        mq, q.next_offset, res.remark, res.next_begin_offset)  # fmt: skip
        q.next_offset = res.next_begin_offset
        if res.status is not PullStatus.FOUND:
            return
        msgs = res.messages
        if sub is not None and sub.tags_set:
            tags = set(sub.tags_set)
            msgs = [m for m in msgs if m.tags in tags]
        if msgs:
            q.batches.append(msgs)
            q.count += len(msgs)
            q.nbytes += sum(len(m.body) for m in msgs)
            self._total += len(msgs)
            if not q.in_ready and not q.paused:
                q.in_ready = True
                self._ready.append(q)
            self._wake()

    # -- rebalance (subscribe mode) ---------------------------------------------------------------------

    def rebalance_now(self) -> None:
        self._rebalance_wakeup.set()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance (subscribe mode)."""
        await self._rebalanced.wait()

    async def _rebalance_loop(self) -> None:
        while True:
            try:
                await self.do_rebalance()
            except RocketMQError as exc:
                log.warning("rebalance of lite group %s failed: %s", self.group, exc)
            done, self._rebalanced = self._rebalanced, anyio.Event()
            done.set()
            with anyio.move_on_after(self.timing.rebalance_interval):
                await self._rebalance_wakeup.wait()
            self._rebalance_wakeup = anyio.Event()

    async def do_rebalance(self) -> None:
        """One rebalance of every subscribed topic (``RebalanceLitePullImpl``)."""
        client = self.client
        for topic in sorted(self._subs):
            try:
                mq_all = await client.subscribe_queues(topic)
            except RocketMQError as exc:
                log.debug("rebalance: no route for %s: %s", topic, exc)
                continue
            route = client.routes.get(topic)
            if route is None or not route.broker_datas:
                continue
            bd = random.choice(route.broker_datas)
            addr = bd.broker_addrs.get(0) or next(iter(bd.broker_addrs.values()))
            try:
                cids = await client.api.get_consumer_id_list(addr, self.group, self.timing.request_timeout)
            except RocketMQError as exc:
                # this topic waits for the next round; the others go on (Java's findConsumerIdList)
                log.warning("rebalance of %s for lite group %s: no consumer list: %s", topic, self.group, exc)
                continue
            if not cids:
                continue  # Java: an empty list fails the allocation and changes nothing
            allocated = allocate_topic(self.strategy, self.group, client.client_id, mq_all, cids)
            to_drop, to_add = diff(self.queues.keys(), allocated, topic)
            for mq in sorted(to_drop):
                await self._drop(mq)
            for mq in sorted(to_add):
                try:
                    offset = await self._start_offset(mq)
                except RocketMQError as exc:
                    log.warning("rebalance: cannot compute the start offset of %s: %s", mq, exc)
                    continue
                await self._add(mq, offset)
            if to_drop or to_add:
                log.info("lite group %s (%s) rebalanced %s: +%d -%d",
                         self.group, client.client_id, topic, len(to_add), len(to_drop))  # fmt: skip
        for mq in [mq for mq in self.queues if mq.topic not in self._subs]:
            await self._drop(mq)

    # -- ConsumerHandle ---------------------------------------------------------------------------------

    def consumer_data(self) -> ConsumerData:
        subs = [self._subs[t] for t in sorted(self._subs)] if self._mode == "subscribe" else []
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

    def subscribed_topics(self) -> set[str]:
        return set(self._subs) | {mq.topic for mq in self._assigned}

    async def handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return None
