"""ProcessQueue: the messages of one queue that were pulled and are not finished yet.

Messages are kept per pulled run: a SortedDict (sortedcontainers) orders the runs by their first
offset, each run is a plain dict offset -> message in ascending order, and one dict indexes every
offset to its run. Adding and finishing a message are then O(1) dict operations; the sorted index is
touched once per pulled batch, not once per message. The committable offset is the smallest offset
still held (or the largest offset seen + 1 once the queue is empty), so one slow message holds back
the group's progress and a crash redelivers what came after it: at-least-once.

Flow control awaits :meth:`wait_for_room`: the pull loop parks on an anyio Event that every removal
sets (and replaces), so the pull resumes the moment consumption frees room, never on a timer. All
state changes are synchronous methods: called from the consume path without an await, they cannot race.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import anyio
from sortedcontainers import SortedDict

from ..protocol.message import MessageExt
from ..protocol.mq import MessageQueue

__all__ = ["ProcessQueue"]


class _Run(dict[int, MessageExt]):
    """The unfinished messages of one pulled run (ascending offsets), filed under ``key``: its first
    offset when it was added. Runs never overlap, so the runs' order by key is their offsets' order."""

    __slots__ = ("key",)

    def __init__(self, key: int, items: Iterable[tuple[int, MessageExt]] = ()) -> None:
        super().__init__(items)
        self.key = key


class ProcessQueue:
    __slots__ = (
        "_index",
        "_room",
        "_runs",
        "_waiting",
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
        #: first offset of a pulled run -> that run's unfinished messages (offset -> message, ascending)
        self._runs: SortedDict = SortedDict()
        #: offset -> the run that holds it
        self._index: dict[int, _Run] = {}
        #: orderly: taken out of ``msgs`` for the running batch, committed on success
        self.consuming: SortedDict = SortedDict()
        self.msg_bytes = 0
        self.queue_offset_max = -1
        self.next_offset = -1
        #: the broker's max offset at the last pull (for lag)
        self.max_offset = -1
        self.dropped = False
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_span = max_span
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        self.locked = False
        self.last_lock_time = 0.0
        self.try_unlock_times = 0
        self.scope: anyio.CancelScope | None = None
        self.consume_lock = anyio.Lock()
        self._room = anyio.Event()
        self._waiting = False

    def __repr__(self) -> str:
        return (
            f"ProcessQueue({self.mq}, count={self.count}, bytes={self.msg_bytes}, "
            f"span={self.span}, next={self.next_offset}, dropped={self.dropped})"
        )

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self._index) + len(self.consuming)

    def _min_offset(self) -> int:
        run: _Run = self._runs.peekitem(0)[1]
        return next(iter(run))

    def _max_offset(self) -> int:
        run: _Run = self._runs.peekitem(-1)[1]
        return next(reversed(run))

    @property
    def span(self) -> int:
        """Offset span of the cached messages (``getMaxSpan``)."""
        if not self._index:
            return 0
        return self._max_offset() - self._min_offset()

    def messages(self) -> list[MessageExt]:
        """The cached messages not being consumed, in offset order."""
        return [m for _, run in self._runs.items() for m in run.values()]

    def over_threshold(self) -> str | None:
        """Why pulling must wait, or None."""
        if self.count > self.max_count:
            return f"cached count {self.count} > {self.max_count}"
        if self.msg_bytes > self.max_bytes:
            return f"cached size {self.msg_bytes} > {self.max_bytes} bytes"
        if self.max_span is not None and self.span > self.max_span:
            return f"offset span {self.span} > {self.max_span}"
        return None

    async def wait_for_room(self) -> None:
        """Return once the queue is under every threshold (or dropped)."""
        while not self.dropped and self.over_threshold() is not None:
            self._waiting = True
            await self._room.wait()

    def _wake(self) -> None:
        if self._waiting:  # events are only made when a pull waits: none on the hot path
            self._waiting = False
            self._room.set()
            self._room = anyio.Event()

    # -- changes ----------------------------------------------------------------------------------

    def put(self, msgs: Iterable[MessageExt]) -> int:
        """Add pulled messages (ascending offsets, as a pull returns them); returns how many were new."""
        index = self._index
        fresh: list[tuple[int, MessageExt]] = []
        size = 0
        for m in msgs:
            off = m.queue_offset
            if off in index or off in self.consuming:
                continue
            fresh.append((off, m))
            size += len(m.body)
        if not fresh:
            return 0
        if self._runs and fresh[0][0] < self._max_offset():
            # not above what is held (never seen from a pull; kept correct anyway): refile everything
            fresh = sorted([*((o, m) for o, m in self._index_items()), *fresh])
            self._runs.clear()
            self._index.clear()
        self._add_run(fresh)
        self.msg_bytes += size
        last = fresh[-1][0]
        if last > self.queue_offset_max:
            self.queue_offset_max = last
        return len(fresh)

    def _add_run(self, items: list[tuple[int, MessageExt]]) -> None:
        """File newly pulled messages (offsets above everything held) as one run."""
        key = items[0][0]
        run = self._runs[key] = _Run(key, items)
        index = self._index
        for off, _ in items:
            index[off] = run

    def _index_items(self) -> list[tuple[int, MessageExt]]:
        return [(off, run[off]) for off, run in self._index.items()]

    def _prepend(self, items: list[tuple[int, MessageExt]]) -> None:
        """File messages below everything held (put back) into the first run, re-keyed if needed."""
        if not self._runs:
            self._add_run(items)
            return
        run: _Run = self._runs.peekitem(0)[1]
        merged = sorted([*run.items(), *items])
        run.clear()
        run.update(merged)
        if merged[0][0] < run.key:
            del self._runs[run.key]
            run.key = merged[0][0]
            self._runs[run.key] = run
        index = self._index
        for off, _ in items:
            index[off] = run

    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Remove finished messages; return the committable offset (-1 if the queue was empty)."""
        index = self._index
        if not index:
            return -1
        for m in msgs:
            off = m.queue_offset
            run = index.pop(off, None)
            if run is not None:
                del run[off]
                self.msg_bytes -= len(m.body)
                if not run:
                    del self._runs[run.key]
        self.last_consume_time = time.monotonic()
        self._wake()
        return self.committable_offset()

    def committable_offset(self) -> int:
        if self._index:
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
        self._index.clear()
        self.consuming.clear()
        self.msg_bytes = 0
        self._wake()

    # -- orderly (ProcessQueue.takeMessages / commit / makeMessageToConsumeAgain) ------------------

    def take(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` messages, in offset order, into the consuming set."""
        out: list[MessageExt] = []
        while self._runs and len(out) < n:
            run: _Run = self._runs.peekitem(0)[1]
            while run and len(out) < n:
                off = next(iter(run))
                m = run.pop(off)
                del self._index[off]
                self.consuming[off] = m
                out.append(m)
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
        back = sorted(
            (m.queue_offset, m) for m in msgs if self.consuming.pop(m.queue_offset, None) is not None
        )
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
            "cachedMsgMinOffset": self._min_offset() if self._index else 0,
            "cachedMsgMaxOffset": self._max_offset() if self._index else 0,
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
