"""Parked pulls (``PullRequestHoldService``).

Strategy: a suspendable pull that finds nothing is parked under (topic, queue) with the way to run it
again (the pull handler that parked it). A put on that queue calls :meth:`HoldService.notify` at once:
a parked pull whose offset is now below the queue end and whose tag filter matches the new message is
re-run and answered on the spot; a SQL92 pull (its commit-log check kept with it) only when the new
message's properties match too (``isMatchedByCommitLog(null, properties)``; a batch put, which has no
single message's properties, and the periodic check wake it on the tag check alone, as Java).
Otherwise the periodic check (every ``held_pull_check_interval``, as the Java hold service's 5 s wait)
re-runs the pulls that have new data or whose ``suspendTimeoutMillis`` has passed. Re-run answers are
always JSON, as the real broker's are (it never copies the request's serialize type on this path).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from ..protocol.codes import SerializeType
from ..protocol.command import RemotingCommand
from .server import Connection, Reply
from .store import MessageStore

__all__ = ["HeldPull", "HoldService", "Rerun"]

#: runs a parked pull again, without parking it a second time
Rerun = Callable[[Connection, RemotingCommand], Reply]


class HeldPull:
    __slots__ = ("accept", "cmd", "codes", "conn", "deadline", "offset", "rerun")

    def __init__(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        offset: int,
        timeout_ms: int,
        codes: frozenset[int] | None,
        rerun: Rerun,
        accept: Callable[[str], bool] | None = None,
    ):
        self.accept = accept  # the commit-log check (SQL92), over the new message's properties
        self.conn = conn
        self.cmd = cmd
        self.offset = offset
        self.deadline = time.monotonic() + timeout_ms / 1000.0
        self.codes = codes
        self.rerun = rerun


class HoldService:
    """Parked pulls by (topic, queue id)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, int], list[HeldPull]] = {}

    def hold(self, topic: str, queue_id: int, req: HeldPull) -> None:
        self.table.setdefault((topic, queue_id), []).append(req)

    def connection_closed(self, conn: Connection) -> None:
        for key, reqs in list(self.table.items()):
            kept = [r for r in reqs if r.conn is not conn]
            if kept:
                self.table[key] = kept
            else:
                del self.table[key]

    def notify(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int | None, props: str | None = None
    ) -> None:
        """``notifyMessageArriving``: wake the parked pulls that a message (or a check) satisfies;
        ``props``: the new message's properties string, for the pulls with a commit-log check."""
        reqs = self.table.get((topic, queue_id))
        if not reqs:
            return
        now = time.monotonic()
        keep: list[HeldPull] = []
        wake: list[HeldPull] = []
        for r in reqs:
            if (
                max_offset > r.offset
                and (tags_code is None or r.codes is None or tags_code in r.codes)
                and (props is None or r.accept is None or r.accept(props))
            ) or now >= r.deadline:
                wake.append(r)
            else:
                keep.append(r)
        if keep:
            self.table[(topic, queue_id)] = keep
        else:
            del self.table[(topic, queue_id)]
        for r in wake:
            self._answer(r)

    def _answer(self, r: HeldPull) -> None:
        if r.conn.closed:
            return
        r.cmd.serialize_type = SerializeType.JSON  # the wake-up path answers in JSON
        resp = r.rerun(r.conn, r.cmd)
        if resp is not None and not r.cmd.is_oneway:
            answer, parts = resp if isinstance(resp, tuple) else (resp, ())
            r.conn.send(answer, parts)

    def check(self, store: MessageStore) -> None:
        """``checkHoldRequest``: re-examine every parked pull against its queue's end."""
        for topic, queue_id in list(self.table):
            self.notify(topic, queue_id, store.max_offset(topic, queue_id), None)

    async def run(self, store: MessageStore, interval: float) -> None:
        """Check every ``interval`` seconds."""
        while True:
            await anyio.sleep(interval)
            self.check(store)
