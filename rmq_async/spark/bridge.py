"""The Spark source's way into the async client: one blocking portal per process, and range reads.

Strategy (STYLE 13): Spark calls are synchronous, so :class:`Bridge` runs an event loop thread
(``anyio.from_thread.start_blocking_portal``) and a :class:`Session` (a stream ``ClientInstance``)
inside it; the driver's metadata calls (queues, min/max offsets, timestamp search, group commits)
go through ``portal.call``. :func:`read_range` is what an executor runs for one input partition: a
portal of its own, plain pulls without suspend from the range's start, messages at or past the end
trimmed, rows handed to Spark as Arrow record batches. Only the name server address is needed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ..client.api import PullStatus
from ..client.instance import ClientInstance, pid_instance_name
from ..config import ClientConfig, Timing
from ..errors import BrokerError, RocketMQError
from ..protocol import headers as H
from ..protocol.bodies import ConsumerData, SubscriptionData
from ..protocol.codes import Perm, PullSysFlag, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.filter import parse_tag_expression
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .offsets import Range, resolve_start
from .options import QueueKey, SourceOptions

__all__ = ["ARROW_BATCH_ROWS", "Bridge", "Session", "arrow_schema", "read_range", "to_arrow"]

log = logging.getLogger("rmq_async.spark")

#: rows per Arrow record batch handed to Spark
ARROW_BATCH_ROWS = 4096


class _GroupHandle:
    """The commit group in one heartbeat (CONSUME_ACTIVELY): how a broker that has not seen the group
    yet creates it (5.x brokers refuse offsets of an unknown group, code 26)."""

    def __init__(self, group: str, topic: str, tags: str) -> None:
        self.group = group
        sub_string, tag_list, codes = parse_tag_expression(tags)
        self._sub = SubscriptionData(
            topic=topic, sub_string=sub_string, tags_set=tag_list, code_set=codes,
            sub_version=int(time.time() * 1000),
        )  # fmt: skip

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            subscription_data_set=[self._sub],
        )

    def subscribed_topics(self) -> set[str]:
        return {self._sub.topic}

    def rebalance_now(self) -> None:
        return None

    async def handle_server_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
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
        sub_string, tags, _ = parse_tag_expression(opts.tags)
        self.sub_string = sub_string
        self.tags = frozenset(tags)
        self._group_made = False

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
        handle = _GroupHandle(self.opts.group, self.opts.topic, self.opts.tags)
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
                expression_type="TAG", bname=r.broker_name,
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

    def commit(self, offsets: dict[QueueKey, int]) -> None:
        self.portal.call(self.session.commit, offsets)


def arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("topic", pa.string()),
            ("broker_name", pa.string()),
            ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()),
            ("msg_id", pa.string()),
            ("keys", pa.string()),
            ("tags", pa.string()),
            ("body", pa.binary()),
            ("born_timestamp", ts),
            ("store_timestamp", ts),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("reconsume_times", pa.int32()),
        ]
    )


def to_arrow(msgs: list[MessageExt], topic: str, broker_name: str) -> Any:
    """One Arrow record batch of ``msgs`` in the source's schema."""
    import pyarrow as pa

    n = len(msgs)
    cols = [
        pa.array([topic] * n, pa.string()),
        pa.array([broker_name] * n, pa.string()),
        pa.array([m.queue_id for m in msgs], pa.int32()),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([m.msg_id for m in msgs], pa.string()),
        pa.array([m.keys for m in msgs], pa.string()),
        pa.array([m.tags for m in msgs], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([m.born_timestamp * 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
        pa.array([m.store_timestamp * 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
        pa.array([list(m.properties.items()) for m in msgs], pa.map_(pa.string(), pa.string())),
        pa.array([m.reconsume_times for m in msgs], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema())


def read_range(opts: SourceOptions, r: Range) -> Iterator[Any]:
    """Executor side: the messages of ``r`` as Arrow record batches, read with plain pulls."""
    if r.end <= r.start:
        return
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Session(opts)) as session:
        offset = r.start
        while offset < r.end:
            msgs, offset = portal.call(session.read_chunk, r, offset, ARROW_BATCH_ROWS)
            if msgs:
                yield to_arrow(msgs, opts.topic, r.broker_name)
