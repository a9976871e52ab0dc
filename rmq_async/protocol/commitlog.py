"""The stored-message layout, written down once: what a broker appends to its commit log and answers
a pull with (``MessageDecoder`` / ``CommitLog.DefaultAppendMessageCallback`` in apache/rocketmq).

The encoder (:func:`encode_stored_into`, :func:`stored_size`, :func:`body_crc`), the readers of one
field of a message in place (``stored_*``) and :func:`patch_stored`, and :class:`StoredMessage`, a
whole message decoded for a copy: the embedded broker's store and POP use them. The client's decoder
(:func:`~.stored.decode_messages`) reads the same layout through the structs defined here.

Sans-IO: no asyncio, sockets or clocks here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from typing import Any

from ..errors import ProtocolError
from .codes import MessageSysFlag

__all__ = [
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "MIN_STORED_SIZE",
    "StoredMessage",
    "body_crc",
    "encode_stored_into",
    "patch_stored",
    "stored_body_span",
    "stored_head",
    "stored_phys_offset",
    "stored_properties",
    "stored_queue_offsets",
    "stored_size",
    "stored_store_timestamp",
    "stored_sys_flag",
]

MAGIC_CODE_V1 = -626843481  # 1-byte topic length
MAGIC_CODE_V2 = -626843477  # 2-byte topic length (5.x, topics over 127 bytes)

# Stored message, both hosts IPv4: TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
# BORNTIMESTAMP BORNHOST(ip, port) STORETIMESTAMP STOREHOST(ip, port) RECONSUMETIMES PREPAREDOFFSET BODYLEN
_FIXED4 = struct.Struct(">iiiiiqqiqIiqIiiqi")
#: what decoding needs at once from that part (TOTALSIZE MAGIC QUEUEOFFSET SYSFLAG BODYLEN): the rest
#: stays as its 88 bytes and is unpacked on first use (the hot path of a consumer never reads it)
_LEAD4 = struct.Struct(">ii12xq8xi44xi")
_HEAD = struct.Struct(">iiiiiqqiq")  # up to BORNTIMESTAMP, when a host is IPv6
_HOST4, _HOST6 = struct.Struct(">Ii"), struct.Struct(">16si")
_I64 = struct.Struct(">q")
_I32_AT = struct.Struct(">i")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES PREPAREDOFFSET BODYLEN
_BORN_V6, _STORE_V6 = MessageSysFlag.BORNHOST_V6_FLAG, MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_V6_FLAGS = _BORN_V6 | _STORE_V6
#: the smallest stored message: IPv4 hosts, empty body, topic and properties (1-byte topic length)
MIN_STORED_SIZE = _FIXED4.size + 1 + 2
# Where the fields before the born host lie, the same for both magic codes and every host kind
# (``MessageDecoder``'s ``*_POSITION``); the born host starts at _HEAD.size (48).
_AT_MAGIC, _AT_CRC, _AT_QID, _AT_FLAG, _AT_QOFF, _AT_PHYS, _AT_SYSFLAG = 4, 8, 12, 16, 20, 28, 36
_SIZE_MAGIC = struct.Struct(">ii")  # TOTALSIZE MAGIC
_MAGIC_SYSFLAG = struct.Struct(">i28xi")  # MAGIC .. SYSFLAG, read from byte 4

# Indexes in the fixed-part tuple (``_FIXED4.unpack``, :func:`unpack_v6`), what a MessageExt keeps.
_SIZE, _MAGIC, _CRC, _QID, _FLAG, _QOFF, _PHYS, _SYSFLAG, _BORN_TS = range(9)
_BORN_IP, _BORN_PORT, _STORE_TS, _STORE_IP, _STORE_PORT, _RECONSUME, _PREPARED, _BODY_LEN = range(9, 17)


def unpack_v6(buf: bytes, pos: int, end: int) -> tuple[tuple[Any, ...], int]:
    """The fixed part when a host is IPv6 (16-byte address): same tuple layout as ``_FIXED4``."""
    head = _HEAD.unpack_from(buf, pos)
    sys_flag = head[_SYSFLAG]
    born = _HOST6 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else _HOST4
    store = _HOST6 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else _HOST4
    fixed = _HEAD.size + born.size + _I64.size + store.size + _TAIL.size
    if end - pos < fixed + 3:
        raise ProtocolError(
            f"stored message at offset {pos}: store size {end - pos} is below the {fixed + 3} bytes "
            "of its fixed part"
        )
    p = pos + _HEAD.size
    born_ip, born_port = born.unpack_from(buf, p)
    p += born.size
    (store_ts,) = _I64.unpack_from(buf, p)
    p += _I64.size
    store_ip, store_port = store.unpack_from(buf, p)
    tail = _TAIL.unpack_from(buf, p + store.size)
    return (*head, born_ip, born_port, store_ts, store_ip, store_port, *tail), fixed


# -- encoding (what a broker writes to its commit log and answers a pull with) ------------------------

_W_PROPS_LEN = struct.Struct(">h")


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC of a stored body: CRC-32 masked to 31 bits (``UtilAll.crc32``)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def stored_size(
    born_host_len: int, store_host_len: int, body_len: int, topic_len: int, props_len: int
) -> int:
    """TOTALSIZE of a stored message (MAGIC_CODE_V1: a topic of at most 127 bytes) with these parts;
    a host is 8 bytes (IPv4 and port) or 20 (IPv6 and port)."""
    return (
        _HEAD.size
        + born_host_len
        + 8
        + store_host_len
        + _TAIL.size
        + body_len
        + 1
        + topic_len
        + 2
        + props_len
    )


def encode_stored_into(
    buf: bytearray | memoryview,
    pos: int,
    total: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_ts: int,
    born_host: bytes,
    store_ts: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_offset: int,
    body: bytes,
    topic_b: bytes,
    props_b: bytes,
) -> None:
    """Write one stored message (``CommitLog`` layout, MAGIC_CODE_V1, the layout :func:`decode_messages`
    reads) at ``buf[pos : pos + total]``; ``total`` is :func:`stored_size` of its parts, the hosts are
    already packed (``ip, port``), the sys flag says which of them are IPv6. Positional only, for the
    broker's append path."""
    crc = zlib.crc32(body) & 0x7FFFFFFF  # body_crc, inlined: the append path
    _HEAD.pack_into(
        buf, pos, total, MAGIC_CODE_V1, crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts
    )
    p = pos + _HEAD.size
    buf[p : p + len(born_host)] = born_host
    p += len(born_host)
    _I64.pack_into(buf, p, store_ts)
    p += 8
    buf[p : p + len(store_host)] = store_host
    p += len(store_host)
    _TAIL.pack_into(buf, p, reconsume_times, prepared_offset, len(body))
    p += _TAIL.size
    buf[p : p + len(body)] = body
    p += len(body)
    buf[p] = len(topic_b)
    p += 1
    buf[p : p + len(topic_b)] = topic_b
    p += len(topic_b)
    _W_PROPS_LEN.pack_into(buf, p, len(props_b))
    p += 2
    buf[p : p + len(props_b)] = props_b


# -- one stored message in place (the broker's side: its commit log, a pop's copy) -------------------
# The broker reads single fields of a message in its commit log (a queue offset, a store time, the
# properties a filter needs) without decoding the rest, patches fixed fields in place (fault
# injection), and decodes a whole message (:class:`StoredMessage`) only to copy it: send-back, delay
# delivery, revive, recovery. ``pos`` is where the message starts in ``buf``; nothing is checked
# beyond what ``struct`` and slicing check (``struct.error``, ``IndexError``, ``UnicodeDecodeError``
# for a record that is not one): the store's own offsets point there.

_Buf = bytes | bytearray | memoryview


def stored_head(buf: _Buf, pos: int = 0) -> tuple[int, int]:
    """TOTALSIZE and MAGIC of the record at ``pos`` (a commit log's BLANK record has these two too)."""
    return _SIZE_MAGIC.unpack_from(buf, pos)


def stored_queue_offsets(messages: Iterable[_Buf]) -> list[int]:
    """QUEUEOFFSET of each stored message, one per buffer (a pull's or a pop's slices of the log)."""
    unpack, at = _I64.unpack_from, _AT_QOFF
    return [unpack(m, at)[0] for m in messages]


def stored_phys_offset(buf: _Buf, pos: int = 0) -> int:
    """PHYSICALOFFSET of the stored message at ``pos`` (its commit-log offset, as written)."""
    value: int = _I64.unpack_from(buf, pos + _AT_PHYS)[0]
    return value


def stored_sys_flag(buf: _Buf, pos: int = 0) -> int:
    """SYSFLAG of the stored message at ``pos``."""
    value: int = _I32_AT.unpack_from(buf, pos + _AT_SYSFLAG)[0]
    return value


def stored_store_timestamp(buf: _Buf, pos: int = 0) -> int:
    """STORETIMESTAMP of the stored message at ``pos``: after the born host, 8 or 20 bytes."""
    (sys_flag,) = _I32_AT.unpack_from(buf, pos + _AT_SYSFLAG)
    value: int = _I64.unpack_from(buf, pos + _HEAD.size + (20 if sys_flag & _BORN_V6 else 8))[0]
    return value


def stored_body_span(buf: _Buf, pos: int = 0) -> tuple[int, int]:
    """Where the body of the stored message at ``pos`` starts in ``buf``, and BODYLEN."""
    (sys_flag,) = _I32_AT.unpack_from(buf, pos + _AT_SYSFLAG)
    p = pos + _HEAD.size + (20 if sys_flag & _BORN_V6 else 8) + 8 + (20 if sys_flag & _STORE_V6 else 8)
    (body_len,) = _I32_AT.unpack_from(buf, p + _TAIL.size - 4)
    return p + _TAIL.size, body_len


def stored_properties(buf: _Buf, pos: int = 0) -> str:
    """The properties string of the stored message at ``pos`` (``MessageDecoder.decodeProperties``),
    found past the body and the topic (1-byte length for MAGIC_CODE_V1, 2 bytes for V2)."""
    magic, sys_flag = _MAGIC_SYSFLAG.unpack_from(buf, pos + _AT_MAGIC)
    p = pos + _HEAD.size + (20 if sys_flag & _BORN_V6 else 8) + 8 + (20 if sys_flag & _STORE_V6 else 8)
    p += _TAIL.size
    p += _I32_AT.unpack_from(buf, p - 4)[0]
    p += 2 + ((buf[p] << 8) | buf[p + 1]) if magic == MAGIC_CODE_V2 else 1 + buf[p]
    props_len = (buf[p] << 8) | buf[p + 1]
    return str(buf[p + 2 : p + 2 + props_len], "utf-8")


def patch_stored(
    buf: bytearray | memoryview,
    pos: int = 0,
    *,
    total: int | None = None,
    magic: int | None = None,
    crc: int | None = None,
    queue_id: int | None = None,
    flag: int | None = None,
    queue_offset: int | None = None,
    phys_offset: int | None = None,
    sys_flag: int | None = None,
) -> None:
    """Overwrite the given fixed fields of the stored message at ``pos``, the rest left as it is (no
    length changes: a sys flag's host bits must stay, and ``crc`` is the caller's to keep true)."""
    for value, at, fmt in (
        (total, 0, _I32_AT), (magic, _AT_MAGIC, _I32_AT), (crc, _AT_CRC, _I32_AT),
        (queue_id, _AT_QID, _I32_AT), (flag, _AT_FLAG, _I32_AT), (queue_offset, _AT_QOFF, _I64),
        (phys_offset, _AT_PHYS, _I64), (sys_flag, _AT_SYSFLAG, _I32_AT),
    ):  # fmt: skip
        if value is not None:
            fmt.pack_into(buf, pos + at, value)


class StoredMessage:
    """One stored message decoded field by field, as a broker copies it (send-back, delay delivery,
    revive, recovery): the hosts stay as stored (address + port bytes), the body as stored
    (compressed or not), the properties as their string. ``raw`` is its bytes."""

    __slots__ = (
        "body",
        "body_crc",
        "born_host",
        "born_ts",
        "flag",
        "phys_offset",
        "prepared_offset",
        "props",
        "queue_id",
        "queue_offset",
        "raw",
        "reconsume_times",
        "store_host",
        "store_ts",
        "sys_flag",
        "topic",
    )

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        (
            _total,
            magic,
            self.body_crc,
            self.queue_id,
            self.flag,
            self.queue_offset,
            self.phys_offset,
            sys_flag,
            self.born_ts,
        ) = _HEAD.unpack_from(raw, 0)
        self.sys_flag = sys_flag
        pos = _HEAD.size
        end = pos + (20 if sys_flag & _BORN_V6 else 8)
        self.born_host = raw[pos:end]
        (self.store_ts,) = _I64.unpack_from(raw, end)
        pos = end + 8
        end = pos + (20 if sys_flag & _STORE_V6 else 8)
        self.store_host = raw[pos:end]
        self.reconsume_times, self.prepared_offset, body_len = _TAIL.unpack_from(raw, end)
        pos = end + _TAIL.size
        end = pos + body_len
        self.body = raw[pos:end]
        if magic == MAGIC_CODE_V2:
            pos = end + 2
            end = pos + ((raw[end] << 8) | raw[end + 1])
        else:
            pos = end + 1
            end = pos + raw[end]
        self.topic = raw[pos:end].decode()
        pos = end + 2
        self.props = raw[pos : pos + ((raw[end] << 8) | raw[end + 1])].decode()

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + commit-log offset, upper hex)."""
        return self.store_host.hex().upper() + f"{self.phys_offset & 0xFFFFFFFFFFFFFFFF:016X}"

    def reencode(self, topic: str, props: str) -> bytes:
        """This message encoded again with another topic and properties string, every other field
        kept (what a pop of a retry message answers: the original topic and a broker-made POP_CK)."""
        topic_b, props_b = topic.encode(), props.encode()
        total = stored_size(
            len(self.born_host), len(self.store_host), len(self.body), len(topic_b), len(props_b)
        )
        out = bytearray(total)
        encode_stored_into(
            out, 0, total, self.queue_id, self.flag, self.queue_offset, self.phys_offset, self.sys_flag,
            self.born_ts, self.born_host, self.store_ts, self.store_host, self.reconsume_times,
            self.prepared_offset, self.body, topic_b, props_b,
        )  # fmt: skip
        return bytes(out)
