"""Stored messages: :class:`MessageExt`, as a pull returns it, and :func:`decode_messages`.

Strategy. A pull body is stored messages back to back (``MessageDecoder.decodes`` in apache/rocketmq).
:func:`decode_messages` reads the fixed part of each one with one precompiled ``struct.Struct``
(``unpack_from`` at an offset of the body, no intermediate slices) and keeps that tuple as the
message's backing store, read through properties, so a decoded message costs one tuple, three copies
(body, topic, property string) and six slot writes. Topics repeat, so their decoded strings are
cached. The property string is decoded (so checked as UTF-8) eagerly, but its dict is built only
when :attr:`MessageExt.properties` is read or a property is set: ``tags``, ``keys``, ``msg_id`` and
:meth:`MessageExt.get_property` find their one value in the raw string
(:func:`~.properties.lookup_property`; the three hot ones inline it). Checking that every property
item has its ``\\x01`` costs as much as the rest of a decode, so it is opt-in (``check_properties``).
Host strings and the offset message id are computed on access. Malformed input raises
:class:`ProtocolError` naming the offset; lengths are checked before use, so nothing reads past a
message or hangs.

One bad message does not fail its batch (it would stall its queue). Once a message's framing is checked (store
size, magic, lengths that add up), what can still go wrong is its own: a compressed body that does not
decompress (zlib, LZ4 frame or ZSTD frame, the three ``CompressionType`` values of the sys flag's bits
8-10), an unknown compression type, a topic or properties string that is not UTF-8. Such a message
becomes an :class:`Undecodable` record (its offsets, topic, queue, ids where readable and the reason)
in :attr:`PulledMessages.undecodable`, and decoding goes on with the next one, so a consumer delivers
the rest and can move the bad one to its DLQ by commit-log offset. Inconsistent framing still fails
the whole body (:class:`BrokenBodyError`): nothing after it can be trusted; a consumer that sees
it repeat pulls that one message alone and names it by :func:`salvage_ids`. The ``try`` wraps only
the decompression (and the UTF-8 decodes, through the outer loop), so the decode of plain messages
costs what it did.

The layout itself, and the broker's side of it (the encoder, the in-place readers,
:class:`StoredMessage`), is :mod:`.commitlog`; the records of messages that cannot be decoded are
:mod:`.undecodable`, body decompression :mod:`.compression`; their public names are re-exported
here.

Sans-IO: no asyncio, sockets or clocks here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar, overload

from ..errors import ProtocolError
from .codes import MessageSysFlag, Prop
from .commitlog import (
    _BODY_LEN,
    _BORN_IP,
    _BORN_PORT,
    _BORN_TS,
    _CRC,
    _FIXED4,
    _FLAG,
    _LEAD4,
    _MAGIC,
    _PHYS,
    _PREPARED,
    _QID,
    _QOFF,
    _RECONSUME,
    _SIZE,
    _STORE_IP,
    _STORE_PORT,
    _STORE_TS,
    _SYSFLAG,
    _V6_FLAGS,
    unpack_v6,
)
from .commitlog import MAGIC_CODE_V1 as MAGIC_CODE_V1
from .commitlog import MAGIC_CODE_V2 as MAGIC_CODE_V2
from .commitlog import MIN_STORED_SIZE as MIN_STORED_SIZE
from .commitlog import StoredMessage as StoredMessage
from .commitlog import body_crc as body_crc
from .commitlog import encode_stored_into as encode_stored_into
from .commitlog import patch_stored as patch_stored
from .commitlog import stored_body_span as stored_body_span
from .commitlog import stored_head as stored_head
from .commitlog import stored_phys_offset as stored_phys_offset
from .commitlog import stored_properties as stored_properties
from .commitlog import stored_queue_offsets as stored_queue_offsets
from .commitlog import stored_size as stored_size
from .commitlog import stored_store_timestamp as stored_store_timestamp
from .commitlog import stored_sys_flag as stored_sys_flag
from .compression import decompress_body as decompress_body
from .msgid import _ip_hex, _ip_text, _parse_host
from .properties import (
    PROPERTIES_MAX,
    encode_properties,
    lookup_property,
    parse_properties,
    properties_well_formed,
)
from .undecodable import UNDECODABLE_POLICIES as UNDECODABLE_POLICIES
from .undecodable import BrokenBodyError as BrokenBodyError
from .undecodable import Undecodable as Undecodable
from .undecodable import UndecodableMessageError as UndecodableMessageError
from .undecodable import UndecodablePolicy as UndecodablePolicy
from .undecodable import _bad, _record
from .undecodable import salvage_ids as salvage_ids
from .undecodable import undecodable_at as undecodable_at

__all__ = [
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "MIN_STORED_SIZE",
    "UNDECODABLE_POLICIES",
    "BrokenBodyError",
    "MessageExt",
    "PulledMessages",
    "StoredMessage",
    "Undecodable",
    "UndecodableMessageError",
    "UndecodablePolicy",
    "body_crc",
    "decode_messages",
    "decompress_body",
    "encode_stored_into",
    "patch_stored",
    "salvage_ids",
    "stored_body_span",
    "stored_head",
    "stored_phys_offset",
    "stored_properties",
    "stored_queue_offsets",
    "stored_size",
    "stored_store_timestamp",
    "stored_sys_flag",
    "undecodable_at",
]


_INT_FIELDS = {
    "store_size": _SIZE, "body_crc": _CRC, "queue_id": _QID, "flag": _FLAG, "queue_offset": _QOFF,
    "commit_log_offset": _PHYS, "sys_flag": _SYSFLAG, "born_timestamp": _BORN_TS,
    "store_timestamp": _STORE_TS, "reconsume_times": _RECONSUME, "prepared_transaction_offset": _PREPARED,
}  # fmt: skip
_T = TypeVar("_T")
_TOPICS: dict[bytes, str] = {}  # decoded topic strings, by their bytes (they repeat)
_TOPICS_MAX = 4096


class _Field(Generic[_T]):
    """An attribute of :class:`MessageExt` kept in its fixed-part tuple (read often, written rarely)."""

    __slots__ = ("_index",)

    def __init__(self, index: int) -> None:
        self._index = index

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Field[_T]: ...
    @overload
    def __get__(self, obj: MessageExt, owner: type | None = None) -> _T: ...
    def __get__(self, obj: MessageExt | None, owner: type | None = None) -> _Field[_T] | _T:
        if obj is None:
            return self
        f = obj._t
        if f is None:
            f = obj._t = _FIXED4.unpack(obj._raw)
        value: _T = f[self._index]
        return value

    def __set__(self, obj: MessageExt, value: _T) -> None:
        f, i = obj._f, self._index
        obj._t = (*f[:i], value, *f[i + 1 :])


class MessageExt:
    """One stored message, as a pull (or VIEW_MESSAGE_BY_ID, CONSUME_MESSAGE_DIRECTLY) returns it.

    ``body`` is decompressed (and then the COMPRESSED bit is cleared from ``sys_flag``, as 5.x does).
    ``born_host``/``store_host`` are ``"ip:port"`` (IPv6 in Java's uncompressed form). ``properties``
    is built from ``raw_properties`` on first use, with Java's lenient rules (items without ``\\x01``,
    or with an empty name or value, are ignored), or when a property is set; until then ``tags``,
    ``keys``, ``msg_id`` and :meth:`get_property` read the raw string, and give what the dict would.
    ``broker_name`` is set by the client (the broker the message was pulled from).
    """

    # _t: the fixed part's fields, or None until first use, when they are unpacked from _raw (its bytes)
    __slots__ = ("_props", "_raw", "_t", "body", "broker_name", "queue_offset", "raw_properties", "topic")

    store_size = _Field[int](_SIZE)  # TOTALSIZE as stored
    body_crc = _Field[int](_CRC)
    queue_id = _Field[int](_QID)
    flag = _Field[int](_FLAG)  # the producer's flag
    commit_log_offset = _Field[int](_PHYS)
    sys_flag = _Field[int](_SYSFLAG)  # MessageSysFlag bits
    born_timestamp = _Field[int](_BORN_TS)  # producer clock, ms
    store_timestamp = _Field[int](_STORE_TS)  # broker clock, ms
    reconsume_times = _Field[int](_RECONSUME)
    prepared_transaction_offset = _Field[int](_PREPARED)

    def __init__(
        self,
        topic: str = "",
        body: bytes = b"",
        *,
        properties: Mapping[str, str] | None = None,
        born_host: str = "127.0.0.1:0",
        store_host: str = "127.0.0.1:0",
        broker_name: str = "",
        **fields: int,
    ) -> None:
        """Build one by hand (tests, tools); ``fields`` are the int attributes (``queue_offset=...``)."""
        unknown = fields.keys() - _INT_FIELDS.keys()
        if unknown:
            raise TypeError(f"unknown MessageExt fields: {sorted(unknown)}")
        values: list[Any] = [0] * 17
        for name, value in fields.items():
            values[_INT_FIELDS[name]] = value
        values[_MAGIC] = MAGIC_CODE_V1 if len(topic.encode("utf-8")) < 128 else MAGIC_CODE_V2
        values[_BORN_IP], values[_BORN_PORT] = _parse_host(born_host)
        values[_STORE_IP], values[_STORE_PORT] = _parse_host(store_host)
        values[_BODY_LEN] = len(body)
        self._t: tuple[Any, ...] | None = tuple(values)
        self._raw = b""
        #: offset in the consume queue (a plain attribute: the consumer reads it for every message)
        self.queue_offset: int = values[_QOFF]
        self.topic = topic
        self.body = body
        self.raw_properties = encode_properties(properties) if properties else ""
        self._props: dict[str, str] | None = dict(properties) if properties else None
        self.broker_name = broker_name

    @property
    def _f(self) -> tuple[Any, ...]:
        """The fixed part's fields (``_FIXED4`` layout), unpacked on first use."""
        f = self._t
        if f is None:
            f = self._t = _FIXED4.unpack(self._raw)
        return f

    @property
    def born_host(self) -> str:
        f = self._f
        return f"{_ip_text(f[_BORN_IP])}:{f[_BORN_PORT]}"

    @property
    def store_host(self) -> str:
        f = self._f
        return f"{_ip_text(f[_STORE_IP])}:{f[_STORE_PORT]}"

    @property
    def offset_msg_id(self) -> str:
        """Store host + commit-log offset, upper-case hex (``MessageDecoder.createMessageId``)."""
        f = self._f
        return f"{_ip_hex(f[_STORE_IP])}{f[_STORE_PORT] & 0xFFFFFFFF:08X}{f[_PHYS] & 0xFFFFFFFFFFFFFFFF:016X}"

    @property
    def properties(self) -> dict[str, str]:
        """All properties (built from ``raw_properties`` on first access; mutable)."""
        props = self._props
        if props is None:
            props = self._props = parse_properties(self.raw_properties, strict=False)
        return props

    def get_property(self, name: str, default: str | None = None) -> str | None:
        """One property, read from ``raw_properties`` while :attr:`properties` is not built."""
        props = self._props
        if props is not None:
            return props.get(name, default)
        value = lookup_property(self.raw_properties, name)
        return default if value is None else value

    def set_property(self, name: str, value: str) -> None:
        """Set a property (e.g. CONSUME_START_TIME); ``raw_properties`` keeps the decoded text, and
        every read goes to :attr:`properties` from then on."""
        self.properties[name] = value

    # tags, keys and msg_id are read for every pulled message: while the dict is not built, each is
    # lookup_property inlined for a constant name. "\x02NAME\x01" split off from the end is the last
    # item of that name (else the only one may open the string); its value runs to the next "\x02".
    # rpartition does the search and the cut in C (~25 % faster than rfind and a slice here). An
    # empty value, which the dict skips, leaves the search for an earlier item to lookup_property.

    @property
    def tags(self) -> str | None:
        if self._props is not None:
            return self._props.get(Prop.TAGS)
        raw = self.raw_properties
        _, sep, tail = raw.rpartition("\x02TAGS\x01")
        if not sep:
            if not raw.startswith("TAGS\x01"):
                return None
            tail = raw[5:]
        value = tail.partition("\x02")[0]
        return value or lookup_property(raw, Prop.TAGS)

    @property
    def keys(self) -> str | None:
        """The ``KEYS`` property: keys separated by a space."""
        if self._props is not None:
            return self._props.get(Prop.KEYS)
        raw = self.raw_properties
        if "\x02KEYS\x01" not in raw:
            # the only item of that name, if any, opens the string: where both producers put it (a
            # Java HashMap of the usual properties iterates KEYS first). Two one-argument methods
            # (removeprefix, partition) cost less than startswith and find, which parse an argument
            # tuple on 3.11 (~1,100 instructions a call less, benchmarks/instructions.py); the
            # lengths, not identity, tell whether the prefix was there (str subclasses, other Pythons)
            rest = raw.removeprefix("KEYS\x01")
            if len(rest) == len(raw):
                return None
            return rest.partition("\x02")[0] or None
        value = raw.rpartition("\x02KEYS\x01")[2].partition("\x02")[0]
        return value or lookup_property(raw, Prop.KEYS)

    @property
    def msg_id(self) -> str:
        """The client's ``UNIQ_KEY`` if present, else :attr:`offset_msg_id` (``MessageClientExt``)."""
        if self._props is not None:
            return self._props.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id
        raw = self.raw_properties
        _, sep, tail = raw.rpartition("\x02UNIQ_KEY\x01")
        if not sep:
            if not raw.startswith("UNIQ_KEY\x01"):
                return self.offset_msg_id
            tail = raw[9:]
        value = tail.partition("\x02")[0]
        return value or lookup_property(raw, Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"msg_id={self.msg_id!r}, tags={self.tags!r}, body={len(self.body)}B)"
        )


# -- decoding a pull body ---------------------------------------------------------------------


class PulledMessages(list[MessageExt]):
    """What :func:`decode_messages` returns: a list of messages that also knows what the decoder saw
    on its way, so the process queue need not touch every message again: ``nbytes``, the sum of the
    (decompressed) body lengths, and ``ascending``, whether the queue offsets rise strictly in list
    order (always so in a pull response; a broker that breaks it gets the process queue's checked,
    merging path). Both describe the list as decoded: a copy or slice is a plain list, and code that
    changes the list in place must not rely on them."""

    __slots__ = ("ascending", "nbytes", "undecodable")

    def __init__(self) -> None:
        super().__init__()
        self.nbytes = 0
        self.ascending = True
        #: the messages of the body that could not be decoded, in body order (not in the list)
        self.undecodable: tuple[Undecodable, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))  # unpickled as a plain list: the fields would be stale


def decode_messages(
    body: bytes | bytearray | memoryview,
    *,
    decompress: bool = True,
    check_properties: bool = False,
    broker_name: str = "",
) -> PulledMessages:
    """Decode a pull response body (stored messages back to back; ``MessageDecoder.decodes``).

    Handles V1 and V2 magic codes, IPv4 and IPv6 hosts, and zlib, LZ4 and ZSTD bodies
    (``decompress=False`` keeps them as stored); every message gets ``broker_name``. Raises
    :class:`ProtocolError` for malformed or truncated framing: a store size out of range or not
    matching the fields, a bad magic code, bad lengths. A message whose framing is sound but which
    cannot be decoded (a body that does not decompress, an unknown compression type, a topic or
    properties that are not UTF-8) is left out of the list and recorded in
    :attr:`PulledMessages.undecodable`; the messages after it are decoded.

    A property item without ``\\x01`` is rejected only with ``check_properties=True``: the check
    costs about as much as the rest of the decoding, and Java's reader ignores such items, as
    :attr:`MessageExt.properties` does.

    The result is a :class:`PulledMessages` carrying the body bytes, whether the offsets ascend and
    the undecodable messages.
    """
    buf = body if type(body) is bytes else bytes(body)
    n = len(buf)
    out = PulledMessages()
    nbytes = 0
    last = -1 << 64  # the previous queue offset (below any stored one)
    ascending = True
    append = out.append
    unpack = _LEAD4.unpack_from
    new = object.__new__
    topics = _TOPICS
    pos = end = 0
    bad: tuple[Undecodable, ...] = ()
    while True:  # left at the end of the body; a message isolated by an exception loops back
        try:
            while pos < n:
                if n - pos < MIN_STORED_SIZE:
                    raise _bad(
                        pos,
                        f"truncated: {n - pos} bytes left, a message needs {MIN_STORED_SIZE} or more",
                        buf,
                    )
                total, magic, queue_offset, sys_flag, body_len = unpack(buf, pos)
                end = pos + total
                if total < MIN_STORED_SIZE or end > n:
                    raise _bad(pos, f"store size {total} is out of range ({MIN_STORED_SIZE}..{n - pos})", buf)
                if magic != MAGIC_CODE_V1 and magic != MAGIC_CODE_V2:
                    raise _bad(pos, f"bad magic code {magic:#x}", buf)
                fixed = 88
                f: tuple[Any, ...] | None = None
                if sys_flag & _V6_FLAGS:
                    f, fixed = unpack_v6(buf, pos, end)
                    body_len = f[_BODY_LEN]
                q = pos + fixed + body_len
                if body_len < 0 or q + 3 > end:
                    raise _bad(pos, f"body length {body_len} does not fit in store size {total}", buf)
                msg_body = buf[pos + fixed : q]
                nbytes += body_len
                if queue_offset <= last:
                    ascending = False
                last = queue_offset
                if magic == MAGIC_CODE_V1:
                    p = q + 1 + buf[q]
                    topic_bytes = buf[q + 1 : p]
                else:
                    p = q + 2 + ((buf[q] << 8) | buf[q + 1])
                    topic_bytes = buf[q + 2 : p]
                if p + 2 > end:
                    raise _bad(pos, f"topic length {len(topic_bytes)} overruns store size {total}", buf)
                props_len = (buf[p] << 8) | buf[p + 1]
                if p + 2 + props_len != end or props_len > PROPERTIES_MAX:
                    raise _bad(
                        pos, f"store size {total} does not match the fields (properties {props_len}B)", buf
                    )
                # the framing is sound from here on: a failure below is this message's alone
                topic = topics.get(topic_bytes)
                if topic is None:
                    topic = _decode_topic(topic_bytes)  # UnicodeDecodeError: isolated below
                raw = buf[p + 2 : end].decode()
                if check_properties and raw and not properties_well_formed(raw):
                    raise _bad(pos, "a property item has no name/value separator")
                if sys_flag & 1 and decompress:
                    try:
                        msg_body = decompress_body(msg_body, sys_flag)
                    except ProtocolError as exc:
                        nbytes -= body_len
                        if f is None:
                            f = _FIXED4.unpack_from(buf, pos)
                        bad += (_record(f, topic_bytes, buf[p + 2 : end], str(exc), broker_name),)
                        pos = end
                        continue
                    nbytes += len(msg_body) - body_len
                    if f is None:
                        f = _FIXED4.unpack_from(buf, pos)
                    f = (*f[:7], sys_flag & ~MessageSysFlag.COMPRESSED_FLAG, *f[8:])
                m = new(MessageExt)
                m._raw = buf[pos : pos + 88] if f is None else b""
                m._t = f
                m.queue_offset = queue_offset
                m.topic = topic
                m.body = msg_body
                m.raw_properties = raw
                m._props = None
                m.broker_name = broker_name
                append(m)
                pos = end
        except BrokenBodyError as exc:
            exc.index = len(out) + len(bad)  # the messages framed before it (decoded or isolated)
            raise
        except UnicodeDecodeError as exc:  # the topic's (topic is None) or the properties' text
            what = "topic is" if topic is None else "properties are"
            reason = f"{what} not valid UTF-8 ({exc.reason} at {exc.start})"
            nbytes -= body_len
            fields = _FIXED4.unpack_from(buf, pos) if f is None else f
            bad += (_record(fields, topic_bytes, buf[p + 2 : end], reason, broker_name),)
            pos = end
            continue
        break
    if bad:
        out.undecodable = bad
    out.nbytes = nbytes
    out.ascending = ascending
    return out


def _decode_topic(topic_bytes: bytes) -> str:
    topic = topic_bytes.decode()  # UnicodeDecodeError: the caller isolates the message
    if len(_TOPICS) >= _TOPICS_MAX:
        _TOPICS.clear()
    _TOPICS[topic_bytes] = topic
    return topic
