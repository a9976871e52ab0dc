"""RemotingCommand and the frame codec.

A frame is ``[int32 total][type:1|header_len:3][header][body]`` where ``total`` counts everything
after itself (``RemotingCommand.encode`` in apache/rocketmq). The header is JSON (type 0, written by
fastjson with its keys in alphabetical order) or the ROCKETMQ binary layout (type 1,
``RocketMQSerializable``). Every frame carries its own type byte: a 4.9 broker answers a binary
request in binary but sends its own requests (40) and held-pull answers (19) as JSON on the same
connection, so the decoder reads the type of each frame.

Sans-IO: bytes in, commands out. No asyncio, sockets or clocks here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic_core import from_json, to_json

from ..errors import FrameError, ProtocolError
from .codes import MQ_VERSION_V4_9_8, LanguageCode, SerializeType

__all__ = [
    "BINARY_MAX_CODE",
    "BINARY_OPAQUE_AT",
    "DEFAULT_MAX_FRAME",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FrameDecoder",
    "RawFrame",
    "RemotingCommand",
    "RequestSettings",
    "binary_entry",
    "decode_frame",
    "frame_prefix",
    "parse_command",
]

FLAG_RESPONSE = 0x1  # RemotingCommand.RPC_TYPE bit
FLAG_ONEWAY = 0x2  # RemotingCommand.RPC_ONEWAY bit
#: one encoder for every JSON header (json.dumps with options builds a new one per call)
# headers are plain dicts built here (no cycles): the circular-reference check would only cost time
_JSON_HEADER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
DEFAULT_MAX_FRAME = 16 << 20  # NettyDecoder FRAME_MAX_LENGTH default (com.rocketmq.remoting.frameMaxLength)

_PREFIX = struct.Struct(">iI")  # total length; serialize type << 24 | header length
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
#: where the opaque lies in a ROCKETMQ binary header (after the code, language and version)
BINARY_OPAQUE_AT = struct.calcsize(">hbh")
#: the largest request code the ROCKETMQ binary header holds (a signed 16-bit field)
BINARY_MAX_CODE = 0x7FFF
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

_LANG_BY_CODE = {lc.value: lc.name for lc in LanguageCode}
_LANG_BY_NAME = {lc.name: lc.value for lc in LanguageCode}


class RemotingCommand:
    """One remoting request or response.

    ``ext_fields`` holds the header fields, every value a string (the Java field names are the keys).
    ``ext_fields_present`` distinguishes a JSON header with ``"extFields":{}`` from one without the key:
    the real broker sends both, depending on the request, and the embedded broker answers alike.
    """

    __slots__ = (
        "body",
        "code",
        "ext_fields",
        "ext_fields_present",
        "flag",
        "language",
        "opaque",
        "received_ns",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        *,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        remark: str | None = None,
        opaque: int = 0,
        flag: int = 0,
        language: str = "PYTHON",
        version: int = MQ_VERSION_V4_9_8,
        serialize_type: SerializeType = SerializeType.JSON,
        ext_fields_present: bool | None = None,
    ) -> None:
        self.code = code
        self.ext_fields: dict[str, str] = ext_fields if ext_fields is not None else {}
        self.ext_fields_present = (
            (ext_fields is not None) if ext_fields_present is None else ext_fields_present
        )
        self.body = body
        self.remark = remark
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        #: when the transport read the frame (``perf_counter_ns``), while a stage recorder asks for
        #: it (see ``transport.connection.stamp_reads``); 0 otherwise
        self.received_ns = 0

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
        language: str = "PYTHON",
        version: int = MQ_VERSION_V4_9_8,
    ) -> RemotingCommand:
        return cls(
            code,
            ext_fields=ext_fields,
            body=body,
            flag=FLAG_ONEWAY if oneway else 0,
            serialize_type=serialize_type,
            language=language,
            version=version,
        )

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        language: str | None = None,
        version: int | None = None,
    ) -> RemotingCommand:
        """A response to this request: same opaque, same serialize type (as the Java server does)."""
        return RemotingCommand(
            code,
            ext_fields=ext_fields,
            body=body,
            remark=remark,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            language=language if language is not None else "JAVA",
            version=version if version is not None else self.version,
            serialize_type=self.serialize_type,
        )

    # -- flags --------------------------------------------------------------------------------

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} remark={self.remark!r} "
            f"ext_fields={self.ext_fields!r} body={len(self.body)}B {self.serialize_type.name})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    # -- encoding -----------------------------------------------------------------------------

    def encode_header(self) -> bytes:
        if self.serialize_type == SerializeType.ROCKETMQ:
            return self._encode_binary_header()
        return self._encode_json_header()

    def _encode_json_header(self) -> bytes:
        # fastjson writes the bean's properties in alphabetical order and leaves out nulls.
        obj: dict[str, Any] = {"code": self.code}
        if self.ext_fields or self.ext_fields_present:
            obj["extFields"] = self.ext_fields
        obj["flag"] = self.flag
        obj["language"] = self.language
        obj["opaque"] = self.opaque
        if self.remark is not None:
            obj["remark"] = self.remark
        obj["serializeTypeCurrentRPC"] = "JSON"
        obj["version"] = self.version
        return _dumps(obj)

    def _encode_binary_header(self) -> bytes:
        lang = _LANG_BY_NAME.get(self.language, LanguageCode.OTHER)
        try:
            parts = [_BIN_FIXED.pack(self.code, lang, self.version, self.opaque, self.flag)]
        except struct.error:
            # the binary header's code and version are 16-bit (RocketMQSerializable): the 5.x codes
            # from 200000 on (POP) do not fit; Java truncates them to a code no broker knows
            raise ProtocolError(
                f"request code {self.code} / version {self.version} does not fit the ROCKETMQ binary "
                "header (16 bits): encode it as JSON"
            ) from None
        if self.remark:
            rb = self.remark.encode("utf-8")
            parts.append(_I32.pack(len(rb)))
            parts.append(rb)
        else:
            parts.append(_I32.pack(0))
        ext = bytearray()
        for k, v in self.ext_fields.items():  # binary_entry inlined (a call per entry: a fifth slower)
            kb = k.encode("utf-8")
            vb = v.encode("utf-8")
            ext += _I16.pack(len(kb))
            ext += kb
            ext += _I32.pack(len(vb))
            ext += vb
        parts.append(_I32.pack(len(ext)))
        parts.append(bytes(ext))
        return b"".join(parts)

    def encode(self) -> bytes:
        """The whole frame, length prefix included."""
        header = self.encode_header()
        return frame_prefix(len(header), len(self.body), self.serialize_type) + header + self.body


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """How a client writes its requests (``ClientConfig.serialize_type``, ``language``, ``version``,
    ``stream``): one place applies them, so the async client's RPCs and the Spark reader's pulls on
    its blocking sockets send the same bytes."""

    serialize_type: SerializeType = SerializeType.JSON
    language: str = "PYTHON"
    version: int = MQ_VERSION_V4_9_8
    #: the requests of a stream client (lite pull, Spark): ``ReqT`` 0 (``RequestType.STREAM``), as
    #: ``DefaultLitePullConsumer`` and ``DefaultMQPullConsumer`` send
    stream: bool = False

    def request(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", *, oneway: bool = False
    ) -> RemotingCommand:
        if self.stream:
            ext = dict(ext or {})
            ext["ReqT"] = "0"
        return RemotingCommand.request(
            code,
            ext,
            body,
            oneway=oneway,
            # the binary header holds a 16-bit code: a 5.x code from 200000 on (POP) goes out as JSON,
            # which every broker reads per request (Java truncates it to a code no broker knows)
            serialize_type=self.serialize_type if code <= BINARY_MAX_CODE else SerializeType.JSON,
            language=self.language,
            version=self.version,
        )


def binary_entry(key: bytes, value: bytes) -> bytes:
    """One ``extFields`` entry of the ROCKETMQ binary header (``RocketMQSerializable.mapSerialize``):
    the key's length in 16 bits, the key, the value's length in 32 bits, the value (both UTF-8)."""
    return _I16.pack(len(key)) + key + _I32.pack(len(value)) + value


def frame_prefix(header_len: int, body_len: int, serialize_type: int = SerializeType.JSON) -> bytes:
    """The 8 bytes before a frame's header: the frame's length (all after these 4 bytes), then the
    serialize type in the top byte and the header's length in the other three."""
    if header_len > 0xFFFFFF:
        raise FrameError(f"header of {header_len} bytes does not fit in 24 bits")
    return _PREFIX.pack(4 + header_len + body_len, (int(serialize_type) << 24) | header_len)


# -- decoding ---------------------------------------------------------------------------------


def _loads(raw: bytes) -> Any:
    """``json.loads`` of a header, by pydantic-core's parser (about 4x faster on a pull answer's
    header); what it refuses (a lone surrogate escape, a byte order mark, anything malformed) goes to
    ``json.loads``, which decides: the same result and the same errors as ``json.loads`` alone."""
    try:
        return from_json(raw)
    except ValueError:
        return json.loads(raw)


def _dumps(obj: dict[str, Any]) -> bytes:
    """A header's JSON as ``_JSON_HEADER`` writes it (the same bytes), by pydantic-core's serializer
    (about 4x faster); what it refuses (a lone surrogate) goes to ``_JSON_HEADER``, whose error is
    raised."""
    try:
        return to_json(obj)
    except ValueError:  # PydanticSerializationError
        return _JSON_HEADER.encode(obj).encode("utf-8")


def _decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        obj = _loads(bytes(data))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"JSON header is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    try:
        code = obj["code"]
        if not isinstance(code, int):
            raise ProtocolError(f"JSON header code is not an integer: {code!r}")
        ext = obj.get("extFields")
        present = ext is not None
        if ext is None:
            ext = {}
        elif not isinstance(ext, dict):
            raise ProtocolError(f"JSON header extFields is not an object: {ext!r}")
        else:
            # Every value travels as a string; a non-string would be a peer bug: keep its text.
            for k, v in ext.items():
                if not isinstance(v, str):
                    ext[k] = (
                        "" if v is None else (json.dumps(v) if not isinstance(v, (int, float)) else str(v))
                    )
        remark = obj.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise ProtocolError(f"JSON header remark is not a string: {remark!r}")
        language = obj.get("language", "JAVA")
        opaque = obj.get("opaque", 0)
        flag = obj.get("flag", 0)
        version = obj.get("version", 0)
        for name, val in (("opaque", opaque), ("flag", flag), ("version", version)):
            if not isinstance(val, int):
                raise ProtocolError(f"JSON header {name} is not an integer: {val!r}")
        return RemotingCommand(
            code,
            ext_fields=ext,
            ext_fields_present=present,
            remark=remark,
            opaque=opaque,
            flag=flag,
            language=str(language),
            version=version,
            serialize_type=SerializeType.JSON,
        )
    except KeyError:
        raise ProtocolError("JSON header has no code") from None


def _decode_binary_header(data: bytes | memoryview) -> RemotingCommand:
    view = memoryview(data)
    n = len(view)
    if n < _BIN_FIXED.size + 8:
        raise ProtocolError(f"binary header of {n} bytes is shorter than the fixed part")
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(view, 0)
    pos = _BIN_FIXED.size
    try:
        (rlen,) = _I32.unpack_from(view, pos)
        pos += 4
        if rlen < 0 or pos + rlen > n:
            raise ProtocolError(f"binary header remark length {rlen} exceeds the header ({n} bytes)")
        remark = str(view[pos : pos + rlen], "utf-8") if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(view, pos)
        pos += 4
        if elen < 0 or pos + elen > n:
            raise ProtocolError(f"binary header extFields length {elen} exceeds the header ({n} bytes)")
        end = pos + elen
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = _I16.unpack_from(view, pos)
            pos += 2
            if klen < 0 or pos + klen > end:
                raise ProtocolError(f"binary header key length {klen} overruns extFields")
            key = str(view[pos : pos + klen], "utf-8")
            pos += klen
            (vlen,) = _I32.unpack_from(view, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise ProtocolError(f"binary header value length {vlen} overruns extFields")
            ext[key] = str(view[pos : pos + vlen], "utf-8")
            pos += vlen
    except struct.error:
        raise ProtocolError("binary header is truncated") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header has invalid UTF-8: {exc}") from None
    return RemotingCommand(
        code,
        ext_fields=ext,
        ext_fields_present=elen > 0,
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=_LANG_BY_CODE.get(lang, "OTHER"),
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def parse_command(frame: bytes | memoryview, serialize_type: int, header_len: int) -> RemotingCommand:
    """Decode the part of a frame after the 8-byte prefix: header then body (copied)."""
    if header_len > len(frame):
        raise FrameError(
            f"header length {header_len} exceeds the frame ({len(frame)} bytes after the prefix)"
        )
    header = frame[:header_len]
    if serialize_type == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif serialize_type == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize_type}")
    cmd.body = bytes(frame[header_len:])
    return cmd


def decode_frame(data: bytes | memoryview) -> RemotingCommand:
    """Decode exactly one whole frame (length prefix included)."""
    if len(data) < 8:
        raise FrameError(f"frame of {len(data)} bytes is shorter than its 8-byte prefix")
    total, mark = _PREFIX.unpack_from(data, 0)
    if total != len(data) - 4:
        raise FrameError(f"frame length field says {total} but {len(data) - 4} bytes follow it")
    return parse_command(memoryview(data)[8:], mark >> 24, mark & 0xFFFFFF)


#: a frame split but not decoded: serialize type, header bytes, body bytes
RawFrame = tuple[int, bytes, bytes]
_T = TypeVar("_T")


def _raw_frame(frame: memoryview, serialize_type: int, header_len: int) -> RawFrame:
    return serialize_type, bytes(frame[:header_len]), bytes(frame[header_len:])


class FrameDecoder:
    """Incremental decoder: bytes in any chunking, whole commands out.

    Two ways in: :meth:`feed` copies a chunk in, and :meth:`get_buffer` / :meth:`buffer_updated` let a
    transport (``asyncio.BufferedProtocol``) read straight into the decoder's buffer, which is
    allocated once and reused (compacted when its free tail runs short, grown only for a frame that
    does not fit). No allocation per read: freeing a large read chunk after every read made the C
    allocator return heap pages to the system and fault them in again, about a page fault per 2 KiB
    received. Bodies are copied out of the buffer (``RemotingCommand.body`` is ``bytes``).

    A frame longer than ``max_frame`` or with a length below 4 raises :class:`FrameError`; after any
    error the decoder refuses more input (the connection must be closed: framing is lost).
    """

    __slots__ = ("_broken", "_buf", "_end", "_max", "_need", "_start")

    #: the least free room offered to a read; the buffer starts at four times this
    MIN_READ = 64 << 10
    #: an empty buffer grown past this for a large frame goes back to the initial size
    _KEEP = 4 << 20

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()  # allocated at the first read
        self._start = 0  # unparsed bytes are _buf[_start:_end]
        self._end = 0
        self._need = 0  # the whole size of the incomplete frame at _start, once its prefix is in
        self._max = max_frame
        self._broken: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        return self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Free room at the buffer's tail for the next read (at least ``MIN_READ`` bytes, and
        enough for the rest of an incomplete frame)."""
        if self._broken is not None:
            raise FrameError(f"decoder already failed: {self._broken}")
        buf = self._buf
        pending = self._end - self._start
        want = max(self._need - pending, self.MIN_READ)
        if len(buf) - self._end < want:
            if len(buf) - pending >= want and len(buf) >= 4 * self.MIN_READ:
                if pending:  # same length: no resize, fine while an older view is still exported
                    buf[:pending] = buf[self._start : self._end]
            else:
                new = bytearray(max(2 * len(buf), 4 * self.MIN_READ, pending + want))
                new[:pending] = buf[self._start : self._end]
                self._buf = new
            self._start, self._end = 0, pending
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[RemotingCommand]:
        """``nbytes`` were written at the start of the last :meth:`get_buffer` view: parse them."""
        return self._split(nbytes, parse_command)

    def frames_updated(self, nbytes: int) -> list[RawFrame]:
        """:meth:`buffer_updated` without decoding: every complete frame as (serialize type, header
        bytes, body bytes), for a reader that decodes only the header fields it needs (a header that
        does not decode is then that reader's :class:`ProtocolError` to raise)."""
        return self._split(nbytes, _raw_frame)

    def _split(self, nbytes: int, make: Callable[[memoryview, int, int], _T]) -> list[_T]:
        if self._broken is not None:
            raise FrameError(f"decoder already failed: {self._broken}")
        self._end += nbytes
        out: list[_T] = []
        pos, n = self._start, self._end
        need = 0
        try:
            with memoryview(self._buf) as view:
                while n - pos >= 4:
                    (total,) = _I32.unpack_from(view, pos)
                    if total < 4 or total > self._max:
                        raise FrameError(f"bad frame length {total} (allowed 4..{self._max})")
                    end = pos + 4 + total
                    if end > n:
                        need = 4 + total
                        break
                    (mark,) = _I32.unpack_from(view, pos + 4)
                    header_len = mark & 0xFFFFFF
                    if header_len > total - 4:
                        raise FrameError(f"header length {header_len} exceeds frame length {total}")
                    out.append(make(view[pos + 8 : end], (mark >> 24) & 0xFF, header_len))
                    pos = end
        except ProtocolError as exc:
            self._broken = exc
            raise
        self._need = need
        if pos == n:
            self._start = self._end = 0
            if len(self._buf) > self._KEEP:
                self._buf = bytearray()
        else:
            self._start = pos
        return out

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Copy ``data`` in and return the commands it completes."""
        if self._broken is not None:
            raise FrameError(f"decoder already failed: {self._broken}")
        out: list[RemotingCommand] = []
        with memoryview(data) as src:
            src = src.cast("B")
            while src:
                room = self.get_buffer(len(src))
                k = min(len(room), len(src))
                room[:k] = src[:k]
                room.release()
                out += self.buffer_updated(k)
                src = src[k:]
        return out
