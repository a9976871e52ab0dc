"""``pipe.pull_range`` against a scripted broker on a real socket: answers out of order and shorter
than asked, a connection the broker closes (idle cached ones are), a broker that never answers.

The bodies are placeholders (the queue offset of their first message at byte 20, all ``pull_range``
reads of them): what is checked is which offsets get pulled, in which order the bodies come out,
and what the failures raise."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rmq_async.errors import ConnectionClosed, RequestTimeout
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.command import FLAG_RESPONSE, FrameDecoder, RemotingCommand
from rmq_async.protocol.pull import PullTemplate
from rmq_async.spark.columns import Chunk
from rmq_async.spark.offsets import Range
from rmq_async.spark.pipe import BrokerSocket, pull_range

pytestmark = pytest.mark.timeout(30)

# what the script does with the requests of one read: a list of answers to write (None: close)
Script = Callable[[list[RemotingCommand]], list[RemotingCommand] | None]


def body_at(offset: int) -> bytes:
    return b"\0" * 20 + struct.pack(">q", offset) + b"m" * 8


def answer(req: RemotingCommand, *, short: int | None = None, end: int = 10**9) -> RemotingCommand:
    off = int(req.ext_fields["queueOffset"])
    n = min(int(req.ext_fields["maxMsgNums"]), short or 10**9, end - off)
    # every field of a broker's PullMessageResponseHeader
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(off + max(n, 0)), "minOffset": "0"}
    ext["maxOffset"] = str(end)
    if n <= 0:
        return RemotingCommand(
            ResponseCode.PULL_NOT_FOUND, ext_fields=ext, flag=FLAG_RESPONSE, opaque=req.opaque
        )
    return RemotingCommand(
        ResponseCode.SUCCESS, ext_fields=ext, body=body_at(off), flag=FLAG_RESPONSE, opaque=req.opaque
    )


class Broker:
    """A listening socket on 127.0.0.1; each connection is served by ``script`` in a thread."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.pulled: list[int] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        dec = FrameDecoder()
        with conn:
            while True:
                try:
                    n = conn.recv_into(dec.get_buffer())
                except OSError:
                    return
                if n == 0:
                    return
                reqs = dec.buffer_updated(n)
                self.pulled.extend(int(r.ext_fields["queueOffset"]) for r in reqs)
                out = self.script(reqs)
                if out is None:
                    return
                try:
                    self.write(conn, out)
                except OSError:  # the reader closed the connection
                    return

    def write(self, conn: socket.socket, answers: list[RemotingCommand]) -> None:
        conn.sendall(b"".join(a.encode() for a in answers))

    def close(self) -> None:
        self.sock.close()


def template() -> PullTemplate:
    ext = {"topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1", "consumerGroup": "g"}
    ext |= {"commitOffset": "0", "sysFlag": "0"}
    return PullTemplate(RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))


def read(
    broker: Broker, r: Range, *, depth: int = 4, batch: int = 32, timeout: float = 5.0
) -> tuple[list[Chunk], list[bool], int]:
    """The bodies read, whether each connection opened was closed by the read, how many were
    released for reuse (all are closed at the end)."""
    opened: list[BrokerSocket] = []
    released: list[BrokerSocket] = []

    def connect() -> BrokerSocket:
        opened.append(BrokerSocket(broker.addr, timeout=timeout))
        return opened[-1]

    gen: Iterator[list[Chunk]] = pull_range(
        connect, released.append, template(), r, depth=depth, batch=batch, filtered=False,
        fail_on_data_loss=True, warn=lambda w: None,
    )  # fmt: skip
    try:
        chunks = [c for got in gen for c in got]
        states = [c.closed for c in opened]
    finally:
        for c in opened:
            c.close()
    return chunks, states, len(released)


def test_answers_out_of_order_and_short_come_out_in_offset_order() -> None:
    # each read's requests answered last first, 5 messages where 32 were asked: every slot needs
    # follow-up pulls, and slots finish out of order
    broker = Broker(lambda reqs: [answer(q, short=5) for q in reversed(reqs)])
    try:
        chunks, closed, released = read(broker, Range("T", "b", 0, 10, 210))
    finally:
        broker.close()
    los = [c.lo for c in chunks]
    slots = [(lo, min(lo + 32, 210)) for lo in range(10, 210, 32)]
    assert los == [o for lo, hi in slots for o in range(lo, hi, 5)]  # each body once, in offset order
    assert all(c.body == body_at(c.lo) for c in chunks)
    assert sorted(broker.pulled) == los  # nothing pulled twice
    assert closed == [False] and released == 1  # one connection, reusable


class OneByOne(Broker):
    """Writes its answers one at a time, a moment apart: the reader sees pulls answered while others
    are still due."""

    def write(self, conn: socket.socket, answers: list[RemotingCommand]) -> None:
        for a in answers:
            conn.sendall(a.encode())
            time.sleep(0.002)


class FailingSend(BrokerSocket):
    """A real connection whose ``sends``-th write fails as a reset connection's does (it is closed)."""

    def __init__(self, addr: str, sends: int) -> None:
        super().__init__(addr, timeout=5.0)
        self.left = sends

    def send_frames(self, frames: list[bytes]) -> None:
        self.left -= 1
        if self.left == 0:
            self.close()
        super().send_frames(frames)


def test_pulls_in_flight_when_a_write_fails_are_sent_again() -> None:
    # the second write fails while the first write's pulls are still due: those go again on the new
    # connection with the ones being written (else the read would wait for answers that never come)
    broker = OneByOne(lambda reqs: [answer(q) for q in reqs])
    opened: list[BrokerSocket] = []

    def connect() -> BrokerSocket:
        opened.append(FailingSend(broker.addr, 2) if not opened else BrokerSocket(broker.addr, timeout=5.0))
        return opened[-1]

    try:
        gen = pull_range(
            connect, lambda c: None, template(), Range("T", "b", 0, 0, 32 * 40), depth=16, batch=32,
            filtered=False, fail_on_data_loss=True, warn=lambda w: None,
        )  # fmt: skip
        started = time.monotonic()
        chunks = [c for got in gen for c in got]
    finally:
        for c in opened:
            c.close()
        broker.close()
    assert [c.lo for c in chunks] == list(range(0, 32 * 40, 32))
    assert len(opened) == 2 and time.monotonic() - started < 4.0  # no wait for a request timeout


def test_a_connection_closed_by_the_broker_is_replaced_and_the_pulls_sent_again() -> None:
    served = [0]

    def script(reqs: list[RemotingCommand]) -> list[RemotingCommand] | None:
        served[0] += 1
        if served[0] == 3:  # the third read on any connection: the broker closes it
            return None
        return [answer(q) for q in reqs]

    broker = Broker(script)
    try:
        chunks, closed, released = read(broker, Range("T", "b", 0, 0, 1000), depth=2)
    finally:
        broker.close()
    assert [c.lo for c in chunks] == list(range(0, 1000, 32))
    assert closed == [True, False] and released == 1 and broker.connections == 2


def test_a_broker_that_keeps_closing_fails_the_read() -> None:
    broker = Broker(lambda reqs: None)
    try:
        with pytest.raises(ConnectionClosed, match="failed 4 times"):
            read(broker, Range("T", "b", 0, 0, 100))
    finally:
        broker.close()
    assert broker.connections == 4


def test_a_broker_that_never_answers_times_out() -> None:
    broker = Broker(lambda reqs: [])
    t0 = time.monotonic()
    try:
        with pytest.raises(RequestTimeout, match=r"no response within 0\.300s"):
            read(broker, Range("T", "b", 0, 0, 100), timeout=0.3)
    finally:
        broker.close()
    assert time.monotonic() - t0 < 5


def test_the_queue_ending_before_the_plan_ends_the_read() -> None:
    broker = Broker(lambda reqs: [answer(q, end=70) for q in reqs])
    try:
        chunks, closed, released = read(broker, Range("T", "b", 0, 0, 200))
    finally:
        broker.close()
    assert [c.lo for c in chunks] == [0, 32, 64]
    assert closed == [False] and released == 1


def test_a_read_abandoned_half_way_closes_its_connection() -> None:
    broker = Broker(lambda reqs: [answer(q) for q in reqs])
    released: list[BrokerSocket] = []
    conn: list[BrokerSocket] = []
    try:

        def connect() -> BrokerSocket:
            conn.append(BrokerSocket(broker.addr, timeout=5.0))
            return conn[-1]

        gen = pull_range(
            connect, released.append, template(), Range("T", "b", 0, 0, 10_000), depth=4, batch=32,
            filtered=False, fail_on_data_loss=True, warn=lambda w: None,
        )  # fmt: skip
        next(gen)
        gen.close()
    finally:
        broker.close()
    assert conn[0].closed and not released  # answers were due on it: never reused
