"""Messages: what a producer sends, what a pull returns, and the ids that name them.

Strategy. A pull body is stored messages back to back (``MessageDecoder.decodes`` in apache/rocketmq).
:func:`decode_messages` reads the fixed part of each one with one precompiled ``struct.Struct``
(``unpack_from`` at an offset of the body, no intermediate slices) and keeps that tuple as the
message's backing store, read through properties, so a decoded message costs one tuple, three copies
(body, topic, property string) and six slot writes. Topics repeat, so their decoded strings are
cached. The property string is decoded (so checked as UTF-8) eagerly, but its dict is built on first
use only; ``tags`` and ``msg_id`` are found in the raw string. Checking that every property item has
its ``\\x01`` costs as much as the rest of a decode, so it is opt-in (``check_properties``). Host
strings and the offset message id are computed on access. Malformed input raises
:class:`ProtocolError` naming the offset; lengths are checked before use, so nothing reads past a
message or hangs.

Sans-IO: no asyncio, sockets or clocks here, except the wall clock that unique ids embed.
"""

from __future__ import annotations

import itertools
import re
import struct
import zlib
from collections.abc import Mapping, Sequence
from operator import contains
from typing import Any, Generic, TypeVar, overload

from ..errors import ProtocolError
from .codes import MessageSysFlag, Prop
from .msgid import (
    UniqIdGenerator,
    _ip_hex,
    _ip_text,
    _parse_host,
    create_offset_msg_id,
    new_uniq_id,
    parse_offset_msg_id,
)

__all__ = [
    "COMPRESS_THRESHOLD", "MAGIC_CODE_V1", "MAGIC_CODE_V2", "MAX_MESSAGE_SIZE", "Message", "MessageExt",
    "PulledMessages", "UniqIdGenerator", "compress_body", "create_offset_msg_id", "decode_messages",
    "encode_batch_body", "encode_properties", "new_uniq_id", "parse_offset_msg_id", "parse_properties",
]  # fmt: skip

#: ``DefaultMQProducer.compressMsgBodyOverHowmuch``: bodies of at least this size are compressed.
COMPRESS_THRESHOLD = 4 * 1024
#: ``DefaultMQProducer.maxMessageSize`` default.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAGIC_CODE_V1 = -626843481  # 1-byte topic length
MAGIC_CODE_V2 = -626843477  # 2-byte topic length (5.x, topics over 127 bytes)

_NV, _SEP = "\x01", "\x02"  # MessageDecoder.NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+", re.ASCII)  # TopicValidator: ^[%|a-zA-Z0-9_-]+$
_TOPIC_MAX = 127  # Validators.TOPIC_MAX_LENGTH
_PROPS_MAX = 0x7FFF  # the properties length is a Java short

# Stored message, both hosts IPv4: TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
# BORNTIMESTAMP BORNHOST(ip, port) STORETIMESTAMP STOREHOST(ip, port) RECONSUMETIMES PREPAREDOFFSET BODYLEN
_FIXED4 = struct.Struct(">iiiiiqqiqIiqIiiqi")
#: what decoding needs at once from that part (TOTALSIZE MAGIC QUEUEOFFSET SYSFLAG BODYLEN): the rest
#: stays as its 88 bytes and is unpacked on first use (the hot path of a consumer never reads it)
_LEAD4 = struct.Struct(">ii12xq8xi44xi")
_HEAD = struct.Struct(">iiiiiqqiq")  # up to BORNTIMESTAMP, when a host is IPv6
_HOST4, _HOST6 = struct.Struct(">Ii"), struct.Struct(">16si")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES PREPAREDOFFSET BODYLEN
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN
_I16 = struct.Struct(">h")
_V6_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_MIN_STORED = _FIXED4.size + 1 + 2  # empty body, 1-byte topic length, properties length

# Indexes in the fixed-part tuple a MessageExt keeps.
_SIZE, _MAGIC, _CRC, _QID, _FLAG, _QOFF, _PHYS, _SYSFLAG, _BORN_TS = range(9)
_BORN_IP, _BORN_PORT, _STORE_TS, _STORE_IP, _STORE_PORT, _RECONSUME, _PREPARED, _BODY_LEN = range(9, 17)

_INT_FIELDS = {
    "store_size": _SIZE, "body_crc": _CRC, "queue_id": _QID, "flag": _FLAG, "queue_offset": _QOFF,
    "commit_log_offset": _PHYS, "sys_flag": _SYSFLAG, "born_timestamp": _BORN_TS,
    "store_timestamp": _STORE_TS, "reconsume_times": _RECONSUME, "prepared_transaction_offset": _PREPARED,
}  # fmt: skip
_T = TypeVar("_T")
_TOPICS: dict[bytes, str] = {}  # decoded topic strings, by their bytes (they repeat)
_TOPICS_MAX = 4096
_NEEDS_NV = itertools.repeat(_NV)


# -- properties -------------------------------------------------------------------------------


def parse_properties(s: str) -> dict[str, str]:
    """``name\\x01value\\x02...`` to a dict (``MessageDecoder.string2messageProperties``).

    Empty items (the 5.x trailing ``\\x02``) are skipped; an item without ``\\x01`` raises
    :class:`ProtocolError`. As in Java, an item with an empty name or value is ignored and a later
    duplicate name wins; a value may contain ``\\x01`` (the first one separates).
    """
    return _parse_properties(s, strict=True)


def _parse_properties(s: str, *, strict: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in s.split(_SEP):
        name, nv, value = item.partition(_NV)
        if name and value:
            out[name] = value
        elif strict and item and not nv:
            raise ProtocolError(f"property item without a name/value separator: {item[:40]!r}")
    return out


def _check_property_items(raw: str) -> bool:
    """True if every non-empty item of ``raw`` has a ``\\x01``; the common case stays in C."""
    items = raw.split(_SEP)
    if not items[-1]:
        items.pop()
    if all(map(contains, items, _NEEDS_NV)):
        return True
    return all(_NV in it for it in items if it)


def encode_properties(props: Mapping[str, str], *, trailing_separator: bool = False) -> str:
    """A property dict to the wire string (``MessageDecoder.messageProperties2String``).

    4.9.8 form by default (no trailing ``\\x02``); ``trailing_separator=True`` gives the 5.x form.
    Names must be non-empty; names and values must not contain ``\\x01`` or ``\\x02`` (ValueError).
    """
    parts = []
    for name, value in props.items():
        _check_property(name, value)
        parts.append(f"{name}{_NV}{value}")
    s = _SEP.join(parts)
    return s + _SEP if trailing_separator and s else s


def _check_property(name: str, value: str) -> None:
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"property names and values must be str, got {name!r}: {value!r}")
    if not name:
        raise ValueError("property name must not be empty")
    if _NV in name or _SEP in name or _NV in value or _SEP in value:
        raise ValueError(f"property {name!r} contains a reserved separator (\\x01 or \\x02)")


# -- ids --------------------------------------------------------------------------------------


def _check_topic(topic: str) -> None:
    if not isinstance(topic, str) or not topic.strip():
        raise ValueError("the topic is blank")
    if len(topic) > _TOPIC_MAX:
        raise ValueError(f"the topic is longer than {_TOPIC_MAX} characters: {topic[:40]!r}...")
    if not _TOPIC_RE.fullmatch(topic):
        raise ValueError(f"the topic {topic!r} contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")


class Message:
    """A message to send. ``properties`` is the full dict that goes on the wire: the user properties,
    then ``KEYS``, ``WAIT``, ``DELAY`` (when ``delay_level > 0``) and ``TAGS``, in the order the 4.9.8
    client's HashMap writes them (the producer inserts ``UNIQ_KEY`` before ``WAIT``).

    ``keys`` is a string or a sequence of keys (joined with a space, as ``setKeys(Collection)``).
    Raises ValueError for an invalid topic (blank, over 127 characters, outside ``[%|a-zA-Z0-9_-]``),
    an empty body, or a property containing ``\\x01``/``\\x02``.
    """

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        _check_topic(topic)
        if not isinstance(body, bytes):
            body = bytes(body)
        if not body:
            raise ValueError("the message body is empty")
        if not -0x80000000 <= flag <= 0x7FFFFFFF:
            raise ValueError(f"flag {flag} does not fit in a Java int")
        if delay_level < 0:
            raise ValueError(f"delay_level must be >= 0, got {delay_level}")
        props: dict[str, str] = {}
        for name, value in (properties or {}).items():
            _check_property(name, value)
            props[name] = value
        if keys is not None:
            joined = keys if isinstance(keys, str) else Prop.KEY_SEPARATOR.join(keys)
            if joined:
                _check_property(Prop.KEYS, joined)
                props[Prop.KEYS] = joined
        props[Prop.WAIT_STORE_MSG_OK] = "true" if wait_store_msg_ok else "false"
        if delay_level > 0:
            props[Prop.DELAY_TIME_LEVEL] = str(delay_level)
        if tags:
            _check_property(Prop.TAGS, tags)
            props[Prop.TAGS] = tags
        self.topic = topic
        self.body = body
        self.flag = flag
        self.properties = props

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(Prop.KEYS)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Prop.DELAY_TIME_LEVEL, "0"))

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(Prop.WAIT_STORE_MSG_OK, "true").lower() == "true"

    @property
    def uniq_id(self) -> str | None:
        return self.properties.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def put_property(self, name: str, value: str) -> None:
        """Set a property (checked for the reserved separators)."""
        _check_property(name, value)
        self.properties[name] = value

    def ensure_uniq_id(self, uniq_id: str | None = None) -> str:
        """Set ``UNIQ_KEY`` (to ``uniq_id`` or a new id) unless it is set; return it
        (``MessageClientIDSetter.setUniqID``). It goes before ``WAIT``, where the Java client has it."""
        props = self.properties
        current = props.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if current:
            return current
        uid = uniq_id or new_uniq_id()
        _check_property(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uid)
        items = list(props.items())
        props.clear()
        for name, value in items:
            if name == Prop.WAIT_STORE_MSG_OK:
                props[Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uid
            props[name] = value
        props.setdefault(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uid)
        return uid

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, body={len(self.body)}B, flag={self.flag}, "
            f"properties={self.properties!r})"
        )


def compress_body(body: bytes, level: int = 5) -> bytes:
    """zlib stream as the Java producer writes it (``ZlibCompressor``, level 5); the producer
    compresses bodies of at least :data:`COMPRESS_THRESHOLD` bytes and sets COMPRESSED|ZLIB (769)."""
    return zlib.compress(body, level)


def encode_batch_body(messages: Sequence[Message], *, trailing_separator: bool = False) -> bytes:
    """The SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``): per message TOTALSIZE, MAGIC 0,
    BODYCRC 0, FLAG, BODY (int length), PROPERTIES (short length). All messages must share a topic
    (the body does not carry it). ``trailing_separator=True`` writes the 5.x property form."""
    if not messages:
        raise ValueError("a batch needs at least one message")
    topic = messages[0].topic
    parts: list[bytes] = []
    for msg in messages:
        if msg.topic != topic:
            raise ValueError(f"a batch must have one topic, got {topic!r} and {msg.topic!r}")
        props = encode_properties(msg.properties, trailing_separator=trailing_separator).encode("utf-8")
        if len(props) > _PROPS_MAX:
            raise ValueError(f"properties of {len(props)} bytes exceed {_PROPS_MAX}")
        total = _BATCH_HEAD.size + len(msg.body) + 2 + len(props)
        parts += (_BATCH_HEAD.pack(total, 0, 0, msg.flag, len(msg.body)), msg.body, _I16.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


# -- the consumer's message -------------------------------------------------------------------


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
    or with an empty name or value, are ignored); ``tags`` and ``msg_id`` read the raw string until
    then. ``broker_name`` is set by the client (the broker the message was pulled from).
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
            props = self._props = _parse_properties(self.raw_properties, strict=False)
        return props

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    def set_property(self, name: str, value: str) -> None:
        """Set a property (e.g. CONSUME_START_TIME); ``raw_properties`` keeps the decoded text."""
        self.properties[name] = value

    # tags and msg_id are read for every pulled message: while the dict is not built, they are found
    # in the raw string with one rfind. "\x02NAME\x01" always starts an item (values cannot hold
    # \x02), so a value that mentions the name does not count, and the last item wins, as in the dict.
    # An empty value is dropped by the dict, where an earlier item may stand: that goes to the dict.

    @property
    def tags(self) -> str | None:
        if self._props is None:
            raw = self.raw_properties
            i = raw.rfind("\x02TAGS\x01")
            if i >= 0:
                value = raw[i + 6 :].partition(_SEP)[0]
            elif raw.startswith("TAGS\x01"):
                value = raw[5:].partition(_SEP)[0]
            else:
                return None
            if value:
                return value
        return self.properties.get(Prop.TAGS)

    @property
    def msg_id(self) -> str:
        """The client's ``UNIQ_KEY`` if present, else :attr:`offset_msg_id` (``MessageClientExt``)."""
        if self._props is None:
            raw = self.raw_properties
            i = raw.rfind("\x02UNIQ_KEY\x01")
            if i >= 0:
                value = raw[i + 10 :].partition(_SEP)[0]
            elif raw.startswith("UNIQ_KEY\x01"):
                value = raw[9:].partition(_SEP)[0]
            else:
                return self.offset_msg_id
            if value:
                return value
        return self.properties.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def keys(self) -> str | None:
        """The ``KEYS`` property: keys separated by a space."""
        return self.properties.get(Prop.KEYS)

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"msg_id={self.msg_id!r}, tags={self.tags!r}, body={len(self.body)}B)"
        )


# -- decoding a pull body ---------------------------------------------------------------------


def _bad(pos: int, what: str) -> ProtocolError:
    return ProtocolError(f"stored message at offset {pos}: {what}")


def _unpack_v6(buf: bytes, pos: int, end: int) -> tuple[tuple[Any, ...], int]:
    """The fixed part when a host is IPv6 (16-byte address): same tuple layout as ``_FIXED4``."""
    head = _HEAD.unpack_from(buf, pos)
    sys_flag = head[_SYSFLAG]
    born = _HOST6 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else _HOST4
    store = _HOST6 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else _HOST4
    fixed = _HEAD.size + born.size + _I64.size + store.size + _TAIL.size
    if end - pos < fixed + 3:
        raise _bad(pos, f"store size {end - pos} is below the {fixed + 3} bytes of its fixed part")
    p = pos + _HEAD.size
    born_ip, born_port = born.unpack_from(buf, p)
    p += born.size
    (store_ts,) = _I64.unpack_from(buf, p)
    p += _I64.size
    store_ip, store_port = store.unpack_from(buf, p)
    tail = _TAIL.unpack_from(buf, p + store.size)
    return (*head, born_ip, born_port, store_ts, store_ip, store_port, *tail), fixed


def _decompress(body: bytes, sys_flag: int, pos: int) -> bytes:
    kind = (sys_flag & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR) >> 8
    if kind not in (0, 3):  # CompressionType.findByValue: 0 (older clients) and 3 are zlib
        name = {1: "LZ4", 2: "ZSTD"}.get(kind, f"unknown type {kind}")
        raise _bad(pos, f"body is compressed with {name}, which is not supported (zlib only)")
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise _bad(pos, f"compressed body does not inflate: {exc}") from None


class PulledMessages(list[MessageExt]):
    """What :func:`decode_messages` returns: a list of messages that also knows what the decoder saw
    on its way, so the process queue need not touch every message again: ``nbytes``, the sum of the
    (decompressed) body lengths, and ``ascending``, whether the queue offsets rise strictly in list
    order (always so in a pull response; a broker that breaks it gets the process queue's checked,
    merging path). Both describe the list as decoded: a copy or slice is a plain list, and code that
    changes the list in place must not rely on them."""

    __slots__ = ("ascending", "nbytes")

    def __init__(self) -> None:
        super().__init__()
        self.nbytes = 0
        self.ascending = True

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

    Handles V1 and V2 magic codes, IPv4 and IPv6 hosts, and zlib bodies (``decompress=False`` keeps
    them as stored); every message gets ``broker_name``. Raises :class:`ProtocolError` for malformed
    or truncated input: a store size out of range or not matching the fields, a bad magic code, bad
    lengths, invalid UTF-8, a body that does not inflate or uses LZ4/ZSTD.

    A property item without ``\\x01`` is rejected only with ``check_properties=True``: the check
    costs about as much as the rest of the decoding, and Java's reader ignores such items, as
    :attr:`MessageExt.properties` does.

    The result is a :class:`PulledMessages` carrying the body bytes and whether the offsets ascend.
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
    pos = 0
    try:
        while pos < n:
            if n - pos < _MIN_STORED:
                raise _bad(pos, f"truncated: {n - pos} bytes left, a message needs {_MIN_STORED} or more")
            total, magic, queue_offset, sys_flag, body_len = unpack(buf, pos)
            end = pos + total
            if total < _MIN_STORED or end > n:
                raise _bad(pos, f"store size {total} is out of range ({_MIN_STORED}..{n - pos})")
            if magic != MAGIC_CODE_V1 and magic != MAGIC_CODE_V2:
                raise _bad(pos, f"bad magic code {magic:#x}")
            fixed = 88
            f: tuple[Any, ...] | None = None
            if sys_flag & _V6_FLAGS:
                f, fixed = _unpack_v6(buf, pos, end)
                body_len = f[_BODY_LEN]
            q = pos + fixed + body_len
            if body_len < 0 or q + 3 > end:
                raise _bad(pos, f"body length {body_len} does not fit in store size {total}")
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
                raise _bad(pos, f"topic length {len(topic_bytes)} overruns store size {total}")
            topic = topics.get(topic_bytes)
            if topic is None:
                topic = _decode_topic(topic_bytes, pos)
            props_len = (buf[p] << 8) | buf[p + 1]
            if p + 2 + props_len != end or props_len > _PROPS_MAX:
                raise _bad(pos, f"store size {total} does not match the fields (properties {props_len}B)")
            raw = buf[p + 2 : end].decode()
            if check_properties and raw and not _check_property_items(raw):
                raise _bad(pos, "a property item has no name/value separator")
            m = new(MessageExt)
            if sys_flag & 1 and decompress:
                msg_body = _decompress(msg_body, sys_flag, pos)
                nbytes += len(msg_body) - body_len
                if f is None:
                    f = _FIXED4.unpack_from(buf, pos)
                f = (*f[:7], sys_flag & ~MessageSysFlag.COMPRESSED_FLAG, *f[8:])
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
    except UnicodeDecodeError as exc:
        raise _bad(pos, f"properties are not valid UTF-8 ({exc.reason} at {exc.start})") from None
    out.nbytes = nbytes
    out.ascending = ascending
    return out


def _decode_topic(topic_bytes: bytes, pos: int) -> str:
    try:
        topic = topic_bytes.decode()
    except UnicodeDecodeError as exc:
        raise _bad(pos, f"topic is not valid UTF-8 ({exc.reason} at {exc.start})") from None
    if len(_TOPICS) >= _TOPICS_MAX:
        _TOPICS.clear()
    _TOPICS[topic_bytes] = topic
    return topic
