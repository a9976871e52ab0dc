"""Stored messages that cannot be decoded, and the records that name them.

A message whose framing is sound but whose content is not (a body that does not decompress, an
unknown compression type, text that is not UTF-8) becomes an :class:`Undecodable` record; a body whose
framing is broken is refused whole (:class:`BrokenBodyError`), with a record of the failing message
when its fixed part still reads; :func:`salvage_ids` names the one message a narrowed pull starts with
from its fixed fields alone. What a consumer does with them is :mod:`rmq_async.consumer.poison`.
:mod:`.stored` re-exports the public names.

Sans-IO: no asyncio, sockets or clocks here.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ProtocolError
from .codes import Prop
from .commitlog import (
    _BODY_LEN,
    _FIXED4,
    _I32_AT,
    _MAGIC,
    _PHYS,
    _QID,
    _QOFF,
    _RECONSUME,
    _SIZE,
    _STORE_IP,
    _STORE_PORT,
    _SYSFLAG,
    _V6_FLAGS,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    unpack_v6,
)
from .msgid import _ip_hex
from .properties import lookup_property

__all__ = [
    "UNDECODABLE_POLICIES",
    "BrokenBodyError",
    "Undecodable",
    "UndecodableMessageError",
    "UndecodablePolicy",
    "salvage_ids",
    "undecodable_at",
]

#: what a lite pull consumer (and the Spark source) does with an undecodable message
UndecodablePolicy = Literal["fail", "skip"]
UNDECODABLE_POLICIES: tuple[UndecodablePolicy, ...] = ("fail", "skip")


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A stored message that could not be decoded: its framing was sound but not its content (a body
    that does not decompress, an unknown compression type, text that is not UTF-8), or its framing
    was broken and a consumer named it from what still read (:func:`salvage_ids`). ``topic`` and
    ``msg_id`` (the UNIQ_KEY) are None when unreadable; ``offset_msg_id`` (store host + commit-log
    offset) names it when the store host reads ("" when not), and ``commit_log_offset`` is what
    CONSUMER_SEND_MSG_BACK needs to move it (-1 when no trusted one is known)."""

    topic: str | None
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    sys_flag: int
    reconsume_times: int
    offset_msg_id: str
    msg_id: str | None
    reason: str
    broker_name: str = ""

    def describe(self) -> str:
        """One line for a log or an error: topic, queue, offset, ids, reason."""
        where = f"{self.topic or '<unreadable topic>'}@{self.broker_name or '?'}:{self.queue_id}"
        ids = f"msg id {self.msg_id}, " if self.msg_id else ""
        if self.offset_msg_id:
            ids += f"offset msg id {self.offset_msg_id}, "
        clo = self.commit_log_offset
        ids += f"commit-log offset {clo}" if clo >= 0 else "commit-log offset unknown"
        return f"undecodable message at {where} offset {self.queue_offset} ({ids}): {self.reason}"


class UndecodableMessageError(ProtocolError):
    """A message could not be decoded and the policy is ``"fail"`` (lite pull, the Spark source):
    the error names its queue and offset; ``record`` holds the details."""

    def __init__(self, record: Undecodable) -> None:
        super().__init__(record.describe())
        self.record = record


def undecodable_at(body: bytes, pos: int, reason: str, *, broker_name: str = "") -> Undecodable:
    """The record of the stored message at byte ``pos`` of a pull body whose framing was checked
    (for a decoder of its own, such as the Spark source's): the fixed part is read again, the topic
    and UNIQ_KEY where they are valid UTF-8."""
    (sys_flag,) = _I32_AT.unpack_from(body, pos + 36)
    if sys_flag & _V6_FLAGS:
        f, fixed = unpack_v6(body, pos, len(body))
    else:
        f, fixed = _FIXED4.unpack_from(body, pos), 88
    q = pos + fixed + f[_BODY_LEN]
    if f[_MAGIC] == MAGIC_CODE_V1:
        p = q + 1 + body[q]
        topic_bytes = body[q + 1 : p]
    else:
        p = q + 2 + ((body[q] << 8) | body[q + 1])
        topic_bytes = body[q + 2 : p]
    props_len = (body[p] << 8) | body[p + 1]
    return _record(f, topic_bytes, body[p + 2 : p + 2 + props_len], reason, broker_name)


#: TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET: the first 36 bytes of a stored
#: message, at the same positions whatever its magic code and host kinds (``MessageDecoder``)
_IDS = struct.Struct(">iiiiiqq")


def salvage_ids(
    body: bytes | bytearray | memoryview, queue_id: int, queue_offset: int, reason: str = ""
) -> Undecodable | None:
    """The record of the one stored message a pull body starts with, from its fixed fields alone,
    when the decoder refused its framing (a bad magic code, sizes that do not add up): trusted only
    if its QUEUEID and QUEUEOFFSET are the queue and offset the pull asked for, so its PHYSICALOFFSET
    (what CONSUMER_SEND_MSG_BACK needs) is most likely sound too. None when the body is shorter than
    those fields or they name another message (or a negative commit-log offset). Never raises."""
    if len(body) < _IDS.size:
        return None
    total, _magic, _crc, qid, _flag, qoff, phys = _IDS.unpack_from(body, 0)
    if qid != queue_id or qoff != queue_offset or phys < 0:
        return None
    return Undecodable(
        topic=None,
        queue_id=qid,
        queue_offset=qoff,
        commit_log_offset=phys,
        store_size=total,
        sys_flag=0,  # past the fields checked: not trusted
        reconsume_times=0,
        offset_msg_id="",
        msg_id=None,
        reason=reason or "its framing does not read",
    )


def _record(
    f: tuple[Any, ...], topic_bytes: bytes | None, props: bytes | None, reason: str, broker: str
) -> Undecodable:
    topic: str | None = None
    if topic_bytes is not None:
        with contextlib.suppress(UnicodeDecodeError):
            topic = topic_bytes.decode()
    msg_id: str | None = None
    if props is not None:
        with contextlib.suppress(UnicodeDecodeError):
            msg_id = lookup_property(props.decode(), Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    offset_msg_id = (
        f"{_ip_hex(f[_STORE_IP])}{f[_STORE_PORT] & 0xFFFFFFFF:08X}{f[_PHYS] & 0xFFFFFFFFFFFFFFFF:016X}"
    )
    return Undecodable(
        topic=topic,
        queue_id=f[_QID],
        queue_offset=f[_QOFF],
        commit_log_offset=f[_PHYS],
        store_size=f[_SIZE],
        sys_flag=f[_SYSFLAG],
        reconsume_times=f[_RECONSUME],
        offset_msg_id=offset_msg_id,
        msg_id=msg_id or None,
        reason=reason,
        broker_name=broker,
    )


def _bad(pos: int, what: str, buf: bytes | None = None) -> ProtocolError:
    message = f"stored message at offset {pos}: {what}"
    if buf is None:
        return ProtocolError(message)
    return BrokenBodyError(message, _salvage(buf, pos, what), body=buf)


class BrokenBodyError(ProtocolError):
    """A pull body whose framing is broken (a store size, magic code or length that does not add
    up): nothing from the failing message on can be trusted, so the whole body is refused. ``record``
    names the failing message when its fixed part still reads as one (magic code valid), else None:
    what a consumer needs to move it to the DLQ after the same failure repeats. ``index`` is the
    number of messages framed soundly before it (a pull of that many gets just those), ``body`` the
    refused bytes (for :func:`salvage_ids`), ``next_begin_offset`` the pull's answer (-1 unknown)."""

    def __init__(
        self, message: str, record: Undecodable | None, *, index: int = 0, body: bytes = b""
    ) -> None:
        super().__init__(message)
        self.record = record
        self.index = index
        self.body = body
        self.next_begin_offset = -1


def _salvage(buf: bytes, pos: int, reason: str) -> Undecodable | None:
    """The record of a message with broken framing, from whatever of it reads."""
    if len(buf) - pos < _FIXED4.size:
        return None
    f = _FIXED4.unpack_from(buf, pos)
    if f[_MAGIC] not in (MAGIC_CODE_V1, MAGIC_CODE_V2) or f[_SYSFLAG] & _V6_FLAGS:
        return None
    try:
        return undecodable_at(buf, pos, reason)
    except (IndexError, struct.error, ProtocolError):
        return _record(f, None, None, reason, "")  # the topic and properties do not read
