"""Messages to send: :class:`Message` and the bytes a producer puts on the wire for its body.

Strategy. A :class:`Message` keeps its properties as the dict that goes on the wire, in the order the
4.9.8 client's HashMap writes them, so :func:`~.properties.encode_properties` reproduces Java's string
byte for byte. What Java's ``Validators`` refuse is refused when the message is built (topic charset
and length, empty body, flag range, a separator in a property); ``properties`` stays a plain dict, so
encoding checks the separators again. A batch body (``MessageDecoder.encodeMessages``) is one
``struct.pack`` per message plus its body and property bytes, joined once; a caller that holds its
messages as columns (the Spark sink) builds each member's properties with
:func:`batch_member_properties` and the body with :func:`encode_batch_members`, the same layout
without a :class:`Message` per member. Bodies are compressed
as the Java producer compresses them (:mod:`.compression`, whose names are re-exported here).

Sans-IO: no asyncio, sockets or clocks here (unique ids come from :mod:`.msgid`).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from ..errors import InvalidMessageError
from .codes import SYSTEM_PROPERTIES, Prop
from .compression import COMPRESSION_TYPES as COMPRESSION_TYPES
from .compression import CompressionType as CompressionType
from .compression import compress_body as compress_body
from .compression import compression_flag as compression_flag
from .fastjson import java_map_order
from .msgid import new_uniq_id
from .properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTIES_MAX,
    PROPERTY_SEPARATOR,
    check_property,
    encode_properties,
)

__all__ = [
    "COMPRESSION_TYPES",
    "COMPRESS_THRESHOLD",
    "MAX_MESSAGE_SIZE",
    "TIMER_PROPERTIES",
    "CompressionType",
    "Message",
    "batch_member_properties",
    "check_topic",
    "compress_body",
    "compression_flag",
    "encode_batch_body",
    "encode_batch_members",
    "is_timer",
]

#: ``DefaultMQProducer.compressMsgBodyOverHowmuch``: bodies of at least this size are compressed.
COMPRESS_THRESHOLD = 4 * 1024
#: ``DefaultMQProducer.maxMessageSize`` default.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024

_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+", re.ASCII)  # TopicValidator: ^[%|a-zA-Z0-9_-]+$
_TOPIC_MAX = 127  # Validators.TOPIC_MAX_LENGTH
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN
_I16 = struct.Struct(">h")
#: the properties that make a message a 5.x timer message (``HookUtils.checkIfTimerMessage``)
TIMER_PROPERTIES = frozenset({Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS})


def is_timer(properties: Mapping[str, str]) -> bool:
    """Whether ``properties`` ask a 5.x broker for a timer (``deliver_at`` or ``delay``)."""
    return not TIMER_PROPERTIES.isdisjoint(properties)


def _seconds(field: str, value: object) -> float:
    """A ``deliver_at`` or ``delay`` as seconds: a datetime (aware, or local time as
    ``datetime.timestamp`` reads a naive one), a timedelta, or a finite number."""
    if isinstance(value, datetime) and field == "deliver_at":
        return value.timestamp()
    if isinstance(value, timedelta) and field == "delay":
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "a datetime or epoch seconds" if field == "deliver_at" else "seconds or a timedelta"
        raise InvalidMessageError(field, f"must be {kind}, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidMessageError(field, f"must be finite, got {value!r}")
    return float(value)


def _timer_property(deliver_at: object, delay: object, delay_level: int) -> tuple[str, str] | None:
    """The one timer property of a message (as the 5.x client's ``setDeliverTimeMs``,
    ``setDelayTimeSec`` and ``setDelayTimeMs`` write it): whole seconds of ``delay`` go as
    TIMER_DELAY_SEC, anything finer as TIMER_DELAY_MS, ``deliver_at`` as TIMER_DELIVER_MS."""
    if deliver_at is None and delay is None:
        return None
    if deliver_at is not None and delay is not None:
        raise InvalidMessageError("delay", "give deliver_at or delay, not both")
    if delay_level > 0:
        raise InvalidMessageError(
            "delay_level", "a timer (deliver_at, delay) and a delay level exclude each other"
        )
    if deliver_at is not None:
        ms = round(_seconds("deliver_at", deliver_at) * 1000)
        if ms <= 0:
            raise InvalidMessageError("deliver_at", f"must be after the epoch, got {deliver_at!r}")
        return Prop.TIMER_DELIVER_MS, str(ms)
    ms = round(_seconds("delay", delay) * 1000)
    if ms <= 0:
        raise InvalidMessageError("delay", f"must be positive, got {delay!r}")
    if ms % 1000 == 0:
        return Prop.TIMER_DELAY_SEC, str(ms // 1000)
    return Prop.TIMER_DELAY_MS, str(ms)


def _check_text(field: str, name: str, value: str) -> None:
    """A property as :func:`check_property` wants it, and encodable as UTF-8 (no lone surrogate)."""
    try:
        check_property(name, value)
        name.encode()
        value.encode()
    except ValueError as exc:  # UnicodeEncodeError included
        what = "a lone surrogate" if isinstance(exc, UnicodeError) else str(exc)
        raise InvalidMessageError(
            field, f"{name!r} holds {what}" if field == "properties" else what
        ) from None


def _check_user_property(name: str, value: str) -> None:
    """A user property (Java's ``putUserProperty``): not a system name, then as :func:`_check_text`."""
    if name in SYSTEM_PROPERTIES:
        raise InvalidMessageError(
            "properties",
            f"{name!r} is used by the system (MessageConst.STRING_HASH_SET): name it otherwise (keys=, "
            "tags= and delay_level= set KEYS, TAGS and DELAY)",
        )
    _check_text("properties", name, value)


def check_topic(topic: str) -> None:
    """``Validators.checkTopic``: the producer's rule for a topic name, the consumers' too (a topic it
    refuses could never be sent to); ValueError saying what is wrong."""
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
    Raises :class:`~rmq_async.errors.InvalidMessageError` (a ``ConfigError``, a ``ValueError``) naming
    the argument for an invalid topic (blank, over 127 characters, outside ``[%|a-zA-Z0-9_-]``), a
    body that is not bytes (a str: encode it) or is empty, keys or tags that are not str, a property
    that is not str or holds ``\\x01``/``\\x02``, text that is not UTF-8 (a lone surrogate), a flag
    outside a Java int, a negative delay level.

    Timer messages (5.x brokers): ``deliver_at`` (a datetime or epoch seconds) or ``delay`` (seconds
    or a timedelta, ms precision) ask the broker to deliver the message then; the broker's wheel
    works to the second and delivers no earlier. A 4.x broker has no timers: the producer refuses to
    send such a message to one (:class:`~rmq_async.errors.UnsupportedByBrokerError`). Both, or either
    with a ``delay_level``, are refused here.
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
        *,
        deliver_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> None:
        try:
            check_topic(topic)
        except ValueError as exc:
            raise InvalidMessageError("topic", str(exc)) from None
        if isinstance(body, str):
            raise InvalidMessageError("body", "must be bytes, got str: encode it (body.encode())")
        if not isinstance(body, bytes):
            try:
                body = bytes(body)  # bytearray, memoryview
            except TypeError:
                raise InvalidMessageError("body", f"must be bytes, got {type(body).__name__}") from None
        if not body:
            raise InvalidMessageError("body", "is empty")
        for name, n in (("flag", flag), ("delay_level", delay_level)):
            if not isinstance(n, int) or isinstance(n, bool):
                raise InvalidMessageError(name, f"must be an int, got {type(n).__name__}")
        if not -0x80000000 <= flag <= 0x7FFFFFFF:
            raise InvalidMessageError("flag", f"{flag} does not fit in a Java int")
        if delay_level < 0:
            raise InvalidMessageError("delay_level", f"must be >= 0, got {delay_level}")
        props: dict[str, str] = {}
        if properties is not None and not isinstance(properties, dict):
            raise InvalidMessageError("properties", f"must be a dict of str, got {type(properties).__name__}")
        for name, value in (properties or {}).items():
            _check_user_property(name, value)
            props[name] = value
        if keys is not None:
            if isinstance(keys, str):
                joined = keys
            elif isinstance(keys, Sequence) and all(isinstance(k, str) for k in keys):
                joined = Prop.KEY_SEPARATOR.join(keys)
            else:
                raise InvalidMessageError("keys", f"must be a str or a sequence of str, got {keys!r}")
            if joined:
                _check_text("keys", Prop.KEYS, joined)
                props[Prop.KEYS] = joined
        props[Prop.WAIT_STORE_MSG_OK] = "true" if wait_store_msg_ok else "false"
        if delay_level > 0:
            props[Prop.DELAY_TIME_LEVEL] = str(delay_level)
        if tags is not None and not isinstance(tags, str):
            raise InvalidMessageError("tags", f"must be a str, got {type(tags).__name__}")
        if tags:
            _check_text("tags", Prop.TAGS, tags)
            props[Prop.TAGS] = tags
        timer = _timer_property(deliver_at, delay, delay_level)
        if timer is not None:
            props[timer[0]] = timer[1]
            props = java_map_order(props)  # where the 5.x client's HashMap puts the TIMER_* key
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
    def deliver_at(self) -> float | None:
        """The absolute delivery time asked for (epoch seconds), if any (TIMER_DELIVER_MS)."""
        ms = self.properties.get(Prop.TIMER_DELIVER_MS)
        return int(ms) / 1000 if ms and ms.isdigit() else None

    @property
    def delay(self) -> float | None:
        """The relative delay asked for (seconds), if any (TIMER_DELAY_SEC or TIMER_DELAY_MS)."""
        sec = self.properties.get(Prop.TIMER_DELAY_SEC)
        if sec and sec.isdigit():
            return float(sec)
        ms = self.properties.get(Prop.TIMER_DELAY_MS)
        return int(ms) / 1000 if ms and ms.isdigit() else None

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(Prop.WAIT_STORE_MSG_OK, "true").lower() == "true"

    @property
    def uniq_id(self) -> str | None:
        return self.properties.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @classmethod
    def resent(
        cls, topic: str, body: bytes, properties: dict[str, str], *, flag: int = 0, delay_level: int = 0
    ) -> Message:
        """A stored message sent again (the send-back fallback, a DLQ move, a batch's members): its
        ``properties`` as they are, system ones included (Java's ``putProperty``, which users do not
        reach), in their order, with ``WAIT`` and ``DELAY`` (``delay_level > 0``) set as :class:`Message`
        sets them."""
        msg = cls(topic, body, flag=flag, delay_level=delay_level)
        props: dict[str, str] = {}
        for name, value in properties.items():
            _check_text("properties", name, value)
            props[name] = value
        props.update(msg.properties)  # WAIT, DELAY: where the stored message had them, else after
        msg.properties = props
        return msg

    @classmethod
    def with_properties(
        cls, topic: str, body: bytes, properties: dict[str, str], *, flag: int = 0
    ) -> Message:
        """A message the client itself builds (a half message, a request, a reply: Java's
        ``MessageAccessor.putProperty``): ``properties`` exactly as given, in their order, system
        names included, only the separators checked. Users set properties through the constructor
        and :meth:`put_property`."""
        msg = cls(topic, body, flag=flag)
        props: dict[str, str] = {}
        for name, value in properties.items():
            _check_text("properties", name, value)
            props[name] = value
        msg.properties = props
        return msg

    def put_property(self, name: str, value: str) -> None:
        """Set a user property (Java's ``putUserProperty``): refused, as :class:`Message`'s
        ``properties=``, for a system name or the reserved separators."""
        _check_user_property(name, value)
        self.properties[name] = value

    def ensure_uniq_id(self, uniq_id: str | None = None) -> str:
        """Set ``UNIQ_KEY`` (to ``uniq_id`` or a new id) unless it is set; return it
        (``MessageClientIDSetter.setUniqID``). It goes before ``WAIT``, where the Java client has it."""
        props = self.properties
        current = props.get(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if current:
            return current
        uid = uniq_id or new_uniq_id()
        check_property(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uid)
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


def encode_batch_body(messages: Sequence[Message], *, trailing_separator: bool = False) -> bytes:
    """The SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``): per message TOTALSIZE, MAGIC 0,
    BODYCRC 0, FLAG, BODY (int length), PROPERTIES (short length). All messages must share a topic
    (the body does not carry it). ``trailing_separator=True`` writes the 5.x property form."""
    if not messages:
        raise ValueError("a batch needs at least one message")
    topic = messages[0].topic
    props: list[bytes] = []
    for msg in messages:
        if msg.topic != topic:
            raise ValueError(f"a batch must have one topic, got {topic!r} and {msg.topic!r}")
        data = encode_properties(msg.properties, trailing_separator=trailing_separator).encode("utf-8")
        if len(data) > PROPERTIES_MAX:
            raise ValueError(f"properties of {len(data)} bytes exceed {PROPERTIES_MAX}")
        props.append(data)
    return encode_batch_members([m.body for m in messages], props, [m.flag for m in messages])


def encode_batch_members(
    bodies: Sequence[bytes], properties: Sequence[bytes], flags: Sequence[int] | None = None
) -> bytes:
    """The SEND_BATCH_MESSAGE body of members given as their bodies and their encoded properties (the
    UTF-8 wire string, at most :data:`~.properties.PROPERTIES_MAX` bytes: what
    :func:`batch_member_properties` returns); ``flags`` 0 when None. The layout of
    :func:`encode_batch_body`: one ``struct.pack`` per member, the parts joined once."""
    if not bodies or len(bodies) != len(properties) or (flags is not None and len(flags) != len(bodies)):
        raise ValueError("a batch needs at least one member, and a body and properties for each")
    parts: list[bytes] = []
    head, fixed = _BATCH_HEAD.pack, _BATCH_HEAD.size + 2
    for i, (body, props) in enumerate(zip(bodies, properties, strict=True)):
        n = len(props)
        parts += (head(fixed + len(body) + n, 0, 0, flags[i] if flags else 0, len(body)), body)
        parts += (n.to_bytes(2, "big"), props)
    return b"".join(parts)


_KEYS_ITEM = f"{Prop.KEYS}{NAME_VALUE_SEPARATOR}"
_UNIQ_ITEM = f"{Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{NAME_VALUE_SEPARATOR}"
_WAIT_ITEM = f"{Prop.WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}true"
_TAGS_ITEM = f"{Prop.TAGS}{NAME_VALUE_SEPARATOR}"


def _plain(field: str, value: object) -> str:
    """``keys`` or ``tags`` as a property value: a str without the separators."""
    if not isinstance(value, str):
        raise InvalidMessageError(field, f"must be a str, got {type(value).__name__}")
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise InvalidMessageError(field, "contains a reserved separator (\\x01 or \\x02)")
    return value


def batch_member_properties(
    uniq_id: str,
    keys: str | None = None,
    tags: str | None = None,
    user: Iterable[tuple[str, str]] | None = None,
) -> bytes:
    """The encoded properties of one member of a batch (UTF-8, the 4.9.8 form) as :class:`Message`
    and :meth:`~rmq_async.Producer.send_batch` make them, in the order they put them (the ``user``
    properties, ``KEYS``, ``UNIQ_KEY``, ``WAIT``, ``TAGS``), for a caller that holds its messages as
    columns and makes no :class:`Message` of each. ``keys`` is one string (the key separator inside
    it); an empty ``keys`` or ``tags`` is left out. Refused as :class:`Message` refuses them
    (:class:`~rmq_async.errors.InvalidMessageError`): a system name among ``user``, a separator, a
    value that is not a str, properties over :data:`~.properties.PROPERTIES_MAX` bytes."""
    items: list[str] = []
    if user is not None:
        for name, value in user:
            _check_user_property(name, value)
            items.append(f"{name}{NAME_VALUE_SEPARATOR}{value}")
    if keys:
        items.append(_KEYS_ITEM + _plain("keys", keys))
    items += (_UNIQ_ITEM + _plain("uniq_id", uniq_id), _WAIT_ITEM)
    if tags:
        items.append(_TAGS_ITEM + _plain("tags", tags))
    try:
        data = PROPERTY_SEPARATOR.join(items).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessageError("properties", "hold a lone surrogate (not UTF-8)") from None
    if len(data) > PROPERTIES_MAX:
        raise InvalidMessageError("properties", f"{len(data)} bytes exceed {PROPERTIES_MAX}")
    return data
