"""Offset decisions of the Spark source, as pure functions (no I/O, hypothesis-testable).

* :func:`to_json` / :func:`from_json`: the checkpoint form ``{"topic": {"broker": {"qid": offset}}}``
  (keyed by topic as the Kafka source's; a one-topic query also reads ``{"broker": {"qid": offset}}``,
  its checkpoints before several topics could be read);
* :func:`resolve_start`: the start offset of one queue against the broker's [min, max] range, with
  ``failOnDataLoss`` semantics (fail, or skip ahead / reset and log, like the Kafka source);
* :func:`limit_offsets`: the end offsets of one micro-batch under ``maxRecordsPerTrigger``, shared out
  fairly among the queues that have data;
* :func:`split_range`: one queue's range cut into pieces of at most ``max_records``;
* :func:`split_for_min_partitions`: ranges cut so that there are about ``minPartitions`` of them, each
  queue's share in proportion to its size (Kafka's ``KafkaOffsetRangeCalculator``);
* :func:`trigger_ready`: whether a micro-batch may start under ``minOffsetsPerTrigger`` and
  ``maxTriggerDelay``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ClientError
from .options import QueueKey

__all__ = [
    "DataLossError", "Range", "from_json", "limit_offsets", "resolve_start", "split_for_min_partitions",
    "split_range", "to_json", "trigger_ready",
]  # fmt: skip


class DataLossError(ClientError):
    """Requested messages are gone from the broker (and ``failOnDataLoss`` is true)."""


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets [start, end) of one queue: one Spark input partition."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int


def to_json(offsets: Mapping[QueueKey, int]) -> dict[str, Any]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (topic, broker, qid), off in sorted(offsets.items()):
        out.setdefault(topic, {}).setdefault(broker, {})[str(qid)] = off
    return out


def from_json(data: Mapping[str, Any], topics: Sequence[str] = ()) -> dict[QueueKey, int]:
    """The checkpoint form back; with exactly one topic in ``topics``, the one-topic form of older
    checkpoints (``{"broker": {"qid": offset}}``: numbers two levels down) is read as that topic's."""
    if (
        len(topics) == 1
        and data
        and all(
            isinstance(qs, Mapping) and not any(isinstance(o, Mapping) for o in qs.values())
            for qs in data.values()
        )
    ):
        data = {topics[0]: data}
    return {(t, b, int(q)): int(o) for t, bs in data.items() for b, qs in bs.items() for q, o in qs.items()}


def resolve_start(
    key: QueueKey, start: int, lo: int, hi: int, *, fail_on_data_loss: bool
) -> tuple[int, str | None]:
    """The offset to read ``key`` from, and a warning when messages were skipped.

    ``start < lo``: the messages in between were deleted. ``start > hi``: the queue's offsets went
    back (the topic or the broker's store was recreated), so the checkpoint does not match the data;
    reading restarts at ``lo``. With ``fail_on_data_loss`` both raise :class:`DataLossError`.
    """
    if lo <= start <= hi:
        return start, None
    where = f"queue {key[0]}/{key[1]}/{key[2]}: requested offset {start}"
    if start < lo:
        msg = f"{where} is below the broker's min offset {lo}; {lo - start} messages were deleted"
    else:
        msg = f"{where} is past the broker's max offset {hi} (the queue was recreated?)"
    if fail_on_data_loss:
        raise DataLossError(
            msg + ". Some data may have been lost. Set the option failOnDataLoss to false to skip ahead "
            "and go on reading."
        )
    return lo, msg + f"; reading from {lo} (failOnDataLoss=false)"


def limit_offsets(
    start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_rows: int | None
) -> dict[QueueKey, int]:
    """End offsets of the next micro-batch: ``latest``, or at most ``max_rows`` messages past ``start``
    shared out round robin (each queue gets an equal share; what a short queue leaves goes to the rest)."""
    ends = {k: max(v, start.get(k, v)) for k, v in latest.items()}
    if max_rows is None:
        return ends
    begin = {k: min(start.get(k, v), ends[k]) for k, v in ends.items()}
    avail = {k: ends[k] - begin[k] for k in ends}
    if sum(avail.values()) <= max_rows:
        return ends
    take = dict.fromkeys(ends, 0)
    left = max_rows
    open_keys = sorted(k for k, a in avail.items() if a > 0)
    while left > 0 and open_keys:
        share = max(1, left // len(open_keys))
        nxt = []
        for k in open_keys:
            n = min(share, avail[k] - take[k], left)
            take[k] += n
            left -= n
            if take[k] < avail[k]:
                nxt.append(k)
            if left == 0:
                break
        open_keys = nxt
    return {k: begin[k] + take[k] for k in ends}


def split_range(r: Range, max_records: int | None) -> list[Range]:
    if max_records is None or r.end - r.start <= max_records:
        return [r]
    return [
        Range(r.topic, r.broker_name, r.queue_id, s, min(s + max_records, r.end))
        for s in range(r.start, r.end, max_records)
    ]


def split_for_min_partitions(ranges: list[Range], min_partitions: int | None) -> list[Range]:
    """Non-empty ``ranges``, cut so that there are about ``min_partitions`` (when there are fewer):
    each range gets ``round(size / total * min_partitions)`` (at least one) near-equal pieces, the
    last piece taking what integer division leaves (``KafkaOffsetRangeCalculator.getRanges``)."""
    ranges = [r for r in ranges if r.end > r.start]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out: list[Range] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(round(size / total * min_partitions), 1)
        remaining, start = size, r.start
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            end = min(start + this, r.end)
            if end > start:
                out.append(Range(r.topic, r.broker_name, r.queue_id, start, end))
            start = end
    return out


def trigger_ready(available: int, min_offsets: int | None, since_last: float, max_delay: float) -> bool:
    """A micro-batch may start: ``available`` new messages reach ``min_offsets`` (None: any), or the
    last one started ``max_delay`` seconds ago or more (then whatever is there is read, maybe none)."""
    if min_offsets is None:
        return True
    return available >= min_offsets or since_last >= max_delay
