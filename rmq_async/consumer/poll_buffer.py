"""PollBuffer: where a lite pull consumer's pull loops put their batches and ``poll`` takes them.

Per queue, a deque of pulled batches (:class:`~rmq_async.consumer.process_queue.PollState`, found on
the process queue); across queues, a FIFO of the queues that have data, served round robin. A pull
waits (``before_pull``) while its queue is paused or the buffer is over a threshold (per queue: count
and bytes; in total: count), on an event every change sets, never on a timer. It is the pull loop's
sink and the queue table's owner of the queues: dropping a queue discards its batches and, with auto
commit, commits its consume offset first. A queue stopped at a message it cannot decode
(``on_undecodable="fail"``) is not pulled until ``poll`` has raised the failure, once the batches
before it were taken (then it is pulled from that offset again, and fails again, until a seek).
"""

from __future__ import annotations

from collections import deque

import anyio

from ..protocol.stored import MessageExt, PulledMessages, Undecodable
from .process_queue import PollState, ProcessQueue

__all__ = ["PollBuffer"]


def _nbytes(msgs: list[MessageExt]) -> int:
    """The body bytes of a batch: summed by the decoder for a batch straight from it (buffered
    batches are never changed in place, so :meth:`PollBuffer.take` finds the same figure), else
    counted here."""
    if type(msgs) is PulledMessages:
        return msgs.nbytes
    return sum([len(m.body) for m in msgs])


class PollBuffer:
    gates_pulls = True  # a paused queue, a full buffer
    sync_drop = True  # as Java's RebalanceLitePullImpl.removeUnnecessaryMessageQueue

    def __init__(
        self, *, max_queue_count: int, max_queue_bytes: int, max_total: int, auto_commit: bool
    ) -> None:
        self.max_queue_count = max_queue_count
        self.max_queue_bytes = max_queue_bytes
        self.max_total = max_total
        self.auto_commit = auto_commit
        self._ready: deque[ProcessQueue] = deque()
        self._total = 0
        # data arrived, room freed, resume, close: made when a waiter needs one (most changes
        # happen with nobody waiting, and an event costs more than the rest of a submit)
        self._changed: anyio.Event | None = None
        self._failed: dict[ProcessQueue, Undecodable] = {}  # queues stopped at an undecodable message

    @staticmethod
    def state(pq: ProcessQueue) -> PollState:
        st = pq.poll
        if st is None:
            st = pq.poll = PollState()
        return st

    def started(self, pq: ProcessQueue) -> None:
        """A queue starts at its ``next_offset``: nothing polled yet."""
        self.state(pq).consume_offset = pq.next_offset

    def wake(self) -> None:
        ev = self._changed
        if ev is not None:  # else nobody waits: the next waiter makes a fresh event
            self._changed = None
            ev.set()

    async def wait_changed(self) -> None:
        ev = self._changed
        if ev is None:
            ev = self._changed = anyio.Event()
        await ev.wait()

    # -- the pull side --------------------------------------------------------------------------------

    def _has_room(self, st: PollState) -> bool:
        return (
            self._total < self.max_total
            and st.count < self.max_queue_count
            and st.nbytes < self.max_queue_bytes
        )

    async def before_pull(self, pq: ProcessQueue) -> bool:
        st = pq.poll or self.state(pq)
        failed = self._failed
        while not pq.dropped and (st.paused or not self._has_room(st) or (failed and pq in failed)):
            await self.wait_changed()
        return not pq.dropped

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        st = pq.poll or self.state(pq)
        n = len(msgs)
        st.batches.append(msgs)
        st.count += n
        st.nbytes += _nbytes(msgs)
        self._total += n
        if not st.in_ready and not st.paused:
            st.in_ready = True
            self._ready.append(pq)
        self.wake()

    def fail(self, pq: ProcessQueue, record: Undecodable) -> None:
        """``pq`` stopped at an undecodable message: :meth:`failure` hands it to ``poll``."""
        self._failed[pq] = record
        self.wake()

    # -- the poll side --------------------------------------------------------------------------------

    def failure(self) -> Undecodable | None:
        """The undecodable message of a queue whose batches before it were all taken (forgotten
        here: the queue is pulled from its offset again), or None."""
        if not self._failed:
            return None
        for pq, record in list(self._failed.items()):
            if pq.dropped:
                del self._failed[pq]
            elif not self.state(pq).batches:
                del self._failed[pq]
                self.wake()
                return record
        return None

    def take(self, out: list[MessageExt], limit: int | None) -> None:
        """Move messages into ``out``, round robin by batch, until it holds ``limit`` messages or
        nothing is ready; a batch larger than what is left is cut and its rest stays first in its
        queue (not polled: neither in the consume offset nor committed). ``limit`` None: one whole
        batch."""
        skipped: list[ProcessQueue] | None = None  # paused queues with data, made when there is one
        ready = self._ready
        want = 1 if limit is None else limit
        while ready and len(out) < want:
            pq = ready.popleft()
            st = pq.poll or self.state(pq)
            st.in_ready = False
            if st.paused or not st.batches or pq.dropped:
                if st.paused and st.batches and not pq.dropped:
                    if skipped is None:
                        skipped = []
                    skipped.append(pq)
                continue
            batch = st.batches.popleft()
            room = want - len(out)
            if limit is not None and len(batch) > room:
                rest = batch[room:]
                st.batches.appendleft(rest)
                nbytes = _nbytes(batch) - _nbytes(rest)
                batch = batch[:room]
            else:
                nbytes = _nbytes(batch)
            n = len(batch)
            st.count -= n
            st.nbytes -= nbytes
            self._total -= n
            st.consume_offset = batch[-1].queue_offset + 1
            out.extend(batch)
            if st.batches:
                st.in_ready = True
                ready.append(pq)
        if skipped is not None:
            for pq in skipped:
                self.state(pq).in_ready = True
                ready.append(pq)
        if out:
            self.wake()

    def pause(self, pq: ProcessQueue) -> None:
        self.state(pq).paused = True

    def resume(self, pq: ProcessQueue) -> None:
        st = self.state(pq)
        if st.paused:
            st.paused = False
            if st.batches and not st.in_ready:
                st.in_ready = True
                self._ready.append(pq)

    def discard(self, pq: ProcessQueue) -> None:
        """Forget ``pq``'s buffered batches (a seek, a drop)."""
        st = self.state(pq)
        self._failed.pop(pq, None)
        self._total -= st.count
        st.batches.clear()
        st.count = st.nbytes = 0
        self.wake()

    # -- the queue table's owner -----------------------------------------------------------------------

    async def drop(self, pq: ProcessQueue, wait: float) -> bool:
        pq.drop()
        self.discard(pq)
        if self.auto_commit:
            pq.offset.set(self.state(pq).consume_offset)
        return True
