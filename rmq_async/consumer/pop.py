"""POP consumption (5.x), the push consumer's ``client_rebalance=False`` mode.

Strategy (Java ``DefaultMQPushConsumerImpl`` pop paths, ``ConsumeMessagePopConcurrentlyService``,
``RebalanceImpl.tryQueryAssignment``): the rebalancer asks :meth:`PopService.assign` for each topic
instead of allocating queues itself. That asks QUERY_ASSIGNMENT (400) of the topic's brokers: the
queues the broker assigns in POP mode get one pop loop each (queue id -1: any queue of that broker),
the PULL ones go back to the rebalancer and are pulled as before (the group's ``%RETRY%`` topic always
is); a broker that does not know the request (4.x) makes the topic fall back to client-side
rebalancing, as Java. A pop loop awaits room (at most ``pop_threshold`` popped messages not settled
per queue, Java's popThresholdForQueue 96; none while the user paused it, ``PushConsumer.pause``),
pops (200050: 32 messages, invisible time ``Timing.pop_invisible_time``, poll time
``Timing.suspend_timeout``, init mode MIN for CONSUME_FROM_FIRST_OFFSET else MAX), gives every
message its receipt handle (``POP_CK``, built from the answer's header unless the broker put one on
a revived message) and hands the batches to the workers; 210 (nothing in the poll time) pops again
at once, errors back off ``pull_error_delay``.

A worker runs the handler through the same path as the concurrent service (hooks, consume deadline,
what it raises or returns; :mod:`.outcome` reads the answer, as for the concurrent service) and settles
each message: SUCCESS (up to ``ack_index``) is acked (200051),
the rest changes its invisible time (200053) to ``pop_delay_levels[reconsume times]`` (or the
context's ``delay_level``), so the broker revives it through the pop retry topic; a message that
failed ``max_reconsume_times`` times is delayed by its age and acked (dropped, logged) once older
than twice the last level, as Java (POP has no DLQ on the client side). Nothing commits offsets; no
queue locks. Handler deadlines: a batch whose invisible time is over before its handler starts is
not run (Java ``isPopTimeout``: the broker has revived or will revive it); a handler still running
when the invisible time ends is not extended (Java does not either): the broker delivers the message
again, to any member, and the late result is still acked (a stale handle, which the broker accepts
and ignores); ``stats.late`` counts those. Orderly POP is not offered (Java: not implemented).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from ..errors import BrokerError, ConfigError, RocketMQError
from ..protocol.mq import MessageQueue
from ..protocol.pop import (
    FIRST_POP_TIME,
    POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ExtraInfo,
    PopMessageRequestHeader,
    parse_offset_info,
)
from ..protocol.stored import MessageExt, decode_messages
from .context import ConsumerContext
from .flow import FlowControl, Step
from .invoke import Invoker
from .outcome import settle_plan
from .pauses import Target
from .types import ConsumeContext, ConsumeResult, Handler

__all__ = ["PopService", "PopStats"]

log = logging.getLogger("rmq_async.consumer")

#: Java popThresholdForQueue: popped messages not settled yet, per pop queue
POP_THRESHOLD = 96
POP_BATCH = 32  # popBatchNums (the broker refuses more than 32)


@dataclass
class PopStats:
    """What the POP side did (``health()``/running info read it)."""

    pops: int = 0
    popped: int = 0
    empty_pops: int = 0
    acked: int = 0
    ack_failed: int = 0
    invisible_changed: int = 0
    #: messages popped with reconsume times > 0 (revived after a failure or an expired invisible time)
    revived_seen: int = 0
    #: handlers that finished after their messages' invisible time (the broker redelivers those)
    late: int = 0
    #: batches not run because their invisible time was over before a worker took them
    expired: int = 0
    #: failed messages acked without consuming after ``max_reconsume_times`` (Java's checkNeedAckOrDelay)
    dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class _PopQueue:
    """One POP-mode assignment: its loop's cancel scope and its flow control (popped messages not
    settled, the user's pause), which its loop awaits as a pull loop awaits its process queue's room."""

    __slots__ = ("_parked", "_waiting", "inflight", "mq", "paused", "room", "scope")

    def __init__(self, mq: MessageQueue, *, paused: bool) -> None:
        self.mq = mq
        self.inflight = 0
        #: paused by the user (``PushConsumer.pause``): no pop until resumed
        self.paused = paused
        self.room = anyio.Event()
        self.scope = anyio.CancelScope()
        self._waiting = False
        self._parked: anyio.Event | None = None  # made by wait_parked, set when the loop parks

    def full(self) -> bool:
        return self.paused or self.inflight >= POP_THRESHOLD

    def _wake(self) -> None:
        self.room.set()
        self.room = anyio.Event()

    def settled(self, n: int) -> None:
        self.inflight -= n
        self._wake()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume popping; resuming wakes the loop at once."""
        self.paused = paused
        if not paused:
            self._wake()

    async def wait_for_room(self) -> None:
        self._waiting = True
        if self._parked is not None:
            self._parked.set()
            self._parked = None
        try:
            await self.room.wait()
        finally:
            self._waiting = False

    async def wait_parked(self) -> None:
        """Return once this queue's loop waits (paused or full): it pops no more until woken. For
        tests and monitoring (as :meth:`~.process_queue.ProcessQueue.wait_parked`)."""
        if self._waiting:
            return
        if self._parked is None:
            self._parked = anyio.Event()
        await self._parked.wait()


def _now_ms() -> int:
    return int(time.time() * 1000)


class PopService:
    """The pop loops and the POP consume path of one push consumer run."""

    def __init__(self, ctx: ConsumerContext, handler: Handler | None, timeout: Callable[[], float]) -> None:
        if handler is None:
            raise ConfigError("client_rebalance=False (POP) needs a handler")
        self.c = ctx
        self.handler = handler
        self.invoker = Invoker(ctx, handler)  # runs the handler: hooks, deadline, observers, results
        self.timeout = timeout  # the consume timeout (seconds), read per batch
        self.queues: dict[MessageQueue, _PopQueue] = {}
        self.stats = PopStats()
        self.limiter = anyio.CapacityLimiter(ctx.config.concurrency)  # the consume workers
        self.levels = ctx.timing.pop_delay_seconds  # parsed once
        self._client_side: set[str] = set()  # topics whose brokers do not answer 400
        self._idle = anyio.Event()
        self._running = 0

    # -- assignment ------------------------------------------------------------------------------

    async def assign(self, topic: str) -> set[MessageQueue] | None:
        """``tryQueryAssignment``: the PULL-mode queues of ``topic`` (POP ones start pop loops);
        None: rebalance ``topic`` on the client side (a broker without QUERY_ASSIGNMENT)."""
        c = self.c
        if topic in self._client_side:
            return None
        client = c.client
        route = client.routes.get(topic) or await client.update_route(topic)
        pull: set[MessageQueue] = set()
        pop: set[MessageQueue] = set()
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(0) or next(iter(bd.broker_addrs.values()))
            assigned = await client.api.query_assignment(
                addr,
                topic,
                c.group,
                client.client_id,
                c.config.allocate_strategy,
                c.config.message_model,
                c.timing.request_timeout,
            )
            if assigned is None:
                log.warning("broker %s does not assign %s (no POP): client-side rebalance", addr, topic)
                self._client_side.add(topic)
                return None
            for a in assigned:
                (pop if a.mode == "POP" else pull).add(a.mq)
        self._apply(topic, pop)
        self.drop_topics(set(c.subscriptions.topics()))
        return pull

    def _apply(self, topic: str, pop: set[MessageQueue]) -> None:
        for mq in [mq for mq in self.queues if mq.topic == topic and mq not in pop]:
            self.queues.pop(mq).scope.cancel()  # popped messages not consumed come back after invisible time
        pauses = self.c.pauses
        for mq in sorted(pop - self.queues.keys()):
            pq = self.queues[mq] = _PopQueue(mq, paused=pauses.covers(mq))
            if (
                mq.queue_id < 0
                and not pq.paused
                and any(q.topic == mq.topic and q.broker_name == mq.broker_name for q in pauses.queues)
            ):
                log.warning("%s is popped as a whole: its queues paused one by one are popped too", mq)
            if not self.c.start_soon(self._pop_loop, pq):
                del self.queues[mq]
            else:
                log.info("group %s pops %s", self.c.group, mq)

    def drop_topics(self, keep: set[str]) -> None:
        for mq in [mq for mq in self.queues if mq.topic not in keep]:
            self.queues.pop(mq).scope.cancel()

    # -- pause (consumer/control.py) ---------------------------------------------------------------

    def check_pause(self, targets: list[Target]) -> None:
        """A queue of a topic popped from its broker as a whole (queue id -1: the broker picks the
        queue of each pop) cannot be paused alone: :class:`ConfigError` naming what can."""
        whole = {(mq.topic, mq.broker_name) for mq in self.queues if mq.queue_id < 0}
        for t in targets:
            if isinstance(t, MessageQueue) and t.queue_id >= 0 and (t.topic, t.broker_name) in whole:
                raise ConfigError(
                    f"{t} is popped with every queue of {t.broker_name} at once (POP, queue id -1): "
                    f"pause the topic {t.topic!r} or {MessageQueue(t.topic, t.broker_name, -1)}"
                )

    def apply_pauses(self) -> None:
        """Pause and resume the pop loops as the context's pauses say now (Java checks ``isPause()``
        before each pop): a pop already out is consumed as usual."""
        pauses = self.c.pauses
        for mq, pq in self.queues.items():
            if pq.paused != (covered := pauses.covers(mq)):
                pq.set_paused(covered)

    def close(self) -> None:
        """Stop popping (shutdown): what was popped and not consumed comes back after invisible time."""
        for pq in self.queues.values():
            pq.scope.cancel()
        self.queues.clear()

    def topics(self) -> set[str]:
        """The topics popped now (their queues are the broker's, none is owned here)."""
        return {mq.topic for mq in self.queues}

    def snapshot(self) -> dict[str, object]:
        """For ``health()``: the counters and, per pop queue, the popped messages not settled yet."""
        return {
            **self.stats.as_dict(),
            "queues": {str(mq): pq.inflight for mq, pq in sorted(self.queues.items())},
        }

    def running_props(self) -> dict[str, str]:
        """GET_CONSUMER_RUNNING_INFO properties (``mqadmin consumerStatus``): POP settings, counters."""
        t = self.c.timing
        props = {
            "clientRebalance": "false",
            "popInvisibleTime": str(int(t.pop_invisible_time * 1000)),
            "popBatchNums": str(POP_BATCH),
            "popThresholdForQueue": str(POP_THRESHOLD),
            "popQueues": ",".join(str(mq) for mq in sorted(self.queues)),
        }
        props.update({f"pop.{k}": str(v) for k, v in self.stats.as_dict().items()})
        return props

    async def wait_idle(self) -> None:
        while self._running:
            await self._idle.wait()

    # -- popping ---------------------------------------------------------------------------------

    def _header(self, mq: MessageQueue) -> PopMessageRequestHeader:
        c = self.c
        sub = c.subscriptions.get(mq.topic)
        return PopMessageRequestHeader(
            consumer_group=c.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            max_msg_nums=POP_BATCH,
            poll_time=int(c.timing.suspend_timeout * 1000),
            invisible_time=int(c.timing.pop_invisible_time * 1000),
            born_time=_now_ms(),
            init_mode=0 if c.config.consume_from_where == "CONSUME_FROM_FIRST_OFFSET" else 1,
            exp_type=sub.expression_type if sub is not None else "TAG",
            exp=sub.sub_string if sub is not None else "*",
            order=False,
            bname=mq.broker_name,
        )

    async def _pop_loop(self, pq: _PopQueue) -> None:
        c = self.c
        flow = FlowControl(c.timing.pull_error_delay)  # the pull loop's: room, back-off
        with pq.scope:
            while (room := flow.room(c.stopping, pq.full())) is not Step.STOP:
                if room is Step.WAIT:
                    await pq.wait_for_room()
                    continue
                try:
                    msgs, pop_time, invisible = await self._pop(pq.mq)
                except RocketMQError as exc:
                    if c.stopping:
                        return
                    log.warning("pop of %s for group %s failed: %s", pq.mq, c.group, exc)
                    await anyio.sleep(flow.failed().seconds)
                    continue
                if not msgs:
                    continue
                pq.inflight += len(msgs)
                n = max(1, c.config.consume_batch_max_size)
                for i in range(0, len(msgs), n):
                    batch = msgs[i : i + n]
                    if not c.start_handler(self._consume, pq, batch, pop_time + invisible):
                        c.start_soon(self._consume, pq, batch, pop_time + invisible)

    async def _pop(self, mq: MessageQueue) -> tuple[list[MessageExt], int, int]:
        c = self.c
        client = c.client
        addr = await client.master_addr(mq.broker_name, mq.topic)
        t0 = time.monotonic()
        got = await client.api.pop_message(addr, self._header(mq), c.timing.pull_timeout)
        self.stats.pops += 1
        if got is None:
            self.stats.empty_pops += 1
            return [], 0, 0
        h, body = got
        msgs = decode_messages(body, broker_name=mq.broker_name) if body else []
        starts = parse_offset_info(h.start_offset_info or "", h.msg_offset_info or "")
        for m in msgs:
            # processPopResponse: a normal message's handle from the header, a revived one keeps its own
            if m.get_property(POP_CK) is None:
                start = starts.get(("0", m.queue_id, m.queue_offset), m.queue_offset)
                info = ExtraInfo(
                    start,
                    h.pop_time,
                    h.invisible_time,
                    h.revive_qid,
                    "0",
                    mq.broker_name,
                    m.queue_id,
                    m.queue_offset,
                )
                m.set_property(POP_CK, str(info))
            if m.get_property(FIRST_POP_TIME) is None:
                m.set_property(FIRST_POP_TIME, str(h.pop_time))
            if m.reconsume_times > 0:
                self.stats.revived_seen += 1
        self.stats.popped += len(msgs)
        if msgs:
            rt = time.monotonic() - t0
            c.stats.pulled(mq.topic, len(msgs), rt)
            # OpenTelemetry: pull latency, delivery latency, what to watch
            if (observer := c.observation.observer) is not None:
                observer.received(mq.topic, msgs, rt)
        return msgs, h.pop_time, h.invisible_time

    # -- consuming -------------------------------------------------------------------------------

    async def _consume(self, pq: _PopQueue, batch: list[MessageExt], due_ms: int) -> None:
        c = self.c
        self._running += 1
        try:
            async with self.limiter:  # a worker slot for the handler only (Java acks asynchronously)
                if c.stopping:
                    return  # left to the invisible time
                if _now_ms() >= due_ms:
                    self.stats.expired += 1
                    return
                result, rt = await self._run_handler(pq.mq, batch)
            if _now_ms() >= due_ms:
                self.stats.late += 1
            await self._settle(pq.mq, batch, result, rt)
        finally:
            pq.settled(len(batch))
            self._running -= 1
            if not self._running:
                self._idle.set()
                self._idle = anyio.Event()

    async def _run_handler(
        self, mq: MessageQueue, batch: list[MessageExt]
    ) -> tuple[tuple[ConsumeResult, ConsumeContext], float]:
        ctx = ConsumeContext(mq)
        # the trace labels a call TIME_OUT past the invisible time, as Java's POP service
        call = await self.invoker.call(
            batch, ctx, timeout=self.timeout(), trace_timeout=self.c.timing.pop_invisible_time
        )
        return (call.result, ctx), call.took

    async def _settle(
        self,
        mq: MessageQueue,
        batch: list[MessageExt],
        outcome: tuple[ConsumeResult, ConsumeContext],
        rt: float,
    ) -> None:
        c = self.c
        result, ctx = outcome
        ok, failed, delay_level = settle_plan(result, ctx, batch, c.group)
        if ok:
            c.stats.consumed(mq.topic, len(ok), rt, ok=True)
        if failed:
            c.stats.consumed(mq.topic, len(failed), rt, ok=False)
        jobs: list[Awaitable[None]] = [self.ack(m) for m in ok]
        levels = self.levels
        for m in failed:
            if m.reconsume_times >= c.max_reconsume_times:
                age = _now_ms() - m.born_timestamp
                if age > levels[-1] * 2000:
                    log.warning("message %s failed %d times: acked (dropped)", m.msg_id, m.reconsume_times)
                    self.stats.dropped += 1
                    jobs.append(self.ack(m))
                    continue
                level = next((i + 1 for i in range(len(levels) - 1, -1, -1) if age >= levels[i] * 1000), 0)
            else:
                level = delay_level if delay_level > 0 else m.reconsume_times
            jobs.append(self.change_invisible(m, levels[min(level, len(levels) - 1)]))
        async with anyio.create_task_group() as tg:
            for job in jobs:
                tg.start_soon(_await, job)

    async def ack(self, m: MessageExt) -> None:
        """ACK_MESSAGE of one popped message (Java ``ackAsync``); failures are logged and counted."""
        c = self.c
        handle = m.get_property(POP_CK)
        if handle is None:
            return
        info = ExtraInfo.parse(handle)
        header = AckMessageRequestHeader(
            consumer_group=c.group,
            topic=info.topic(m.topic, c.group),
            queue_id=info.queue_id,
            extra_info=handle,
            offset=info.offset,
            bname=info.broker_name,
        )
        try:
            addr = await c.client.master_addr(info.broker_name, m.topic)
            await c.client.api.ack_message(addr, header, c.timing.request_timeout)
        except BrokerError as exc:
            self.stats.ack_failed += 1
            log.warning("ack of %s refused: %s", m.msg_id, exc)
            return
        except RocketMQError as exc:
            self.stats.ack_failed += 1
            log.warning("ack of %s failed: %s (it comes back after its invisible time)", m.msg_id, exc)
            return
        self.stats.acked += 1

    async def change_invisible(self, m: MessageExt, seconds: float) -> None:
        """CHANGE_MESSAGE_INVISIBLETIME: visible again in ``seconds``; the new handle replaces POP_CK."""
        c = self.c
        handle = m.get_property(POP_CK)
        if handle is None:
            return
        info = ExtraInfo.parse(handle)
        invisible = int(seconds * 1000)
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=c.group,
            topic=info.topic(m.topic, c.group),
            queue_id=info.queue_id,
            extra_info=handle,
            offset=info.offset,
            invisible_time=invisible,
            bname=info.broker_name,
        )
        try:
            addr = await c.client.master_addr(info.broker_name, m.topic)
            rh = await c.client.api.change_invisible_time(addr, header, c.timing.request_timeout)
        except RocketMQError as exc:
            log.warning("change of invisible time of %s failed: %s", m.msg_id, exc)
            return
        self.stats.invisible_changed += 1
        m.set_property(POP_CK, str(info.changed(rh.pop_time, rh.invisible_time, rh.revive_qid)))


async def _await(job: Awaitable[None]) -> None:
    await job
