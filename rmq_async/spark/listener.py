"""Progress of ``rocketmq`` streams on the driver: lag per queue, and the group commit without a lag.

Strategy. Spark calls a Python stream reader's ``commit(end)`` (the source's ``commitOffsets``) for a
micro-batch only when it plans the next one (``MicroBatchExecution`` commits the previous batch's
offsets to the sources then), so offsets committed from there trail one micro-batch, and the last
batch of a query is never committed by it. The data source API offers no hook at the end of a
micro-batch; the query progress does: Spark posts it (``onQueryProgress``) after the batch's commit
log is written. :class:`OffsetCommitListener` is a ``StreamingQueryListener`` that writes the batch's
``endOffset`` to the group from there, so the group's offsets are those of the latest completed batch.
It runs in the user's driver process (register it with ``spark.streams.addListener``), which the
source's own reader, living in a Spark-managed Python process, cannot do.

:func:`queue_lag` reads a source's progress: ``latestOffset`` is what the source reported
(``reportLatestOffset``: the queues' max offsets when the batch was planned) and ``endOffset`` where
the batch ended, so their difference is the lag per queue, in messages.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from .bridge import Bridge
from .offsets import from_json, to_json
from .options import QueueKey, parse_options

__all__ = ["OffsetCommitListener", "queue_lag"]

log = logging.getLogger("rmq_async.spark")


def _offsets(value: Any) -> dict[QueueKey, int] | None:
    """A source progress offset (JSON text or dict) in the checkpoint's shape, else None."""
    if value is None:
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else value
        return from_json(data) if isinstance(data, Mapping) else None
    except (ValueError, TypeError, AttributeError):
        return None


def queue_lag(source_progress: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]] | None:
    """Messages behind the queues' max offsets after a micro-batch, per topic, broker and queue id
    (the checkpoint's shape), from one entry of ``query.lastProgress["sources"]``; None when it holds
    no rocketmq offsets."""
    latest = _offsets(source_progress.get("latestOffset"))
    end = _offsets(source_progress.get("endOffset"))
    if latest is None or end is None:
        return None
    lag = {key: max(hi - end.get(key, hi), 0) for key, hi in latest.items()}
    out: dict[str, dict[str, dict[str, int]]] = to_json(lag)
    return out


class OffsetCommitListener(StreamingQueryListener):
    """Commit the end offsets of each completed micro-batch of a ``rocketmq`` stream to ``group``.

    ``spark.streams.addListener(OffsetCommitListener(namesrv, topic, group, query_name="q"))``; with
    ``query_name`` only the query of that name is followed, else every query whose source offsets
    have the rocketmq shape (give each topic its own listener and query name). ``options`` are the
    source's connection options (``accessKey``, ``tls...``, ``requestTimeout``). Failures are logged,
    never raised: the commit only shows the group's lag in RocketMQ's tools. ``committed`` holds the
    last offsets written; :meth:`wait_committed` waits for a batch's.
    """

    def __init__(
        self, namesrv: str, topic: str, group: str, *, query_name: str | None = None, **options: str
    ) -> None:
        self.opts = parse_options(
            {"namesrv": namesrv, "topic": topic, "group": group, **options}, streaming=True
        )
        self.query_name = query_name
        self.committed: dict[QueueKey, int] = {}
        self._bridge: Bridge | None = None
        self._changed = threading.Condition()

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if self.query_name is not None and p.name != self.query_name:
            return
        for source in p.sources:
            end = _offsets(source.endOffset)
            if end:
                self._commit(end)

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None

    def _commit(self, end: dict[QueueKey, int]) -> None:
        try:
            if self._bridge is None:
                self._bridge = Bridge(self.opts)
            self._bridge.commit(end)
        except Exception as exc:
            log.warning(
                "committing offsets of %s to group %s failed: %s", self.opts.subject, self.opts.group, exc
            )
            return
        with self._changed:
            self.committed = dict(end)
            self._changed.notify_all()

    def wait_committed(self, offsets: Mapping[QueueKey, int], timeout: float) -> bool:
        """Wait until the last commit holds ``offsets`` (True), or ``timeout`` seconds (False)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: all(self.committed.get(k) == v for k, v in offsets.items()), timeout
            )

    def close(self) -> None:
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            bridge.close()
