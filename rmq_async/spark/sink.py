"""The ``rocketmq`` Spark sink: ``df.write.format("rocketmq")`` and ``writeStream.format("rocketmq")``.

Strategy. A row is a message (columns checked on the driver by :func:`~.sink_options.check_columns`).
A task's rows reach a Python worker as Arrow record batches (``DataSourceArrowWriter`` and
``DataSourceStreamArrowWriter``, the arrow variants of ``DataSourceWriter`` and
``DataSourceStreamWriter`` that pyspark >= 4.2 has): :func:`write_partition` takes each batch's
columns as lists and groups the rows per topic (and pinned queue) into SEND_BATCH_MESSAGE requests of
``batchSize`` rows, each row checked and its properties encoded straight from the columns, the
request's body built at once (``protocol.message``'s ``batch_member_properties`` and
``encode_batch_members``, the message ids made at once: no :class:`~rmq_async.Message` per row,
made once by the task and again by ``send_batch``, which took about 40 % of the worker's CPU) and
sent by ``Producer.send_batch_body``. A row with a delay level or a timer
(``delay``, ``deliver_at``) cannot go in a batch (as in Java): it becomes a ``Message`` sent alone,
as every row does with ``batchSize`` 1. One :class:`~rmq_async.Producer` per Python worker process
and connection setting, started in the worker's event loop thread (the one the source's readers use,
:mod:`.bridge`), is reused by every task of the worker and stopped at exit (``atexit``). Sends are
pipelined: Spark's thread goes on converting while up to ``sendsInFlight`` requests, holding at most
``maxBytesInFlight`` bytes of bodies, are in flight; it waits when either bound is reached.

A task ends with a :class:`SinkCommit`: the messages acknowledged per queue, the rows whose send
failed and the first failure. A failed send fails the task, after the sends in flight are
answered, with :class:`SinkSendError` saying which rows were sent and which were not (the rows it
had not read yet were not sent either); with ``failOnSendError=false`` the task goes on and its
commit message reports the rows not sent, which the driver logs. Only sends the broker acknowledged
are counted as sent.

Delivery is at-least-once: Spark may run a task again (a failed attempt, a lost executor, a
micro-batch replayed after a restart), and its rows are then sent again. ``uniqKeyColumn`` makes a
column the messages' ``UNIQ_KEY`` (their message id), so a row sent twice has one id and consumers
can drop the repeat.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pickle
import threading
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pyarrow as pa
from anyio.from_thread import BlockingPortal
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from ..client.api import SendResult
from ..errors import MQClientError
from ..producer.producer import Producer
from ..protocol.message import Message, batch_member_properties, check_topic, encode_batch_members
from ..protocol.mq import MessageQueue
from ..protocol.msgid import new_uniq_id, new_uniq_ids
from .bridge import _this_worker
from .sink_options import ROLES, SinkColumns, SinkOptions, check_columns, parse_sink_options

__all__ = [
    "RocketMQStreamWriter", "RocketMQWriter", "SinkCommit", "SinkSendError", "sink_writer", "stream_writer",
    "write_partition",
]  # fmt: skip

log = logging.getLogger("rmq_async.spark")

#: a SEND_BATCH_MESSAGE request is sent at batchSize messages or this many bytes of bodies (the
#: broker's default maxMessageSize is 4 MiB for the whole request)
BATCH_BYTES = 1 << 20
#: failed rows named in an error or a log record, at most
SHOWN_ROWS = 10


class SinkSendError(MQClientError):
    """Rows of a task were not sent (and ``failOnSendError`` is true): the message says which."""


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task sent: the driver's ``commit`` gets one per task."""

    partition: int
    #: rows the task read from its input
    rows: int = 0
    #: messages the broker acknowledged, per (topic, broker name, queue id)
    sent: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: indexes (in the task's input) of the rows not sent, ascending
    failed_rows: list[int] = field(default_factory=list)
    #: keys of the first rows not sent (those that have keys)
    failed_keys: list[str] = field(default_factory=list)
    first_error: str | None = None

    @property
    def sent_count(self) -> int:
        return sum(self.sent.values())

    def describe_failed(self) -> str:
        """``rows 3-5, 9 (keys k-3, k-4, ...)``: the rows not sent, shortened."""
        spans: list[str] = []
        rows = self.failed_rows
        i = 0
        while i < len(rows) and len(spans) < SHOWN_ROWS:
            j = i
            while j + 1 < len(rows) and rows[j + 1] == rows[j] + 1:
                j += 1
            spans.append(str(rows[i]) if i == j else f"{rows[i]}-{rows[j]}")
            i = j + 1
        text = "rows " + ", ".join(spans) + (", ..." if i < len(rows) else "")
        if self.failed_keys:
            more = ", ..." if len(self.failed_keys) < len(rows) else ""
            text += f" (keys {', '.join(self.failed_keys)}{more})"
        return text


# -- the producers of a Python worker -----------------------------------------------------------------

_producers: dict[bytes, Producer] = {}
_producers_lock = threading.Lock()
_producers_pid = 0


def _producer(opts: SinkOptions) -> Producer:
    """The started producer of ``opts``' connection settings in this process (made on first use)."""
    global _producers_pid
    key = pickle.dumps((opts.client_config(), opts.producer_config()))
    worker = _this_worker()
    with _producers_lock:
        if _producers_pid != os.getpid():  # none yet, or inherited through a fork: not ours
            _producers.clear()
            _producers_pid = os.getpid()
            atexit.register(_close_producers)  # after the worker's own hook: runs before it
        producer = _producers.get(key)
        if producer is None:
            producer = Producer(config=opts.producer_config(), client_config=opts.client_config())
            worker.portal.call(producer.start)
            _producers[key] = producer
        return producer


def _close_producers(timeout: float = 5.0) -> None:
    """Stop this process's producers (bounded: a hung stop does not hold the exit)."""
    with _producers_lock:
        producers = list(_producers.values()) if _producers_pid == os.getpid() else []
        _producers.clear()
    if not producers:
        return
    portal = _this_worker().portal

    def stop() -> None:
        for p in producers:
            try:
                portal.call(p.stop)
            except Exception as exc:  # closing only
                log.debug("stopping a Spark sink producer: %s", exc)

    runner = threading.Thread(target=stop, daemon=True)
    runner.start()
    runner.join(timeout)


# -- one task -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    """One send request of a task: a single message, or the encoded body of a batch of rows of one
    topic (and pinned queue)."""

    topic: str
    queue_id: int | None
    #: the rows it carries (indexes in the task's input) and their keys
    rows: list[int]
    keys: list[str | None]
    #: bytes of the bodies
    nbytes: int
    #: sent alone (a delay level, a timer, batchSize 1) ...
    msg: Message | None = None
    #: ... or as SEND_BATCH_MESSAGE: the body and the members' UNIQ_KEY values
    body: bytes = b""
    ids: list[str] = field(default_factory=list)


class _Feeder:
    """Requests from Spark's thread to the worker's event loop without a round trip each.

    ``portal.start_task_soon`` waits until the loop thread has spawned the task: a thread switch
    both ways per request, which cost the task thread as much as building the request's rows
    (the sink's microbenchmark: 0.8-1.2 s of CPU per 50,000 rows with it, 0.4-0.6 s without). One
    feeding task per write task runs in the portal's task group instead and starts each request's
    send in its own task group; Spark's thread appends to a deque and wakes it
    (``call_soon_threadsafe``), never waiting for the loop."""

    def __init__(self, portal: BlockingPortal, send: Callable[[_Request], Coroutine[Any, Any, None]]) -> None:
        self._send = send
        self._queue: deque[_Request | None] = deque()
        self.ended, (self._loop, self._wake) = portal.start_task(self._run)

    async def _run(
        self, *, task_status: anyio.abc.TaskStatus[tuple[asyncio.AbstractEventLoop, asyncio.Event]]
    ) -> None:
        wake = asyncio.Event()
        q = self._queue
        async with anyio.create_task_group() as tg:
            task_status.started((asyncio.get_running_loop(), wake))
            while True:
                while not q:
                    wake.clear()  # a put after this schedules its set() after it: never missed
                    await wake.wait()
                req = q.popleft()
                if req is None:
                    return
                tg.start_soon(self._send, req)

    def put(self, req: _Request | None) -> None:
        """Hand ``req`` over (None: no more; the feeding task ends once its sends are done)."""
        self._queue.append(req)
        self._loop.call_soon_threadsafe(self._wake.set)


class _Pipeline:
    """The sends of one task in flight, bounded by count and bytes; what came back."""

    def __init__(self, opts: SinkOptions, producer: Producer, commit: SinkCommit) -> None:
        self.opts = opts
        self.producer = producer
        self.commit = commit
        self.cond = threading.Condition()
        self.in_flight = 0
        self.bytes = 0
        self.sent: Counter[tuple[str, str, int]] = Counter()
        self.failed: list[tuple[list[int], list[str | None]]] = []
        self.first_error: str | None = None
        self.feeder = _Feeder(_this_worker().portal, self._send)

    def submit(self, req: _Request) -> None:
        o = self.opts
        with self.cond:
            while self.in_flight >= o.sends_in_flight or (
                self.in_flight and self.bytes + req.nbytes > o.max_bytes_in_flight
            ):
                self.cond.wait()
            self.in_flight += 1
            self.bytes += req.nbytes
        self.feeder.put(req)

    async def _send(self, req: _Request) -> None:
        """Send ``req`` (in the loop) and note what came back; a failure is the rows', never the
        feeding task's."""
        p = self.producer
        try:
            queue: MessageQueue | None = None
            if req.queue_id is not None:  # as Java's selectors: the queue_id-th of the topic's queues
                queues = await p.queues(req.topic)
                queue = queues[req.queue_id % len(queues)]
            if req.msg is not None:
                res = await p.send(req.msg, queue=queue)
            else:
                res = await p.send_batch_body(req.topic, req.body, req.ids, queue=queue)
        except Exception as exc:
            self._done(req, None, exc)
        except BaseException:  # the worker's loop closing: the rows were not sent
            self._done(req, None, MQClientError("the send was cancelled"))
            raise
        else:
            self._done(req, res, None)

    def _done(self, req: _Request, res: SendResult | None, exc: BaseException | None) -> None:
        with self.cond:
            self.in_flight -= 1
            self.bytes -= req.nbytes
            if res is not None:
                mq = res.message_queue
                self.sent[(mq.topic, mq.broker_name, mq.queue_id)] += len(req.rows)
            else:
                self.fail(req.rows, req.keys, exc or MQClientError("not sent"))
            self.cond.notify_all()

    def fail(self, rows: list[int], keys: list[str | None], exc: BaseException) -> None:
        """Rows not sent (call with ``cond`` held, or from the task's thread before any send)."""
        self.failed.append((rows, keys))
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"

    def stopped(self) -> bool:
        """A send failed and the task is to fail: read no more rows."""
        return self.opts.fail_on_send_error and self.first_error is not None

    def finish(self) -> SinkCommit:
        """Wait for every send in flight (and the feeding task's end); the task's commit message."""
        self.feeder.put(None)
        self.feeder.ended.result()
        with self.cond:
            self.cond.wait_for(lambda: self.in_flight == 0)
        c = self.commit
        c.sent = dict(self.sent)
        pairs = sorted(((r, k) for rows, keys in self.failed for r, k in zip(rows, keys, strict=True)))
        c.failed_rows = [r for r, _ in pairs]
        c.failed_keys = [k for _, k in pairs if k][:SHOWN_ROWS]
        c.first_error = self.first_error
        return c


@dataclass(slots=True)
class _Members:
    """The rows of one (topic, pinned queue id) waiting for their SEND_BATCH_MESSAGE."""

    bodies: list[bytes] = field(default_factory=list)
    props: list[bytes] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    nbytes: int = 0


class _Batcher:
    """Rows waiting for their send request, per (topic, pinned queue id), kept as the members'
    bodies and encoded properties: a batch body is built from them at once
    (:func:`~rmq_async.protocol.message.encode_batch_members`), with no :class:`Message` per row."""

    def __init__(self, pipe: _Pipeline) -> None:
        self.pipe = pipe
        self.size = pipe.opts.batch_size
        self.pending: dict[tuple[str, int | None], _Members] = {}

    def alone(self, msg: Message, row: int, queue_id: int | None) -> None:
        """A message sent by itself (a delay level or a timer: not in a batch, as in Java)."""
        self.pipe.submit(_Request(msg.topic, queue_id, [row], [msg.keys], len(msg.body), msg=msg))

    def add(
        self, topic: str, queue_id: int | None, body: bytes, props: bytes, uid: str, row: int, key: str | None
    ) -> None:
        m = self.pending.get((topic, queue_id))
        if m is None:
            m = self.pending[(topic, queue_id)] = _Members()
        m.bodies.append(body)
        m.props.append(props)
        m.ids.append(uid)
        m.rows.append(row)
        m.keys.append(key)
        m.nbytes += len(body)
        if len(m.bodies) >= self.size or m.nbytes >= BATCH_BYTES:
            del self.pending[(topic, queue_id)]
            self._submit(topic, queue_id, m)

    def _submit(self, topic: str, queue_id: int | None, m: _Members) -> None:
        body = encode_batch_members(m.bodies, m.props)
        self.pipe.submit(_Request(topic, queue_id, m.rows, m.keys, m.nbytes, body=body, ids=m.ids))

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for (topic, queue_id), m in pending.items():
            self._submit(topic, queue_id, m)

    def drop(self) -> None:
        """The task stops after a failed send: what waits for a request is not sent either."""
        pending, self.pending = self.pending, {}
        with self.pipe.cond:
            for m in pending.values():
                self.pipe.fail(m.rows, m.keys, MQClientError("not sent: an earlier send failed"))


def _rows(
    opts: SinkOptions,
    cols: SinkColumns,
    data: dict[str, list[Any]],
    n: int,
    first_row: int,
    batcher: _Batcher,
) -> int:
    """Rows ``first_row ..`` (``n`` of them, as column lists by role, :func:`_columns`) to
    ``batcher``; how many were taken (fewer than ``n`` when the task stops after a failed send). A
    row that cannot be a message (no body, a bad topic or property) is a row not sent.

    A row with a delay level or a timer (or any row with ``batchSize`` 1) becomes a
    :class:`Message`, sent alone; the others become batch members straight from the columns, checked
    as :class:`Message` checks them (:func:`~rmq_async.protocol.message.batch_member_properties`)."""
    pipe = batcher.pipe
    bodies = data["body"]
    topics = [opts.topic] * n if opts.topic is not None else data["topic"]
    keys, tags, props, qids = data["keys"], data["tags"], data["properties"], data["queue_id"]
    levels, delays, ats, uniq = data["delay_level"], data["delay"], data["deliver_at"], data["uniq_key"]
    alone = opts.batch_size == 1
    # message ids made at once for the rows of a batch, unless a uniqKeyColumn gives them
    fresh = new_uniq_ids(n) if "uniq_key" not in cols.names else None
    good_topics: set[str] = set()
    for i in range(n):
        if pipe.stopped():
            return i
        row = first_row + i
        try:
            body, topic = bodies[i], topics[i]
            if not body:
                raise ValueError("the body is null" if body is None else "the body is empty")
            u = uniq[i]
            if alone or levels[i] or delays[i] is not None or ats[i] is not None:
                p = props[i]
                msg = Message(
                    topic,
                    body,
                    tags=tags[i],
                    keys=keys[i],
                    properties=dict(p) if p is not None else None,
                    delay_level=levels[i] or 0,
                    delay=delays[i],
                    deliver_at=ats[i],
                )
                if u is not None:
                    msg.ensure_uniq_id(str(u))
                batcher.alone(msg, row, qids[i])
                continue
            if topic not in good_topics:
                check_topic(topic)
                good_topics.add(topic)
            uid = fresh[i] if fresh is not None else (str(u) if u is not None else "") or new_uniq_id()
            encoded = batch_member_properties(uid, keys[i], tags[i], props[i])
        except (ValueError, TypeError) as exc:  # InvalidMessageError is a ValueError
            with pipe.cond:
                pipe.fail([row], [keys[i]], ValueError(f"row {row} is not a message: {exc}"))
            continue
        batcher.add(topic, qids[i], body, encoded, uid, row, keys[i])
    return n


def write_partition(
    opts: SinkOptions, cols: SinkColumns, batches: Iterable[Any], partition: int
) -> SinkCommit:
    """Send the rows of one task (``batches``: its Arrow record batches) and return its commit
    message, or raise :class:`SinkSendError` (``failOnSendError``) once the sends in flight are
    answered."""
    commit = SinkCommit(partition=partition)
    pipe = _Pipeline(opts, _producer(opts), commit)
    batcher = _Batcher(pipe)
    rows = 0
    try:
        for batch in batches:
            rows += _rows(opts, cols, _columns(batch, cols), batch.num_rows, rows, batcher)
            if pipe.stopped():
                break
        if not pipe.stopped():
            batcher.flush()
    finally:
        batcher.drop()  # after a failure (or an exception of the input): not sent
        pipe.finish()
    commit.rows = rows
    if commit.failed_rows and opts.fail_on_send_error:
        raise SinkSendError(_failure_text(commit, read_all=not pipe.stopped()))
    return commit


def _failure_text(c: SinkCommit, *, read_all: bool) -> str:
    unsent = "" if read_all else f"; the rows after row {c.rows - 1} were not read, so not sent either"
    return (
        f"rocketmq sink: partition {c.partition}: {len(c.failed_rows)} of the {c.rows} rows read were not "
        f"sent: {c.describe_failed()}{unsent}; {c.sent_count} were sent and acknowledged "
        f"({_per_queue(c.sent)}); first failure: {c.first_error}. Delivery is at-least-once: "
        "a rerun sends the rows sent again (set failOnSendError=false to go on past failed sends)"
    )


def _per_queue(sent: dict[tuple[str, str, int], int]) -> str:
    return ", ".join(f"{t}/{b}/{q}: {n}" for (t, b, q), n in sorted(sent.items())) or "none"


def _task_partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _columns(batch: Any, cols: SinkColumns) -> dict[str, list[Any]]:
    """A record batch's message columns as Python lists, by role (a missing one: all None); a
    string body as its UTF-8 bytes (a cast in Arrow, no copy)."""
    n = batch.num_rows
    out: dict[str, list[Any]] = {role: [None] * n for role in ROLES}
    for role, name in cols.names.items():
        column = batch.column(name)
        if role == "body" and cols.body_is_text:
            column = column.cast(pa.binary())
        out[role] = column.to_pylist()
    return out


# -- the driver's side ----------------------------------------------------------------------------------


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, list[SinkCommit]]:
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    return sum(c.sent_count for c in commits), sum(c.rows for c in commits), commits


def _log_commit(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    sent, rows, commits = _summary(messages)
    log.info("rocketmq sink: %s: %d of %d rows sent by %d tasks", what, sent, rows, len(commits))
    for c in commits:
        if c.failed_rows:
            log.warning(
                "rocketmq sink: %s: partition %d: %d rows not sent (failOnSendError=false): %s; "
                "first failure: %s",
                what, c.partition, len(c.failed_rows), c.describe_failed(), c.first_error,
            )  # fmt: skip


def _log_abort(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    sent, _, commits = _summary(messages)
    log.warning(
        "rocketmq sink: %s failed; %d messages had been sent by the %d tasks that completed (they stay "
        "sent: at-least-once)",
        what, sent, len(commits),
    )  # fmt: skip


class RocketMQWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: each task's rows as Arrow record batches."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_partition(self.opts, self.cols, iterator, _task_partition())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort("write", messages)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("rocketmq")``: each task's rows of a micro-batch as Arrow record batches."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_partition(self.opts, self.cols, iterator, _task_partition())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(f"micro-batch {batchId}", messages)


def _writer_args(options: Any, schema: Any, overwrite: bool) -> tuple[SinkOptions, SinkColumns]:
    if overwrite:
        raise MQClientError("rocketmq sink: a topic cannot be overwritten: use mode('append')")
    opts = parse_sink_options(options)
    return opts, check_columns(opts, {f.name: f.dataType.simpleString() for f in schema.fields})


def sink_writer(options: Any, schema: Any, overwrite: bool) -> RocketMQWriter:
    """The batch writer of ``DataSource.writer``."""
    return RocketMQWriter(*_writer_args(options, schema, overwrite))


def stream_writer(options: Any, schema: Any, overwrite: bool) -> RocketMQStreamWriter:
    """The streaming writer of ``DataSource.streamWriter``."""
    return RocketMQStreamWriter(*_writer_args(options, schema, overwrite))
