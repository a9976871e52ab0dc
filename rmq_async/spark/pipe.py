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

A pull is the request ``MQClientAPI.pull`` sends: the sans-IO core of both is
:mod:`rmq_async.protocol.pull`. Unsigned pulls are written from the queue's
:class:`~rmq_async.protocol.pull.PullTemplate` (the header with the offset, count and opaque filled in,
byte for byte ``RemotingCommand.encode``, JSON or binary); with ACL credentials each request is signed
by the client instance's signer (the transport's :data:`~rmq_async.transport.Signer`) and encoded the
generic way. TLS when configured. Frames are read with the shared
:class:`~rmq_async.protocol.command.FrameDecoder`; answers are classified by
:func:`~rmq_async.protocol.pull.read_pull_answer`, a code that is no pull status raised as the async
client raises it (``client.auth.broker_error``).
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

from ..client.auth import broker_error
from ..errors import ConnectError, ConnectionClosed, ProtocolError, RequestTimeout, RocketMQError
from ..protocol.codes import SerializeType
from ..protocol.command import FLAG_RESPONSE, FrameDecoder, RawFrame, RemotingCommand, parse_command
from ..protocol.pull import PullAnswer, PullRefused, PullStatus, PullTemplate, read_pull_answer
from ..transport.connection import Signer
from ..transport.tls import handshake_error
from .columns import Chunk
from .offsets import Range, resolve_start

__all__ = ["Answer", "BrokerSocket", "pull_range", "pull_status"]

_QUEUE_OFFSET = struct.Struct(">q")  # QUEUEOFFSET, 20 bytes into a stored message
_OPAQUE_MASK = 0x7FFFFFFF
#: new connections a partition may open after its connection failed, before it gives up
RECONNECTS = 3


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


def pull_status(answer: Answer, template: PullTemplate, offset: int, count: int, addr: str) -> PullAnswer:
    """What the answer to ``template``'s pull at ``offset`` for ``count`` messages says: a
    :class:`~rmq_async.errors.BrokerError` (or ACL refusal) for a code a pull does not answer with, a
    :class:`ProtocolError` naming ``addr`` for a header without the offsets."""
    code, _, ext, remark, _ = answer
    try:
        got = read_pull_answer(code, ext, remark)
    except ProtocolError as exc:
        raise ProtocolError(f"pull answer from {addr} with a bad header: {exc} in {ext!r}") from None
    if isinstance(got, PullRefused):
        ask = template.command(offset, count)
        raise broker_error(got.code, got.remark, ask.code, ask.ext_fields, addr)
    return got


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
    key = (r.topic, r.broker_name, r.queue_id)
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
        if conn.signer is None:
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
        status, next_begin, min_offset, max_offset, _ = pull_status(
            answer, template, offset, count, conn.addr
        )
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
