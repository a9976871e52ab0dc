"""Where a message's time goes, stage by stage: a sampled recorder of one pulled batch in N.

Strategy: off by default (``ConsumerConfig.stage_sample = 0``): the consumer then has no recorder and
each hot-path seam is one ``is not None`` test on a local. On, every Nth pulled batch that carries
messages becomes a :class:`StageSample`, stamped with ``time.perf_counter_ns()`` as it goes:

- ``read``: the pull response was read off the socket (the transport stamps every response frame
  while some recorder wants it: :func:`~rmq_async.transport.connection.stamp_reads`);
- ``decoded``: the pull loop has the decoded answer;
- ``queued``: the batch is handed to the consume service (and held in the process queue, unless
  a plain handler consumes it at once: ``ConcurrentConsumeService.take_now``);
- ``picked``: a consume worker took it (concurrent service);
- ``entered`` / ``returned``: the handler was entered with, and returned from, the batch's first
  message; ``last_entered``: the handler was entered with its last message;
- ``settled``: the first message was acknowledged in the process queue;
- ``next_pull``: the queue's next pull request went out.

The broker's part comes from the message's store timestamp (``store_ms``, the broker's wall clock in
ms), set against the read stamp through the wall clock read at ``decoded``: on one host (the embedded
cluster) the two clocks are the same; across hosts the broker's part carries their offset.

Handler entries are seen through the handler-observer seam (:mod:`.observe`, by message identity,
``watching_ids``), so a call without a sampled message costs one dict test. The samples are kept in
a bounded ring (:attr:`StageRecorder.keep`), the older ones packed as plain ints; :func:`summarize`
turns them into per-interval percentiles. ``picked`` and ``settled`` are the concurrent service's
(an orderly consumer's samples have neither).
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final

from ..protocol.stored import MessageExt

__all__ = ["INTERVALS", "StageObserver", "StageRecorder", "StageSample", "percentile", "summarize"]

#: the reported intervals: name -> (from stage, to stage); ``store`` is the broker's store timestamp
INTERVALS: Final[dict[str, tuple[str, str]]] = {
    "store_to_read": ("store", "read"),
    "read_to_decoded": ("read", "decoded"),
    "decoded_to_queued": ("decoded", "queued"),
    "queued_to_picked": ("queued", "picked"),
    "picked_to_entered": ("picked", "entered"),
    "queued_to_entered": ("queued", "entered"),
    "handler": ("entered", "returned"),
    "returned_to_settled": ("returned", "settled"),
    "read_to_entered": ("read", "entered"),
    "read_to_last_entered": ("read", "last_entered"),
    "store_to_entered": ("store", "entered"),
    "decoded_to_next_pull": ("decoded", "next_pull"),
}
#: a watched message not seen by a handler after this many newer samples is forgotten (its queue
#: was dropped, or its batch failed before the handler)
_WATCH_LIMIT = 4096


#: a sample's fields, in the order they are packed
_FIELDS: Final = (
    "queue_id",
    "count",
    "store_ms",
    "wall_offset_ns",
    "read",
    "decoded",
    "queued",
    "picked",
    "entered",
    "returned",
    "last_entered",
    "settled",
    "next_pull",
)
_WIDTH: Final = len(_FIELDS)
#: the newest samples kept as objects (their stamps still arriving); older ones are packed
_LIVE: Final = 1024


class StageSample:
    """The stage stamps of one sampled pulled batch: ``perf_counter_ns`` values, 0 where not (yet)
    recorded; ``store_ms`` the first message's store timestamp, ``wall_offset_ns`` the wall clock
    minus ``perf_counter_ns`` when the batch was decoded (to set ``store_ms`` against the stamps)."""

    __slots__ = _FIELDS

    def __init__(self, queue_id: int, count: int, store_ms: int, read: int, decoded: int) -> None:
        self.queue_id = queue_id
        self.count = count
        self.store_ms = store_ms
        self.read = read
        self.decoded = decoded
        self.wall_offset_ns = time.time_ns() - decoded
        self.queued = self.picked = self.entered = self.returned = 0
        self.last_entered = self.settled = self.next_pull = 0

    @classmethod
    def unpacked(cls, fields: Sequence[int]) -> StageSample:
        """A sample from its packed fields (:data:`_FIELDS` order)."""
        s = cls.__new__(cls)
        for name, value in zip(_FIELDS, fields, strict=True):
            setattr(s, name, value)
        return s

    def packed(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in _FIELDS)

    def stamp(self, stage: str) -> int:
        """The stage's ``perf_counter_ns`` stamp (0: not recorded); ``store`` on the same clock."""
        if stage == "store":
            return self.store_ms * 1_000_000 - self.wall_offset_ns if self.store_ms > 0 else 0
        value: int = getattr(self, stage)
        return value

    def intervals(self) -> dict[str, float]:
        """The :data:`INTERVALS` this sample has both ends of, in ms."""
        out: dict[str, float] = {}
        for name, (a, b) in INTERVALS.items():
            ta, tb = self.stamp(a), self.stamp(b)
            if ta and tb:
                out[name] = (tb - ta) / 1e6
        return out

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _FIELDS}


class StageRecorder:
    """Samples every ``every``-th pulled batch that carries messages (see the module docstring) and
    keeps the last ``keep`` samples: the newest :data:`_LIVE` as objects, the older ones packed in
    one array of ints (about 100 bytes each, nothing for the garbage collector to walk). One per
    consumer, shared by its runs."""

    __slots__ = ("_live", "_n", "_packed", "_picking", "_settling", "_start", "every", "keep", "watching_ids")

    def __init__(self, every: int, keep: int = 100_000) -> None:
        if every < 1 or keep < 1:
            raise ValueError("every and keep must be >= 1")
        self.every = every
        self.keep = keep
        self._n = 0
        self._live: deque[StageSample] = deque()
        self._packed = array("q")  # a ring of (keep - _LIVE) samples once full, oldest at _start
        self._start = 0
        # keyed by id() and holding the object itself, so an id is never reused while watched
        self._picking: dict[int, tuple[StageSample, object]] = {}
        self._settling: dict[int, tuple[StageSample, object]] = {}
        #: id(message) -> (sample, message, is the batch's first, is its last): the handler observer's
        self.watching_ids: dict[int, tuple[StageSample, MessageExt, bool, bool]] = {}

    @property
    def samples(self) -> list[StageSample]:
        """The samples kept, oldest first."""
        packed, start = self._packed, self._start
        rows = len(packed) // _WIDTH
        out = [
            StageSample.unpacked(packed[i * _WIDTH : (i + 1) * _WIDTH])
            for i in (*range(start, rows), *range(start))
        ]
        return out + list(self._live)

    # -- the pull loop ------------------------------------------------------------------------------

    def pulled(
        self, queue_id: int, msgs: Sequence[MessageExt], read_ns: int, decoded_ns: int
    ) -> StageSample | None:
        """A pulled batch was decoded at ``decoded_ns`` (read at ``read_ns``, 0: not stamped): its
        sample when it is the ``every``-th, else None."""
        n = self._n = self._n + 1
        if n < self.every or not msgs:
            return None
        self._n = 0
        first, last = msgs[0], msgs[-1]
        s = StageSample(queue_id, len(msgs), first.store_timestamp, read_ns, decoded_ns)
        live = self._live
        live.append(s)
        if len(live) > min(_LIVE, self.keep):
            self._pack(live.popleft())
        if len(self.watching_ids) > _WATCH_LIMIT:
            self.watching_ids.clear()
            self._picking.clear()
            self._settling.clear()
        self._picking[id(msgs)] = (s, msgs)
        self._settling[id(first)] = (s, first)
        self.watching_ids[id(first)] = (s, first, True, last is first)
        if last is not first:
            self.watching_ids[id(last)] = (s, last, False, True)
        return s

    def _pack(self, s: StageSample) -> None:
        room = self.keep - min(_LIVE, self.keep)
        if room <= 0:
            return
        packed = self._packed
        if len(packed) < room * _WIDTH:
            packed.extend(s.packed())
            return
        i = self._start * _WIDTH
        packed[i : i + _WIDTH] = array("q", s.packed())
        self._start = (self._start + 1) % room

    # -- the consume service ------------------------------------------------------------------------

    def picked(self, msgs: object) -> None:
        """A consume worker took the pulled batch ``msgs``."""
        got = self._picking.pop(id(msgs), None)
        if got is not None and got[1] is msgs:
            got[0].picked = time.perf_counter_ns()

    def settled(self, ok: Sequence[MessageExt]) -> None:
        """``ok`` (one pulled batch's, ascending) were acknowledged in the process queue."""
        if ok and self._settling:
            first = ok[0]
            got = self._settling.pop(id(first), None)
            if got is not None and got[1] is first:
                got[0].settled = time.perf_counter_ns()

    # -- reading ------------------------------------------------------------------------------------

    def summary(self) -> dict[str, dict[str, float | int | None]]:
        """Per-interval percentiles (ms) of the samples kept (:func:`summarize`)."""
        return summarize(self.samples)

    def clear(self) -> None:
        """Forget the samples kept (e.g. after a warm-up)."""
        self._live.clear()
        self._packed = array("q")
        self._start = 0


class StageObserver:
    """The handler observer that stamps ``entered``, ``returned`` and ``last_entered`` of the sampled
    batches (:class:`~.observe.HandlerObserver`, sampling: only calls with a watched message are
    seen)."""

    after_optional = True

    def __init__(self, recorder: StageRecorder) -> None:
        self.watching_ids = recorder.watching_ids

    def before(self, batch: list[MessageExt]) -> StageSample | None:
        now = time.perf_counter_ns()
        watching = self.watching_ids
        token: StageSample | None = None
        for m in batch:
            got = watching.get(id(m))
            if got is None or got[1] is not m:
                continue
            del watching[id(m)]
            s, _, first, last = got
            if first:
                s.entered = now
                token = s
            if last:
                s.last_entered = now
        return token

    def after(
        self, token: object, batch: list[MessageExt], result: object, error: BaseException | None
    ) -> None:
        if isinstance(token, StageSample):
            token.returned = time.perf_counter_ns()


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1) of sorted ``xs``; None for no data."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(q * len(xs))))]


def summarize(samples: Iterable[StageSample]) -> dict[str, dict[str, float | int | None]]:
    """For each of :data:`INTERVALS`: ``count``, ``p50``, ``p90``, ``p99``, ``p99.9``, ``max`` (ms)
    over the samples that have both of its ends."""
    values: dict[str, list[float]] = {name: [] for name in INTERVALS}
    for s in samples:
        for name, v in s.intervals().items():
            values[name].append(v)
    out: dict[str, dict[str, float | int | None]] = {}
    for name, xs in values.items():
        xs.sort()
        out[name] = {
            "count": len(xs),
            "p50": percentile(xs, 0.50),
            "p90": percentile(xs, 0.90),
            "p99": percentile(xs, 0.99),
            "p99.9": percentile(xs, 0.999),
            "max": xs[-1] if xs else None,
        }
    return out
