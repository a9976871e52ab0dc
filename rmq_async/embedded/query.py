"""QUERY_MESSAGE (12) by key (``QueryMessageProcessor.queryMessage`` over the ``IndexService``), what
``mqadmin queryMsgByKey`` and ``queryMsgTraceById`` send.

Strategy: the key index is built lazily: a query first reads the commit log from where the index
stopped to its end, so sends, delayed copies and recovered messages are indexed by one path and a send
pays nothing for it. Each message is indexed under ``topic#UNIQ_KEY`` and ``topic#key`` for each of
its space-separated ``KEYS`` (``IndexService.buildIndex``). A query takes the entries of
``topic#key`` whose store time is within ``[beginTimestamp, endTimestamp]``, newest first, at most
``maxNum`` (capped at 64, ``maxMsgsNumBatch``; 32 when ``_UNIQUE_KEY_QUERY`` is "true",
``defaultQueryMaxNum``), and answers the stored messages back to back with
``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset``; nothing found: 22 QUERY_NOT_FOUND.
"""

from __future__ import annotations

from ..protocol.codes import ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.commitlog import StoredMessage, stored_head
from .context import BrokerContext, Handler
from .fields import req_int, req_str
from .jcompat import props_decode
from .server import Connection, Reply
from .store import BLANK_MAGIC, SEGMENT_SIZE, MessageStore

__all__ = ["KeyIndex", "query_message_handler"]

MAX_MSGS_NUM_BATCH = 64  # MessageStoreConfig.maxMsgsNumBatch
DEFAULT_QUERY_MAX_NUM = 32  # MessageStoreConfig.defaultQueryMaxNum
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG


class KeyIndex:
    """``topic#key`` -> [(commit-log offset, store time)] of one store, caught up on demand."""

    __slots__ = ("_entries", "_pos", "_store", "last_phys", "last_ts")

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._pos = 0
        self._entries: dict[str, list[tuple[int, int]]] = {}
        self.last_phys = 0
        self.last_ts = 0

    def catch_up(self) -> None:
        store = self._store
        end = store.write_pos
        pos = self._pos
        entries = self._entries
        while pos < end:
            seg, off = divmod(pos, SEGMENT_SIZE)
            total, magic = stored_head(store.views[seg], off)
            if magic == BLANK_MAGIC or total <= 0:
                pos = (seg + 1) * SEGMENT_SIZE
                continue
            msg = StoredMessage(bytes(store.views[seg][off : off + total]))
            props = props_decode(msg.props)
            entry = (pos, msg.store_ts)
            uniq = props.get("UNIQ_KEY")
            if uniq:
                entries.setdefault(f"{msg.topic}#{uniq}", []).append(entry)
            for key in (props.get("KEYS") or "").split(" "):
                if key:
                    entries.setdefault(f"{msg.topic}#{key}", []).append(entry)
            self.last_phys, self.last_ts = pos, msg.store_ts
            pos += total
        self._pos = pos

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of ``topic``'s messages with ``key`` stored in ``[begin, end]``, newest
        first, at most ``max_num`` (capped at 64)."""
        self.catch_up()
        limit = min(max_num, MAX_MSGS_NUM_BATCH)
        out: list[int] = []
        for phys, ts in reversed(self._entries.get(f"{topic}#{key}", ())):
            if len(out) >= limit:
                break
            if begin <= ts <= end:
                out.append(phys)
        return out


def query_message_handler(ctx: BrokerContext) -> Handler:
    index = KeyIndex(ctx.store)

    def query_message(conn: Connection, cmd: RemotingCommand) -> Reply:
        topic = req_str(cmd, "topic")
        key = req_str(cmd, "key")
        max_num = req_int(cmd, "maxNum")
        begin = req_int(cmd, "beginTimestamp")
        end = req_int(cmd, "endTimestamp")
        if (cmd.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) or "") == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        views = []
        for phys in index.query(topic, key, max_num, begin, end):
            view = ctx.store.message_at(phys)
            if view is not None:
                views.append(view)
        ext = {
            "indexLastUpdateTimestamp": str(index.last_ts),
            "indexLastUpdatePhyoffset": str(index.last_phys),
        }
        if not views:
            return ctx.respond(
                cmd, ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext
            )
        return ctx.respond(cmd, 0, None, ext), tuple(views)

    return query_message
