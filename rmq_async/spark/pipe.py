"""An input partition's pulls, on a plain blocking socket in the thread that builds the batches.

Strategy (STYLE 13, sans-IO first). A partition's offsets are dense and known in advance, so there is
nothing to wait for but the broker: :func:`pull_range` cuts the range into pull-sized *slots* and keeps
``pullsInFlight`` PULL_MESSAGE requests outstanding on one connection (:class:`BrokerSocket`),
written together with one ``sendall``; answers are matched by opaque (a broker may answer out of
order) and each slot's undecoded bodies are handed over in offset order. The thread that builds the
Arrow batches does the I/O itself: no event loop, no task, future or timer per pull, no hand-over
between threads per pull (an asyncio pipeline cost 40-50 µs per 32-message pull and a second busy
thread contending for the GIL in every Python worker); finished batches go to Spark's thread, one
hand-over per batch (``bridge.one_ahead``).

A pull is the request ``MQClientAPI.pull`` would send, written from a per-queue template
(:class:`PullTemplate`: the JSON header with the offset, count and opaque filled in, byte for byte
``RemotingCommand.encode``), signed by the client instance's ACL signer when there is one, over TLS
when configured. Frames are read with the shared :class:`~rmq_async.protocol.command.FrameDecoder`.
Pulls are reads: when a connection fails (a broker closed an idle cached connection, a restart), the
outstanding pulls are sent again on a new one, a bounded number of times.
"""

from __future__ import annotations

import collections
import socket
import ssl
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from ..client.api import PullStatus
from ..client.auth import broker_error
from ..errors import ConnectError, ConnectionClosed, ProtocolError, RequestTimeout, RocketMQError
from ..protocol.codes import ResponseCode, SerializeType
from ..protocol.command import (
    FLAG_RESPONSE,
    FrameDecoder,
    RawFrame,
    RemotingCommand,
    frame_prefix,
    parse_command,
)
from ..transport.tls import handshake_error
from .columns import Chunk
from .offsets import Range, resolve_start

__all__ = ["Answer", "BrokerSocket", "PullTemplate", "pull_range", "pull_status"]

_QUEUE_OFFSET = struct.Struct(">q")  # QUEUEOFFSET, 20 bytes into a stored message
_OPAQUE_MASK = 0x7FFFFFFF
_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
# unlikely values whose text marks where the varying fields go in a request's JSON header
_MARK_OFFSET, _MARK_COUNT, _MARK_OPAQUE = 7_919_191_919_191_919_191, 1_931_931_931, 2_011_011_011
#: new connections a partition may open after its connection failed, before it gives up
RECONNECTS = 3

Signer = Callable[[RemotingCommand], None]


class PullTemplate:
    """The PULL_MESSAGE request of one queue as :meth:`MQClientAPI.pull` writes it, with its JSON
    header cut where the queue offset, the message count and the opaque go: a pull's frame is then
    one join (byte for byte what ``RemotingCommand.encode`` writes; checked when the template is
    made). ``parts`` is None where a template cannot be used (the binary header)."""

    __slots__ = ("base", "order", "parts")

    def __init__(self, base: RemotingCommand) -> None:
        self.base = base
        self.parts: tuple[bytes, ...] | None = None
        self.order: tuple[int, ...] = ()
        if base.serialize_type != SerializeType.JSON or base.body or base.remark is not None:
            return
        probe = self.command(_MARK_OFFSET, _MARK_COUNT)
        probe.opaque = _MARK_OPAQUE
        header = probe.encode_header()
        marks = [(b'"%d"' % _MARK_OFFSET, 0), (b'"%d"' % _MARK_COUNT, 1), (b":%d," % _MARK_OPAQUE, 2)]
        where = []
        for mark, what in marks:
            at = header.find(mark)
            if at < 0 or header.find(mark, at + 1) >= 0:
                return
            where.append((at, len(mark), what))
        where.sort()
        parts, pos = [], 0
        for at, size, _ in where:  # keep the quotes (values) or the colon and comma (opaque)
            parts.append(header[pos : at + 1])
            pos = at + size - 1
        parts.append(header[pos:])
        self.parts = tuple(parts)
        self.order = tuple(what for _, _, what in where)
        check = _PullCommand(self, probe.ext_fields)
        check.opaque = probe.opaque
        if check.encode() != probe.encode():  # pragma: no cover
            self.parts = None

    def command(self, offset: int, count: int) -> RemotingCommand:
        ext = dict(self.base.ext_fields)
        ext["queueOffset"] = str(offset)
        ext["maxMsgNums"] = str(count)
        if self.parts is None:
            b = self.base
            return RemotingCommand.request(
                b.code, ext, serialize_type=b.serialize_type, language=b.language, version=b.version
            )
        return _PullCommand(self, ext)

    def frame(self, offset: int, count: int, opaque: int) -> bytes:
        """The whole frame of the pull at ``offset`` for ``count`` messages (``parts`` must be set):
        byte for byte ``command(offset, count)`` with ``opaque``, encoded."""
        parts = self.parts
        assert parts is not None
        values = (b"%d" % offset, b"%d" % count, b"%d" % opaque)
        o = self.order
        header = b"".join((parts[0], values[o[0]], parts[1], values[o[1]], parts[2], values[o[2]], parts[3]))
        return frame_prefix(len(header), 0, SerializeType.JSON) + header


class _PullCommand(RemotingCommand):
    """A pull request encoded from its queue's :class:`PullTemplate` (the generic encoding when
    something changed it since, e.g. an ACL signature added to its fields)."""

    __slots__ = ("_template",)

    def __init__(self, template: PullTemplate, ext: dict[str, str]) -> None:
        b = template.base
        super().__init__(
            b.code, ext_fields=ext, language=b.language, version=b.version, serialize_type=b.serialize_type
        )
        self._template = template

    def encode(self) -> bytes:
        parts = self._template.parts
        ext = self.ext_fields
        if parts is None or self.flag or len(ext) != len(self._template.base.ext_fields):
            return super().encode()
        return self._template.frame(int(ext["queueOffset"]), int(ext["maxMsgNums"]), self.opaque)


#: one answer as the pull loop reads it: code, opaque, header fields, remark, body
Answer = tuple[int, int, dict[str, Any], str | None, bytes]


def _answer(frame: RawFrame) -> Answer | None:
    """The fields of a response frame the pull loop needs, read straight from its JSON header (no
    :class:`RemotingCommand`); None for a request. A header this does not take (the binary header
    type, anything not shaped as a response's JSON header) is decoded the generic way, which also
    raises :class:`ProtocolError` for one that does not decode."""
    stype, header, body = frame
    if stype == SerializeType.JSON:
        try:
            obj = from_json(header)
        except ValueError:
            obj = None
        if type(obj) is dict:
            code, opaque, flag = obj.get("code"), obj.get("opaque", 0), obj.get("flag", 0)
            ext, remark = obj.get("extFields"), obj.get("remark")
            if (
                type(code) is int
                and type(opaque) is int
                and type(flag) is int
                and (ext is None or (type(ext) is dict and all(type(v) is str for v in ext.values())))
                and (remark is None or type(remark) is str)
            ):
                return (code, opaque, ext or {}, remark, body) if flag & FLAG_RESPONSE else None
    cmd = parse_command(header + body, stype, len(header))
    if not cmd.flag & FLAG_RESPONSE:
        return None
    return cmd.code, cmd.opaque, cmd.ext_fields, cmd.remark, cmd.body


def pull_status(
    answer: Answer, template: PullTemplate, offset: int, count: int, addr: str
) -> tuple[PullStatus, int, int, int]:
    """The status, next begin, min and max offsets of the answer to ``template``'s pull at ``offset``
    for ``count`` messages: a :class:`~rmq_async.errors.BrokerError` (or ACL refusal) for a code a
    pull does not answer with, a :class:`ProtocolError` for a header without those fields."""
    code, _, ext, remark, _ = answer
    status = _PULL_STATUS.get(code)
    if status is None:
        ask = template.command(offset, count)
        raise broker_error(code, remark, ask.code, ask.ext_fields, addr)
    try:
        return status, int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"])
    except (KeyError, ValueError, TypeError) as exc:
        raise ProtocolError(f"pull answer from {addr} with a bad header: {exc!r} in {ext!r}") from None


class BrokerSocket:
    """One blocking connection to a broker: requests out (opaque assigned, signed), responses in.

    Every failure is a :class:`~rmq_async.errors.RemotingError` naming the address (a connect that
    fails, a TLS handshake refused, no answer within ``timeout``, a connection closed, a frame that
    does not parse); the socket is then closed and must be replaced."""

    def __init__(
        self,
        addr: str,
        *,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.addr = addr
        self.timeout = timeout
        self.signer = signer
        self._decoder = FrameDecoder()
        self._ready: collections.deque[Answer] = collections.deque()
        self._opaque = 0
        host, _, port = addr.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise ConnectError(f"cannot connect: {exc}", addr) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        except OSError as exc:
            sock.close()
            raise (handshake_error(exc, addr) or ConnectError(f"cannot connect: {exc}", addr)) from None
        self._sock: socket.socket | None = sock

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def next_opaque(self) -> int:
        self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        return self._opaque

    def send(self, cmds: list[RemotingCommand]) -> None:
        """Write requests (their opaques assigned here, signed) with one ``sendall``."""
        frames = []
        for cmd in cmds:
            cmd.flag = 0
            cmd.opaque = self.next_opaque()
            if self.signer is not None:
                self.signer(cmd)
            frames.append(cmd.encode())
        self.send_frames(frames)

    def send_frames(self, frames: list[bytes]) -> None:
        """Write encoded requests with one ``sendall``."""
        sock = self._sock
        if sock is None:
            raise ConnectionClosed("connection closed", self.addr)
        try:
            sock.sendall(b"".join(frames))
        except OSError as exc:
            self.close()
            raise ConnectionClosed(f"connection lost: {exc}", self.addr) from None

    def receive(self, code: int) -> Answer:
        """The next response (requests from the broker are not expected and are dropped); waits at
        most ``timeout`` seconds for bytes (``code``: the request code named by the timeout error)."""
        ready = self._ready
        while not ready:
            sock = self._sock
            if sock is None:
                raise ConnectionClosed("connection closed", self.addr)
            try:
                n = sock.recv_into(self._decoder.get_buffer())
            except TimeoutError:
                self.close()
                raise RequestTimeout(code, self.addr, self.timeout) from None
            except OSError as exc:
                self.close()
                raise ConnectionClosed(f"connection lost: {exc}", self.addr) from None
            if n == 0:
                self.close()
                raise ConnectionClosed("connection closed by the peer", self.addr)
            try:
                for frame in self._decoder.frames_updated(n):
                    got = _answer(frame)
                    if got is not None:
                        ready.append(got)
            except ProtocolError as exc:
                self.close()
                raise ConnectionClosed(f"unreadable frame: {exc}", self.addr) from None
        return ready.popleft()

    def pending(self) -> bool:
        """Whether decoded responses are waiting (no read needed for the next one)."""
        return bool(self._ready)


@dataclass(slots=True)
class _Slot:
    """Offsets [cursor, hi) of a range still to pull, and the bodies pulled so far."""

    cursor: int
    hi: int
    chunks: list[Chunk] = field(default_factory=list)
    done: bool = False


def pull_range(
    connect: Callable[[], BrokerSocket],
    release: Callable[[BrokerSocket], None],
    template: PullTemplate,
    r: Range,
    *,
    depth: int,
    batch: int,
    filtered: bool,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> Generator[list[Chunk], None, None]:
    """The undecoded pull bodies of ``r``, in offset order, ``depth`` pulls in flight.

    ``connect`` gives a connection (a cached one first); ``release`` takes it back at the end when
    nothing is due on it any more (else it is closed); ``filtered``: the broker filters by tag or
    SQL, so a body's first message may lie past the offset asked for without anything deleted. The
    offset rules are the lite pull's: NO_MATCHED_MSG moves on to ``nextBeginOffset``; a pull below
    the min offset (retention deleted the head since the plan) goes on at the min offset (or raises
    :class:`~rmq_async.spark.offsets.DataLossError` under ``fail_on_data_loss``); the queue ending
    before the plan's end ends the slot.

    New pulls go out together once at most a quarter of ``depth`` is still in flight (fewer, larger
    writes on both ends of the connection; the broker still has those to answer meanwhile)."""
    key = (r.broker_name, r.queue_id)
    slots: collections.deque[_Slot] = collections.deque()
    inflight: dict[int, tuple[_Slot, int, int]] = {}  # opaque -> slot, offset and count asked
    queued: list[_Slot] = []  # slots whose next pull is due
    next_lo = r.start
    conn = connect()
    reconnects = 0
    low = depth // 4
    code = template.base.code

    def send() -> None:
        asks = [(slot, slot.cursor, min(batch, slot.hi - slot.cursor)) for slot in queued]
        if template.parts is not None and conn.signer is None:
            frames = []
            for ask in asks:
                opaque = conn.next_opaque()
                frames.append(template.frame(ask[1], ask[2], opaque))
                inflight[opaque] = ask
            try:
                conn.send_frames(frames)
            except ConnectionClosed:
                for opaque in list(inflight)[-len(asks) :]:
                    del inflight[opaque]
                raise
        else:
            cmds = [template.command(offset, count) for _, offset, count in asks]
            conn.send(cmds)  # opaques assigned (and the commands signed) there
            for cmd, ask in zip(cmds, asks, strict=True):
                inflight[cmd.opaque] = ask
        queued.clear()

    def settle(slot: _Slot, answer: Answer, offset: int, count: int) -> None:
        """Apply one answer to its slot: a body kept, the cursor moved, a follow-up pull queued."""
        status, next_begin, min_offset, max_offset = pull_status(answer, template, offset, count, conn.addr)
        remark, body = answer[3], answer[4]
        cursor, hi = slot.cursor, slot.hi
        if status is PullStatus.FOUND:
            if len(body) >= 28 and not filtered:
                (first,) = _QUEUE_OFFSET.unpack_from(body, 20)
                if first > cursor:  # the first messages of the range were deleted since the plan
                    cursor, warning = resolve_start(
                        key, cursor, first, max_offset, fail_on_data_loss=fail_on_data_loss
                    )
                    if warning:
                        warn(warning)
            if body and cursor < hi:
                slot.chunks.append(Chunk(body, cursor, hi))
            cursor = max(cursor + 1, min(next_begin, hi))
        elif status is PullStatus.NO_MATCHED_MSG:
            cursor = min(max(next_begin, cursor + 1), hi)
        elif max_offset <= cursor:  # the queue ends before the plan said: the slot is done
            cursor = hi
        else:
            new, warning = resolve_start(
                key, cursor, min_offset, max_offset, fail_on_data_loss=fail_on_data_loss
            )
            if warning:
                warn(warning)
            if new <= cursor:  # nothing to read where the broker says there is
                raise RocketMQError(f"pull of {key} at {cursor} answered {status.value}: {remark}")
            cursor = new
        slot.cursor = cursor
        if cursor < hi:
            queued.append(slot)
        else:
            slot.done = True

    try:
        while True:
            while len(inflight) + len(queued) < depth and next_lo < r.end and len(slots) < 2 * depth:
                slot = _Slot(next_lo, min(next_lo + batch, r.end))
                slots.append(slot)
                queued.append(slot)
                next_lo = slot.hi
            if queued and len(inflight) <= low:
                try:
                    send()
                except ConnectionClosed:
                    # the pulls still due on the lost connection go again on the new one, as do
                    # those that were being sent
                    queued[:0] = [slot for slot, _, _ in inflight.values()]
                    inflight.clear()
                    conn, reconnects = _again(connect, conn, reconnects)
                    continue
            if slots and slots[0].done:
                out: list[Chunk] = []
                while slots and slots[0].done:
                    out.extend(slots.popleft().chunks)
                if out:
                    yield out
                continue
            if not inflight:
                if slots or next_lo < r.end:  # pragma: no cover - every pull due is in flight or queued
                    at = slots[0].cursor if slots else next_lo
                    raise RocketMQError(f"read of {key} lost track of its pulls at offset {at}")
                return
            while True:  # every answer already read, at least one
                try:
                    answer = conn.receive(code)
                except ConnectionClosed:
                    # pulls are reads: the outstanding ones go again on a new connection
                    queued[:0] = [slot for slot, _, _ in inflight.values()]
                    inflight.clear()
                    conn, reconnects = _again(connect, conn, reconnects)
                    break
                hit = inflight.pop(answer[1], None)
                if hit is not None:  # else a late answer of a connection's earlier reader
                    settle(hit[0], answer, hit[1], hit[2])
                if not conn.pending():
                    break
    finally:
        if inflight or queued or conn.closed:
            conn.close()  # answers still due on it: not reusable
        else:
            release(conn)


def _again(
    connect: Callable[[], BrokerSocket], conn: BrokerSocket, reconnects: int
) -> tuple[BrokerSocket, int]:
    conn.close()
    if reconnects >= RECONNECTS:
        raise ConnectionClosed(f"connection failed {reconnects + 1} times while reading", conn.addr)
    return connect(), reconnects + 1
