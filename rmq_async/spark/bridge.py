"""The Spark source's way into the client: a blocking portal for the driver, blocking pulls for the
executors.

Strategy (STYLE 13): Spark calls are synchronous, so the driver's :class:`Bridge` runs an event loop
thread (``anyio.from_thread.start_blocking_portal``) and a :class:`Session` (a stream
``ClientInstance``) inside it; the driver's metadata calls (queues, min/max offsets, timestamp search,
group commits) go through ``portal.call``.

Executors: :func:`read_range` reads one input partition. Each Python worker process keeps one event
loop thread (uvloop when installed; a daemon, so a worker never waits for it at exit) and one
:class:`Session` per connection settings, reused by every partition the worker reads and closed at
exit (``atexit``; a worker killed outright just drops its sockets): it finds a queue's broker (the
route, a slave while the master is down). The pulls themselves do not go through it: a reading
thread (kept between partitions) pulls on a plain blocking connection (:mod:`.pipe`,
``pullsInFlight`` pulls in flight, connections cached per broker and reused by the worker's next
partitions) and builds the Arrow record batches (``columns.build_batch``) from the undecoded bodies,
one batch ahead of Spark's thread, which hands them to the JVM (:func:`one_ahead`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import pickle
import queue
import socket
import ssl
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ..client.admin_api import MQAdminAPI
from ..client.instance import ClientInstance, pid_instance_name
from ..config import ClientConfig, Timing
from ..errors import BrokerError, MQClientError, RocketMQError, TopicNotExist
from ..protocol import headers as H
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.codes import Perm, PullSysFlag, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.filter import parse_tag_expression
from ..protocol.mq import MessageQueue
from ..protocol.pull import PullStatus, PullTemplate, pull_request
from ..protocol.stored import MessageExt
from ..transport.tls import client_ssl_context
from .columns import Chunk, arrow_schema, build_batch, to_arrow
from .offsets import Range, resolve_start
from .options import QueueKey, SourceOptions
from .pipe import BrokerSocket, pull_range

__all__ = [
    "ARROW_BATCH_ROWS",
    "READ_THREAD",
    "Bridge",
    "Session",
    "arrow_schema",
    "freeze_worker_heap",
    "one_ahead",
    "quick_ack_spark_connection",
    "read_range",
    "to_arrow",
]

log = logging.getLogger("rmq_async.spark")

#: rows per Arrow record batch handed to Spark (about: whole pulls are grouped); Spark's own default
#: for Arrow batches (``spark.sql.execution.arrow.maxRecordsPerBatch``). Batches of 4,096 rows cost
#: the workers 0.1 s more per 400,000 rows (benchmarks/RESULTS.md, "Spark source at Spark speed",
#: round 9).
ARROW_BATCH_ROWS = 10_000
#: an Arrow batch is handed to Spark at ARROW_BATCH_ROWS rows or this many bytes of pull bodies
ARROW_BATCH_BYTES = 64 << 20
#: requests of one planning call (min and max offsets, timestamp searches, offset commits) a
#: :class:`Session` keeps in flight. The requests are Java's (``MQAdminImpl`` asks one queue at a time:
#: a round trip per queue, twice for the bounds, every micro-batch); sent together they cost about one.
PLANNING_CONCURRENCY = 32

_K = TypeVar("_K")
_V = TypeVar("_V")


async def _each(keys: Sequence[_K], ask: Callable[[_K], Awaitable[_V]]) -> dict[_K, _V]:
    """``ask(key)`` for every key, at most :data:`PLANNING_CONCURRENCY` at once; the answers in the
    keys' order. The first failure is raised as itself (not in an exception group), the other asks
    cancelled."""
    got: dict[_K, _V] = {}
    limiter = anyio.CapacityLimiter(PLANNING_CONCURRENCY)

    async def one(key: _K) -> None:
        async with limiter:
            got[key] = await ask(key)

    try:
        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(one, key)
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        raise exc from None
    return {key: got[key] for key in keys}


#: ``TopicValidator.SYSTEM_TOPIC_SET``: never read by a topicPattern (nor are ``rmq_sys_*`` topics)
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)  # fmt: skip


def _system_topic(topic: str) -> bool:
    """A topic no pattern read takes: system (``TopicValidator.isSystemTopic``), retry, dead letters."""
    return topic in _SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "%RETRY%", "%DLQ%"))


class _GroupHandle:
    """The commit group in one heartbeat (CONSUME_ACTIVELY): how a broker that has not seen the group
    yet creates it (5.x brokers refuse offsets of an unknown group, code 26)."""

    def __init__(self, group: str, topics: Sequence[str], tags: str, sql: str | None = None) -> None:
        self.group = group
        sub_string, tag_list, codes = parse_tag_expression(tags) if sql is None else (sql, [], [])
        version = int(time.time() * 1000)
        self._subs = [
            SubscriptionData(
                topic=topic,
                sub_string=sub_string,
                tags_set=tag_list,
                code_set=codes,
                sub_version=version,
                expression_type="TAG" if sql is None else "SQL92",
            )
            for topic in topics
        ]

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            subscription_data_set=list(self._subs),
        )

    def _subscribed_topics(self) -> set[str]:
        return {sub.topic for sub in self._subs}

    def rebalance_now(self) -> None:
        return None

    async def _handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return None


class Session:
    """Async access to the topics of a query through a stream client instance (use ``async with``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        t = opts.request_timeout
        timing = Timing(request_timeout=t)
        cfg = ClientConfig(
            namesrv_addr=opts.namesrv, timing=timing, stream=True, credentials=opts.credentials, tls=opts.tls,
            namespace=opts.namespace,
        )  # fmt: skip
        self.client = ClientInstance(cfg, instance_name=pid_instance_name())
        #: a topic or group as it goes on the wire (option namespace: ``ns%name``, as a consumer's);
        #: queue keys, rows and checkpoints keep the user's names
        self.wire = cfg.with_namespace
        self.group = self.wire(opts.group)
        sub_string, tags, _ = parse_tag_expression(opts.tags) if opts.sql is None else (opts.sql, [], [])
        self.sub_string = sub_string
        self.tags = frozenset(tags)
        self.expression_type = "TAG" if opts.sql is None else "SQL92"  # option sql: the broker filters
        self._group_made = False
        self._templates: dict[QueueKey, PullTemplate] = {}
        self._ssl: ssl.SSLContext | None = None

    def template(self, r: Range) -> PullTemplate:
        """The pull request template of ``r``'s queue (made once per queue)."""
        key = (r.topic, r.broker_name, r.queue_id)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = self._template(r)
        return template

    def open_socket(self, addr: str) -> BrokerSocket:
        """A new blocking connection to ``addr`` with this client's TLS and ACL settings."""
        tls = self.client.tls
        if tls is not None and self._ssl is None:
            self._ssl = client_ssl_context(tls)
        return BrokerSocket(
            addr,
            timeout=self.opts.request_timeout,
            ssl_context=self._ssl,
            server_hostname=tls.server_hostname if tls is not None else None,
            signer=self.client.signer,
        )

    def _template(self, r: Range) -> PullTemplate:
        """What :meth:`MQClientAPI.pull` would send for this queue (the client's request settings:
        language, version, header type and stream mark), as a template."""
        header = H.PullMessageRequestHeader(
            consumer_group=self.group, topic=self.wire(r.topic), queue_id=r.queue_id, queue_offset=0,
            max_msg_nums=1,
            sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
            commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=self.sub_string,
            expression_type=self.expression_type, bname=r.broker_name,
        )  # fmt: skip
        return PullTemplate(pull_request(self.client.api.settings, header))

    async def __aenter__(self) -> Session:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(None, None, None)

    def _mq(self, key: QueueKey) -> MessageQueue:
        """The queue of ``key`` as the broker names it."""
        return MessageQueue(self.wire(key[0]), key[1], key[2])

    async def _addr(self, key: QueueKey) -> str:
        """The broker's master, or a slave while the master is down (slaves answer pulls and offset
        look-ups; Java consumers read from them then too)."""
        return await self.client.master_or_any_addr(key[1], self.wire(key[0]))

    async def topics(self) -> list[str]:
        """The topics read: those of option topic, or those of the name server's topic list
        (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, on the first name server that answers) whose whole name
        matches option topicPattern, retry, dead-letter and system topics left out; with option
        namespace, the topics of that namespace, by their names without it."""
        o = self.opts
        if o.topic_pattern is None:
            return list(o.topics)
        prefix = f"{self.client.config.namespace}%" if self.client.config.namespace else ""
        admin = MQAdminAPI.sharing(self.client.api)
        last: RocketMQError | None = None
        for ns in self.client.config.namesrv_list():
            try:
                names = await admin.get_all_topic_list(ns, o.request_timeout)
            except RocketMQError as exc:
                last = exc
                continue
            if prefix:
                names = [t[len(prefix) :] for t in names if t.startswith(prefix)]
            return sorted(t for t in set(names) if not _system_topic(t) and o.matches(t))
        raise MQClientError(f"no name server answered the topic list ({o.subject}): {last}") from last

    async def queues(self) -> list[QueueKey]:
        """The readable queues of the topics, from fresh routes. A topic named by option topic that
        does not exist fails the query (:class:`TopicNotExist`); one matched by topicPattern that is
        gone by the time its route is asked is left out."""
        out: list[QueueKey] = []
        for topic in await self.topics():
            try:
                route = await self.client.update_route(self.wire(topic))
            except TopicNotExist:
                if self.opts.topic_pattern is None:
                    raise
                continue
            for qd in route.queue_datas:
                if qd.perm & Perm.READ:
                    out.extend((topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
        return sorted(out)

    async def _addrs(self, keys: Sequence[QueueKey]) -> dict[str, str]:
        """The address of each broker of ``keys`` (one lookup per broker, before requests fan out)."""
        out: dict[str, str] = {}
        for key in keys:
            if key[1] not in out:
                out[key[1]] = await self._addr(key)
        return out

    async def bounds(self, keys: list[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        """(min offset, max offset) of each queue: GET_MIN_OFFSET and GET_MAX_OFFSET of every queue,
        sent together (:data:`PLANNING_CONCURRENCY`)."""
        api, t = self.client.api, self.opts.request_timeout
        addrs = await self._addrs(keys)

        async def ask(job: tuple[QueueKey, bool]) -> int:
            key, lowest = job
            get = api.get_min_offset if lowest else api.get_max_offset
            return await get(addrs[key[1]], self._mq(key), t)

        got = await _each([(key, lowest) for key in keys for lowest in (True, False)], ask)
        return {key: (got[(key, True)], got[(key, False)]) for key in keys}

    async def search_all(self, timestamps: dict[QueueKey, int]) -> dict[QueueKey, int]:
        """:meth:`search` of each queue's timestamp, sent together."""
        await self._addrs(list(timestamps))
        return await _each(sorted(timestamps), lambda key: self.search(key, timestamps[key]))

    async def search(self, key: QueueKey, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms``. The broker answers the nearest
        neighbour, so the message there is looked at and the offset moved past it when it is older."""
        addr = await self._addr(key)
        t = self.opts.request_timeout
        off = await self.client.api.search_offset(addr, self._mq(key), timestamp_ms, t)
        header = H.PullMessageRequestHeader(
            consumer_group=self.group, topic=self.wire(key[0]), queue_id=key[2], queue_offset=off,
            max_msg_nums=1, sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
            commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*",
            expression_type="TAG", bname=key[1],
        )  # fmt: skip
        res = await self.client.api.pull(addr, header, t, broker_name=key[1])
        if res.status is PullStatus.FOUND and res.messages and res.messages[0].store_timestamp < timestamp_ms:
            off = res.messages[0].queue_offset + 1
        return off

    async def commit(self, offsets: dict[QueueKey, int]) -> None:
        """Write ``offsets`` for the group. The driver never stays a member of the group (a Java push
        group of that name would give it queues it never pulls): a broker that does not know the group
        yet (26) is shown it by one heartbeat, undone at once, and the writes it refused are tried
        again. The writes of all queues are sent together (:data:`PLANNING_CONCURRENCY`)."""
        keys = sorted(offsets)
        addrs = await self._addrs(keys)

        async def write(key: QueueKey) -> BrokerError | None:
            h = H.UpdateConsumerOffsetRequestHeader(
                consumer_group=self.group, topic=self.wire(key[0]), queue_id=key[2],
                commit_offset=offsets[key], bname=key[1],
            )  # fmt: skip
            try:
                await self.client.api.update_consumer_offset(
                    addrs[key[1]], h, self.opts.request_timeout, oneway=False
                )
            except BrokerError as exc:
                if exc.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                    raise
                return exc  # the group is unknown to that broker
            return None

        refused = {k: e for k, e in (await _each(keys, write)).items() if e is not None}
        if not refused:
            return
        if self._group_made:
            raise next(iter(refused.values()))
        await self._make_group(sorted({k[0] for k in keys}))
        again = {k: e for k, e in (await _each(list(refused), write)).items() if e is not None}
        if again:
            raise next(iter(again.values()))

    async def _make_group(self, topics: Sequence[str]) -> None:
        self._group_made = True
        wired = [self.wire(t) for t in topics]
        handle = _GroupHandle(self.group, wired, self.opts.tags, self.opts.sql)
        self.client.register_consumer(handle)
        try:
            for topic in wired:
                await self.client.update_route(topic)
            await self.client.send_heartbeat_to_all_brokers()
        finally:
            self.client.unregister_consumer_local(self.group)
            with anyio.move_on_after(self.opts.request_timeout, shield=True):
                await self.client.unregister_everywhere(consumer_group=self.group)

    async def read_chunk(self, r: Range, offset: int, max_rows: int) -> tuple[list[MessageExt], int]:
        """Messages of ``r`` from ``offset`` (up to about ``max_rows``) and the offset to go on from;
        the returned offset is ``r.end`` when the range is done."""
        o = self.opts
        key = (r.topic, r.broker_name, r.queue_id)
        addr = await self._addr(key)
        out: list[MessageExt] = []
        while offset < r.end and len(out) < max_rows:
            header = H.PullMessageRequestHeader(
                consumer_group=self.group, topic=self.wire(r.topic), queue_id=r.queue_id, queue_offset=offset,
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

    def search_all(self, timestamps: dict[QueueKey, int]) -> dict[QueueKey, int]:
        return self.portal.call(self.session.search_all, timestamps)

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
        #: idle broker connections of each session, by broker address
        self.idle: dict[tuple[bytes, str], list[BrokerSocket]] = {}
        #: sessions and idle connections are used by the reading threads (one per partition read at once)
        self.lock = threading.Lock()

    def session(self, opts: SourceOptions) -> tuple[bytes, Session]:
        """The session of these options (and its key)."""
        key = pickle.dumps(opts)
        with self.lock:
            hit = self.sessions.get(key)
            if hit is not None:
                return key, hit[1]
            while len(self.sessions) >= self.MAX_SESSIONS:
                self._close(next(iter(self.sessions)))
            cm = self.portal.wrap_async_context_manager(Session(opts))
            session = cm.__enter__()
            self.sessions[key] = (cm, session)
            return key, session

    def take_socket(self, key: bytes, session: Session, addr: str) -> BrokerSocket:
        """An idle connection of the session to ``addr``, or a new one (the caller owns it)."""
        with self.lock:
            idle = self.idle.get((key, addr))
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    return conn
        return session.open_socket(addr)

    def give_socket(self, key: bytes, conn: BrokerSocket) -> None:
        """Take back a connection with nothing due on it (kept while its session is)."""
        with self.lock:
            if key in self.sessions and not conn.closed:
                self.idle.setdefault((key, conn.addr), []).append(conn)
                return
        conn.close()

    def _close(self, key: bytes) -> None:
        for idle_key in [k for k in self.idle if k[0] == key]:
            for conn in self.idle.pop(idle_key):
                conn.close()
        cm, _ = self.sessions.pop(key)
        try:
            cm.__exit__(None, None, None)
        except Exception as exc:  # closing only
            log.debug("closing a Spark source session: %s", exc)

    def close(self, timeout: float = 5.0) -> None:
        """Close every session and stop the loop (bounded: a hung close does not hold the exit)."""

        def stop() -> None:
            with self.lock:
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


_frozen_in: int | None = None  # the process whose heap freeze_worker_heap froze


def freeze_worker_heap() -> None:
    """Once per process, :func:`gc.freeze`: every object alive now leaves the cyclic collector's
    generations for good (reference counting still frees it).

    Called by the readers after a Python worker's first partition (option ``gcFreeze``). pyspark's
    daemon runs a full ``gc.collect()`` after every task of a reused worker, and each walked the
    110,000-odd objects of the worker's imports (pyspark, pyarrow, pandas, numpy, this package):
    about 45 ms of CPU a task on the benchmark's machine. After the freeze it walks what the worker
    allocated since, whichever source the task reads. The price: objects of that first task that
    end up in a reference cycle are never freed (once per worker process, a bounded amount); a
    process with the collector disabled is left alone."""
    global _frozen_in
    pid = os.getpid()
    if _frozen_in != pid and gc.isenabled():
        _frozen_in = pid
        gc.freeze()


def _module_name(scope: dict[str, Any]) -> str | None:
    """A module's name, also when it runs as ``__main__`` (``python -m pyspark.worker``: Spark's
    workers without its daemon)."""
    name = scope.get("__name__")
    if name == "__main__":
        return getattr(scope.get("__spec__"), "name", None)
    return name if isinstance(name, str) else None


def quick_ack_spark_connection() -> bool:
    """Ask the kernel to acknowledge at once what Spark's JVM sends next on this Python worker's
    connection (``TCP_QUICKACK``, Linux); True when it was set.

    Called by the readers at the end of every partition, and when a task's command unpickles a
    reader (the task's input not read yet). Between two tasks of a reused worker the JVM writes the
    next task's command, then its input; with Nagle's algorithm on its side it holds the input until
    the worker acknowledges the command, and Linux delays that acknowledgement by up to 40 ms. That
    was 40 ms per task before every partition after a worker's first (about 10 % of a 400,000-row
    batch read on 8 queues); set when the command unpickles, the pending acknowledgement goes at
    once, also for a task that follows another source's in the worker. The connection is found from
    pyspark's frames (the file ``pyspark.worker.main`` writes, with or without Spark's daemon); where
    it is not found, not TCP or not Linux, nothing is done."""
    quick_ack = getattr(socket, "TCP_QUICKACK", None)
    if quick_ack is None:
        return False
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "main" and _module_name(frame.f_globals) == "pyspark.worker":
            break
        frame = frame.f_back
    if frame is None:
        return False
    try:
        conn = socket.socket(fileno=os.dup(frame.f_locals["outfile"].fileno()))
    except (KeyError, AttributeError, OSError, ValueError):
        return False
    with conn:  # closes the duplicate only
        if conn.family not in (socket.AF_INET, socket.AF_INET6) or conn.type != socket.SOCK_STREAM:
            return False
        try:
            conn.setsockopt(socket.IPPROTO_TCP, quick_ack, 1)
        except OSError:
            return False
    return True


def read_range(opts: SourceOptions, r: Range) -> Iterator[Any]:
    """Executor side: the messages of ``r`` as Arrow record batches, with ``pullsInFlight`` pulls
    in flight on a connection of this process. A thread of the worker pulls and builds each batch
    while Spark's thread hands the one before to the JVM (:func:`one_ahead`)."""
    if r.end <= r.start:
        return
    yield from one_ahead(_batches(opts, r))


def _batches(opts: SourceOptions, r: Range) -> Generator[Any, None, None]:
    """The batches of ``r``, pulled and built in the calling thread."""
    worker = _this_worker()
    skey, session = worker.session(opts)
    addr = worker.portal.call(session._addr, (r.topic, r.broker_name, r.queue_id))
    bodies = pull_range(
        lambda: worker.take_socket(skey, session, addr),
        lambda conn: worker.give_socket(skey, conn),
        session.template(r),
        r,
        depth=opts.pulls_in_flight,
        batch=opts.pull_batch_size,
        filtered=session.sub_string != "*",
        fail_on_data_loss=opts.fail_on_data_loss,
        warn=log.warning,
    )

    def build(chunks: list[Chunk]) -> Any:
        return build_batch(
            chunks,
            r.topic,
            r.broker_name,
            tags=session.tags,
            properties=opts.include_properties,
            skip_undecodable=opts.on_undecodable == "skip",
        )

    with contextlib.closing(bodies):
        pending: list[Chunk] = []
        rows = nbytes = 0
        for chunks in bodies:
            pending.extend(chunks)
            rows += sum(c.hi - c.lo for c in chunks)  # at most: a pull may answer fewer
            nbytes += sum(len(c.body) for c in chunks)
            if rows >= ARROW_BATCH_ROWS or nbytes >= ARROW_BATCH_BYTES:
                batch = build(pending)
                pending, rows, nbytes = [], 0, 0
                if batch.num_rows:
                    yield batch
        if pending:
            batch = build(pending)
            if batch.num_rows:
                yield batch


_END = object()
#: the name of the threads that make a partition's batches (kept between partitions)
READ_THREAD = "rmq_async-spark-read"


class _Runner:
    """A daemon thread that runs the jobs handed to it one at a time and waits for the next between
    them (a partition's batches are made in one, :func:`one_ahead`).

    Kept between partitions rather than started for each: a new thread each partition began with
    fresh per-thread heaps (Arrow's mimalloc, glibc's arenas), so every partition paid for new pages
    again (the reader outside Spark: peak RSS 283-310 MiB against 244 with kept threads and 227-235
    in one thread; benchmarks/RESULTS.md, "Spark source at Spark speed", round 11)."""

    __slots__ = ("inbox",)

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=READ_THREAD, daemon=True).start()

    def _loop(self) -> None:
        pid = os.getpid()
        while True:
            job, done = self.inbox.get()
            try:
                job()
            except BaseException as exc:  # pragma: no cover - jobs hand their errors over themselves
                log.error("a Spark source reading job failed: %r", exc)
            with _runners_lock:
                if _runners_pid == pid:
                    _idle_runners.append(self)
            done.set()  # idle again first: the caller's next job finds this thread
            del job, done  # nothing of the last partition kept while idle


_idle_runners: list[_Runner] = []
_runners_lock = threading.Lock()
_runners_pid = 0


def _run(job: Callable[[], None], done: threading.Event) -> None:
    """Run ``job`` in an idle kept thread, or in a new one when all are busy (a caller may read two
    partitions at once, interleaved: each needs a thread of its own); ``done`` is set after it."""
    global _runners_pid
    with _runners_lock:
        if _runners_pid != os.getpid():  # none yet, or inherited through a fork: their threads are gone
            _idle_runners.clear()
            _runners_pid = os.getpid()
        runner = _idle_runners.pop() if _idle_runners else None
    (runner or _Runner()).inbox.put((job, done))


def one_ahead(items: Generator[Any, None, None]) -> Generator[Any, None, None]:
    """``items``, made in another thread (:data:`READ_THREAD`) one item ahead: the next item is made
    while the caller works with the last one.

    Spark's thread hands each batch to the JVM with blocking writes (a 10,000-row batch of 1 KiB
    bodies: 10-20 ms of waiting for the JVM to read it); meanwhile the other thread pulls and builds
    the next, and the broker answers its pulls. In a single thread the broker sat idle during every
    write, then the JVM during every pull (benchmarks/RESULTS.md, "Spark source at Spark speed", round
    11). At most two items are made and not yet taken (one waiting, one being made).

    An exception of ``items`` is raised here, after the items before it. Closing this generator
    (Spark's ``limit``, a failed task) stops the other thread once the item it is making is done,
    closes ``items`` there (a partition's pulls still due close its connection) and waits for it."""
    handoff: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()
    done = threading.Event()

    def make() -> None:
        try:
            with contextlib.closing(items):
                for item in items:
                    handoff.put((item, None))
                    if stop.is_set():
                        return
            handoff.put((_END, None))
        except BaseException as exc:  # handed to the caller's thread
            handoff.put((_END, exc))

    _run(make, done)
    try:
        while True:
            item, exc = handoff.get()
            if exc is not None:
                raise exc
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        while not done.is_set():  # take what it still hands over, so that it is never stuck
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.05)
