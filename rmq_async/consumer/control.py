"""The user's control of a push consumer's queues while it runs (aiokafka's ``pause`` / ``resume`` /
``seek`` / ``committed`` / ``position`` / ``end_offsets`` / ``commit``; Java's
``DefaultMQPushConsumer.suspend()`` / ``resume()``), one :class:`PushControl` per run; the facade's
methods of the same names delegate to it.

Pausing marks the owned process queues of a topic or a queue: their pull loops wait for room as over
a threshold (no poll, no sleep) until resumed; what they cached is still consumed, a pull answered
after the pause is not applied, heartbeats and rebalancing go on and the queues stay owned. What is
paused is kept in the context (:class:`~.pauses.Pauses`): a queue assigned later for a paused topic,
or in a later run, starts paused. POP-consumed topics (``client_rebalance=False``) pause the same way:
their pop loops await before the next pop (:class:`~.pop.PopService`); the messages of a pop already
out when paused are consumed and acked as usual (Java's ``popMessage`` checks ``isPause()`` before
each pop too): the broker made them invisible to the group's other members already, so leaving them
would only delay them by the invisible time. A queue of a broker popped as a whole (queue id -1)
cannot be paused alone (:class:`~rmq_async.ConfigError`).

A seek replaces the queue's process queue (:meth:`~.queues.QueueTable.restart`: the old one's
handlers, still running, commit nowhere), commits the new offset to the broker at once (a member
the queue is rebalanced to next starts there) and starts the new pull loop. As aiokafka's
``IllegalStateError`` and Java's lite consumer, a queue this member does not own is refused
(:class:`~rmq_async.ClientError`); a group's offsets of queues not owned are changed with the admin
tool (``rmq-async admin reset-offset``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from ..errors import ClientError, ConfigError, RocketMQError
from ..protocol.mq import MessageQueue
from .broker_offsets import BrokerOffsets
from .context import ConsumerContext
from .pauses import Target
from .pop import PopService
from .process_queue import ProcessQueue
from .queues import QueueTable

__all__ = ["PushControl", "Queues"]

log = logging.getLogger("rmq_async.consumer")

#: what the seek-to methods take: a queue, queues, a topic (its owned queues), None (every owned queue)
Queues = MessageQueue | Iterable[MessageQueue] | str | None


class PushControl:
    """``start_pull``: start a queue's pull loop (after a seek); ``pop``: the run's POP service, if
    any. Topics and queues are taken as the user names them or as the broker does (the namespace
    added when missing)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        table: QueueTable,
        *,
        start_pull: Callable[[ProcessQueue], None],
        pop: PopService | None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.pop = pop  # [pop] its pop loops pause as the pull loops do
        self._in = ctx.client_config.with_namespace
        self._start_pull = start_pull

    def _mq_in(self, mq: MessageQueue) -> MessageQueue:
        return MessageQueue(self._in(mq.topic), mq.broker_name, mq.queue_id)

    def _targets(self, targets: Target | Iterable[Target]) -> list[Target]:
        items = [targets] if isinstance(targets, str | MessageQueue) else list(targets)
        out: list[Target] = []
        for t in items:
            if isinstance(t, MessageQueue):
                out.append(self._mq_in(t))
            elif isinstance(t, str) and t:
                out.append(self._in(t))
            else:
                raise ConfigError(f"pause/resume take topics and MessageQueues, not {t!r}")
        return out

    # -- pause / resume -------------------------------------------------------------------------------

    def pause(self, targets: Target | Iterable[Target]) -> None:
        pauses = self.ctx.pauses
        items = self._targets(targets)
        if self.pop is not None:
            self.pop.check_pause(items)
        pauses.pause(items)
        for pq in self.table.pqs.values():
            if not pq.paused and pauses.covers(pq.mq):
                pq.set_paused(True)
        if self.pop is not None:
            self.pop.apply_pauses()

    def resume(self, targets: Target | Iterable[Target]) -> None:
        pauses = self.ctx.pauses
        pauses.resume(self._targets(targets))
        for pq in self.table.pqs.values():
            if pq.paused and not pauses.covers(pq.mq):
                pq.set_paused(False)
        if self.pop is not None:
            self.pop.apply_pauses()

    def paused(self) -> set[Target]:
        return self.ctx.pauses.snapshot()

    # -- offsets --------------------------------------------------------------------------------------

    @property
    def broker(self) -> BrokerOffsets:
        return BrokerOffsets(self.ctx.client, self.ctx.timing.request_timeout)

    def owned(self, mq: MessageQueue) -> ProcessQueue:
        """The process queue of ``mq``; ClientError when this member does not own it."""
        pq = self.table.pqs.get(self._mq_in(mq))
        if pq is None or pq.dropped:
            raise ClientError(f"{mq} is not assigned to this consumer")
        return pq

    def position(self, mq: MessageQueue) -> int:
        return self.owned(mq).next_offset

    async def committed(self, mq: MessageQueue) -> int | None:
        return await self.ctx.offset_store.query_store(self._mq_in(mq))

    async def end_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        broker = self.broker
        return await broker.per_queue([self._mq_in(mq) for mq in mqs], broker.max_offset)

    async def commit(self) -> None:
        """Every owned queue's committable offset (the smallest still in flight, as the persist timer
        writes it) written to its broker, answered; the first failure is raised once all were tried."""
        store = self.ctx.offset_store
        failed: RocketMQError | None = None
        for mq in sorted(self.table.assignment()):
            try:
                await store.persist(mq, sync=True)
            except RocketMQError as exc:
                log.warning("committing the offset of %s failed: %s", mq, exc)
                failed = failed or exc
        if failed is not None:
            raise failed

    # -- seeking --------------------------------------------------------------------------------------

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        pq = self.owned(mq)
        broker = self.broker
        lo, hi = await broker.min_offset(pq.mq), await broker.max_offset(pq.mq)
        if not lo <= offset <= hi:
            raise ConfigError(f"seek offset {offset} of {mq} is outside the queue's range [{lo}, {hi}]")
        await self._seek_to({pq.mq: offset})

    def _queues(self, which: Queues) -> list[MessageQueue]:
        """The owned queues ``which`` names (None: all of them but the retry topic's)."""
        if which is None:
            return sorted(mq for mq in self.table.assignment() if not mq.topic.startswith("%RETRY%"))
        if isinstance(which, str):
            topic = self._in(which)
            if topic not in self.ctx.subscriptions:
                raise ClientError(f"topic {which!r} is not subscribed")
            return sorted(mq for mq in self.table.assignment() if mq.topic == topic)
        mqs = [which] if isinstance(which, MessageQueue) else list(which)
        return [self.owned(mq).mq for mq in mqs]

    async def seek_by(self, which: Queues, ask: Callable[[MessageQueue], Awaitable[int]]) -> None:
        """Seek each queue of ``which`` to what ``ask`` answers of it (asked of all first)."""
        mqs = self._queues(which)
        await self._seek_to(await self.broker.per_queue(mqs, ask))

    async def seek_to_beginning(self, which: Queues) -> None:
        await self.seek_by(which, self.broker.min_offset)

    async def seek_to_end(self, which: Queues) -> None:
        await self.seek_by(which, self.broker.max_offset)

    async def seek_to_timestamp(self, which: Queues, timestamp_ms: int) -> None:
        broker = self.broker
        await self.seek_by(which, lambda mq: broker.offset_for_timestamp(mq, timestamp_ms))

    async def _seek_to(self, offsets: dict[MessageQueue, int]) -> None:
        """Restart each queue at its offset, committed to the broker before its new pull loop starts
        (an orderly queue re-reads the broker's offset before its first pull)."""
        store = self.ctx.offset_store
        failed: RocketMQError | None = None
        for mq, offset in offsets.items():
            if mq not in self.table.pqs:
                continue  # rebalanced away while the offsets were asked
            pq = await self.table.restart(mq, offset)
            try:
                await store.persist(mq, sync=True)
            except RocketMQError as exc:
                log.warning(
                    "committing the seek of %s to %d failed (it goes on from there): %s", mq, offset, exc
                )
                failed = failed or exc
            finally:
                self._start_pull(pq)
        if failed is not None:
            raise failed
