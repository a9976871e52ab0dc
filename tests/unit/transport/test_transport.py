"""Connection and ConnectionPool against a real socket server on 127.0.0.1 (support/transport_server.py).

Every test body runs twice, on the default asyncio loop and on uvloop (the ``loop_name`` fixture),
each under a hard bound. Nothing sleeps: tests await server-side conditions, futures or events.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import pytest
import uvloop
from support.transport_server import FrameServer

from rmq_async.errors import ClientError, ConnectError, ConnectionClosed, FrameError, RequestTimeout
from rmq_async.protocol.codes import ResponseCode, SerializeType
from rmq_async.protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from rmq_async.transport import Connection, ConnectionPool, format_addr, parse_addr

LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
TEST_BOUND = 5.0  # seconds; each body takes well under one


@pytest.fixture(params=sorted(LOOP_FACTORIES))
def loop_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def on_both_loops(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[str], None]:
    """Turn an async test body into a test run on a fresh loop of each kind."""

    def test(loop_name: str) -> None:
        with asyncio.Runner(loop_factory=LOOP_FACTORIES[loop_name]) as runner:
            runner.run(asyncio.wait_for(fn(), TEST_BOUND))

    # not functools.wraps: its __wrapped__ would make pytest see fn's signature (no loop_name)
    test.__name__, test.__qualname__, test.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return test


def req(act: str = "echo", code: int = 14, **fields: str) -> RemotingCommand:
    return RemotingCommand.request(code, {"act": act, **fields}, b"")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- addresses -------------------------------------------------------------------------------------


def test_parse_and_format_addr() -> None:
    assert parse_addr("127.0.0.1:10911") == ("127.0.0.1", 10911)
    assert parse_addr("[::1]:9876") == ("::1", 9876)
    assert parse_addr("broker-a.local:1") == ("broker-a.local", 1)
    for bad in ("127.0.0.1", ":10911", "host:0", "host:70000", "host:abc", ""):
        with pytest.raises(ConnectError, match="bad address"):
            parse_addr(bad)
    assert format_addr(("127.0.0.1", 5)) == "127.0.0.1:5"
    assert format_addr(("::1", 5, 0, 0)) == "[::1]:5"


# -- request / response ----------------------------------------------------------------------------


@on_both_loops
async def test_request_response_json_and_rocketmq() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        try:
            assert conn.addr == server.addr and conn.local_addr.startswith("127.0.0.1:")
            for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
                cmd = RemotingCommand.request(
                    11, {"topic": "T", "queueId": "3"}, b"body-\x00\xff", serialize_type=st
                )
                resp = await conn.request(cmd, timeout=2)
                assert resp.is_response and resp.code == 0 and resp.remark == "ok"
                assert resp.opaque == cmd.opaque
                assert resp.serialize_type == st
                assert resp.ext_fields == {"topic": "T", "queueId": "3"} and resp.body == b"body-\x00\xff"
                seen = server.received[-1]
                assert seen.serialize_type == st and seen.flag == 0 and seen.opaque == cmd.opaque
            assert conn.in_flight == 0
            assert [c.opaque for c in server.received] == [0, 1]
        finally:
            await conn.aclose()


@on_both_loops
async def test_pipelined_responses_of_every_size_through_the_read_buffer() -> None:
    # the transport reads into the decoder's reused buffer: frames that straddle reads, many frames
    # in one read, and bodies larger than the buffer (it grows, then shrinks back) all come out whole
    sizes = [0, 1, 100, 35_000, 70_000, 300_000, 3 << 20, 5, 64 << 10, 1 << 20, 33]
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        try:
            bodies = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
            resps: list[RemotingCommand | None] = [None] * len(bodies)

            async def one(i: int) -> None:
                resps[i] = await conn.request(RemotingCommand.request(11, {"i": str(i)}, bodies[i]), 10)

            async with anyio.create_task_group() as tg:
                for i in range(len(bodies)):
                    tg.start_soon(one, i)
            for i, resp in enumerate(resps):
                assert resp is not None and resp.ext_fields["i"] == str(i) and resp.body == bodies[i]
            assert conn.in_flight == 0
        finally:
            await conn.aclose()


@on_both_loops
async def test_out_of_order_responses_correlate_by_opaque() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        tasks = [asyncio.ensure_future(conn.request(req("hold", i=str(i)), timeout=2)) for i in range(4)]
        await server.wait_for(lambda: len(server.held) == 4)
        assert conn.in_flight == 4
        for index in (2, -1, 0, 0):  # answer 2, 3, 0, 1
            server.answer(index)
        results = await asyncio.gather(*tasks)
        assert [r.ext_fields["i"] for r in results] == ["0", "1", "2", "3"]
        assert conn.in_flight == 0
        await conn.aclose()


@on_both_loops
async def test_timeout_raises_and_late_answer_is_dropped() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        cmd = req("hold", code=11)
        with pytest.raises(RequestTimeout) as info:
            await conn.request(cmd, timeout=0.05)
        assert info.value.code == 11 and info.value.addr == server.addr and info.value.timeout == 0.05
        assert conn.in_flight == 0
        late = server.answer()  # arrives before the next response (same TCP stream)
        assert late.opaque == cmd.opaque
        resp = await conn.request(req(i="next"), timeout=2)
        assert resp.ext_fields["i"] == "next" and resp.opaque != cmd.opaque
        assert not conn.closed and conn.in_flight == 0
        await conn.aclose()


@on_both_loops
async def test_cancelled_request_leaves_no_pending_entry() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, max_timeouts=1)
        with anyio.move_on_after(0.02) as scope:
            await conn.request(req("hold"), timeout=10)
        assert scope.cancelled_caught
        assert conn.in_flight == 0
        server.answer()  # late answer to a cancelled request: dropped
        assert (await conn.request(req(), timeout=2)).code == 0
        assert not conn.closed  # a cancellation is not a timeout
        await conn.aclose()


@on_both_loops
async def test_oneway_reaches_server_with_flag_and_needs_no_answer() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        cmd = RemotingCommand.request(15, {"consumerGroup": "g", "commitOffset": "7"})
        await conn.oneway(cmd)
        assert conn.in_flight == 0
        await server.wait_for(lambda: len(server.received) == 1)
        seen = server.received[0]
        assert seen.code == 15 and seen.flag & FLAG_ONEWAY and not seen.flag & FLAG_RESPONSE
        assert seen.opaque == cmd.opaque and seen.ext_fields["commitOffset"] == "7"
        await conn.aclose()


@on_both_loops
async def test_coalesced_requests_go_out_at_the_next_turn_in_the_order_they_were_made() -> None:
    # pulls of several queues made in one turn are written together; a frame written meanwhile
    # (here a oneway) goes after them, never ahead
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        a = asyncio.ensure_future(conn.request(req(n="a"), 5, coalesce=True))
        b = asyncio.ensure_future(conn.request(req(n="b"), 5, coalesce=True))
        await asyncio.sleep(0)  # both ran up to their await: their frames wait for the turn's end
        assert not server.received
        await conn.oneway(req(n="c"))
        assert [r.ext_fields["n"] for r in await asyncio.gather(a, b)] == ["a", "b"]
        await server.wait_for(lambda: len(server.received) == 3)
        assert [cmd.ext_fields["n"] for cmd in server.received] == ["a", "b", "c"]
        await conn.aclose()


@on_both_loops
async def test_a_graceful_close_still_writes_what_waits_behind_a_coalesced_request() -> None:
    # a oneway (a last offset commit, an unregister) queued behind a coalesced pull just before
    # aclose() goes out before the socket closes; the pull itself fails as closed
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        pull = asyncio.ensure_future(conn.request(req("hold", n="pull"), 30, coalesce=True))
        await asyncio.sleep(0)
        await conn.oneway(req(n="last"))
        await conn.aclose()
        with pytest.raises(ConnectionClosed):
            await pull
        await server.wait_for(lambda: len(server.received) == 2)
        assert [cmd.ext_fields["n"] for cmd in server.received] == ["pull", "last"]


class _Prepared:
    """A request that writes its own frame (as a queue's PreparedPull does)."""

    code = 14

    def __init__(self, n: str) -> None:
        self.n = n
        self.frames: list[int] = []  # the opaques it was asked to write a frame with

    def command(self) -> RemotingCommand:
        return req(n=self.n, via="command")

    def frame(self, opaque: int) -> bytes:
        self.frames.append(opaque)
        cmd = req(n=self.n, via="frame")
        cmd.opaque = opaque
        return cmd.encode()


@on_both_loops
async def test_a_prepared_request_writes_its_own_frame_unless_the_connection_signs() -> None:
    # its frame, with the opaque the connection assigned, answered as any request; a connection that
    # signs its requests signs the prepared request's command instead (the frame cannot be signed)
    signed: list[RemotingCommand] = []

    def signer(cmd: RemotingCommand) -> None:
        cmd.ext_fields["Signature"] = "s"
        signed.append(cmd)

    async with FrameServer() as server:
        plain = await Connection.connect(server.addr)
        prepared = _Prepared("p")
        resp = await plain.request(prepared, 5, coalesce=True)
        assert prepared.frames == [resp.opaque] and resp.ext_fields["via"] == "frame"
        signing = await Connection.connect(server.addr, signer=signer)
        other = _Prepared("q")
        resp = await signing.request(other, 5)
        assert other.frames == [] and resp.ext_fields["via"] == "command"
        assert resp.ext_fields["Signature"] == "s" and [c.opaque for c in signed] == [resp.opaque]
        await server.wait_for(lambda: len(server.received) == 2)
        assert [(c.ext_fields["n"], c.ext_fields["via"]) for c in server.received] == [
            ("p", "frame"),
            ("q", "command"),
        ]
        await plain.aclose()
        await signing.aclose()


@on_both_loops
async def test_opaque_wraps_at_2_31_and_skips_pending() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        conn._next_opaque = 0x7FFFFFFE
        opaques = []
        for _ in range(3):
            cmd = req()
            resp = await conn.request(cmd, timeout=2)
            assert resp.opaque == cmd.opaque
            opaques.append(cmd.opaque)
        assert opaques == [0x7FFFFFFE, 0x7FFFFFFF, 0]
        held = asyncio.ensure_future(conn.request(req("hold"), timeout=2))  # opaque 1 stays pending
        await server.wait_for(lambda: len(server.held) == 1)
        conn._next_opaque = 1
        cmd = req()
        await conn.request(cmd, timeout=2)
        assert cmd.opaque == 2
        server.answer()
        assert (await held).opaque == 1
        await conn.aclose()


# -- server-initiated requests ---------------------------------------------------------------------


@on_both_loops
async def test_server_request_is_answered_by_handler_with_same_opaque() -> None:
    calls: list[RemotingCommand] = []

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        calls.append(cmd)
        return cmd.make_response(0, "not set any response code", body=b'{"running":true}')

    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, handler=handler)
        await server.wait_for(lambda: len(server.conns) == 1)
        sc = server.conns[0]
        for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
            ask = RemotingCommand.request(307, {"consumerGroup": "g"}, serialize_type=st)
            answer = await sc.request(ask)
            assert answer.is_response and answer.opaque == ask.opaque and answer.code == 0
            assert answer.serialize_type == st and answer.body == b'{"running":true}'
        assert [c.code for c in calls] == [307, 307]
        await conn.aclose()


@on_both_loops
async def test_server_oneway_request_gets_no_answer() -> None:
    tasks: list[asyncio.Task[None]] = []
    seen: list[RemotingCommand] = []
    called = asyncio.Event()

    async def run(fn: Callable[[], Awaitable[None]]) -> None:
        await fn()

    def spawn(fn: Callable[[], Awaitable[None]]) -> None:
        tasks.append(asyncio.ensure_future(run(fn)))

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        called.set()
        return cmd.make_response(0, "would be wrong to send")

    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, handler=handler, spawn=spawn)
        await server.wait_for(lambda: len(server.conns) == 1)
        opaque = server.conns[0].oneway(RemotingCommand.request(40, {"consumerGroup": "g"}))
        await called.wait()
        await asyncio.gather(*tasks)  # the handler returned and its task finished
        assert [(c.code, c.opaque, c.is_oneway) for c in seen] == [(40, opaque, True)]
        await conn.request(req(), timeout=2)  # anything written before it has arrived by now
        assert server.responses == []
        await conn.aclose()


@on_both_loops
async def test_handler_error_answers_system_error() -> None:
    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        raise ValueError("boom")

    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, handler=handler)
        await server.wait_for(lambda: len(server.conns) == 1)
        answer = await server.conns[0].request(RemotingCommand.request(309, {"msgId": "x"}))
        assert answer.code == ResponseCode.SYSTEM_ERROR and "ValueError: boom" in (answer.remark or "")
        assert not conn.closed
        await conn.aclose()


@on_both_loops
async def test_no_handler_answers_request_code_not_supported() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        await server.wait_for(lambda: len(server.conns) == 1)
        server.conns[0].oneway(RemotingCommand.request(40, {}))  # oneway: no answer at all
        answer = await server.conns[0].request(RemotingCommand.request(221, {}))
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "221" in (answer.remark or "")
        assert len(server.responses) == 1
        await conn.aclose()


@on_both_loops
async def test_tracked_handler_task_is_cancelled_at_close() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None  # pragma: no cover

    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, handler=handler)
        await server.wait_for(lambda: len(server.conns) == 1)
        server.conns[0].oneway(RemotingCommand.request(220, {}))
        await started.wait()
        await conn.aclose()
        assert cancelled.is_set()


# -- closing ---------------------------------------------------------------------------------------


@on_both_loops
async def test_peer_close_fails_all_pending_at_once() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        closes: list[Connection] = []
        conn.add_close_callback(closes.append)
        tasks = [asyncio.ensure_future(conn.request(req("hold"), timeout=30)) for _ in range(5)]
        await server.wait_for(lambda: len(server.held) == 5)
        server.conns[0].close()
        with anyio.fail_after(1.0):  # far below the requests' own 30 s timeouts
            results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ConnectionClosed) for r in results), results
        assert conn.closed and conn.in_flight == 0 and closes == [conn]
        with pytest.raises(ConnectionClosed, match="closed by the peer"):
            await conn.request(req(), timeout=2)
        with pytest.raises(ConnectionClosed):
            await conn.oneway(req())
        await conn.wait_closed()
        await conn.aclose()  # idempotent
        assert closes == [conn]


@on_both_loops
async def test_aclose_fails_pending_and_is_idempotent() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        closes: list[Connection] = []
        conn.add_close_callback(closes.append)
        task = asyncio.ensure_future(conn.request(req("hold"), timeout=30))
        await server.wait_for(lambda: len(server.held) == 1)
        await conn.aclose()
        with pytest.raises(ConnectionClosed, match="closed by the client"):
            await task
        await conn.aclose()
        await conn.wait_closed()
        late: list[Connection] = []
        conn.add_close_callback(late.append)  # already closed: called at once
        assert closes == [conn] and late == [conn]
        await server.wait_for(lambda: server.conns[0].lost.is_set())


@on_both_loops
async def test_garbage_from_server_closes_with_frame_error() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        pending = asyncio.ensure_future(conn.request(req("hold"), timeout=30))
        await server.wait_for(lambda: len(server.held) == 1)
        with pytest.raises(ConnectionClosed) as info:
            await conn.request(req("garbage"), timeout=30)
        assert isinstance(info.value.__cause__, FrameError)
        with pytest.raises(ConnectionClosed) as info2:
            await pending
        assert isinstance(info2.value.__cause__, FrameError)
        assert conn.closed
        await conn.wait_closed()


@on_both_loops
async def test_oversize_frame_from_server_closes_with_frame_error() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, max_frame=4096)
        assert len((await conn.request(RemotingCommand.request(11, {}, b"x" * 1000), timeout=2)).body) == 1000
        with pytest.raises(ConnectionClosed) as info:  # the echo of 8000 bytes exceeds max_frame
            await conn.request(RemotingCommand.request(11, {}, b"x" * 8000), timeout=30)
        assert isinstance(info.value.__cause__, FrameError) and "4096" in str(info.value.__cause__)
        conn2 = await Connection.connect(server.addr)
        with pytest.raises(ConnectionClosed) as info:  # a length prefix of ~2 GiB
            await conn2.request(req("oversize"), timeout=30)
        assert isinstance(info.value.__cause__, FrameError)


@on_both_loops
async def test_half_open_detected_after_max_timeouts() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, max_timeouts=3)
        server.mute = True  # keeps the socket, answers nothing
        long_poll = asyncio.ensure_future(conn.request(req(code=11), timeout=30))
        for i in range(3):
            with pytest.raises(RequestTimeout):
                await conn.request(req(), timeout=0.03)
            assert conn.closed == (i == 2)
        with anyio.fail_after(0.5):
            with pytest.raises(ConnectionClosed, match="3 consecutive request timeouts") as info:
                await long_poll
        assert isinstance(info.value.__cause__, RequestTimeout)
        with pytest.raises(ConnectionClosed):
            await conn.request(req(), timeout=2)


@on_both_loops
async def test_a_response_resets_the_timeout_count() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr, max_timeouts=2)
        for _ in range(2):
            with pytest.raises(RequestTimeout):
                await conn.request(req("hold"), timeout=0.03)
            assert (await conn.request(req(), timeout=2)).code == 0
        assert not conn.closed
        for _ in range(2):
            with pytest.raises(RequestTimeout):
                await conn.request(req("hold"), timeout=0.03)
        assert conn.closed


@on_both_loops
async def test_write_backpressure_waits_for_drain() -> None:
    async with FrameServer() as server:
        conn = await Connection.connect(server.addr)
        await server.wait_for(lambda: len(server.conns) == 1)
        sc = server.conns[0]
        assert sc.transport is not None
        sc.transport.pause_reading()
        big = b"x" * (256 << 10)
        sent = 0
        while not conn._paused:  # fill the socket buffers until the transport pushes back
            await conn.oneway(RemotingCommand.request(15, {}, big))
            sent += 1
            await asyncio.sleep(0)  # let the loop try to flush
            assert sent < 4000
        with pytest.raises(RequestTimeout):  # the wait for room is bounded by the request's timeout
            await conn.request(req(), timeout=0.05)
        blocked = asyncio.ensure_future(conn.oneway(RemotingCommand.request(15, {}, b"last")))
        answered = asyncio.ensure_future(conn.request(req(i="after"), timeout=5))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not blocked.done() and not answered.done()
        sc.transport.resume_reading()
        await blocked
        assert (await answered).ext_fields["i"] == "after"
        await server.wait_for(lambda: any(c.body == b"last" for c in server.received))
        await conn.aclose()


@on_both_loops
async def test_connect_errors_are_connect_error() -> None:
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectError) as info:
        await Connection.connect(addr)
    assert info.value.addr == addr and isinstance(info.value.__cause__, OSError)
    with pytest.raises(ConnectError, match="bad address"):
        await Connection.connect("nonsense")


@on_both_loops
async def test_ipv6_address() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    server = FrameServer()
    try:
        await server.start(host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback")
    try:
        conn = await Connection.connect(f"[::1]:{server.port}")
        assert conn.local_addr.startswith("[::1]:")
        assert (await conn.request(req(), timeout=2)).code == 0
        await conn.aclose()
    finally:
        await server.aclose()


# -- pool ------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@on_both_loops
async def test_pool_concurrent_gets_share_one_connect() -> None:
    async with FrameServer() as server, ConnectionPool() as pool:
        conns = await asyncio.gather(*(pool.get(server.addr) for _ in range(10)))
        assert all(c is conns[0] for c in conns)
        assert server.accepted == 1
        assert (await pool.request(server.addr, req(i="p"), timeout=2)).ext_fields["i"] == "p"
        await pool.oneway(server.addr, RemotingCommand.request(15, {"x": "1"}))
        await server.wait_for(lambda: any(c.is_oneway for c in server.received))
        assert server.accepted == 1 and pool.connections == {server.addr: conns[0]}
        await pool.close_address(server.addr)
        assert conns[0].closed and pool.connections == {}
        assert (await pool.get(server.addr)) is not conns[0]
        assert server.accepted == 2


@on_both_loops
async def test_pool_reconnects_after_server_restart_respecting_backoff() -> None:
    clock = FakeClock()
    server = await FrameServer().start()
    port = server.port
    async with ConnectionPool(clock=clock) as pool:
        first = await pool.get(server.addr)
        await server.aclose()
        await first.wait_closed()
        with pytest.raises(ConnectError) as info:  # dials, refused
            await pool.get(server.addr)
        assert isinstance(info.value.__cause__, OSError)
        assert pool.backoff_remaining(server.addr) == pytest.approx(0.1)
        server = await FrameServer().start(port=port)  # back on the same port
        async with server:
            with pytest.raises(ConnectError, match=r"next try in 0\.100s"):
                await pool.get(server.addr)  # back-off: no dial
            assert server.accepted == 0
            clock.now += 0.1
            second = await pool.get(server.addr)
            assert second is not first and not second.closed and server.accepted == 1
            assert pool.backoff_remaining(server.addr) == 0.0
            assert (await second.request(req(), timeout=2)).code == 0
            server.conns[0].close()  # a closed connection is replaced on the next get
            await second.wait_closed()
            third = await pool.get(server.addr)
            assert third is not second and server.accepted == 2


@on_both_loops
async def test_pool_backoff_doubles_to_the_cap_and_resets() -> None:
    clock = FakeClock()
    addr = f"127.0.0.1:{free_port()}"
    async with ConnectionPool(clock=clock, max_backoff=1.0) as pool:
        failures = await asyncio.gather(*(pool.get(addr) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(f, ConnectError) for f in failures)
        with pytest.raises(ConnectError, match=r"1 connect attempt\(s\) failed"):  # one shared dial
            await pool.get(addr)
        clock.now += pool.backoff_remaining(addr)
        delays = [0.1]
        for _ in range(5):
            with pytest.raises(ConnectError, match="cannot connect"):
                await pool.get(addr)
            delays.append(round(pool.backoff_remaining(addr), 6))
            with pytest.raises(ConnectError, match="next try in"):
                await pool.get(addr)
            clock.now += delays[-1]
        assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
        server = await FrameServer().start(port=int(addr.rsplit(":", 1)[1]))
        async with server:
            conn = await pool.get(addr)
            assert pool.backoff_remaining(addr) == 0.0
        await conn.wait_closed()
        with pytest.raises(ConnectError, match="cannot connect"):
            await pool.get(addr)
        assert pool.backoff_remaining(addr) == pytest.approx(0.1)  # the success reset the doubling


@on_both_loops
async def test_pool_runs_handlers_in_its_task_group_and_closes_all_on_exit() -> None:
    handler_started = asyncio.Event()
    handler_cancelled = asyncio.Event()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == 220:
            handler_started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                handler_cancelled.set()
                raise
        return cmd.make_response(0, None, body=str(cmd.code).encode())

    async with FrameServer() as server, FrameServer() as other:
        async with ConnectionPool(handler=handler) as pool:
            a = await pool.get(server.addr)
            b = await pool.get(other.addr)
            answer = await server.conns[0].request(RemotingCommand.request(307, {}))
            assert answer.code == 0 and answer.body == b"307"
            server.conns[0].oneway(RemotingCommand.request(220, {}))  # a handler that never ends
            await handler_started.wait()
        assert a.closed and b.closed and handler_cancelled.is_set()
        await server.wait_for(lambda: server.conns[0].lost.is_set() and other.conns[0].lost.is_set())
        with pytest.raises(ClientError):
            await pool.get(server.addr)


@on_both_loops
async def test_pool_exit_lets_the_body_exception_through_unwrapped() -> None:
    async with FrameServer() as server:
        with pytest.raises(KeyError, match="body"):
            async with ConnectionPool() as pool:
                conn = await pool.get(server.addr)
                raise KeyError("body")
        assert conn.closed
        pool2 = ConnectionPool()
        with anyio.move_on_after(0.02) as scope:  # cancelled from outside while inside the pool
            async with pool2:
                conn2 = await pool2.get(server.addr)
                await asyncio.Event().wait()
        assert scope.cancelled_caught and conn2.closed
        await server.wait_for(lambda: all(c.lost.is_set() for c in server.conns))


@on_both_loops
async def test_pool_not_entered_raises_client_error() -> None:
    pool = ConnectionPool()
    with pytest.raises(ClientError):
        await pool.get("127.0.0.1:1")
