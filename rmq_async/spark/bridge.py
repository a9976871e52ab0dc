"""The Spark source's way into the async client: blocking portals, and pipelined range reads.

Strategy (STYLE 13): Spark calls are synchronous, so the driver's :class:`Bridge` runs an event loop
thread (``anyio.from_thread.start_blocking_portal``) and a :class:`Session` (a stream
``ClientInstance``) inside it; the driver's metadata calls (queues, min/max offsets, timestamp search,
group commits) go through ``portal.call``.

Executors: :func:`read_range` reads one input partition. Each Python worker process keeps one event
loop thread (uvloop when installed; a daemon, so a worker never waits for it at exit) and one
:class:`Session` per connection settings, reused by every partition the worker reads and closed at
exit (``atexit``; a
worker killed outright just drops its sockets). A partition's offsets are dense and known in
advance, so :meth:`Session.pipeline` cuts the range into slots and keeps ``pullsInFlight`` of them
pulling at once (plain pulls without suspend), handing the undecoded bodies over in order; the
Spark thread builds Arrow record batches from them (``columns.build_batch``) while the loop pulls on.
A pull is the request ``MQClientAPI.pull`` would send, written from a per-queue template
(:class:`_PullTemplate`: the JSON header with the offset, count and opaque filled in), its answer's
header fields read straight from the map (no header objects per pull).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import os
import pickle
import queue
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
from anyio.abc import ObjectSendStream
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream

from ..client.api import PullResult, PullStatus
from ..client.auth import broker_error
from ..client.instance import ClientInstance, pid_instance_name
from ..config import ClientConfig, Timing
from ..errors import BrokerError, ProtocolError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.codes import Perm, PullSysFlag, RequestCode, ResponseCode, SerializeType
from ..protocol.command import RemotingCommand
from ..protocol.filter import parse_tag_expression
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .columns import Chunk, arrow_schema, build_batch, to_arrow
from .offsets import Range, resolve_start
from .options import QueueKey, SourceOptions

__all__ = ["ARROW_BATCH_ROWS", "Bridge", "Session", "arrow_schema", "read_range", "to_arrow"]

log = logging.getLogger("rmq_async.spark")

#: rows per Arrow record batch handed to Spark (about: whole pulls are grouped)
ARROW_BATCH_ROWS = 4096
#: offsets per pipeline slot at most: one task and one hand-over per slot, so slots are larger than a
#: pull (a broker answers at most 32 messages: maxTransferCountOnMessageInMemory)...
SLOT_OFFSETS = 512
#: ... and about this many body bytes (large messages, short slots)
SLOT_BYTES = 1 << 20
#: an Arrow batch is handed to Spark at ARROW_BATCH_ROWS rows or this many bytes of pull bodies
ARROW_BATCH_BYTES = 64 << 20
_QUEUE_OFFSET = struct.Struct(">q")  # QUEUEOFFSET, 20 bytes into a stored message
_PREFIX = struct.Struct(">iI")  # frame length; serialize type << 24 | header length
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
# unlikely values whose text marks where the varying fields go in a request's JSON header
_MARK_OFFSET, _MARK_COUNT, _MARK_OPAQUE = 7_919_191_919_191_919_191, 1_931_931_931, 2_011_011_011


class _PullTemplate:
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
        for mark, field in marks:
            at = header.find(mark)
            if at < 0 or header.find(mark, at + 1) >= 0:
                return
            where.append((at, len(mark), field))
        where.sort()
        parts, pos = [], 0
        for at, size, _ in where:  # keep the quotes (values) or the colon and comma (opaque)
            parts.append(header[pos : at + 1])
            pos = at + size - 1
        parts.append(header[pos:])
        self.parts = tuple(parts)
        self.order = tuple(field for _, _, field in where)
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


def _pull_result(resp: RemotingCommand, cmd: RemotingCommand, addr: str) -> PullResult:
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


class _PullCommand(RemotingCommand):
    """A pull request encoded from its queue's :class:`_PullTemplate` (the generic encoding when
    something changed it since, e.g. an ACL signature added to its fields)."""

    __slots__ = ("_template",)

    def __init__(self, template: _PullTemplate, ext: dict[str, str]) -> None:
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


class _GroupHandle:
    """The commit group in one heartbeat (CONSUME_ACTIVELY): how a broker that has not seen the group
    yet creates it (5.x brokers refuse offsets of an unknown group, code 26)."""

    def __init__(self, group: str, topic: str, tags: str, sql: str | None = None) -> None:
        self.group = group
        sub_string, tag_list, codes = parse_tag_expression(tags) if sql is None else (sql, [], [])
        self._sub = SubscriptionData(
            topic=topic, sub_string=sub_string, tags_set=tag_list, code_set=codes,
            sub_version=int(time.time() * 1000), expression_type="TAG" if sql is None else "SQL92",
        )  # fmt: skip

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            subscription_data_set=[self._sub],
        )

    def _subscribed_topics(self) -> set[str]:
        return {self._sub.topic}

    def rebalance_now(self) -> None:
        return None

    async def _handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return None


class Session:
    """Async access to one topic through a stream client instance (use ``async with``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        t = opts.request_timeout
        timing = Timing(request_timeout=t)
        cfg = ClientConfig(
            namesrv_addr=opts.namesrv, timing=timing, stream=True, credentials=opts.credentials, tls=opts.tls
        )
        self.client = ClientInstance(cfg, instance_name=pid_instance_name())
        sub_string, tags, _ = parse_tag_expression(opts.tags) if opts.sql is None else (opts.sql, [], [])
        self.sub_string = sub_string
        self.tags = frozenset(tags)
        self.expression_type = "TAG" if opts.sql is None else "SQL92"  # option sql: the broker filters
        self._group_made = False
        self._templates: dict[QueueKey, _PullTemplate] = {}

    def _template(self, r: Range) -> _PullTemplate:
        """What :meth:`MQClientAPI.pull` would send for this queue (its language, version, header
        type and stream mark), as a template."""
        o = self.opts
        header = H.PullMessageRequestHeader(
            consumer_group=o.group, topic=o.topic, queue_id=r.queue_id, queue_offset=0, max_msg_nums=1,
            sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
            commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=self.sub_string,
            expression_type=self.expression_type, bname=r.broker_name,
        )  # fmt: skip
        return _PullTemplate(self.client.api._cmd(RequestCode.PULL_MESSAGE, header.to_ext_fields()))

    async def __aenter__(self) -> Session:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(None, None, None)

    def _mq(self, key: QueueKey) -> MessageQueue:
        return MessageQueue(self.opts.topic, key[0], key[1])

    async def _addr(self, key: QueueKey) -> str:
        """The broker's master, or a slave while the master is down (slaves answer pulls and offset
        look-ups; Java consumers read from them then too)."""
        return await self.client.master_or_any_addr(key[0], self.opts.topic)

    async def queues(self) -> list[QueueKey]:
        """The readable queues of the topic, from a fresh route."""
        route = await self.client.update_route(self.opts.topic)
        out: list[QueueKey] = []
        for qd in route.queue_datas:
            if qd.perm & Perm.READ:
                out.extend((qd.broker_name, i) for i in range(qd.read_queue_nums))
        return sorted(out)

    async def bounds(self, keys: list[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        """(min offset, max offset) of each queue."""
        api, t = self.client.api, self.opts.request_timeout
        out = {}
        for key in keys:
            addr = await self._addr(key)
            mq = self._mq(key)
            out[key] = (await api.get_min_offset(addr, mq, t), await api.get_max_offset(addr, mq, t))
        return out

    async def search(self, key: QueueKey, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms``. The broker answers the nearest
        neighbour, so the message there is looked at and the offset moved past it when it is older."""
        addr = await self._addr(key)
        t = self.opts.request_timeout
        off = await self.client.api.search_offset(addr, self._mq(key), timestamp_ms, t)
        header = H.PullMessageRequestHeader(
            consumer_group=self.opts.group, topic=self.opts.topic, queue_id=key[1], queue_offset=off,
            max_msg_nums=1, sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
            commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*",
            expression_type="TAG", bname=key[0],
        )  # fmt: skip
        res = await self.client.api.pull(addr, header, t, broker_name=key[0])
        if res.status is PullStatus.FOUND and res.messages and res.messages[0].store_timestamp < timestamp_ms:
            off = res.messages[0].queue_offset + 1
        return off

    async def commit(self, offsets: dict[QueueKey, int]) -> None:
        """Write ``offsets`` for the group. The driver never stays a member of the group (a Java push
        group of that name would give it queues it never pulls): a broker that does not know the group
        yet (26) is shown it by one heartbeat, undone at once, and the write is tried again."""
        for key, off in sorted(offsets.items()):
            h = H.UpdateConsumerOffsetRequestHeader(
                consumer_group=self.opts.group, topic=self.opts.topic, queue_id=key[1],
                commit_offset=off, bname=key[0],
            )  # fmt: skip
            try:
                await self.client.api.update_consumer_offset(
                    await self._addr(key), h, self.opts.request_timeout, oneway=False
                )
            except BrokerError as exc:
                if exc.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST or self._group_made:
                    raise
                await self._make_group()
                await self.client.api.update_consumer_offset(
                    await self._addr(key), h, self.opts.request_timeout, oneway=False
                )

    async def _make_group(self) -> None:
        self._group_made = True
        handle = _GroupHandle(self.opts.group, self.opts.topic, self.opts.tags, self.opts.sql)
        self.client.register_consumer(handle)
        try:
            await self.client.update_route(self.opts.topic)
            await self.client.send_heartbeat_to_all_brokers()
        finally:
            self.client.unregister_consumer_local(self.opts.group)
            with anyio.move_on_after(self.opts.request_timeout, shield=True):
                await self.client.unregister_everywhere(consumer_group=self.opts.group)

    async def read_chunk(self, r: Range, offset: int, max_rows: int) -> tuple[list[MessageExt], int]:
        """Messages of ``r`` from ``offset`` (up to about ``max_rows``) and the offset to go on from;
        the returned offset is ``r.end`` when the range is done."""
        o = self.opts
        key = (r.broker_name, r.queue_id)
        addr = await self._addr(key)
        out: list[MessageExt] = []
        while offset < r.end and len(out) < max_rows:
            header = H.PullMessageRequestHeader(
                consumer_group=o.group, topic=o.topic, queue_id=r.queue_id, queue_offset=offset,
                max_msg_nums=min(o.pull_batch_size, r.end - offset),
                sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
                commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=self.sub_string,
                expression_type=self.expression_type, bname=r.broker_name,
            )  # fmt: skip
            res = await self.client.api.pull(addr, header, o.request_timeout, broker_name=r.broker_name)
            if res.status is PullStatus.FOUND:
                msgs = res.messages
                if msgs and msgs[0].queue_offset > offset and self.sub_string == "*":
                    # the first messages of the range were deleted since the plan was made
                    offset, warning = resolve_start(
                        key,
                        offset,
                        msgs[0].queue_offset,
                        res.max_offset,
                        fail_on_data_loss=o.fail_on_data_loss,
                    )
                    if warning:
                        log.warning(warning)
                for m in msgs:
                    if m.queue_offset >= r.end:
                        break
                    if m.queue_offset >= offset and (not self.tags or m.tags in self.tags):
                        out.append(m)
                offset = max(offset + 1, min(res.next_begin_offset, r.end))
            elif res.status is PullStatus.NO_MATCHED_MSG:
                offset = min(max(res.next_begin_offset, offset + 1), r.end)
            else:
                lo = res.min_offset
                new, warning = resolve_start(
                    key, offset, lo, res.max_offset, fail_on_data_loss=o.fail_on_data_loss
                )
                if warning:
                    log.warning(warning)
                if new <= offset:  # nothing more to read where the plan said there was
                    if res.max_offset <= offset:
                        return out, r.end
                    raise RocketMQError(
                        f"pull of {key} at {offset} answered {res.status.value}: {res.remark}"
                    )
                offset = new
        return out, min(offset, r.end)

    async def fetch(self, r: Range, lo: int, hi: int) -> list[Chunk]:
        """The undecoded pull bodies holding the messages of ``r`` in [lo, hi) (several pulls when a
        broker answers fewer messages than asked); the same offset rules as :meth:`read_chunk`."""
        o = self.opts
        key = (r.broker_name, r.queue_id)
        addr = await self._addr(key)
        out: list[Chunk] = []
        offset = lo
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = self._template(r)
        pool = self.client.api.pool
        while offset < hi:
            cmd = template.command(offset, min(o.pull_batch_size, hi - offset))
            res = _pull_result(await pool.request(addr, cmd, o.request_timeout), cmd, addr)
            if res.status is PullStatus.FOUND:
                body = res.body
                if len(body) >= 28 and self.sub_string == "*":
                    (first,) = _QUEUE_OFFSET.unpack_from(body, 20)
                    if first > offset:  # the first messages of the range were deleted since the plan
                        offset, warning = resolve_start(
                            key, offset, first, res.max_offset, fail_on_data_loss=o.fail_on_data_loss
                        )
                        if warning:
                            log.warning(warning)
                if body and offset < hi:
                    out.append(Chunk(body, offset, hi))
                offset = max(offset + 1, min(res.next_begin_offset, hi))
            elif res.status is PullStatus.NO_MATCHED_MSG:
                offset = min(max(res.next_begin_offset, offset + 1), hi)
            else:
                if res.max_offset <= offset:  # the queue ends before the plan said: the range is done
                    return out  # (slots run ahead, so this one may start past the end)
                new, warning = resolve_start(
                    key, offset, res.min_offset, res.max_offset, fail_on_data_loss=o.fail_on_data_loss
                )
                if warning:
                    log.warning(warning)
                if new <= offset:  # nothing to read where the broker says there is
                    raise RocketMQError(
                        f"pull of {key} at {offset} answered {res.status.value}: {res.remark}"
                    )
                offset = new
        return out

    async def pipeline(self, r: Range, depth: int, send: ObjectSendStream[list[Chunk]]) -> None:
        """Fetch ``r`` in slots (each slot by pulls of ``pullBatchSize`` one after the other), ``depth``
        slots at a time, and send each slot's bodies in offset order (``send`` is closed at the end, or
        on failure). A slot spans about :data:`SLOT_BYTES` of the bytes seen so far per offset, at
        most :data:`SLOT_OFFSETS` offsets: large messages make short slots, so memory stays bounded."""
        room = anyio.Semaphore(depth)
        seen = [0, 0]  # body bytes and offsets fetched so far
        order_send, order_recv = anyio.create_memory_object_stream[tuple[anyio.Event, list[list[Chunk]]]](
            depth
        )

        async def one(lo: int, hi: int, box: list[list[Chunk]], done: anyio.Event) -> None:
            chunks = await self.fetch(r, lo, hi)
            seen[0] += sum(len(c.body) for c in chunks)
            seen[1] += hi - lo
            box.append(chunks)
            done.set()

        async def launch() -> None:
            async with order_send:
                lo = r.start
                while lo < r.end:
                    await room.acquire()
                    nbytes, offsets = seen
                    if offsets:
                        step = max(1, min(SLOT_OFFSETS, SLOT_BYTES * offsets // max(nbytes, 1)))
                    else:  # nothing seen yet: one pull's worth
                        step = self.opts.pull_batch_size
                    hi = min(lo + step, r.end)
                    box: list[list[Chunk]] = []
                    done = anyio.Event()
                    tg.start_soon(one, lo, hi, box, done)
                    await order_send.send((done, box))
                    lo = hi

        async with send, anyio.create_task_group() as tg:
            tg.start_soon(launch)
            async with order_recv:
                async for done, box in order_recv:
                    await done.wait()
                    room.release()
                    if box[0]:
                        await send.send(box[0])


class Bridge:
    """Synchronous facade over a :class:`Session` running in a blocking portal."""

    def __init__(self, opts: SourceOptions) -> None:
        self._stack = contextlib.ExitStack()
        self.portal: BlockingPortal = self._stack.enter_context(start_blocking_portal())
        try:
            self.session: Session = self._stack.enter_context(
                self.portal.wrap_async_context_manager(Session(opts))
            )
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def queues(self) -> list[QueueKey]:
        return self.portal.call(self.session.queues)

    def bounds(self, keys: list[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        return self.portal.call(self.session.bounds, keys)

    def search(self, key: QueueKey, timestamp_ms: int) -> int:
        return self.portal.call(self.session.search, key, timestamp_ms)

    def commit(self, offsets: dict[QueueKey, int]) -> None:
        self.portal.call(self.session.commit, offsets)


class _Worker:
    """The executor side of one Python worker process: an event loop thread (a daemon) with a
    blocking portal, and the :class:`Session` of each connection setting seen, reused by every
    partition this process reads."""

    MAX_SESSIONS = 4

    def __init__(self) -> None:
        self.pid = os.getpid()
        ready: queue.SimpleQueue[BlockingPortal | BaseException] = queue.SimpleQueue()

        async def serve() -> None:
            async with BlockingPortal() as portal:
                ready.put(portal)
                await portal.sleep_until_stopped()

        def run() -> None:
            try:
                anyio.run(serve, backend_options={"use_uvloop": _has_uvloop()})
            except BaseException as exc:  # handed to the thread that waits
                ready.put(exc)

        self.thread = threading.Thread(target=run, name="rmq_async-spark-loop", daemon=True)
        self.thread.start()
        got = ready.get()
        if isinstance(got, BaseException):
            raise RocketMQError(f"the Spark source's event loop did not start: {got}") from got
        self.portal: BlockingPortal = got
        self.sessions: dict[bytes, tuple[contextlib.AbstractContextManager[Session], Session]] = {}

    def session(self, opts: SourceOptions) -> Session:
        key = pickle.dumps(opts)
        hit = self.sessions.get(key)
        if hit is not None:
            return hit[1]
        while len(self.sessions) >= self.MAX_SESSIONS:
            self._close(next(iter(self.sessions)))
        cm = self.portal.wrap_async_context_manager(Session(opts))
        session = cm.__enter__()
        self.sessions[key] = (cm, session)
        return session

    def _close(self, key: bytes) -> None:
        cm, _ = self.sessions.pop(key)
        try:
            cm.__exit__(None, None, None)
        except Exception as exc:  # closing only
            log.debug("closing a Spark source session: %s", exc)

    def close(self, timeout: float = 5.0) -> None:
        """Close every session and stop the loop (bounded: a hung close does not hold the exit)."""

        def stop() -> None:
            for key in list(self.sessions):
                self._close(key)
            self.portal.call(self.portal.stop, True)

        runner = threading.Thread(target=stop, daemon=True)
        runner.start()
        runner.join(timeout)


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _this_worker() -> _Worker:
    global _worker
    with _worker_lock:
        if _worker is None or _worker.pid != os.getpid():  # none yet, or inherited through a fork
            _worker = _Worker()
            atexit.register(_worker.close)
        return _worker


def _close_worker() -> None:
    """Close this process's executor client now (tests; Spark's workers close it at exit)."""
    global _worker
    with _worker_lock:
        w, _worker = _worker, None
    if w is not None and w.pid == os.getpid():
        atexit.unregister(w.close)
        w.close()


def read_range(opts: SourceOptions, r: Range) -> Iterator[Any]:
    """Executor side: the messages of ``r`` as Arrow record batches, with ``pullsInFlight`` pulls
    in flight, through this process's shared client."""
    if r.end <= r.start:
        return
    worker = _this_worker()
    portal = worker.portal
    session = worker.session(opts)
    send, receive = anyio.create_memory_object_stream[list[Chunk]](opts.pulls_in_flight)
    fut = portal.start_task_soon(session.pipeline, r, opts.pulls_in_flight, send)

    def build(chunks: list[Chunk]) -> Any:
        return build_batch(
            chunks,
            opts.topic,
            r.broker_name,
            tags=session.tags,
            properties=opts.include_properties,
            skip_undecodable=opts.on_undecodable == "skip",
        )

    try:
        pending: list[Chunk] = []
        rows = nbytes = 0
        while True:
            chunks = portal.call(_drain, receive)
            if not chunks:
                break
            pending.extend(chunks)
            rows += sum(c.hi - c.lo for c in chunks)  # at most: a pull may answer fewer
            nbytes += sum(len(c.body) for c in chunks)
            if rows >= ARROW_BATCH_ROWS or nbytes >= ARROW_BATCH_BYTES:
                batch = build(pending)
                pending, rows, nbytes = [], 0, 0
                if batch.num_rows:
                    yield batch
        _result(fut)
        if pending:
            batch = build(pending)
            if batch.num_rows:
                yield batch
    finally:
        if not fut.done():
            fut.cancel()
        with contextlib.suppress(Exception):
            portal.call(receive.aclose)


async def _drain(receive: MemoryObjectReceiveStream[list[Chunk]]) -> list[Chunk]:
    """The next slot's bodies and those of every slot already waiting (one thread hop for them all);
    [] at the end of the range."""
    try:
        out = list(await receive.receive())
    except anyio.EndOfStream:
        return []
    with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
        while True:
            out.extend(receive.receive_nowait())
    return out


def _result(fut: concurrent.futures.Future[None]) -> None:
    """``fut.result()``, with a task group's lone error raised as itself."""
    try:
        fut.result()
    except BaseExceptionGroup as eg:
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None
        raise
