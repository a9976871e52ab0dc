"""ProcessQueue: the messages of one queue that were pulled and are not finished yet.

A SortedDict offset -> message. The committable offset is the smallest offset still in it (or the
largest offset seen + 1 once it is empty), so one slow message holds back the group's progress and a
crash redelivers what came after it: at-least-once.

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


class ProcessQueue:
    __slots__ = (
        "_room",
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
        "msgs",
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
        self.msgs: SortedDict = SortedDict()  # offset -> MessageExt
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
        return len(self.msgs) + len(self.consuming)

    @property
    def span(self) -> int:
        """Offset span of the cached messages (``getMaxSpan``)."""
        if not self.msgs:
            return 0
        return int(self.msgs.peekitem(-1)[0]) - int(self.msgs.peekitem(0)[0])

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
        """Add pulled messages; returns how many were new."""
        added = 0
        tree = self.msgs
        for m in msgs:
            off = m.queue_offset
            if off in tree:
                continue
            tree[off] = m
            self.msg_bytes += len(m.body)
            added += 1
            if off > self.queue_offset_max:
                self.queue_offset_max = off
        return added

    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Remove finished messages; return the committable offset (-1 if the queue was empty)."""
        tree = self.msgs
        if not tree:
            return -1
        for m in msgs:
            if tree.pop(m.queue_offset, None) is not None:
                self.msg_bytes -= len(m.body)
        self.last_consume_time = time.monotonic()
        self._wake()
        return self.committable_offset()

    def committable_offset(self) -> int:
        if self.msgs:
            return int(self.msgs.peekitem(0)[0])
        if self.consuming:
            return int(self.consuming.peekitem(0)[0])
        return self.queue_offset_max + 1

    def drop(self) -> None:
        self.dropped = True
        self._wake()
        if self.scope is not None:
            self.scope.cancel()

    def clear(self) -> None:
        self.msgs.clear()
        self.consuming.clear()
        self.msg_bytes = 0
        self._wake()

    # -- orderly (ProcessQueue.takeMessages / commit / makeMessageToConsumeAgain) ------------------

    def take(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` messages, in offset order, into the consuming set."""
        out: list[MessageExt] = []
        tree = self.msgs
        while tree and len(out) < n:
            off, m = tree.popitem(0)
            self.consuming[off] = m
            out.append(m)
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
        for m in msgs:
            if self.consuming.pop(m.queue_offset, None) is not None:
                self.msgs[m.queue_offset] = m

    def lock_expired(self, lease: float) -> bool:
        return time.monotonic() - self.last_lock_time > lease

    # -- introspection ----------------------------------------------------------------------------

    def info(self) -> dict[str, object]:
        """ProcessQueueInfo fields (GET_CONSUMER_RUNNING_INFO)."""
        now_ms = int(time.time() * 1000)
        mono = time.monotonic()
        return {
            "cachedMsgMinOffset": int(self.msgs.peekitem(0)[0]) if self.msgs else 0,
            "cachedMsgMaxOffset": int(self.msgs.peekitem(-1)[0]) if self.msgs else 0,
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
