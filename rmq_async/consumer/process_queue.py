"""ProcessQueue: the messages of one queue that were pulled and are not finished yet.

Messages are kept per pulled run: a SortedDict (sortedcontainers) orders the runs by their first
offset, and each run is a plain list of messages in ascending offset order that knows its byte total.
Adding a pulled batch copies its list (no per-message Python loop beyond reading the offsets and
sizes); finishing a whole run, the common case when handlers keep up, drops it at once after an
identity check of its messages; finishing part of a run finds the run, then the message, by bisection. The
committable offset is the smallest offset still held (or the largest offset seen + 1 once the queue is
empty), so one slow message holds back the group's progress and a crash redelivers what came after
it: at-least-once.

Flow control awaits :meth:`wait_for_room`: the pull loop parks on an anyio Event that every removal
sets (and replaces), so the pull resumes the moment consumption frees room, never on a timer; a
paused queue (``PushConsumer.pause``) waits the same way until resumed. All
state changes are synchronous methods: called from the consume path without an await, they cannot race.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import islice
from operator import attrgetter, lt

import anyio
from sortedcontainers import SortedDict  # type: ignore[import-untyped, unused-ignore]  # untyped

from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt, PulledMessages
from .offset_store import OffsetCell
from .types import OrderlyResult

__all__ = ["OrderlyState", "Pending", "PollState", "ProcessQueue"]


_body = attrgetter("body")
_offset = attrgetter("queue_offset")


def _size(msgs: Iterable[MessageExt]) -> int:
    return sum(map(len, map(_body, msgs)))


class _Run(list[MessageExt]):
    """The unfinished messages of one pulled run (ascending offsets), filed under ``key``: its first
    offset when it was added, with ``nbytes`` their body bytes. Runs never overlap, so the runs' order
    by key is their offsets' order."""

    __slots__ = ("key", "nbytes")

    def __init__(self, key: int, msgs: Iterable[MessageExt] = (), nbytes: int = -1) -> None:
        super().__init__(msgs)
        self.key = key
        self.nbytes = _size(self) if nbytes < 0 else nbytes

    def index_of(self, off: int) -> int:
        """Where the message at ``off`` is, or -1."""
        i = bisect_left(self, off, key=_offset)
        return i if i < len(self) and self[i].queue_offset == off else -1


class Pending:
    """Orderly, without a handler: the one message of a queue handed to the ``async for`` loop."""

    __slots__ = ("done", "message", "result")

    def __init__(self, message: MessageExt) -> None:
        self.message = message
        self.result = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        self.done = anyio.Event()


class OrderlyState:
    """The orderly consume service's bookkeeping of one process queue (``ProcessQueue.orderly``)."""

    __slots__ = ("active", "pending", "refresh_offset", "relock", "revoking", "scope", "start")

    def __init__(self) -> None:
        self.active = False  # a drive task runs (or waits to run) for this queue
        self.revoking = False  # a rebalance is taking the queue away: no new batch
        self.refresh_offset = True  # re-read the start offset from the broker before the next pull
        self.scope: anyio.CancelScope | None = None  # the running handler's
        self.start = 0.0
        self.pending: Pending | None = None  # delivery API: the message handed out
        self.relock = anyio.Lock()


class PollState:
    """A lite pull consumer's buffer of one queue (``ProcessQueue.poll``): pulled batches not polled
    yet, their size, and the consume offset (after the last message ``poll`` handed out)."""

    __slots__ = ("batches", "consume_offset", "count", "in_ready", "nbytes", "paused")

    def __init__(self) -> None:
        self.batches: deque[list[MessageExt]] = deque()
        self.count = 0
        self.nbytes = 0
        self.consume_offset = -1
        self.paused = False
        self.in_ready = False  # in the buffer's FIFO of queues with data


class ProcessQueue:
    __slots__ = (
        "_count",
        "_parked",
        "_room",
        "_runs",
        "_waiting",
        "broker_id",
        "consume_lock",
        "consuming",
        "dropped",
        "last_consume_time",
        "last_lock_time",
        "last_pull_time",
        "locked",
        "max_bytes",
        "max_count",
        "max_offset",
        "max_span",
        "mq",
        "msg_bytes",
        "next_offset",
        "offset",
        "orderly",
        "paused",
        "poll",
        "queue_offset_max",
        "scope",
        "try_unlock_times",
    )

    def __init__(
        self,
        mq: MessageQueue,
        *,
        max_count: int = 1000,
        max_bytes: int = 100 << 20,
        max_span: int | None = 2000,
    ) -> None:
        self.mq = mq
        #: first offset of a pulled run -> that run's unfinished messages (ascending offsets)
        self._runs: SortedDict = SortedDict()
        self._count = 0  # messages in the runs
        #: orderly: taken out of the runs for the running batch, committed on success
        self.consuming: SortedDict = SortedDict()
        self.msg_bytes = 0  # body bytes of the runs and the consuming batch
        self.queue_offset_max = -1
        self.next_offset = -1
        #: the committed offset: the offset store's cell of this queue (set by the queue table when
        #: the queue starts; a fresh cell belongs to no store)
        self.offset = OffsetCell()
        #: the broker's max offset at the last pull (for lag)
        self.max_offset = -1
        self.dropped = False
        #: paused by the user (``PushConsumer.pause``): no pull until resumed (see :meth:`set_paused`)
        self.paused = False
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_span = max_span
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        self.locked = False
        self.last_lock_time = 0.0
        self.try_unlock_times = 0
        #: the pull loop's cancel scope (dropping the queue cancels it)
        self.scope: anyio.CancelScope | None = None
        #: the broker node the last pull was told to use next (``suggestWhichBrokerId``; 0: the master)
        self.broker_id = 0
        #: orderly consumption's state of this queue (made by the orderly service)
        self.orderly: OrderlyState | None = None
        #: a lite pull consumer's buffer of this queue
        self.poll: PollState | None = None
        self.consume_lock = anyio.Lock()
        self._room = anyio.Event()
        self._waiting = False
        self._parked: anyio.Event | None = None  # made by wait_parked, set when a pull parks

    def __repr__(self) -> str:
        return (
            f"ProcessQueue({self.mq}, count={self.count}, bytes={self.msg_bytes}, "
            f"span={self.span}, next={self.next_offset}, dropped={self.dropped})"
        )

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self._count + len(self.consuming)

    def _min_offset(self) -> int:
        run: _Run = self._runs.peekitem(0)[1]
        return run[0].queue_offset

    def _max_offset(self) -> int:
        run: _Run = self._runs.peekitem(-1)[1]
        return run[-1].queue_offset

    @property
    def span(self) -> int:
        """Offset span of the cached messages (``getMaxSpan``)."""
        if not self._runs:
            return 0
        return self._max_offset() - self._min_offset()

    def messages(self) -> list[MessageExt]:
        """The cached messages not being consumed, in offset order."""
        return [m for run in self._runs.values() for m in run]

    def over_threshold(self) -> str | None:
        """Why pulling must wait, or None (checked before every pull)."""
        if self.paused:
            return "paused"
        if self._count + len(self.consuming) > self.max_count:
            return f"cached count {self.count} > {self.max_count}"
        if self.msg_bytes > self.max_bytes:
            return f"cached size {self.msg_bytes} > {self.max_bytes} bytes"
        max_span = self.max_span
        # the largest offset ever filed bounds the largest held one: the exact span (two sorted-dict
        # lookups) is needed only when that bound is over the limit
        if max_span is not None and self._runs and self.queue_offset_max - self._min_offset() > max_span:
            span = self.span
            if span > max_span:
                return f"offset span {span} > {max_span}"
        return None

    async def wait_for_room(self) -> None:
        """Return once the queue is under every threshold (or dropped)."""
        while not self.dropped and self.over_threshold() is not None:
            self._waiting = True
            if self._parked is not None:
                self._parked.set()
                self._parked = None
            await self._room.wait()

    async def wait_parked(self) -> None:
        """Return once a pull of this queue waits for room (at once if one does): flow control has
        stopped pulling it. For tests and monitoring; nothing on the pull path pays for it."""
        if self._waiting:
            return
        if self._parked is None:
            self._parked = anyio.Event()
        await self._parked.wait()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume pulling: a paused queue's pull loop waits for room as over a threshold (its
        cached messages are still consumed) and resumes the moment :meth:`set_paused` (False) wakes it."""
        self.paused = paused
        if not paused:
            self._wake()

    def _wake(self) -> None:
        if self._waiting:  # events are only made when a pull waits: none on the hot path
            self._waiting = False
            self._room.set()
            self._room = anyio.Event()

    # -- changes ----------------------------------------------------------------------------------

    def put(self, msgs: Sequence[MessageExt]) -> int:
        """Add pulled messages (ascending offsets, as a pull returns them); returns how many were new."""
        if not msgs:
            return 0
        if type(msgs) is PulledMessages and msgs.ascending:
            # straight from the decoder, which already summed the bodies and checked the order
            # while each message was in the caches: no second pass over the batch
            first = msgs[0].queue_offset
            if first <= self.queue_offset_max:
                return self._put_merging(list(msgs))
            run = _Run(first, msgs, msgs.nbytes)
            self._file(run)
            return len(run)
        offsets = list(map(_offset, msgs))
        first = offsets[0]
        # at or below the largest offset ever filed (which bounds everything held or being consumed):
        # never from a pull, and the merging path is correct for any input
        if first <= self.queue_offset_max or not all(map(lt, offsets, islice(offsets, 1, None))):
            return self._put_merging(list(msgs))
        run = _Run(first, msgs)
        self._file(run)
        return len(run)

    def _file(self, run: _Run) -> None:
        self._runs[run.key] = run
        self._count += len(run)
        self.msg_bytes += run.nbytes
        last = run[-1].queue_offset
        if last > self.queue_offset_max:
            self.queue_offset_max = last

    def _put_merging(self, msgs: list[MessageExt]) -> int:
        """Add messages that are not simply above everything held (never seen from a pull; kept
        correct anyway): offsets already held or being consumed are skipped, the rest refiled."""
        held = {m.queue_offset for run in self._runs.values() for m in run}
        fresh: dict[int, MessageExt] = {}
        for m in msgs:
            off = m.queue_offset
            if off not in held and off not in self.consuming and off not in fresh:
                fresh[off] = m
        if not fresh:
            return 0
        merged = sorted([*(m for run in self._runs.values() for m in run), *fresh.values()], key=_offset)
        self._runs.clear()
        self._count = 0
        self.msg_bytes = _size(self.consuming.values())
        self._file(_Run(merged[0].queue_offset, merged))
        return len(fresh)

    def _prepend(self, msgs: list[MessageExt]) -> None:
        """File messages below everything held (put back, ascending) into the first run, re-keyed if
        needed; their bytes are already counted (they come from the consuming batch)."""
        self._count += len(msgs)
        if not self._runs:
            run = _Run(msgs[0].queue_offset, msgs)
            self._runs[run.key] = run
            return
        run = self._runs.peekitem(0)[1]
        run.nbytes += _size(msgs)
        run[:0] = msgs
        run.sort(key=_offset)
        if run[0].queue_offset < run.key:
            del self._runs[run.key]
            run.key = run[0].queue_offset
            self._runs[run.key] = run

    def _run_of(self, off: int) -> _Run | None:
        runs = self._runs
        i = runs.bisect_right(off) - 1
        if i < 0:
            return None
        run: _Run = runs.peekitem(i)[1]
        return run

    def remove(self, msgs: Sequence[MessageExt]) -> int:
        """Remove finished messages; return the committable offset (-1 if the queue was empty)."""
        runs = self._runs
        if not runs:
            return -1
        run: _Run | None = runs.get(msgs[0].queue_offset) if msgs else None
        if run is not None and run == msgs:
            # a whole pulled run finished (the common case); list equality compares identity first,
            # and a message without identity equals only itself: a C loop, no call per message
            del runs[run.key]
            self._count -= len(run)
            self.msg_bytes -= run.nbytes
        else:
            self._remove_each(msgs)
        self.last_consume_time = time.monotonic()
        self._wake()
        return self.committable_offset()

    def _remove_each(self, msgs: Iterable[MessageExt]) -> None:
        run: _Run | None = None
        removed = size = 0
        for m in msgs:
            off = m.queue_offset
            i = run.index_of(off) if run is not None else -1
            if i < 0:
                if run is not None and not run:
                    del self._runs[run.key]
                run = self._run_of(off)
                i = run.index_of(off) if run is not None else -1
                if i < 0:
                    run = None
                    continue
            assert run is not None
            n = len(run.pop(i).body)
            run.nbytes -= n
            size += n
            removed += 1
        if run is not None and not run:
            del self._runs[run.key]
        self._count -= removed
        self.msg_bytes -= size

    def pass_by(self, last_offset: int) -> int:
        """A pulled batch up to ``last_offset`` was consumed in full before it was ever held (a
        plain handler's, called by the pulling task: nothing could see it held): the largest offset
        seen moves to it, as :meth:`put` then :meth:`remove` would leave it. Returns the committable
        offset (held messages below it still hold it back)."""
        if last_offset > self.queue_offset_max:
            self.queue_offset_max = last_offset
        self.last_consume_time = time.monotonic()
        return self.committable_offset()

    def committable_offset(self) -> int:
        if self._runs:
            return self._min_offset()
        if self.consuming:
            return int(self.consuming.peekitem(0)[0])
        return self.queue_offset_max + 1

    def drop(self) -> None:
        self.dropped = True
        self._wake()
        if self.scope is not None:
            self.scope.cancel()

    def clear(self) -> None:
        self._runs.clear()
        self._count = 0
        self.consuming.clear()
        self.msg_bytes = 0
        self._wake()

    # -- orderly (ProcessQueue.takeMessages / commit / makeMessageToConsumeAgain) ------------------

    def take(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` messages, in offset order, into the consuming set."""
        out: list[MessageExt] = []
        while self._runs and len(out) < n:
            run: _Run = self._runs.peekitem(0)[1]
            k = min(n - len(out), len(run))
            chunk = run[:k]
            del run[:k]
            size = _size(chunk)
            run.nbytes -= size
            self._count -= k
            self.consuming.update(zip(map(_offset, chunk), chunk, strict=True))
            out += chunk
            if not run:
                del self._runs[run.key]
        return out

    def commit(self) -> int:
        """Finish the consuming batch; return the offset to commit (-1 if nothing was consuming)."""
        if not self.consuming:
            return -1
        last = int(self.consuming.peekitem(-1)[0])
        for m in self.consuming.values():
            self.msg_bytes -= len(m.body)
        self.consuming.clear()
        self.last_consume_time = time.monotonic()
        self._wake()
        return last + 1

    def put_back(self, msgs: Iterable[MessageExt]) -> None:
        """Return messages of the consuming batch to the queue, to be consumed again."""
        back = sorted((m for m in msgs if self.consuming.pop(m.queue_offset, None) is not None), key=_offset)
        if back:
            self._prepend(back)

    def consuming_messages(self) -> list[MessageExt]:
        """The messages of the batch being consumed (orderly), in offset order."""
        return list(self.consuming.values())

    def lock_expired(self, lease: float) -> bool:
        return time.monotonic() - self.last_lock_time > lease

    # -- introspection ----------------------------------------------------------------------------

    def info(self) -> dict[str, object]:
        """ProcessQueueInfo fields (GET_CONSUMER_RUNNING_INFO)."""
        now_ms = int(time.time() * 1000)
        mono = time.monotonic()
        return {
            "cachedMsgMinOffset": self._min_offset() if self._runs else 0,
            "cachedMsgMaxOffset": self._max_offset() if self._runs else 0,
            "cachedMsgCount": self.count,
            "cachedMsgSizeInMiB": self.msg_bytes >> 20,
            "transactionMsgMinOffset": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgCount": 0,
            "locked": self.locked,
            "tryUnlockTimes": self.try_unlock_times,
            "lastLockTimestamp": now_ms - int((mono - self.last_lock_time) * 1000)
            if self.last_lock_time
            else 0,
            "droped": self.dropped,
            "lastPullTimestamp": now_ms - int((mono - self.last_pull_time) * 1000),
            "lastConsumeTimestamp": now_ms - int((mono - self.last_consume_time) * 1000),
        }
