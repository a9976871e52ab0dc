"""Offset stores (Java ``OffsetStore``).

Clustering: :class:`RemoteOffsetStore`, a local map updated after each consumption and written to the
queue's broker every ``persist_interval`` (oneway, like the Java client), at drop and at shutdown
(synchronously, so a graceful shutdown really leaves the offsets on the broker).
A queue dropped while its broker could not be reached (a persist that failed: the broker left the
route for a moment, a cut) keeps its unpersisted offset for :data:`UNPERSISTED_TTL`; if the queue
comes back to this consumer meanwhile, it resumes from the larger of that and the broker's offset
instead of replaying what it already consumed (Java forgets it and replays from the broker's).
Broadcasting: :class:`LocalFileOffsetStore`, a JSON file written atomically (temp file + rename).

Each queue's committed offset lives in an :class:`OffsetCell` the store hands out (:meth:`cell`) and
keeps in its table for persisting; the queue table puts it on the queue's ProcessQueue
(``pq.offset``), so the consume path commits through the cell, without a lookup by MessageQueue.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import anyio

from ..errors import AuthError, ProtocolError, RocketMQError
from ..protocol import fastjson
from ..protocol import headers as H
from ..protocol.mq import MessageQueue
from .remote import Remote

__all__ = ["UNPERSISTED_TTL", "LocalFileOffsetStore", "OffsetCell", "OffsetStore", "RemoteOffsetStore"]

log = logging.getLogger("rmq_async.consumer")

#: seconds the offset of a dropped queue that never reached its broker is kept (see the module doc):
#: every message below it was consumed by this client, so resuming from it never skips one
UNPERSISTED_TTL = 600.0


class OffsetCell:
    """One queue's committed offset in memory (-1: none yet). Written by the consume path through
    ``pq.offset``, read by the store when it persists."""

    __slots__ = ("value",)

    def __init__(self, value: int = -1) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"OffsetCell({self.value})"

    def advance(self, offset: int) -> None:
        """``updateOffset(mq, offset, increaseOnly=true)``: only forward."""
        if offset > self.value:
            self.value = offset

    def set(self, offset: int) -> None:
        """``updateOffset(mq, offset, increaseOnly=false)``: any offset >= 0, backwards too."""
        if offset >= 0:
            self.value = offset


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def cell(self, mq: MessageQueue) -> OffsetCell: ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    def read_memory(self, mq: MessageQueue) -> int: ...

    async def read_store(self, mq: MessageQueue) -> int | None: ...

    async def query_store(self, mq: MessageQueue) -> int | None: ...

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None: ...

    async def persist_all(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...

    def forget(self, mq: MessageQueue) -> None: ...

    def snapshot(self) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        #: the queues' cells (a cell at -1: no offset yet)
        self.table: dict[MessageQueue, OffsetCell] = {}

    def cell(self, mq: MessageQueue) -> OffsetCell:
        """The cell of ``mq`` (made on first use, kept until :meth:`remove`)."""
        cell = self.table.get(mq)
        if cell is None:
            cell = self.table[mq] = OffsetCell()
        return cell

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        if offset < 0:
            return
        cell = self.cell(mq)
        if not increase_only or offset > cell.value:
            cell.value = offset

    def read_memory(self, mq: MessageQueue) -> int:
        cell = self.table.get(mq)
        return cell.value if cell is not None else -1

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    def forget(self, mq: MessageQueue) -> None:
        """Remove ``mq``'s cell and anything kept of it: what it held must not come back (a seek
        replaces it; manual commit drops what was not committed). The cell itself is left as it
        is: whoever still holds it (a dropped process queue's late results) writes nowhere."""
        self.table.pop(mq, None)

    def snapshot(self) -> dict[MessageQueue, int]:
        return {mq: cell.value for mq, cell in self.table.items() if cell.value >= 0}


class RemoteOffsetStore(_MemoryTable):
    """Offsets kept by the broker of each queue (``RemoteBrokerOffsetStore``)."""

    def __init__(self, client: Remote, group: str) -> None:
        super().__init__()
        self.client = client
        self.group = group
        #: the last offset of each queue the broker has (we persisted it, or read it from there)
        self._persisted: dict[MessageQueue, int] = {}
        #: dropped queues whose last offset never reached the broker: (offset, monotonic drop time)
        self._unpersisted: dict[MessageQueue, tuple[int, float]] = {}

    async def load(self) -> None:
        return None

    async def read_store(self, mq: MessageQueue) -> int | None:
        """The offset a queue (newly assigned) starts from, which also becomes the local one: the
        broker's committed offset, or this client's own offset of the queue if it dropped the queue
        less than :data:`UNPERSISTED_TTL` ago without reaching the broker and that offset is larger;
        None when there is neither (22). Errors propagate."""
        off = await self.query_store(mq)
        if off is not None:
            self._persisted[mq] = off
        kept = self._unpersisted.pop(mq, None)
        fresh = kept is not None and time.monotonic() - kept[1] < UNPERSISTED_TTL
        if kept is not None and fresh and (off is None or kept[0] > off):
            log.info(
                "%s: resuming from this client's offset %d, which never reached the broker (it has %s)",
                mq,
                kept[0],
                off,
            )
            off = kept[0]
        if off is not None:
            self.update(mq, off, increase_only=False)
        return off

    async def query_store(self, mq: MessageQueue) -> int | None:
        """The broker's committed offset, the local one left alone; None when it has none (22). Asked
        of the master, or of a slave while the master is down (``fetchConsumeOffsetFromBroker``)."""
        addr = await self.client.master_or_any_addr(mq.broker_name, mq.topic)
        h = H.QueryConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name
        )
        return await self.client.api.query_consumer_offset(addr, h, self.client.timing.request_timeout)

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        off = self.read_memory(mq)
        if off < 0:
            return
        # the master, or a slave while the master is down (``updateConsumeOffsetToBroker``)
        addr = await self.client.master_or_any_addr(mq.broker_name, mq.topic)
        h = H.UpdateConsumerOffsetRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            commit_offset=off,
            bname=mq.broker_name,
        )
        await self.client.api.update_consumer_offset(
            addr, h, self.client.timing.request_timeout, oneway=not sync
        )
        self._persisted[mq] = off

    async def persist_all(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        for mq in list(mqs):
            try:
                await self.persist(mq, sync=sync)
            except AuthError as exc:  # refused by ACL: logged once per resource per interval
                if self.client.auth_errors.note(exc):
                    log.error("persisting the offset of %s denied: %s", mq, exc)
            except RocketMQError as exc:
                log.warning("persisting the offset of %s failed: %s", mq, exc)

    def forget(self, mq: MessageQueue) -> None:
        super().forget(mq)
        self._unpersisted.pop(mq, None)

    def remove(self, mq: MessageQueue) -> None:
        off = self.read_memory(mq)
        super().remove(mq)
        if off >= 0 and off > self._persisted.pop(mq, -1):
            self._unpersisted[mq] = (off, time.monotonic())
        if len(self._unpersisted) > 64:  # bounded: the expired ones go
            now = time.monotonic()
            self._unpersisted = {
                q: kept for q, kept in self._unpersisted.items() if now - kept[1] < UNPERSISTED_TTL
            }


def _parse_offsets(text: str) -> dict[MessageQueue, int]:
    data = fastjson.loads(text)
    out: dict[MessageQueue, int] = {}
    if "offsetTable" in data:  # Java's OffsetSerializeWrapper
        table = data["offsetTable"]
        for key, off in table if isinstance(table, fastjson.ObjectKeyMap) else table.items():
            mq = MessageQueue(key["topic"], key["brokerName"], int(key["queueId"]))
            out[mq] = int(off)
        return out
    for row in data["offsets"]:  # rmq_async's own rows, before it wrote Java's format
        out[MessageQueue(row["topic"], row["brokerName"], int(row["queueId"]))] = int(row["offset"])
    return out


def default_offset_dir() -> Path:
    return Path(os.environ.get("RMQ_ASYNC_OFFSET_DIR") or Path.home() / ".rocketmq_offsets")


class LocalFileOffsetStore(_MemoryTable):
    """Offsets in ``<dir>/<client id>/<group>/offsets.json`` (broadcasting), written atomically."""

    def __init__(self, directory: str | Path | None, client_id: str, group: str) -> None:
        super().__init__()
        base = Path(directory) if directory else default_offset_dir()
        self.path = base / client_id.replace(":", "_") / group / "offsets.json"

    async def load(self) -> None:
        """Read the file in Java's format (``OffsetSerializeWrapper``: fastjson with the queues as
        object keys, ``{"offsetTable":{{"brokerName":..,"queueId":0,"topic":..}:5}}``) or the row
        format of rmq_async before 0.1; a missing or empty file falls back to Java's ``.bak`` copy
        (``readLocalOffsetBak``)."""
        for path in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = await anyio.Path(path).read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                for mq, off in _parse_offsets(text).items():
                    self.cell(mq).value = off
            except (ValueError, KeyError, TypeError, ProtocolError) as exc:
                log.error("ignoring unreadable offset file %s: %s", path, exc)
            return

    async def read_store(self, mq: MessageQueue) -> int | None:
        off = self.read_memory(mq)
        return off if off >= 0 else None

    async def query_store(self, mq: MessageQueue) -> int | None:
        return await self.read_store(mq)

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        await self.persist_all([mq], sync=sync)

    async def persist_all(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        # Java's format, so a Java member with the same client id (ip@DEFAULT) reads it too
        payload = fastjson.dumps({"offsetTable": dict(sorted(self.snapshot().items()))})
        try:
            await anyio.to_thread.run_sync(self._write, payload)
        except OSError as exc:  # as Java's persistAll: logged, consumption goes on
            log.error("writing the offset file %s failed: %s", self.path, exc)

    def remove(self, mq: MessageQueue) -> None:
        """Kept (Java's ``LocalFileOffsetStore.removeOffset`` does nothing): no other member owns the
        queue, and an offset corrected at a drop must be where the queue starts again."""

    def _write(self, payload: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".offsets-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
