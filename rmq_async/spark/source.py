"""The ``rocketmq`` PySpark data source (``pyspark.sql.datasource``, pyspark >= 4.2).

Strategy: the driver plans, executors read. Planning (queues, min/max offsets, timestamp searches,
data-loss checks, read limits) runs on the driver through one :class:`Bridge` (a blocking portal);
each input partition is a :class:`Range` of one queue, read on an executor by :func:`read_range` with
plain pulls. Offsets in the checkpoint are ``{"<topic>": {"<broker>": {"<queue id>": next offset}}}``
(keyed by topic as the Kafka source's). Several topics are read with option ``topic`` as a
comma-separated list or ``topicPattern``; the topics and their queues are looked up at every
planning, so a stream picks up a new topic (and a new queue) in its next micro-batch, from its first
message. Readers and partitions hold plain data only, so they pickle; the bridge is rebuilt where
needed, never shipped.

Register with ``spark.dataSource.register(RocketMQDataSource)``, then
``spark.read.format("rocketmq").option("namesrv", "host:port").option("topic", "T").load()`` or
``spark.readStream.format("rocketmq")...``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .bridge import Bridge, freeze_worker_heap, quick_ack_spark_connection, read_range
from .offsets import (
    Range,
    from_json,
    limit_offsets,
    resolve_start,
    split_for_min_partitions,
    split_range,
    to_json,
    trigger_ready,
)
from .options import EARLIEST, LATEST, QueueKey, SourceOptions, parse_options
from .sink import RocketMQStreamWriter, RocketMQWriter, sink_writer, stream_writer

__all__ = ["SCHEMA", "RocketMQBatchReader", "RocketMQDataSource", "RocketMQPartition", "RocketMQStreamReader"]

log = logging.getLogger("rmq_async.spark")

#: the rows' schema (Spark DDL)
SCHEMA = (
    "topic string, broker_name string, queue_id int, queue_offset long, msg_id string, keys string, "
    "tags string, body binary, born_timestamp timestamp, store_timestamp timestamp, "
    "properties map<string,string>, reconsume_times int"
)


class RocketMQPartition(InputPartition):
    """One input partition: ``value`` is the :class:`Range` of one queue to read."""

    def __init__(self, r: Range) -> None:
        super().__init__(r)


def _starting(
    opts: SourceOptions, bridge: Bridge, keys: list[QueueKey], bounds: dict[QueueKey, tuple[int, int]]
) -> dict[QueueKey, int]:
    """Where a query with no checkpoint starts, per queue (timestamps first, as the Kafka source)."""
    stamps: dict[QueueKey, int] = {}
    for key in keys:
        if opts.starting_by_timestamp is not None and key in opts.starting_by_timestamp:
            stamps[key] = opts.starting_by_timestamp[key]
        elif opts.starting_timestamp is not None:
            stamps[key] = opts.starting_timestamp
    out = bridge.search_all(stamps) if stamps else {}
    for key in keys:
        if key in out:  # found by its timestamp
            continue
        lo, hi = bounds[key]
        if opts.starting == "earliest":
            out[key] = lo
        elif opts.starting == "latest":
            out[key] = hi
        else:
            assert isinstance(opts.starting, dict)
            v = opts.starting.get(key, EARLIEST)
            out[key] = lo if v == EARLIEST else hi if v == LATEST else v
    return out


def _checked(opts: SourceOptions, key: QueueKey, start: int, lo: int, hi: int) -> int:
    begin, warning = resolve_start(key, start, lo, hi, fail_on_data_loss=opts.fail_on_data_loss)
    if warning:
        log.warning("topic %s: %s", key[0], warning)
    return begin


def _partitions(opts: SourceOptions, ranges: list[Range]) -> list[RocketMQPartition]:
    out: list[RocketMQPartition] = []
    for r in split_for_min_partitions(ranges, opts.min_partitions):
        out.extend(RocketMQPartition(piece) for piece in split_range(r, opts.max_records_per_partition))
    return out


class RocketMQDataSource(DataSource):
    """The ``rocketmq`` format: batch and streaming reads of one or more topics, and writes
    (:mod:`.sink`)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        # called at load(): check the options now, not when the query starts (the mode-specific
        # checks run again in reader() / streamReader())
        parse_options(self.options, streaming="endingoffsets" not in {k.lower() for k in self.options})
        return SCHEMA

    def reader(self, schema: Any) -> RocketMQBatchReader:
        return RocketMQBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> RocketMQStreamReader:
        return RocketMQStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> RocketMQWriter:
        return sink_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> RocketMQStreamWriter:
        return stream_writer(self.options, schema, overwrite)


class RocketMQBatchReader(DataSourceReader):
    """``spark.read``: the range [startingOffsets, endingOffsets) of every queue."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        quick_ack_spark_connection()  # a task's command: let its input come at once

    def partitions(self) -> Sequence[RocketMQPartition]:
        opts = self.opts
        bridge = Bridge(opts)
        try:
            keys = bridge.queues()
            bounds = bridge.bounds(keys)
            start = _starting(opts, bridge, keys, bounds)
        finally:
            bridge.close()
        ranges = []
        for key in keys:
            lo, hi = bounds[key]
            if opts.ending == "latest":
                end = hi
            else:
                assert isinstance(opts.ending, dict)
                end = opts.ending.get(key, LATEST)
                end = hi if end == LATEST else lo if end == EARLIEST else min(end, hi)
            begin = _checked(opts, key, start[key], lo, hi)
            ranges.append(Range(*key, begin, end))
        return _partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from _read(self.opts, partition)


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    """A partition's batches in a Python worker; the worker's heap frozen after its first one."""
    if isinstance(partition.value, Range):  # Spark sends an empty partition when there are none
        yield from read_range(opts, partition.value)
        if opts.gc_freeze:
            freeze_worker_heap()
    quick_ack_spark_connection()


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of new messages; offsets per queue in the checkpoint."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._bridge: Bridge | None = None
        self._latest: dict[QueueKey, int] | None = None
        self._target: dict[QueueKey, int] | None = None
        self._last_trigger = 0.0  # wall clock of the last micro-batch planned (0: none yet, as Kafka)

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_bridge": None, "_latest": None, "_target": None, "_last_trigger": 0.0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        quick_ack_spark_connection()  # a task's command: let its input come at once

    @property
    def bridge(self) -> Bridge:
        if self._bridge is None:
            self._bridge = Bridge(self.opts)
        return self._bridge

    def _bounds(self) -> dict[QueueKey, tuple[int, int]]:
        b = self.bridge
        return b.bounds(b.queues())

    def initialOffset(self) -> dict[str, Any]:
        bounds = self._bounds()
        return to_json(_starting(self.opts, self.bridge, sorted(bounds), bounds))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: hi for k, (_, hi) in self._bounds().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        bounds = self._bounds()
        self._latest = {k: hi for k, (_, hi) in bounds.items()}
        old = from_json(start, self.opts.topics)
        begin = {}
        for key, (lo, hi) in bounds.items():
            # a queue not in the checkpoint is new: read it from its beginning (as Kafka does)
            begin[key] = _checked(self.opts, key, old[key], lo, hi) if key in old else lo
        latest = dict(self._latest)
        if self._target is not None:  # availableNow: nothing past what existed at the start
            latest = {k: min(v, self._target.get(k, begin[k])) for k, v in latest.items()}
        if self._target is None:  # minOffsetsPerTrigger / maxTriggerDelay (not under availableNow)
            available = sum(max(v - begin.get(k, v), 0) for k, v in latest.items())
            now, o = time.time(), self.opts
            since = now - self._last_trigger
            if not trigger_ready(available, o.min_offsets_per_trigger, since, o.max_trigger_delay):
                return start
            if available:
                self._last_trigger = now
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ends = limit_offsets(begin, latest, max_rows)
        for key, off in old.items():  # queues that vanished from the route keep their offset
            ends.setdefault(key, off)
        return to_json(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[RocketMQPartition]:
        s, e = from_json(start, self.opts.topics), from_json(end, self.opts.topics)
        ranges = []
        for key, stop in sorted(e.items()):
            begin = s.get(key)
            if begin is None or begin > stop:
                # new queue, or reset by latestOffset's data-loss handling: [min offset, stop)
                begin = self.bridge.bounds([key])[key][0] if stop > 0 else 0
            ranges.append(Range(*key, begin, stop))
        return _partitions(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """With ``commitOffsets``, write ``end`` for ``group`` (lag in RocketMQ's tools). Spark calls
        this for a micro-batch when it plans the next one, so the group trails by one batch (and the
        last batch of a query is not committed); :class:`~.listener.OffsetCommitListener` commits
        each batch as soon as it completes."""
        if self.opts.commit_offsets:
            try:
                self.bridge.commit(from_json(end, self.opts.topics))
            except Exception as exc:  # lag reporting only: never fail the query for it
                log.warning(
                    "committing offsets of %s to group %s failed: %s", self.opts.subject, self.opts.group, exc
                )

    def stop(self) -> None:
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            bridge.close()
