"""The embedded broker's message store: one commit log and a consume queue per (topic, queue).

Strategy. The commit log is a list of fixed-size segments (``bytearray``, never resized, so
``memoryview`` slices of them stay valid); a stored message never spans two segments: when it does
not fit, the rest of the segment gets a BLANK marker, as the real CommitLog does at the end of a
mapped file. A message is written once, in the ``MessageDecoder`` stored layout (magic V1), so a pull
answer is a list of slices of the log handed to the transport, never a re-encode. The layout is
``protocol/stored.py``'s: the store writes, reads and patches messages through its functions and
knows only its own BLANK record. Consume queues are three parallel ``array`` columns (commit-log
offset, size, tag hash), so the pull path is a tight loop over integers.

Persistence (``data_dir`` given). The commit log is mirrored byte for byte into ``<dir>/commitlog``
(a commit-log offset is a file offset). Every put is handed to the OS at once (``os.write``, no
user-space buffer), and the file is fsync'ed by :meth:`MessageStore.flush`, which the broker calls
about once a second and at shutdown. So a killed broker process loses no acknowledged message; an OS
crash or power loss can lose the last second of messages. On start the file is scanned (body CRC
checked), a torn tail is cut off, and the consume queues are rebuilt from it. Consumer offsets and
topic configs are separate JSON files (see ``state.py``), written atomically.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from array import array
from collections.abc import Callable
from pathlib import Path

from ..protocol.codes import MessageSysFlag
from ..protocol.commitlog import (
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    MIN_STORED_SIZE,
    StoredMessage,
    body_crc,
    encode_stored_into,
    patch_stored,
    stored_body_span,
    stored_head,
    stored_phys_offset,
    stored_properties,
    stored_size,
    stored_store_timestamp,
    stored_sys_flag,
)

__all__ = [
    "BLANK_MAGIC",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_MESSAGE_SIZE",
    "SEGMENT_SIZE",
    "ConsumeQueue",
    "GetResult",
    "MessageStore",
    "PutResult",
    "StoreError",
    "StoredMessage",
    "host_bytes",
    "now_ms",
]

SEGMENT_SIZE = 1 << 24  # 16 MiB
MAX_MESSAGE_SIZE = 4 << 20  # MessageStoreConfig.maxMessageSize
MAGIC_V1 = MAGIC_CODE_V1  # 0xdaa320a7
MAGIC_V2 = MAGIC_CODE_V2
BLANK_MAGIC = -875286124  # CommitLog.BLANK_MAGIC_CODE
_MIN_BLANK = 8
MAX_TRANSFER_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory
MAX_TRANSFER_COUNT = 32  # maxTransferCountOnMessageInMemory

_I32 = struct.Struct(">i")
_BLANK = struct.Struct(">ii")  # a segment's end: the rest of its size, BLANK_MAGIC


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def host_bytes(ip: str, port: int) -> bytes:
    """A host as stored: 4-byte IPv4 (or 16-byte IPv6) address + int32 port."""
    try:
        return socket.inet_aton(ip) + _I32.pack(port)
    except OSError:
        return socket.inet_pton(socket.AF_INET6, ip) + _I32.pack(port)


class StoreError(Exception):
    """A put the store refuses; ``status`` is the PutMessageStatus name."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class PutResult:
    __slots__ = ("msg_id", "phys_offset", "queue_offset", "size", "store_ts")

    def __init__(self, phys_offset: int, queue_offset: int, size: int, store_ts: int, msg_id: str) -> None:
        self.phys_offset = phys_offset
        self.queue_offset = queue_offset
        self.size = size
        self.store_ts = store_ts
        self.msg_id = msg_id


class GetResult:
    """What ``DefaultMessageStore.getMessage`` returns: status name, offsets, message slices."""

    __slots__ = ("count", "max_offset", "min_offset", "next_begin", "parts", "status", "total")

    def __init__(self, status: str, next_begin: int, min_offset: int, max_offset: int) -> None:
        self.status = status
        self.next_begin = next_begin
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.parts: list[memoryview] = []
        self.total = 0
        self.count = 0


class ConsumeQueue:
    """One queue's index: commit-log offset, size and tag hash code of each message, indexed by queue
    offset. Entries below ``head`` (the queue's min offset) are deleted: retention took them."""

    __slots__ = ("head", "offsets", "sizes", "tags")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.sizes = array("i")
        self.tags = array("q")
        self.head = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, phys: int, size: int, tags_code: int) -> None:
        self.offsets.append(phys)
        self.sizes.append(size)
        self.tags.append(tags_code)


#: ``(topic, properties string, store timestamp) -> tag code``, used when rebuilding consume queues
TagsCodeFn = Callable[[str, str, int], int]


class MessageStore:
    """Commit log + consume queues; optionally mirrored to ``<data_dir>/commitlog``."""

    def __init__(
        self,
        store_host: bytes,
        data_dir: Path | None = None,
        *,
        max_transfer_count: int = MAX_TRANSFER_COUNT,
        max_transfer_bytes: int = MAX_TRANSFER_BYTES,
    ) -> None:
        self.store_host = store_host
        #: what one pull answers at most: messages and bytes (a first message is always sent whole)
        self.max_transfer_count = max_transfer_count
        self.max_transfer_bytes = max_transfer_bytes
        self._store_v6 = len(store_host) == 20
        self._id_prefix = store_host.hex().upper()
        self.segments: list[bytearray] = []
        self.views: list[memoryview] = []
        self.write_pos = 0  # next commit-log offset
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._fd: int | None = None
        self._dirty = False
        self.path = data_dir / "commitlog" if data_dir is not None else None

    # -- recovery -----------------------------------------------------------------------------

    def open(self, tags_code: TagsCodeFn) -> int:
        """Open (and recover) the commit-log file; returns the number of messages recovered."""
        if self.path is None:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        count = 0
        seg_index = 0
        good_end = 0
        while seg_index * SEGMENT_SIZE < size:
            base = seg_index * SEGMENT_SIZE
            chunk = os.pread(fd, SEGMENT_SIZE, base)
            self._new_segment()[: len(chunk)] = chunk
            pos = 0
            rolled = False
            while pos + 8 <= len(chunk):
                total, magic = stored_head(chunk, pos)
                if magic == BLANK_MAGIC and total == SEGMENT_SIZE - pos:
                    rolled = True
                    good_end = base + SEGMENT_SIZE
                    break
                if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_STORED_SIZE or pos + total > len(chunk):
                    break  # torn or garbage tail
                try:
                    msg = StoredMessage(chunk[pos : pos + total])
                except (struct.error, UnicodeDecodeError, IndexError):
                    break
                if body_crc(msg.body) != msg.body_crc:
                    break
                self._cq(msg.topic, msg.queue_id).append(
                    base + pos, total, tags_code(msg.topic, msg.props, msg.store_ts)
                )
                count += 1
                pos += total
                good_end = base + pos
            if not rolled:
                break
            seg_index += 1
        # drop segments past the good end, cut the torn tail
        keep = good_end // SEGMENT_SIZE + (1 if good_end % SEGMENT_SIZE else 0)
        del self.segments[keep:]
        del self.views[keep:]
        self.write_pos = good_end
        if size != good_end:
            os.ftruncate(fd, good_end)
        os.lseek(fd, good_end, os.SEEK_SET)  # puts append here (the preads above left the position at 0)
        self._fd = fd
        return count

    # -- write --------------------------------------------------------------------------------

    def _new_segment(self) -> bytearray:
        seg = bytearray(SEGMENT_SIZE)
        self.segments.append(seg)
        self.views.append(memoryview(seg))
        return seg

    def _cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            cq = self.cqs[(topic, queue_id)] = ConsumeQueue()
        return cq

    def _reserve(self, total: int) -> tuple[bytearray, int]:
        seg_index, pos = divmod(self.write_pos, SEGMENT_SIZE)
        if seg_index == len(self.segments):
            return self._new_segment(), pos
        if pos + total + _MIN_BLANK > SEGMENT_SIZE:
            seg = self.segments[seg_index]
            blank = SEGMENT_SIZE - pos
            _BLANK.pack_into(seg, pos, blank, BLANK_MAGIC)
            self._mirror(memoryview(seg)[pos:])
            self.write_pos += blank
            return self._new_segment(), 0
        return self.segments[seg_index], pos

    def _mirror(self, data: memoryview) -> None:
        if self._fd is not None:
            view = data
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self._dirty = True

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        props: str,
        tags_code: int,
        sys_flag: int,
        born_ts: int,
        born_host: bytes,
        reconsume_times: int = 0,
        prepared_offset: int = 0,
        store_ts: int | None = None,
    ) -> PutResult:
        """Append one message; raises :class:`StoreError` for an illegal one."""
        topic_b = topic.encode("utf-8")
        props_b = props.encode("utf-8")
        if len(props_b) > 32767:
            raise StoreError("PROPERTIES_SIZE_EXCEEDED", f"properties of {len(props_b)} bytes exceed 32767")
        if len(topic_b) > 127:
            raise StoreError("MESSAGE_ILLEGAL", f"topic of {len(topic_b)} bytes exceeds 127")
        if len(born_host) == 20:
            sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
        if self._store_v6:
            sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        total = stored_size(len(born_host), len(self.store_host), len(body), len(topic_b), len(props_b))
        if total > MAX_MESSAGE_SIZE:
            raise StoreError("MESSAGE_ILLEGAL", f"message of {total} bytes exceeds {MAX_MESSAGE_SIZE}")
        cq = self._cq(topic, queue_id)
        queue_offset = len(cq.offsets)
        seg, pos = self._reserve(total)
        phys = self.write_pos
        if store_ts is None:
            store_ts = now_ms()
        encode_stored_into(
            seg, pos, total, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host, store_ts,
            self.store_host, reconsume_times, prepared_offset, body, topic_b, props_b,
        )  # fmt: skip
        self.write_pos = phys + total
        cq.append(phys, total, tags_code)
        if self._fd is not None:
            self._mirror(memoryview(seg)[pos : pos + total])
        return PutResult(phys, queue_offset, total, store_ts, self._id_prefix + f"{phys:016X}")

    # -- read ---------------------------------------------------------------------------------

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.cqs.get((topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return len(cq.offsets) if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return cq.head if cq is not None else 0

    def truncate_head(self, topic: str, queue_id: int, offset: int) -> int:
        """Delete the queue's messages below ``offset`` (at most all of them), as the real broker's
        retention does when it deletes expired commit-log files (``cleanExpiredConsumerQueue``,
        ``correctMinOffset``): the queue's min offset moves up, pulls below it answer OFFSET_TOO_SMALL.
        Kept in memory only (a restarted persistent store recovers every message). Returns the new
        min offset."""
        cq = self._cq(topic, queue_id)
        cq.head = max(cq.head, min(offset, len(cq.offsets)))
        return cq.head

    def corrupt(self, topic: str, queue_id: int, offset: int, how: str = "body") -> int:
        """Fault injection (tests): spoil the stored message at ``offset`` of a queue so that no
        client can decode it, its framing left sound (the store size, the lengths, the commit-log
        offset and the body CRC are kept consistent, so recovery and send-back still read it, as a
        real broker reads a message a producer compressed wrongly). ``how``: ``"body"`` marks the
        body COMPRESSED (zlib) and overwrites its first bytes with a header no decompressor takes;
        ``"type"`` sets the compression type bits to 7, which no ``CompressionType`` has;
        ``"framing"`` (the one that breaks the framing) makes its store size one byte too large, so a
        pull body holding it is refused as a whole (the consume queue keeps the true size, so pulls
        still serve it; a restarted persistent store cuts its commit log there). Two more break the
        framing as damage to the stored bytes would, the consume queue entry intact, so a real broker
        serves them as they are (``getMessage`` copies the entry's size of bytes from the commit log
        and checks none of them): ``"magic"`` zeroes the magic code, the ids (queue, offsets) left
        sound; a 4.9.8 broker reads it back for a send-back (its ``MessageDecoder`` skips the magic
        code), a 5.x one does not (``MessageVersion.valueOfMagicCode`` throws: "look message by offset
        failed").
        ``"ids"`` overwrites the magic code, the queue id and both offsets with 0xFF bytes (the store
        size kept), so nothing names the message. The change is mirrored to the commit-log file.
        Returns the message's commit-log offset."""
        if how not in ("body", "type", "framing", "magic", "ids"):
            raise ValueError(f"how must be 'body', 'type', 'framing', 'magic' or 'ids', not {how!r}")
        cq = self.cqs.get((topic, queue_id))
        if cq is None or not cq.head <= offset < len(cq.offsets):
            raise ValueError(f"no message at offset {offset} of {topic}:{queue_id}")
        phys = cq.offsets[offset]
        seg_index, pos = divmod(phys, SEGMENT_SIZE)
        seg = self.segments[seg_index]
        if how == "magic":
            patch_stored(seg, pos, magic=0)
        elif how == "ids":  # every byte of MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET 0xFF
            patch_stored(seg, pos, magic=-1, crc=-1, queue_id=-1, flag=-1, queue_offset=-1, phys_offset=-1)
        elif how == "framing":
            patch_stored(seg, pos, total=stored_head(seg, pos)[0] + 1)
        else:
            sys_flag = stored_sys_flag(seg, pos) | MessageSysFlag.COMPRESSED_FLAG
            if how == "type":
                patch_stored(seg, pos, sys_flag=sys_flag | MessageSysFlag.COMPRESSION_TYPE_COMPARATOR)
            else:
                sys_flag &= ~MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
                p, body_len = stored_body_span(seg, pos)
                junk = b"\xff\xfe\xfd\xfc"[:body_len]  # no zlib header starts with 0xff
                seg[p : p + len(junk)] = junk
                crc = body_crc(seg[p : p + body_len])
                patch_stored(seg, pos, sys_flag=sys_flag | MessageSysFlag.COMPRESSION_ZLIB_TYPE, crc=crc)
        self._rewrite(cq, offset, seg, pos, phys)
        return phys

    def _rewrite(self, cq: ConsumeQueue, offset: int, seg: bytearray, pos: int, phys: int) -> None:
        """A stored message changed in memory (:meth:`corrupt`): the same bytes to the commit-log file."""
        if self._fd is not None:
            size = cq.sizes[offset]
            os.pwrite(self._fd, bytes(seg[pos : pos + size]), phys)
            self._dirty = True

    def slice(self, phys: int, size: int) -> memoryview:
        seg, pos = divmod(phys, SEGMENT_SIZE)
        return self.views[seg][pos : pos + size]

    def message_at(self, phys: int, *, any_magic: bool = False) -> memoryview | None:
        """The stored message starting at commit-log offset ``phys``, or None if none starts there;
        ``any_magic``: whatever its magic code (4.9.8's ``MessageDecoder.decode`` skips it)."""
        if phys < 0 or phys + MIN_STORED_SIZE > self.write_pos:
            return None
        seg, pos = divmod(phys, SEGMENT_SIZE)
        if pos + 8 > SEGMENT_SIZE:
            return None
        view = self.views[seg]
        total, magic = stored_head(view, pos)
        if (
            (not any_magic and magic not in (MAGIC_V1, MAGIC_V2))
            or total < MIN_STORED_SIZE
            or pos + total > SEGMENT_SIZE
        ):
            return None
        if stored_phys_offset(view, pos) != phys:
            return None  # PHYSICALOFFSET must name itself
        return view[pos : pos + total]

    def lookup(self, phys: int, *, any_magic: bool = False) -> StoredMessage | None:
        view = self.message_at(phys, any_magic=any_magic)
        return StoredMessage(bytes(view)) if view is not None else None

    def store_ts_at(self, phys: int) -> int:
        seg, pos = divmod(phys, SEGMENT_SIZE)
        return stored_store_timestamp(self.views[seg], pos)

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """``getMessageStoreTimeStamp``: the store time of the message at a queue offset, -1 if none."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None or not cq.head <= offset < len(cq.offsets):
            return -1
        return self.store_ts_at(cq.offsets[offset])

    def drop_topic(self, topic: str) -> None:
        """``cleanUnusedTopic`` of a deleted topic: its consume queues go (the commit log keeps the
        bytes, as the real one does until its files expire)."""
        for key in [k for k in self.cqs if k[0] == topic]:
            del self.cqs[key]

    def earliest_time(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        if cq is None or cq.head >= len(cq.offsets):
            return -1
        return self.store_ts_at(cq.offsets[cq.head])

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``ConsumeQueue.getOffsetInQueueByTime``: binary search, nearest neighbour when inexact."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None or cq.head >= len(cq.offsets):
            return cq.head if cq is not None else 0
        low, high = cq.head, len(cq.offsets) - 1
        left = right = -1
        left_v = right_v = -1
        while high >= low:
            mid = (low + high) // 2
            ts = self.store_ts_at(cq.offsets[mid])
            if ts == timestamp:
                return mid
            if ts > timestamp:
                high, right, right_v = mid - 1, mid, ts
            else:
                low, left, left_v = mid + 1, mid, ts
        if left_v == -1:
            return right
        if right_v == -1:
            return left
        return right if abs(timestamp - left_v) > abs(timestamp - right_v) else left

    def _window(
        self, topic: str, queue_id: int, offset: int, max_nums: int
    ) -> tuple[GetResult, ConsumeQueue | None, int]:
        """Where a get starts: the answer so far and, when ``offset`` lies in the queue, the queue and
        the queue offset where looking for matches stops (else None: the answer is final)."""
        cq = self.cqs.get((topic, queue_id))
        max_offset = len(cq.offsets) if cq is not None else 0
        if cq is None or max_offset == 0:  # findConsumeQueue creates missing queues: empty, not absent
            return GetResult("NO_MESSAGE_IN_QUEUE", 0, 0, 0), None, 0
        if offset < cq.head:
            return GetResult("OFFSET_TOO_SMALL", cq.head, cq.head, max_offset), None, 0
        if offset == max_offset:
            return GetResult("OFFSET_OVERFLOW_ONE", offset, cq.head, max_offset), None, 0
        if offset > max_offset:
            return GetResult("OFFSET_OVERFLOW_BADLY", max_offset, cq.head, max_offset), None, 0
        res = GetResult("NO_MATCHED_MESSAGE", offset, cq.head, max_offset)
        return res, cq, min(max_offset, offset + max(800, max_nums))

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        codes: frozenset[int] | None,
        *,
        runs: bool = False,
        accept: Callable[[str], bool] | None = None,
    ) -> GetResult:
        """``DefaultMessageStore.getMessage``: ``codes`` None matches every tag; with ``accept``, a
        message whose tag code matches is taken only if ``accept(its properties string)`` (a
        commit-log filter, ``MessageFilter.isMatchedByCommitLog``). With ``runs``, messages that lie
        back to back in the commit log share one slice (fewer buffers to write for a pull; ``parts``
        are then not one per message)."""
        res, cq, end = self._window(topic, queue_id, offset, max_nums)
        if cq is None:
            return res
        offsets, sizes, tags, views = cq.offsets, cq.sizes, cq.tags, self.views
        parts = res.parts
        max_count, max_bytes = min(max_nums, self.max_transfer_count), self.max_transfer_bytes
        if codes is None and accept is None and runs:
            # Every message matches: the answer is the next max_count messages (the first whatever
            # is asked) unless the byte limit cuts it. When they all lie back to back in one segment
            # (a batch, or one producer's messages to one queue; the first two tell most others
            # apart at once) it is one slice, found without a step per message.
            at = offsets[offset]
            stop = min(end, offset + max_count) if max_count > 1 else offset + 1
            last = stop - 1
            if last == offset or offsets[offset + 1] == at + sizes[offset]:
                total = sum(sizes[offset:stop])
                pos = at % SEGMENT_SIZE
                if (
                    (total <= max_bytes or last == offset)
                    and offsets[last] + sizes[last] - at == total  # queue entries ascend: no gaps
                    and pos + total <= SEGMENT_SIZE
                ):
                    parts.append(views[at // SEGMENT_SIZE][pos : pos + total])
                    res.next_begin = stop
                    res.status = "FOUND"
                    res.total = total
                    res.count = stop - offset
                    return res
        total = 0
        count = 0
        i = offset
        run_at, run_end = -1, -1  # the commit-log span of the current slice
        while i < end:
            size = sizes[i]
            if count and (count >= max_count or total + size > max_bytes):
                break
            if codes is None or tags[i] in codes:
                at = offsets[i]
                if accept is None or accept(self._props_or_empty(at)):
                    # a new slice unless the message goes on from the last one (a segment ends with a
                    # blank: a slice never crosses one; checked anyway)
                    if not runs or at != run_end or at % SEGMENT_SIZE == 0:
                        if run_at >= 0:
                            seg, pos = divmod(run_at, SEGMENT_SIZE)
                            parts.append(views[seg][pos : pos + run_end - run_at])
                        run_at = at
                    run_end = at + size
                    total += size
                    count += 1
            i += 1
        if run_at >= 0:
            seg, pos = divmod(run_at, SEGMENT_SIZE)
            parts.append(views[seg][pos : pos + run_end - run_at])
        res.next_begin = i
        if count:
            res.status = "FOUND"
            res.total = total
            res.count = count
        return res

    def _props_or_empty(self, phys: int) -> str:
        try:
            return self.props_at(phys)
        except (struct.error, IndexError, UnicodeDecodeError):
            return ""  # a damaged message: its properties do not read

    def props_at(self, phys: int) -> str:
        """The properties string of the message at ``phys`` (``MessageDecoder.decodeProperties``)."""
        seg, pos = divmod(phys, SEGMENT_SIZE)
        return stored_properties(self.views[seg], pos)

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the commit-log file if anything was written since the last flush."""
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None
        self.views.clear()
        self.segments.clear()
