"""The ``rocketmq`` Spark source next to its ceiling and to lite pull, in one Spark session (#22).

Strategy: one topic holds N messages of ``--size`` bytes (preloaded into the embedded cluster, run in
a child process, or already on the cluster given by ``--namesrv``). In one Spark session
(``--master``, default ``local[2]``) and on the same rows, each round measures:

* ``memory``: a trivial Python data source with the source's schema that yields Arrow record batches
  built once in memory (same body size, the property map of a real message of the topic, same
  number of input partitions), with the two settings the source makes in a Python worker
  (``TCP_QUICKACK`` on the worker's connection when a task's command is read and after each
  partition; the heap frozen after the worker's first partition): the ceiling of any Python data
  source on this machine. ``--plain-ceiling`` leaves them out (what rounds 6-8 of RESULTS measured;
  every task of that ceiling waits about 40 ms for its input);
* ``rocketmq``: the source, earliest to latest;

each as a batch read (``spark.read ... .write.format("noop")``) and as a streaming query with
``Trigger.AvailableNow`` into the ``noop`` sink; and ``lite pull``: a ``LitePullConsumer`` (in the
driver process, no Spark) assigned every queue, polling until N messages are seen.

Rows/s are N over the wall time of the query (planning included; session start left out); ratios are
to the ceiling of the same mode and to lite pull. Every reader also logs (time, rows) per Arrow batch
it yields, so ``--plot`` draws rows/s over the whole run (0.25 s bins). ``--json`` keeps the figures;
``--before OLD.json`` adds an earlier run (e.g. of the previous commit) to the table and the plot;
``--write`` replaces the "Spark source at Spark speed (#22)" section of benchmarks/history/bench-spark.md.
``--source-opt k=v`` passes extra options to the source (e.g. ``minPartitions=8``). ``--free-build``
gives a bound instead of the source's figure: its batch builder hands out slices of the first batch it
built, so the source costs only its pulls.

    python benchmarks/bench_spark.py [--messages 200000] [--size 1024] [--queues 8] [--rounds 2]
        [--namesrv HOST:PORT --topic T [--preload]] [--master local[2]] [--json F] [--plot F] [--write]

``--mode write`` measures the sink instead (#44): in each round, ``rmq-async produce`` (a child
process: one producer, ``--batch`` messages per request, ``--concurrency`` requests in flight) sends
``--messages`` rows of ``--size`` bytes with keys, then the Spark sink sends the same rows (the same
body size and keys, made by Spark from ``spark.range``) with the same pipelining (``batchSize``,
``sendsInFlight``); rows/s of each over the wall time of the send (the sink's: the whole write job),
and their ratio:

    python benchmarks/bench_spark.py --mode write [--messages 200000] [--rounds 3] [--batch 32]
        [--concurrency 16] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

from rmq_async import Message, Producer, Timing
from rmq_async.consumer.lite_pull import LitePullConsumer
from rmq_async.embedded import EmbeddedCluster

RESULTS = Path(__file__).with_name("history") / "bench-spark.md"  # the log; RESULTS.md quotes it
SECTION = "## Spark source at Spark speed (#22)"
PROGRESS_ENV = "RMQ_BENCH_PROGRESS"  # file the Python workers append "time rows" lines to
FREE_BUILD_ENV = "RMQ_BENCH_FREE_BUILD"  # "1": --free-build in the Python workers
BATCH_ROWS = 4096

# -- the progress log (driver and Python workers share the machine and its clock) ------------------


def _log_rows(batches: Iterator[Any]) -> Iterator[Any]:
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        yield from batches
        return
    with open(path, "a", encoding="ascii", buffering=1) as f:
        for b in batches:
            f.write(f"{time.time():.4f} {b.num_rows}\n")
            yield b


# -- the ceiling: an in-memory Python data source with the same schema -------------------------------

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from rmq_async.spark import SCHEMA, RocketMQDataSource
    from rmq_async.spark.source import RocketMQBatchReader, RocketMQStreamReader
except ImportError as exc:  # pragma: no cover
    raise SystemExit(f"bench_spark needs the spark extra: {exc}") from None


def _memory_batches(opts: dict[str, str], lo: int, hi: int) -> Iterator[Any]:
    """Rows [lo, hi) as Arrow batches cut from one template built in memory."""
    import pyarrow as pa

    size = int(opts["size"])
    props = json.loads(opts["props"])
    n = min(BATCH_ROWS, max(hi - lo, 1))
    ts = int(time.time() * 1_000_000)
    cols = [
        pa.array([opts["topic"]] * n, pa.string()),
        pa.array(["broker-a"] * n, pa.string()),
        pa.array([0] * n, pa.int32()),
        pa.array(range(n), pa.int64()),
        pa.array([f"{i:032X}" for i in range(n)], pa.string()),
        pa.array([props.get("KEYS")] * n, pa.string()),
        pa.array([props.get("TAGS")] * n, pa.string()),
        pa.array([b"x" * size] * n, pa.binary()),
        pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
        pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
        pa.array([list(props.items())] * n, pa.map_(pa.string(), pa.string())),
        pa.array([0] * n, pa.int32()),
    ]
    template = pa.RecordBatch.from_arrays(cols, schema=_memory_schema())
    pos = lo
    while pos < hi:
        k = min(n, hi - pos)
        yield template if k == n else template.slice(0, k)
        pos += k


def _memory_schema() -> Any:
    """The source's Arrow schema, written out here: the ceiling's workers import rmq_async only for
    the worker settings."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("topic", pa.string()), ("broker_name", pa.string()), ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()), ("msg_id", pa.string()), ("keys", pa.string()),
            ("tags", pa.string()), ("body", pa.binary()), ("born_timestamp", ts), ("store_timestamp", ts),
            ("properties", pa.map_(pa.string(), pa.string())), ("reconsume_times", pa.int32()),
        ]
    )  # fmt: skip


def _splits(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    step = -(-(hi - lo) // parts) if hi > lo else 1
    return [(s, min(s + step, hi)) for s in range(lo, hi, step)]


def _worker_settings(opts: dict[str, str], *, partition_done: bool) -> None:
    """The settings the source makes in a Python worker, made by the ceiling too (unless
    ``--plain-ceiling``): ``TCP_QUICKACK`` on the worker's connection to the JVM when a task's command
    unpickles a reader and after each partition, and the heap frozen after the first partition."""
    if opts.get("plain") == "1":
        return
    if not partition_done and "rmq_async.spark.bridge" not in sys.modules:
        # not a worker that read the source (Spark's streaming source runner unpickles the reader
        # too): importing the package there would cost what the trivial source never pays
        return
    from rmq_async.spark.bridge import freeze_worker_heap, quick_ack_spark_connection

    if partition_done:
        freeze_worker_heap()
    quick_ack_spark_connection()


class _MemoryReader:
    opts: dict[str, str]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _worker_settings(self.opts, partition_done=False)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        lo, hi = partition.value
        yield from _log_rows(_memory_batches(self.opts, lo, hi))
        _worker_settings(self.opts, partition_done=True)


class MemoryBatchReader(_MemoryReader, DataSourceReader):
    def __init__(self, opts: dict[str, str]) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in _splits(0, int(self.opts["rows"]), int(self.opts["partitions"]))]


class MemoryStreamReader(_MemoryReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: dict[str, str]) -> None:
        self.opts = opts

    def initialOffset(self) -> dict[str, Any]:
        return {"n": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"n": int(self.opts["rows"])}

    def prepareForTriggerAvailableNow(self) -> None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in _splits(start["n"], end["n"], int(self.opts["partitions"]))]


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmq_bench_memory"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> MemoryBatchReader:
        return MemoryBatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> MemoryStreamReader:
        return MemoryStreamReader(dict(self.options))


# -- the source, with its batches logged ---------------------------------------------------------------


def _free_build() -> None:
    """``--free-build``, once per Python worker: the source's batch builder replaced by one that hands
    out slices of the first batch it built (cache-hot, as the ceiling's), so the source costs only
    its pulls. A bound, not a reader: the rows are not the pulled ones (their count is)."""
    from rmq_async.spark import bridge, columns

    real = columns.build_batch
    if os.environ.get(FREE_BUILD_ENV) != "1" or getattr(bridge, "_free_build", False):
        return
    kept: list[Any] = []

    def cached(chunks: Any, topic: str, broker_name: str, **kw: Any) -> Any:
        chunks = list(chunks)
        rows = sum(c.hi - c.lo for c in chunks)  # every pull answers what it asks for here
        if not kept or kept[0].num_rows < rows:
            kept[:] = [real(chunks, topic, broker_name, **kw)]
            return kept[0]
        return kept[0].slice(0, rows)

    bridge.__dict__.update(build_batch=cached, _free_build=True)  # what read_range calls


class TimedBatchReader(RocketMQBatchReader):
    def read(self, partition: InputPartition) -> Iterator[Any]:
        _free_build()
        yield from _log_rows(super().read(partition))


class TimedStreamReader(RocketMQStreamReader):
    def read(self, partition: InputPartition) -> Iterator[Any]:
        _free_build()
        yield from _log_rows(super().read(partition))


class TimedSource(RocketMQDataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketmq_timed"

    def reader(self, schema: Any) -> Any:
        r = super().reader(schema)
        r.__class__ = TimedBatchReader
        return r

    def streamReader(self, schema: Any) -> Any:
        r = super().streamReader(schema)
        r.__class__ = TimedStreamReader
        return r


# -- the cluster side ----------------------------------------------------------------------------------


async def preload(namesrv: str, topic: str, n: int, size: int, batch: int = 32, inflight: int = 16) -> float:
    body = b"x" * size
    async with Producer("bench_spark_producer", namesrv_addr=namesrv) as p:
        await p.send(Message(topic, body))
        left = n - 1
        it = iter([batch] * (left // batch) + ([left % batch] if left % batch else []))
        t0 = time.perf_counter()

        async def sender() -> None:
            for k in it:
                await p.send_batch([Message(topic, body) for _ in range(k)])

        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(sender)
        return (n - 1) / max(time.perf_counter() - t0, 1e-9)


async def backlog(namesrv: str, topic: str) -> tuple[int, int]:
    """(messages between min and max offsets over all queues, number of queues)."""
    from rmq_async.spark.bridge import Session
    from rmq_async.spark.options import parse_options

    async with Session(parse_options({"namesrv": namesrv, "topic": topic}, streaming=False)) as s:
        keys = await s.queues()
        bounds = await s.bounds(keys)
    return sum(hi - lo for lo, hi in bounds.values()), len(keys)


async def lite_pull(namesrv: str, topic: str, n: int, log: list[tuple[float, int]]) -> float:
    async with LitePullConsumer(
        f"bench_lite_{time.monotonic_ns()}", namesrv_addr=namesrv, auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=32,
    ) as c:  # fmt: skip
        mqs = await c.fetch_queues(topic)
        t0 = time.perf_counter()
        await c.assign(mqs)
        seen = 0
        while seen < n:
            k = len(await c.poll(5.0, max_messages=BATCH_ROWS))
            if k == 0:
                raise SystemExit(f"lite pull: nothing for 5 s after {seen} of {n} messages")
            seen += k
            log.append((time.time(), k))
        return n / (time.perf_counter() - t0)


# -- the Spark side ------------------------------------------------------------------------------------


class Runner:
    def __init__(
        self,
        spark: Any,
        namesrv: str,
        topic: str,
        n: int,
        progress: Path,
        extra: dict[str, str],
        *,
        plain_ceiling: bool = False,
    ):
        self.spark, self.namesrv, self.topic, self.n = spark, namesrv, topic, n
        self.progress = progress
        self.extra = extra
        self.plain_ceiling = plain_ceiling
        self.memory_opts: dict[str, str] = {}

    def source_reader(self, stream: bool) -> Any:
        r = (self.spark.readStream if stream else self.spark.read).format("rocketmq_timed")
        r = r.option("namesrv", self.namesrv).option("topic", self.topic)
        r = r.option("startingOffsets", "earliest")
        for k, v in self.extra.items():
            r = r.option(k, v)
        return r

    def memory_reader(self, stream: bool) -> Any:
        r = (self.spark.readStream if stream else self.spark.read).format("rmq_bench_memory")
        for k, v in self.memory_opts.items():
            r = r.option(k, v)
        return r

    def sample(self, queues: int, size: int) -> None:
        """The ceiling's options: a real message's property map, the body size, the partition count."""
        row = self.source_reader(False).load().limit(1).collect()[0]
        props = dict(row.properties or {})
        parts = self.source_reader(False).load().rdd.getNumPartitions()
        self.memory_opts = {
            "rows": str(self.n), "partitions": str(max(parts, 2)), "size": str(len(row.body) or size),
            "topic": self.topic, "props": json.dumps(props), "plain": "1" if self.plain_ceiling else "0",
        }  # fmt: skip
        self.memory_reader(False).load().limit(1).collect()  # warm the workers up, as sample() did
        print(f"rows: {self.n}; source partitions: {parts}; sample properties: {sorted(props)}", flush=True)

    def batch(self, reader: Any) -> tuple[float, float]:
        t0 = time.time()
        reader.load().write.format("noop").mode("overwrite").save()
        return t0, time.time()

    def available_now(self, reader: Any) -> tuple[float, float]:
        with tempfile.TemporaryDirectory() as ckpt:
            t0 = time.time()
            q = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            t1 = time.time()
            if q.exception() is not None:
                raise SystemExit(f"query failed: {q.exception()}")
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            if rows != self.n:
                raise SystemExit(f"availableNow read {rows} rows, expected {self.n}")
            return t0, t1

    def logged_rows(self, t0: float, t1: float) -> int:
        total = 0
        for line in self.progress.read_text().splitlines():
            t, k = line.split()
            if t0 <= float(t) <= t1 + 1.0:
                total += int(k)
        return total


def start_spark(master: str, progress: Path, *, free_build: bool = False) -> tuple[Any, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ[PROGRESS_ENV] = str(progress)
    os.environ[FREE_BUILD_ENV] = "1" if free_build else "0"
    from pyspark.sql import SparkSession

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(master)
        .appName("rmq_async bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.executorEnv." + PROGRESS_ENV, str(progress))
        .config("spark.executorEnv." + FREE_BUILD_ENV, os.environ[FREE_BUILD_ENV])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TimedSource)
    spark.dataSource.register(MemorySource)
    return spark, time.perf_counter() - t0


def worker_package(spark: Any) -> Path:
    """Where the Python workers import rmq_async from."""
    rdd = spark.sparkContext.parallelize([0], 1)
    (path,) = rdd.map(lambda _: __import__("rmq_async").__file__).collect()
    return Path(path).parent


def byte_compile(package: Path) -> int:
    """Write the ``.pyc`` of every module of ``package`` that has none (or a stale one); how many.

    pip writes them when it installs a wheel, and Python on a package's first import; neither happens
    in a tree under test where bytecode is not written (``PYTHONDONTWRITEBYTECODE``, as on the machine
    of RESULTS round 12, or a read-only checkout). Spark starts a new Python process for every
    streaming query (its source runner), and that process then compiles the package from source,
    about 45 ms of CPU a query, while pyspark's own modules load from their ``.pyc``."""
    import compileall
    import importlib.util

    stale = 0
    for src in package.rglob("*.py"):
        pyc = Path(importlib.util.cache_from_source(str(src)))
        if not pyc.exists() or pyc.stat().st_mtime < src.stat().st_mtime:
            stale += 1
    if stale:
        compileall.compile_dir(str(package), quiet=1)
    return stale


# -- CPU by role ----------------------------------------------------------------------------------------


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by this process tree, by role: the JVM, the Python workers (pyspark's
    daemon and its children), the broker (other children) and this driver process, and the seconds
    every CPU of the machine spent idle (Linux /proc; empty elsewhere). A process that exited is
    counted by its parent once reaped (``cutime``, ``cstime``, ``cminflt``): Spark's streaming
    runner, a new Python process per availableNow query, exits in the round after its query, and
    without that a round's workers could read negative. What the JVM reaped is counted as Python
    workers (Spark starts no other processes here). Also the Python workers' part of it spent in the
    kernel and their minor page faults (memory the C allocator took fresh from the system, a zeroed
    page each)."""
    if not os.path.isdir("/proc"):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    # ppid, CPU s, system s, faults, command, then the same of its reaped children
    table: dict[int, tuple[int, float, float, int, str, float, float, int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as fb:
                cmd = fb.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        utime, stime = int(rest[11]) / tick, int(rest[12]) / tick
        cutime, cstime = int(rest[13]) / tick, int(rest[14]) / tick
        table[int(d)] = (
            int(rest[1]),
            utime + stime,
            stime,
            int(rest[7]),
            cmd,
            cutime + cstime,
            cstime,
            int(rest[8]),
        )
    me = os.getpid()
    out: dict[str, float] = {}

    def add(role: str, secs: float, sys_secs: float, faults: int) -> None:
        out[role] = out.get(role, 0.0) + secs
        if role == "Python workers":
            out[WORKERS_SYS] = out.get(WORKERS_SYS, 0.0) + sys_secs
            out[WORKERS_FAULTS] = out.get(WORKERS_FAULTS, 0.0) + faults

    for pid, (_, secs, sys_secs, faults, cmd, c_secs, c_sys, c_faults) in table.items():
        chain: list[int] = []
        p = pid
        while p in table and p != me and len(chain) < 50:
            chain.append(p)
            p = table[p][0]
        if p != me:
            continue
        cmds = [table[c][4] for c in chain]
        if pid == me:
            role = children = "driver"  # its children are the JVM and the broker, alive all run
        elif "java" in cmd.split(" ")[0]:
            role, children = "JVM", "Python workers"
        elif any("pyspark" in c for c in cmds):
            role = children = "Python workers"
        else:
            role = children = "broker"
        add(role, secs, sys_secs, faults)
        add(children, c_secs, c_sys, c_faults)
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()
    out["machine idle"] = (int(fields[4]) + int(fields[5])) / tick  # idle and iowait, every CPU
    return out


#: keys of :func:`cpu_by_role` that are parts of "Python workers", not roles of their own
WORKERS_SYS, WORKERS_FAULTS = "Python workers: system", "Python workers: minor faults"


def cpu_delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: round(b.get(k, 0.0) - a.get(k, 0.0), 2) for k in sorted(set(a) | set(b))}


# -- figures -------------------------------------------------------------------------------------------


def binned(events: list[tuple[float, int]], t0: float, t1: float, width: float = 0.25) -> list[list[float]]:
    """[[time since t0 (bin centre), rows/s]] for events in [t0, t1]."""
    nbins = max(1, int((t1 - t0) / width) + 1)
    rows = [0] * nbins
    for t, k in events:
        if t0 <= t <= t1:
            rows[min(int((t - t0) / width), nbins - 1)] += k
    return [[round(i * width + width / 2, 3), r / width] for i, r in enumerate(rows)]


def table(runs: dict[str, list[float]], before: dict[str, Any] | None) -> str:
    """Markdown: median and best rows/s per reader, ratios to the ceiling and to lite pull."""

    def med(name: str, src: dict[str, list[float]]) -> float:
        return statistics.median(src[name]) if src.get(name) else 0.0

    lite = med("lite pull", runs)
    lines = [
        "| reader | mode | rows/s (median) | best | ratio to ceiling | ratio to lite pull |"
        + (" before (median) | before ratio to ceiling |" if before else ""),
        "|---|---|---:|---:|---:|---:|" + ("---:|---:|" if before else ""),
    ]
    for mode in ("batch", "availableNow"):
        ceiling = med(f"memory {mode}", runs)
        for who in ("memory", "rocketmq"):
            name = f"{who} {mode}"
            if not runs.get(name):  # not run (--only)
                continue
            m = med(name, runs)
            label = "in-memory ceiling" if who == "memory" else "`rocketmq` source"
            row = (
                f"| {label} | {mode} | {m:,.0f} | {max(runs.get(name) or [0]):,.0f} | "
                f"{f'{m / ceiling:.2f}' if ceiling else '-'} | {f'{m / lite:.2f}' if lite else '-'} |"
            )
            if before:
                b = med(name, before["runs"])
                bc = med(f"memory {mode}", before["runs"])
                row += f" {b:,.0f} | {b / bc if bc else 0:.2f} |"
            lines.append(row)
    if lite:
        best = max(runs["lite pull"])
        row = f"| `LitePullConsumer` alone | - | {lite:,.0f} | {best:,.0f} | - | 1.00 |"
        if before:
            row += f" {med('lite pull', before['runs']):,.0f} | - |"
        lines.append(row)
    return "\n".join(lines)


def round_ratios(runs: dict[str, list[float]], skip: int) -> str:
    """One line per mode: the source's rows/s over the ceiling's of the same round, rounds after the
    first ``skip`` (median and range): the ceiling's speed moves from round to round with the JVM's."""
    out = []
    for mode in ("batch", "availableNow"):
        ceiling, source = runs.get(f"memory {mode}", [])[skip:], runs.get(f"rocketmq {mode}", [])[skip:]
        ratios = [b / a for a, b in zip(ceiling, source, strict=False) if a]
        if ratios:
            out.append(
                f"{mode}: {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, "
                f"{len(ratios)} rounds)"
            )
    return "per-round ratio to the ceiling: " + "; ".join(out) if out else ""


def plot(path: Path, series: list[dict[str, Any]], before: dict[str, Any] | None, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("after" if before else "this run", series)]
    if before:
        panels.append(("before", before["series"]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.6 * len(panels)), squeeze=False)
    colors = {"memory": "tab:gray", "rocketmq": "tab:blue", "lite": "tab:green"}
    for ax, (label, ser) in zip(axes[:, 0], panels, strict=True):
        seen: set[str] = set()
        for s in ser:
            kind = s["name"].split()[0]
            pts = s["points"]
            name = {"memory": "in-memory ceiling", "rocketmq": "rocketmq source", "lite": "lite pull"}[kind]
            ax.plot([p[0] + s["offset"] for p in pts], [p[1] for p in pts], color=colors[kind],
                    label=None if name in seen else name, linewidth=1)  # fmt: skip
            seen.add(name)
            ax.text(s["offset"], max((p[1] for p in pts), default=0), s["name"].split(" r")[0],
                    fontsize=7, rotation=30)  # fmt: skip
        ax.set_title(f"{title} ({label})", fontsize=9)
        ax.set_xlabel("seconds into the run (each query's wall time, back to back)")
        ax.set_ylabel("rows/s (0.25 s bins)")
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def write_section(text: str) -> None:
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    pat = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pat.sub(lambda _: text, old) if pat.search(old) else old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new, encoding="utf-8")


# -- main ----------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, namesrv: str, portal: Any) -> dict[str, Any]:
    topic = args.topic
    if args.preload:
        if args.namesrv:  # --queues queues on every broker, not the 4 a topic is auto-created with
            from rmq_async.bench.cluster import create_topic

            portal.call(create_topic, namesrv, topic, args.queues)
        rate = portal.call(preload, namesrv, topic, args.messages, args.size)
        print(f"preload: {args.messages} x {args.size} B at {rate:,.0f} msgs/s", flush=True)
    n, queues = portal.call(backlog, namesrv, topic)
    if n == 0:
        raise SystemExit(f"topic {topic} is empty")
    extra = dict(kv.split("=", 1) for kv in args.source_opt)
    work = Path(tempfile.mkdtemp(prefix="bench_spark_"))
    progress = work / "progress.log"
    progress.touch()
    spark, started = start_spark(args.master, progress, free_build=args.free_build)
    where = Path(sys.modules["rmq_async"].__file__ or "").parent
    workers = worker_package(spark)
    print(f"session start {started:.1f} s; rmq_async from {where} (Python workers: {workers})", flush=True)
    if workers != where:
        raise SystemExit(
            f"Spark's Python workers import rmq_async from {workers}, this process from {where}: a "
            "worker's sys.path starts with the directory Spark was started in, before PYTHONPATH; run "
            "from a directory without an rmq_async package to compare trees"
        )
    compiled = byte_compile(workers)
    if compiled:
        print(f"byte-compiled {compiled} modules of {workers} (as pip does at install)", flush=True)
    runs: dict[str, list[float]] = {}
    cpus: dict[str, list[dict[str, float]]] = {}
    series: list[dict[str, Any]] = []
    offset = 0.0
    try:
        r = Runner(spark, namesrv, topic, n, progress, extra, plain_ceiling=args.plain_ceiling)
        r.sample(queues, args.size)
        for rnd in range(1 - args.warmup, args.rounds + 1):
            plan: list[tuple[str, Any]] = [
                ("memory batch", lambda: r.batch(r.memory_reader(False))),
                ("rocketmq batch", lambda: r.batch(r.source_reader(False))),
                ("memory availableNow", lambda: r.available_now(r.memory_reader(True))),
                ("rocketmq availableNow", lambda: r.available_now(r.source_reader(True))),
            ]
            for name, run in plan:
                if args.only and name not in args.only:
                    continue
                c0 = cpu_by_role()
                t0, t1 = run()
                if rnd <= 0:  # a warm-up round: not counted
                    print(f"warm-up {name}: {n / (t1 - t0):,.0f} rows/s", flush=True)
                    continue
                cpu = cpu_delta(c0, cpu_by_role())
                cpus.setdefault(name, []).append(cpu)
                logged = r.logged_rows(t0, t1)
                if logged != n:
                    raise SystemExit(f"{name}: the readers yielded {logged} rows, expected {n}")
                rate = n / (t1 - t0)
                runs.setdefault(name, []).append(rate)
                lines = (ln.split() for ln in progress.read_text().splitlines())
                events = [(float(t), int(k)) for t, k in lines]
                times = [t for t, _ in events if t0 <= t <= t1]
                # until the first batch (planning, the first pulls), after the last (the query's end)
                first, tail = (times[0] - t0, t1 - times[-1]) if times else (0.0, 0.0)
                series.append(
                    {"name": f"{name} r{rnd}", "offset": offset, "points": binned(events, t0, t1),
                     "first_batch_s": first, "after_last_batch_s": tail}
                )  # fmt: skip
                offset += t1 - t0 + 0.5
                print(
                    f"round {rnd} {name}: {rate:,.0f} rows/s ({t1 - t0:.2f} s; first batch after "
                    f"{first * 1000:.0f} ms, the end {tail * 1000:.0f} ms after the last); cpu s {cpu}",
                    flush=True,
                )
            if rnd <= 0 or (args.only and "lite pull" not in args.only):
                continue
            log: list[tuple[float, int]] = []
            c0 = cpu_by_role()
            t0 = time.time()
            lite = portal.call(lite_pull, namesrv, topic, n, log)
            t1 = time.time()
            cpus.setdefault("lite pull", []).append(cpu_delta(c0, cpu_by_role()))
            runs.setdefault("lite pull", []).append(lite)
            series.append({"name": f"lite pull r{rnd}", "offset": offset, "points": binned(log, t0, t1)})
            offset += t1 - t0 + 0.5
            print(
                f"round {rnd} lite pull: {lite:,.0f} rows/s ({t1 - t0:.2f} s); cpu s {cpus['lite pull'][-1]}"
            )
    finally:
        spark.stop()
    import pyspark

    return {
        "rows": n, "size": args.size, "queues": queues, "master": args.master, "rounds": args.rounds,
        "warmup": args.warmup,
        "source_opts": extra, "free_build": args.free_build, "plain_ceiling": args.plain_ceiling,
        "session_start_s": started, "runs": runs,
        "cpu": cpus, "series": series,
        "python": platform.python_version(), "pyspark": pyspark.__version__, "cpus": os.cpu_count(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "namesrv": args.namesrv or "embedded (child process)",
    }  # fmt: skip


def _pin(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus`` (processes it starts later inherit them)."""
    if not cpus:
        raise SystemExit("--broker-cpus leaves no CPU for Spark")
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cpus)


def produce_cli(namesrv: str, topic: str, n: int, size: int, batch: int, concurrency: int) -> float:
    """``rmq-async produce`` of ``n`` rows in a child process; its msgs/s."""
    import subprocess

    cmd = [
        sys.executable, "-m", "rmq_async", "produce", "--namesrv", namesrv, "--topic", topic,
        "--count", str(n), "--size", str(size), "--batch", str(batch), "--concurrency", str(concurrency),
        "--quiet",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["failed"]:
        raise SystemExit(f"rmq-async produce: {got['failed']} sends failed")
    return float(got["msgs_per_s"])


def sink_write(
    spark: Any, namesrv: str, topic: str, n: int, size: int, batch: int, concurrency: int
) -> float:
    """The Spark sink writing ``n`` rows like those of ``rmq-async produce`` (key ``k-<i>``, a body
    of ``size`` bytes that starts with it); rows/s over the write job."""
    df = spark.range(n).selectExpr(
        "concat('k-', id) as keys", f"cast(rpad(concat('k-', id, ':'), {size}, 'x') as binary) as body"
    )
    t0 = time.perf_counter()
    (
        df.write.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("batchSize", str(batch))
        .option("sendsInFlight", str(concurrency))
        .mode("append")
        .save()
    )
    return n / (time.perf_counter() - t0)


def write_mode(args: argparse.Namespace) -> None:
    """``--mode write``: the sink against ``rmq-async produce`` with the same pipelining, in turn."""
    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(brokers=1, queues=args.queues, timing=Timing(), process=True)
        with portal.wrap_async_context_manager(cluster):
            ns = cluster.namesrv_addr
            for t in ("BenchSinkCli", "BenchSinkSpark"):
                portal.call(cluster.create_topic, t, args.queues)
            spark, started = start_spark(args.master, Path(tempfile.mkdtemp(prefix="bench_sink_")) / "p.log")
            spark.dataSource.register(RocketMQDataSource)
            print(f"session start {started:.1f} s", flush=True)
            cli: list[float] = []
            sink: list[float] = []
            try:
                sink_write(spark, ns, "BenchSinkSpark", 2000, args.size, args.batch, args.concurrency)  # warm
                for r in range(args.rounds):
                    cli.append(
                        produce_cli(
                            ns, "BenchSinkCli", args.messages, args.size, args.batch, args.concurrency
                        )
                    )
                    sink.append(
                        sink_write(
                            spark,
                            ns,
                            "BenchSinkSpark",
                            args.messages,
                            args.size,
                            args.batch,
                            args.concurrency,
                        )
                    )
                    print(
                        f"round {r + 1}: produce {cli[-1]:,.0f} rows/s, sink {sink[-1]:,.0f} rows/s",
                        flush=True,
                    )
            finally:
                spark.stop()
    mc, ms = statistics.median(cli), statistics.median(sink)
    print(
        f"| writer | rows/s (median) | best |\n|---|---|---|\n"
        f"| `rmq-async produce` | {mc:,.0f} | {max(cli):,.0f} |\n"
        f"| Spark sink | {ms:,.0f} | {max(sink):,.0f} |\n\n"
        f"sink / produce: {ms / mc:.2f} (median of the rounds; per round "
        f"{', '.join(f'{b / a:.2f}' for a, b in zip(cli, sink, strict=True))}); {args.messages:,} rows of "
        f"{args.size} B, --batch {args.batch} --concurrency {args.concurrency}, {args.queues} queues, "
        f"Spark {args.master}, pyspark {__import__('pyspark').__version__}, {platform.machine()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description="rocketmq Spark source vs in-memory ceiling vs lite pull")
    ap.add_argument(
        "--mode",
        choices=("read", "write"),
        default="read",
        help="read: the source (default); write: the sink",
    )
    ap.add_argument("--batch", type=int, default=32, help="--mode write: messages per send request")
    ap.add_argument("--concurrency", type=int, default=16, help="--mode write: send requests in flight")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument(
        "--queues", type=int, default=8, help="the topic's queues (with --namesrv: made by --preload)"
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="N",
        help="rounds of the Spark readers run first and not counted (the JVM keeps compiling for about "
        "10 rounds: a warm JVM makes the ceiling faster)",
    )
    ap.add_argument("--namesrv", help="a running cluster's name server (default: an embedded cluster)")
    ap.add_argument("--topic", default="BenchSpark")
    ap.add_argument("--preload", action="store_true", help="with --namesrv: produce --messages first")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--source-opt", action="append", default=[], metavar="K=V")
    ap.add_argument(
        "--only",
        action="append",
        choices=[f"{w} {m}" for m in ("batch", "availableNow") for w in ("memory", "rocketmq")]
        + ["lite pull"],
        help="run only these readers (repeatable; default: all five, in turn each round)",
    )
    ap.add_argument(
        "--free-build",
        action="store_true",
        help="a bound, not a measurement of the source: its batch builder hands out slices of the "
        "first batch it built, so the source costs its pulls only (what a free batch build would give)",
    )
    ap.add_argument(
        "--plain-ceiling",
        action="store_true",
        help="the ceiling without the source's two Python worker settings (TCP_QUICKACK, the heap "
        "frozen): a trivial source's tasks each wait about 40 ms for their input",
    )
    ap.add_argument("--json", type=Path, help="write the figures (and the plot's series) here")
    ap.add_argument("--before", type=Path, help="figures of an earlier run (its --json) to compare")
    ap.add_argument("--plot", type=Path, help="PNG of rows/s over the run")
    ap.add_argument("--write", action="store_true", help="replace its section in history/bench-spark.md")
    ap.add_argument(
        "--broker-cpus",
        type=lambda v: {int(c) for c in v.split(",")},
        help="the embedded cluster on these CPUs (e.g. 1), this process, Spark and its workers on the "
        "others: a broker that does not share Spark's cores, as on another machine (Linux)",
    )
    ap.add_argument(
        "--max-transfer-count",
        type=int,
        default=32,
        metavar="N",
        help="the embedded broker's maxTransferCountOnMessageInMemory (Java's default 32); with "
        "--source-opt pullBatchSize=N, pulls of N messages",
    )
    args = ap.parse_args()
    if args.mode == "write":
        write_mode(args)
        return
    if args.write and args.free_build:
        ap.error("--free-build is a bound, not the source: it is not written")
    if args.broker_cpus and args.namesrv:
        ap.error("--broker-cpus pins the embedded cluster: pin a --namesrv cluster yourself (taskset)")
    t0 = time.perf_counter()
    with start_blocking_portal() as portal:
        if args.namesrv:
            res = measure(args, args.namesrv, portal)
        else:
            args.preload = True
            everything = os.sched_getaffinity(0)
            if args.broker_cpus:
                _pin(args.broker_cpus)  # the cluster's process is started from here: it inherits these
            cluster = EmbeddedCluster(
                brokers=1,
                queues=args.queues,
                timing=Timing(),
                process=True,
                max_transfer_count=args.max_transfer_count,
                max_transfer_bytes=max(256 << 10, args.max_transfer_count * (args.size + 256)),
            )
            with portal.wrap_async_context_manager(cluster):
                if args.broker_cpus:
                    _pin(everything - args.broker_cpus)  # this process, then the JVM and its workers
                portal.call(cluster.create_topic, args.topic, args.queues)
                res = measure(args, cluster.namesrv_addr, portal)
            res["broker_cpus"] = sorted(args.broker_cpus or ())
            res["max_transfer_count"] = args.max_transfer_count
    res["wall_s"] = time.perf_counter() - t0
    before = json.loads(args.before.read_text()) if args.before else None
    if args.json:
        args.json.write_text(json.dumps(res))
    tab = table(res["runs"], before)
    per_round = round_ratios(res["runs"], 0 if args.warmup else 1)
    if per_round:
        tab += f"\n\n{per_round} (rounds after the first, or every round after --warmup)"
    print(tab)
    if args.plot:
        plot(args.plot, res["series"], before, f"{res['rows']:,} x {res['size']} B, {res['master']}")
    if args.write:
        text = f"""{SECTION}

`python {" ".join(sys.argv)}` (wall time {res["wall_s"]:.0f} s): {res["rows"]:,} messages of {res["size"]} B
on {res["queues"]} queues ({res["namesrv"]}); Spark `{res["master"]}`, `noop` sink, {res["rounds"]} rounds
(median and best); Python {res["python"]}, pyspark {res["pyspark"]}, {res["machine"]}, shared. The
ceiling {"without" if res["plain_ceiling"] else "with"} the source's Python worker settings.

{tab}
"""
        write_section(text)


if __name__ == "__main__":
    main()
