"""Resetting a group's offsets on a topic, as Java's tools do it.

* By time (``timestamp``, ``to="earliest"``, ``to="latest"``): ``ResetOffsetByTimeCommand``. Earliest
  is timestamp 0 (the broker's search answers each queue's first offset), latest is -1 (the broker
  takes each queue's max offset: ``Broker2Client.resetOffset``, and the 5.x server-side reset). Each
  broker of the topic's route gets INVOKE_BROKER_TO_RESET_OFFSET (222, ``isForce``); it sends
  RESET_CONSUMER_CLIENT_OFFSET (220) to the group's members, which move at once. A broker that answers
  206 CONSUMER_NOT_ONLINE gets the offline path (``resetOffsetByTimestampOld``, per broker as
  ``resetOffsetNewConcurrent`` does it): GET_CONSUME_STATS (208) for the group's queues of the topic
  (or, when it has none, GET_TOPIC_STATS_INFO (202), min offset as the consumer offset), then per queue
  SEARCH_OFFSET_BY_TIMESTAMP (29) or, for -1, GET_MAX_OFFSET (30), and a sync UPDATE_CONSUMER_OFFSET
  (15) when ``force`` or the new offset is not past the committed one. The group's members started
  later read these offsets.
* Explicit offsets (``offsets={mq: offset}``): ``resetOffsetByQueueId`` (5.x ``resetOffsetByTime -q
  -o``): a sync 15 per queue, then, when the broker's answer says 5.0 or later, 222 for that queue
  (``queueId``, ``offset``), which moves its online members. A 4.x broker knows no queue-level reset
  (it would move every queue to its earliest offset), so it gets the 15 alone: stop the group first,
  as the 4.x tools require, or a running member commits its own offset over it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ..protocol import headers as H
from ..protocol.codes import MQ_VERSION_V5_0_0
from ..protocol.mq import MessageQueue
from .session import Session

__all__ = ["reset_by_time", "reset_to_offsets", "timestamp_of"]

_TARGETS = {"earliest": 0, "latest": -1}


def timestamp_of(
    timestamp: int | None, to: str | None, offsets: Mapping[MessageQueue, int] | None
) -> int | None:
    """The timestamp the brokers are asked for (None: explicit offsets); :class:`ConfigError` unless
    exactly one of the three is given, or for a bad value."""
    given = [
        name for name, v in (("timestamp", timestamp), ("to", to), ("offsets", offsets)) if v is not None
    ]
    if len(given) != 1:
        raise ConfigError(f"reset_offset takes exactly one of timestamp, to, offsets (got {given or 'none'})")
    if timestamp is not None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise ConfigError(f"timestamp must be epoch milliseconds >= 0, not {timestamp!r}")
        return timestamp
    if to is not None:
        if to not in _TARGETS:
            raise ConfigError(f"to must be 'earliest' or 'latest', not {to!r}")
        return _TARGETS[to]
    assert offsets is not None
    for mq, off in offsets.items():
        if not isinstance(mq, MessageQueue) or isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise ConfigError(f"offsets maps MessageQueue to an offset >= 0, not {mq!r}: {off!r}")
    return None


async def reset_by_time(
    s: Session, group: str, topic: str, timestamp: int, force: bool
) -> dict[MessageQueue, int]:
    """222 to every broker of the topic, the offline path where the group is not online."""
    route = await s.route(topic)
    queues = {qd.broker_name: qd.read_queue_nums for qd in route.queue_datas}
    out: dict[MessageQueue, int] = {}
    for name, addr in s.selected(route):
        table = await s.api.invoke_broker_to_reset_offset(addr, topic, group, timestamp, force, s.timeout)
        if table is None:
            table = await _reset_offline(s, addr, name, queues.get(name, 0), group, topic, timestamp, force)
        out.update(table)
    return dict(sorted(out.items()))


async def _reset_offline(
    s: Session, addr: str, broker: str, read_queues: int, group: str, topic: str, timestamp: int, force: bool
) -> dict[MessageQueue, int]:
    """``resetOffsetByTimestampOld`` on one broker: the queues' new offsets (those moved)."""
    stats = await s.api.get_consume_stats(addr, group, s.timeout)
    current = {mq: w.consumer_offset for mq, w in stats.offset_table.items() if mq.topic == topic}
    if not current:  # never consumed: the topic's queues, from their min offsets
        topic_stats = await s.api.get_topic_stats(addr, topic, s.timeout)
        for q in range(read_queues):
            mq = MessageQueue(topic, broker, q)
            got = topic_stats.offset_table.get(mq)
            current[mq] = got.min_offset if got is not None else 0
    out: dict[MessageQueue, int] = {}
    for mq, consumer_offset in current.items():
        if timestamp == -1:
            target = await s.api.get_max_offset(addr, mq, s.timeout)
        else:
            target = await s.api.search_offset(addr, mq, timestamp, s.timeout)
        if force or target <= consumer_offset:
            await s.api.commit_offset(addr, _commit(group, mq, target), s.timeout)
            out[mq] = target
    return out


async def reset_to_offsets(
    s: Session, group: str, offsets: Mapping[MessageQueue, int]
) -> dict[MessageQueue, int]:
    """``resetOffsetByQueueId`` for each queue (see the module doc)."""
    out: dict[MessageQueue, int] = {}
    for mq, offset in sorted(offsets.items()):
        addr = await s.client.master_addr(mq.broker_name, mq.topic)
        version = await s.api.commit_offset(addr, _commit(group, mq, offset, bname=False), s.timeout)
        if version >= MQ_VERSION_V5_0_0:
            await s.api.reset_queue_offset(addr, mq, group, offset, s.timeout)
        out[mq] = offset
    return out


def _commit(
    group: str, mq: MessageQueue, offset: int, *, bname: bool = True
) -> H.UpdateConsumerOffsetRequestHeader:
    """The sync 15 (``resetOffsetConsumeOffset`` sets the broker name, ``resetOffsetByQueueId`` not)."""
    return H.UpdateConsumerOffsetRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        commit_offset=offset,
        bname=mq.broker_name if bname else None,
    )
