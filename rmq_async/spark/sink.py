"""The ``rocketmq`` Spark sink: ``df.write.format("rocketmq")`` and ``writeStream.format("rocketmq")``.

Strategy. A row is a message (columns checked on the driver by :func:`~.sink_options.check_columns`).
A task's rows reach a Python worker as Arrow record batches (``DataSourceArrowWriter`` and
``DataSourceStreamArrowWriter``, the arrow variants of ``DataSourceWriter`` and
``DataSourceStreamWriter`` that pyspark >= 4.2 has): :func:`write_partition` turns each batch
into :class:`~rmq_async.Message` objects column by column, groups them per topic (and pinned queue)
into SEND_BATCH_MESSAGE requests of ``batchSize`` messages, and hands each request to the worker's
producer. One :class:`~rmq_async.Producer` per Python worker process and connection setting, started
in the worker's event loop thread (the one the source's readers use, :mod:`.bridge`), is reused by
every task of the worker and stopped at exit (``atexit``). Sends are pipelined: Spark's thread goes
on converting while up to ``sendsInFlight`` requests, holding at most ``maxBytesInFlight`` bytes of
bodies, are in flight; it waits when either bound is reached.

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

import atexit
import logging
import os
import pickle
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from ..client.api import SendResult
from ..errors import MQClientError
from ..producer.producer import Producer
from ..protocol.message import Message
from ..protocol.mq import MessageQueue
from .bridge import _this_worker
from .sink_options import SinkColumns, SinkOptions, check_columns, parse_sink_options

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


class _Pipeline:
    """The sends of one task in flight, bounded by count and bytes; what came back."""

    def __init__(self, opts: SinkOptions, producer: Producer, commit: SinkCommit) -> None:
        self.opts = opts
        self.producer = producer
        self.portal = _this_worker().portal
        self.commit = commit
        self.cond = threading.Condition()
        self.in_flight = 0
        self.bytes = 0
        self.sent: Counter[tuple[str, str, int]] = Counter()
        self.failed: list[tuple[list[int], list[str | None]]] = []
        self.first_error: str | None = None

    def submit(self, msgs: list[Message], rows: list[int], nbytes: int, queue_id: int | None) -> None:
        o = self.opts
        with self.cond:
            while self.in_flight >= o.sends_in_flight or (
                self.in_flight and self.bytes + nbytes > o.max_bytes_in_flight
            ):
                self.cond.wait()
            self.in_flight += 1
            self.bytes += nbytes
        fut = self.portal.start_task_soon(self._send, msgs, queue_id)
        fut.add_done_callback(lambda f: self._done(f, msgs, rows, nbytes))

    async def _send(self, msgs: list[Message], queue_id: int | None) -> SendResult:
        p = self.producer
        queue: MessageQueue | None = None
        if queue_id is not None:  # as Java's selectors: the queue_id-th of the topic's queues
            queues = await p.queues(msgs[0].topic)
            queue = queues[queue_id % len(queues)]
        if len(msgs) == 1:
            return await p.send(msgs[0], queue=queue)
        return await p.send_batch(msgs, queue=queue)

    def _done(self, fut: Future[SendResult], msgs: list[Message], rows: list[int], nbytes: int) -> None:
        exc = fut.exception() if not fut.cancelled() else MQClientError("the send was cancelled")
        with self.cond:
            self.in_flight -= 1
            self.bytes -= nbytes
            if exc is None:
                mq = fut.result().message_queue
                self.sent[(mq.topic, mq.broker_name, mq.queue_id)] += len(msgs)
            else:
                self.fail(rows, [m.keys for m in msgs], exc)
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
        """Wait for every send in flight; the task's commit message."""
        with self.cond:
            self.cond.wait_for(lambda: self.in_flight == 0)
        c = self.commit
        c.sent = dict(self.sent)
        pairs = sorted(((r, k) for rows, keys in self.failed for r, k in zip(rows, keys, strict=True)))
        c.failed_rows = [r for r, _ in pairs]
        c.failed_keys = [k for _, k in pairs if k][:SHOWN_ROWS]
        c.first_error = self.first_error
        return c


class _Batcher:
    """Messages waiting for their send request, per (topic, pinned queue id)."""

    def __init__(self, pipe: _Pipeline) -> None:
        self.pipe = pipe
        self.size = pipe.opts.batch_size
        self.pending: dict[tuple[str, int | None], tuple[list[Message], list[int], int]] = {}

    def add(self, msg: Message, row: int, queue_id: int | None, delayed: bool) -> None:
        if delayed or self.size == 1:  # delayed messages cannot go in a batch (as in Java)
            self.pipe.submit([msg], [row], len(msg.body), queue_id)
            return
        key = (msg.topic, queue_id)
        msgs, rows, nbytes = self.pending.get(key) or ([], [], 0)
        msgs.append(msg)
        rows.append(row)
        nbytes += len(msg.body)
        if len(msgs) >= self.size or nbytes >= BATCH_BYTES:
            self.pending.pop(key, None)
            self.pipe.submit(msgs, rows, nbytes, queue_id)
        else:
            self.pending[key] = (msgs, rows, nbytes)

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for (_, queue_id), (msgs, rows, nbytes) in pending.items():
            self.pipe.submit(msgs, rows, nbytes, queue_id)

    def drop(self) -> None:
        """The task stops after a failed send: what waits for a request is not sent either."""
        pending, self.pending = self.pending, {}
        with self.pipe.cond:
            for msgs, rows, _ in pending.values():
                self.pipe.fail(
                    rows, [m.keys for m in msgs], MQClientError("not sent: an earlier send failed")
                )


def _column(data: dict[str, list[Any]], cols: SinkColumns, role: str, n: int) -> list[Any]:
    name = cols.names.get(role)
    return data[name] if name is not None else [None] * n


def _messages(
    opts: SinkOptions,
    cols: SinkColumns,
    data: dict[str, list[Any]],
    n: int,
    first_row: int,
    batcher: _Batcher,
) -> int:
    """Rows ``first_row ..`` (``n`` of them, as column lists) as messages to ``batcher``; how many
    were taken (fewer than ``n`` when the task stops after a failed send). A row that cannot be a
    message (no body, a bad topic or property) is a row not sent."""
    pipe = batcher.pipe
    bodies = _column(data, cols, "body", n)
    topics = [opts.topic] * n if opts.topic is not None else _column(data, cols, "topic", n)
    keys, tags = _column(data, cols, "keys", n), _column(data, cols, "tags", n)
    props, qids = _column(data, cols, "properties", n), _column(data, cols, "queue_id", n)
    levels, uniq = _column(data, cols, "delay_level", n), _column(data, cols, "uniq_key", n)
    text = cols.body_is_text
    for i in range(n):
        if pipe.stopped():
            return i
        row = first_row + i
        try:
            body = bodies[i]
            if body is None:
                raise ValueError("the body is null")
            p = props[i]
            msg = Message(
                topics[i],
                body.encode() if text else body,
                tags=tags[i],
                keys=keys[i],
                properties=(dict(p) if not isinstance(p, dict) else p) if p is not None else None,
                delay_level=levels[i] or 0,
            )
            if uniq[i] is not None:
                msg.ensure_uniq_id(str(uniq[i]))
        except (ValueError, TypeError) as exc:  # InvalidMessageError is a ValueError
            with pipe.cond:
                pipe.fail([row], [keys[i]], ValueError(f"row {row} is not a message: {exc}"))
            continue
        batcher.add(msg, row, qids[i], bool(levels[i]))
    return n


def write_partition(
    opts: SinkOptions, cols: SinkColumns, chunks: Iterable[tuple[dict[str, list[Any]], int]], partition: int
) -> SinkCommit:
    """Send the rows of one task (``chunks``: column lists and their row count) and return its
    commit message, or raise :class:`SinkSendError` (``failOnSendError``) once the sends in flight
    are answered."""
    commit = SinkCommit(partition=partition)
    pipe = _Pipeline(opts, _producer(opts), commit)
    batcher = _Batcher(pipe)
    rows = 0
    try:
        for data, n in chunks:
            rows += _messages(opts, cols, data, n, rows, batcher)
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


def _arrow_chunks(batches: Iterator[Any]) -> Iterator[tuple[dict[str, list[Any]], int]]:
    for b in batches:
        yield {name: b.column(i).to_pylist() for i, name in enumerate(b.schema.names)}, b.num_rows


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
        return write_partition(self.opts, self.cols, _arrow_chunks(iterator), _task_partition())

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
        return write_partition(self.opts, self.cols, _arrow_chunks(iterator), _task_partition())

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
