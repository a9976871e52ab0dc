"""An input partition's pulls, on a plain blocking socket in the thread that builds the batches.

Strategy (STYLE 13, sans-IO first). A partition's offsets are dense and known in advance, so there is
nothing to wait for but the broker: :func:`pull_range` cuts the range into pull-sized *slots* and keeps
``pullsInFlight`` PULL_MESSAGE requests outstanding on one connection (:class:`BrokerSocket`),
written together with one ``sendall``; answers are matched by opaque (a broker may answer out of
order) and each slot's undecoded bodies are handed over in offset order. The thread that builds the
Arrow batches does the I/O itself: no event loop, no task, future or timer per pull, no hand-over
between threads (an asyncio pipeline cost 40-50 µs per 32-message pull and a second busy thread
contending for the GIL in every Python worker).

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

from ..client.api import PullResult, PullStatus
from ..client.auth import broker_error
from ..errors import ConnectError, ConnectionClosed, ProtocolError, RequestTimeout, RocketMQError
from ..protocol.codes import ResponseCode, SerializeType
from ..protocol.command import FLAG_RESPONSE, FrameDecoder, RemotingCommand
from ..transport.tls import handshake_error
from .columns import Chunk
from .offsets import Range, resolve_start

__all__ = ["BrokerSocket", "PullTemplate", "pull_range", "pull_result"]

_QUEUE_OFFSET = struct.Struct(">q")  # QUEUEOFFSET, 20 bytes into a stored message
_PREFIX = struct.Struct(">iI")  # frame length; serialize type << 24 | header length
_OPAQUE_MASK = 0x7FFFFFFF
_PULL_STATUS = {
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
        values = (ext["queueOffset"].encode(), ext["maxMsgNums"].encode(), b"%d" % self.opaque)
        o = self._template.order
        header = b"".join((parts[0], values[o[0]], parts[1], values[o[1]], parts[2], values[o[2]], parts[3]))
        return _PREFIX.pack(4 + len(header), len(header)) + header


def pull_result(resp: RemotingCommand, cmd: RemotingCommand, addr: str) -> PullResult:
    """The answer to a pull, its body undecoded (the header's fields read straight from the map)."""
    status = _PULL_STATUS.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise broker_error(resp.code, resp.remark, cmd.code, cmd.ext_fields, addr)
    ext = resp.ext_fields
    try:
        return PullResult(
            status=status,
            next_begin_offset=int(ext["nextBeginOffset"]),
            min_offset=int(ext["minOffset"]),
            max_offset=int(ext["maxOffset"]),
            suggest_which_broker_id=int(ext.get("suggestWhichBrokerId", "0")),
            remark=resp.remark,
            body=resp.body,
        )
    except (KeyError, ValueError) as exc:
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
        self._signer = signer
        self._decoder = FrameDecoder()
        self._ready: collections.deque[RemotingCommand] = collections.deque()
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

    def send(self, cmds: list[RemotingCommand]) -> None:
        """Write requests (their opaques assigned here) with one ``sendall``."""
        sock = self._sock
        if sock is None:
            raise ConnectionClosed("connection closed", self.addr)
        frames = []
        for cmd in cmds:
            cmd.flag = 0
            cmd.opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
            if self._signer is not None:
                self._signer(cmd)
            frames.append(cmd.encode())
        try:
            sock.sendall(b"".join(frames))
        except OSError as exc:
            self.close()
            raise ConnectionClosed(f"connection lost: {exc}", self.addr) from None

    def receive(self, code: int) -> RemotingCommand:
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
                got = self._decoder.buffer_updated(n)
            except ProtocolError as exc:
                self.close()
                raise ConnectionClosed(f"unreadable frame: {exc}", self.addr) from None
            ready.extend(cmd for cmd in got if cmd.flag & FLAG_RESPONSE)
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
    before the plan's end ends the slot."""
    key = (r.broker_name, r.queue_id)
    slots: collections.deque[_Slot] = collections.deque()
    inflight: dict[int, tuple[_Slot, RemotingCommand]] = {}
    queued: list[tuple[_Slot, RemotingCommand]] = []
    next_lo = r.start
    conn = connect()
    reconnects = 0

    def pull(slot: _Slot) -> None:
        queued.append((slot, template.command(slot.cursor, min(batch, slot.hi - slot.cursor))))

    def settle(slot: _Slot, res: PullResult) -> None:
        """Apply one answer to its slot: a body kept, the cursor moved, a follow-up pull queued."""
        cursor, hi = slot.cursor, slot.hi
        if res.status is PullStatus.FOUND:
            body = res.body
            if len(body) >= 28 and not filtered:
                (first,) = _QUEUE_OFFSET.unpack_from(body, 20)
                if first > cursor:  # the first messages of the range were deleted since the plan
                    cursor, warning = resolve_start(
                        key, cursor, first, res.max_offset, fail_on_data_loss=fail_on_data_loss
                    )
                    if warning:
                        warn(warning)
            if body and cursor < hi:
                slot.chunks.append(Chunk(body, cursor, hi))
            cursor = max(cursor + 1, min(res.next_begin_offset, hi))
        elif res.status is PullStatus.NO_MATCHED_MSG:
            cursor = min(max(res.next_begin_offset, cursor + 1), hi)
        elif res.max_offset <= cursor:  # the queue ends before the plan said: the slot is done
            cursor = hi
        else:
            new, warning = resolve_start(
                key, cursor, res.min_offset, res.max_offset, fail_on_data_loss=fail_on_data_loss
            )
            if warning:
                warn(warning)
            if new <= cursor:  # nothing to read where the broker says there is
                raise RocketMQError(f"pull of {key} at {cursor} answered {res.status.value}: {res.remark}")
            cursor = new
        slot.cursor = cursor
        if cursor < hi:
            pull(slot)
        else:
            slot.done = True

    try:
        while True:
            while len(inflight) + len(queued) < depth and next_lo < r.end and len(slots) < 2 * depth:
                slot = _Slot(next_lo, min(next_lo + batch, r.end))
                slots.append(slot)
                pull(slot)
                next_lo = slot.hi
            if queued:
                try:
                    conn.send([cmd for _, cmd in queued])
                except ConnectionClosed:
                    conn, reconnects = _again(connect, conn, reconnects)
                    continue  # everything is still queued
                for slot_cmd in queued:
                    inflight[slot_cmd[1].opaque] = slot_cmd
                queued.clear()
            if slots and slots[0].done:
                out: list[Chunk] = []
                while slots and slots[0].done:
                    out.extend(slots.popleft().chunks)
                if out:
                    yield out
                continue
            if not inflight:
                return
            while True:  # every answer already read, at least one
                try:
                    resp = conn.receive(template.base.code)
                except ConnectionClosed:
                    # pulls are reads: the outstanding ones go again on a new connection
                    queued[:0] = [(slot, template.command(slot.cursor, min(batch, slot.hi - slot.cursor)))
                                  for slot, _ in inflight.values()]  # fmt: skip
                    inflight.clear()
                    conn, reconnects = _again(connect, conn, reconnects)
                    break
                hit = inflight.pop(resp.opaque, None)
                if hit is not None:  # else a late answer of a connection's earlier reader
                    settle(hit[0], pull_result(resp, hit[1], conn.addr))
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
