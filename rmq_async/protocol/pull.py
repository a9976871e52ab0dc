"""PULL_MESSAGE (11), sans-IO: the request a client writes and what the broker's answer means.

Strategy (httpcore's layering): one core, two I/O shells. The async client
(``client.api.MQClientAPI.pull``) and the Spark reader's blocking pipe (``spark.pipe``) both build
their requests with :func:`pull_request` (the client's :class:`~.command.RequestSettings`: header
serialization, language, version, stream mark) and read the answers with :func:`read_pull_answer`,
which decides as ``MQClientAPIImpl.processPullResponse`` does: SUCCESS is FOUND, PULL_NOT_FOUND
NO_NEW_MSG, PULL_RETRY_IMMEDIATELY NO_MATCHED_MSG, PULL_OFFSET_MOVED OFFSET_ILLEGAL, with the
offsets of the ``PullMessageResponseHeader``; any other code is a :class:`PullRefused`, which each
shell raises as its broker error (``client.auth.broker_error``).

The pipe and the push consumer write thousands of pulls a second, each its queue's request with a new
offset, count, commit offset (and the flag that says whether one is sent) and opaque:
:class:`PullTemplate` cuts the header the shared encoder wrote for a queue's first request where
those go, and a frame is then a join, byte for byte ``RemotingCommand.encode`` (about 1 us against
6 us for building and encoding the command). :class:`PreparedPull` is one such pull, which the
connection encodes with its opaque (or, when it signs requests, builds as a command and signs).

* JSON: the cuts are found by their keys (``"queueOffset":"``, ``"maxMsgNums":"``, ``"commitOffset":"``,
  ``"sysFlag":"``, ``"opaque":``).
  Each occurs once: inside an encoded string a quote is escaped (``\\"``), so a key followed by its
  closing quote and a colon can only be that key itself, and a header has each key once.
* ROCKETMQ binary: the fixed part with the opaque (at :data:`~.command.BINARY_OPAQUE_AT`), the remark,
  the ``extFields`` length, then one :func:`~.command.binary_entry` per field: the fields that vary
  are encoded per frame, the others once.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from .codes import RequestCode, ResponseCode, SerializeType
from .command import BINARY_OPAQUE_AT, RemotingCommand, RequestSettings, binary_entry, frame_prefix
from .headers import PullMessageRequestHeader, PullMessageResponseHeader

__all__ = [
    "OPEN_FIELDS",
    "PULL_STATUS",
    "PreparedPull",
    "PullAnswer",
    "PullRefused",
    "PullStatus",
    "PullTemplate",
    "pull_request",
    "read_pull_answer",
]

_I32 = struct.Struct(">i")
QUEUE_OFFSET, MAX_MSG_NUMS = "queueOffset", "maxMsgNums"
COMMIT_OFFSET, SYS_FLAG = "commitOffset", "sysFlag"
#: the request fields a :class:`PullTemplate` leaves open, in the order :meth:`PullTemplate.frame` takes them
OPEN_FIELDS = (QUEUE_OFFSET, MAX_MSG_NUMS, COMMIT_OFFSET, SYS_FLAG)
_OPEN_KEYS = tuple(k.encode() for k in OPEN_FIELDS)


class PullStatus(Enum):
    """What a pull found (Java's ``PullStatus``)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


#: the status of each response code a pull is answered with (``processPullResponse``); any other code
#: is a broker error
PULL_STATUS: Mapping[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullAnswer(NamedTuple):
    """A pull's status and the offsets its answer's header gives (a named tuple: one is made per
    pull, and a frozen dataclass takes four times as long to make)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int


@dataclass(frozen=True, slots=True)
class PullRefused:
    """An answer whose code is not a pull status (a refused subscription, an ACL refusal, a system
    error): the caller raises it as its broker error, naming its request."""

    code: int
    remark: str | None


def pull_request(settings: RequestSettings, header: PullMessageRequestHeader) -> RemotingCommand:
    """The PULL_MESSAGE request of ``header``, written with the client's ``settings``."""
    return settings.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())


def read_pull_answer(
    code: int, ext_fields: Mapping[str, str], remark: str | None
) -> PullAnswer | PullRefused:
    """What the answer with ``code``, header ``ext_fields`` and ``remark`` says about a pull.

    A header without the four offsets, or one of its fields not a Java ``long`` / ``int``, raises
    :class:`~rmq_async.errors.ProtocolError`, as ``PullMessageResponseHeader.from_ext_fields`` reads
    it. What brokers send, plain decimal digits, is read here without the generic codec (in a quarter
    of its time: one answer is read per pull); anything else goes to the codec, which decides."""
    status = PULL_STATUS.get(code)
    if status is None:
        return PullRefused(code, remark)
    get = ext_fields.get
    next_begin, lo, hi = get("nextBeginOffset"), get("minOffset"), get("maxOffset")
    broker, topic_flag, group_flag = get("suggestWhichBrokerId"), get("topicSysFlag"), get("groupSysFlag")
    if (
        next_begin and lo and hi and broker  # present and not empty
        and len(next_begin) < 19 and len(lo) < 19 and len(hi) < 19 and len(broker) < 19  # a long
        and (topic_flag is None or 0 < len(topic_flag) < 10)  # 5.x, an int
        and (group_flag is None or 0 < len(group_flag) < 10)
    ):  # fmt: skip
        digits = next_begin + lo + hi + broker + (topic_flag or "") + (group_flag or "")
        if digits.isascii() and digits.isdigit():
            return PullAnswer(status, int(next_begin), int(lo), int(hi), int(broker))
    h = PullMessageResponseHeader.from_ext_fields(ext_fields)  # decides, and raises for a bad header
    return PullAnswer(status, h.next_begin_offset, h.min_offset, h.max_offset, h.suggest_which_broker_id)


class PullTemplate:
    """The PULL_MESSAGE requests of one queue, from its first one (``base``, as :func:`pull_request`
    built it): :meth:`command` for the pull at an offset, :meth:`frame` for its encoded frame with an
    opaque, byte for byte what ``command(...)`` with that opaque encodes to, in either header
    serialization. The fields a queue's pulls change (:data:`OPEN_FIELDS`: the offset, the count,
    the commit offset and the flags that say whether it is sent) are given per frame; the others stay
    as ``base`` has them."""

    __slots__ = ("_binary", "_defaults", "_ext_len", "_order", "_parts", "base")

    def __init__(self, base: RemotingCommand) -> None:
        if base.body:
            raise ValueError("a pull request has no body")
        self.base = base
        ext = base.ext_fields
        keys = list(ext)
        missing = [k for k in OPEN_FIELDS if k not in ext]
        if missing:  # (a PullMessageRequestHeader always has them)
            raise ValueError(f"a pull request has the fields {', '.join(missing)}")
        #: each open field's value in ``base`` (the frame's when not given)
        self._defaults = tuple(ext[k].encode() for k in OPEN_FIELDS)
        header = base.encode_header()
        self._binary = base.serialize_type == SerializeType.ROCKETMQ
        self._parts: tuple[bytes, ...]
        if self._binary:
            entries = [binary_entry(k.encode(), v.encode()) for k, v in ext.items()]
            head = header[: len(header) - 4 - sum(map(len, entries))]  # the fixed part and the remark
            at = sorted(keys.index(k) for k in OPEN_FIELDS)  # where the open entries lie
            self._order = (*(OPEN_FIELDS.index(keys[i]) for i in at), len(OPEN_FIELDS))  # the opaque last
            segments, prev = [], 0
            for i in at:
                segments.append(b"".join(entries[prev:i]))
                prev = i + 1
            segments.append(b"".join(entries[prev:]))
            self._parts = (head[:BINARY_OPAQUE_AT], head[BINARY_OPAQUE_AT + 4 :], *segments)
            self._ext_len = sum(map(len, segments))  # of the entries that do not change
        else:
            cuts = sorted(
                [
                    (*_json_cut(header, b'"%s":"' % key, value, b'"'), j)
                    for j, (key, value) in enumerate(zip(_OPEN_KEYS, self._defaults, strict=True))
                ]
                + [(*_json_cut(header, b'"opaque":', b"%d" % base.opaque, b","), len(OPEN_FIELDS))]
            )
            parts, pos = [], 0
            for cut_at, cut_end, _ in cuts:  # extFields comes before opaque (keys in alphabetical order)
                parts.append(header[pos:cut_at])
                pos = cut_end
            parts.append(header[pos:])
            self._parts = tuple(parts)
            self._order = tuple(j for _, _, j in cuts)
            self._ext_len = 0

    def command(
        self, offset: int, count: int, *, commit_offset: int | None = None, sys_flag: int | None = None
    ) -> RemotingCommand:
        """The request of the pull at ``offset`` for ``count`` messages (its opaque not set)."""
        b = self.base
        ext = dict(b.ext_fields)
        ext[QUEUE_OFFSET] = str(offset)
        ext[MAX_MSG_NUMS] = str(count)
        if commit_offset is not None:
            ext[COMMIT_OFFSET] = str(commit_offset)
        if sys_flag is not None:
            ext[SYS_FLAG] = str(sys_flag)
        return RemotingCommand(
            b.code,
            ext_fields=ext,
            remark=b.remark,
            flag=b.flag,
            language=b.language,
            version=b.version,
            serialize_type=b.serialize_type,
        )

    def frame(
        self,
        offset: int,
        count: int,
        opaque: int,
        *,
        commit_offset: int | None = None,
        sys_flag: int | None = None,
    ) -> bytes:
        """The whole frame of the pull at ``offset`` for ``count`` messages with ``opaque``."""
        d = self._defaults
        v = (
            b"%d" % offset,
            b"%d" % count,
            d[2] if commit_offset is None else b"%d" % commit_offset,
            d[3] if sys_flag is None else b"%d" % sys_flag,
            b"%d" % opaque,
        )
        p = self._parts
        a, b, c, e, f = self._order  # (unrolled: the frame is made once per pull)
        if self._binary:
            k = _OPEN_KEYS
            ea, eb, ec, ee = (
                binary_entry(k[a], v[a]),
                binary_entry(k[b], v[b]),
                binary_entry(k[c], v[c]),
                binary_entry(k[e], v[e]),
            )
            ext_len = _I32.pack(self._ext_len + len(ea) + len(eb) + len(ec) + len(ee))
            header = b"".join(
                (p[0], _I32.pack(opaque), p[1], ext_len, p[2], ea, p[3], eb, p[4], ec, p[5], ee, p[6])
            )
            return frame_prefix(len(header), 0, SerializeType.ROCKETMQ) + header
        header = b"".join((p[0], v[a], p[1], v[b], p[2], v[c], p[3], v[e], p[4], v[f], p[5]))
        return frame_prefix(len(header), 0, SerializeType.JSON) + header


class PreparedPull:
    """One pull of a queue as its :class:`PullTemplate` writes it: what
    :meth:`~rmq_async.transport.connection.Connection.request` takes in place of a command (the
    frame made with the opaque it assigns; the command only when the connection signs its requests)."""

    __slots__ = ("commit_offset", "count", "offset", "sys_flag", "template")

    code = RequestCode.PULL_MESSAGE

    def __init__(
        self, template: PullTemplate, offset: int, count: int, commit_offset: int, sys_flag: int
    ) -> None:
        self.template = template
        self.offset = offset
        self.count = count
        self.commit_offset = commit_offset
        self.sys_flag = sys_flag

    def frame(self, opaque: int) -> bytes:
        return self.template.frame(
            self.offset, self.count, opaque, commit_offset=self.commit_offset, sys_flag=self.sys_flag
        )

    def command(self) -> RemotingCommand:
        return self.template.command(
            self.offset, self.count, commit_offset=self.commit_offset, sys_flag=self.sys_flag
        )


def _json_cut(header: bytes, key: bytes, value: bytes, after: bytes) -> tuple[int, int]:
    """Where ``value`` lies in ``header``: after ``key`` (written once, see the module's strategy),
    before ``after``."""
    at = header.index(key + value + after) + len(key)
    return at, at + len(value)
