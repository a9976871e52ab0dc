"""Consumer statistics: pull and consume counts, TPS and RT, readable from Python and reported in
GET_CONSUMER_RUNNING_INFO's ``statusTable`` (Java ``ConsumeStatus``)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["ConsumerStats", "TopicStats"]

_WINDOW = 60.0  # seconds of history kept for the rates


@dataclass
class TopicStats:
    pulled: int = 0
    pull_rt_total: float = 0.0
    pulls: int = 0
    consumed_ok: int = 0
    consumed_failed: int = 0
    consume_rt_total: float = 0.0
    consume_runs: int = 0
    samples: deque[tuple[float, int, int, int]] = field(default_factory=deque)

    def sample(self, now: float) -> None:
        self.samples.append((now, self.pulled, self.consumed_ok, self.consumed_failed))
        while self.samples and now - self.samples[0][0] > _WINDOW:
            self.samples.popleft()

    def rates(self, now: float) -> tuple[float, float, float]:
        """(pull TPS, consume OK TPS, consume failed TPS) over the last minute."""
        self.sample(now)
        t0, p0, ok0, f0 = self.samples[0]
        dt = now - t0
        if dt <= 0:
            return 0.0, 0.0, 0.0
        return (self.pulled - p0) / dt, (self.consumed_ok - ok0) / dt, (self.consumed_failed - f0) / dt


class ConsumerStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.sent_back = 0
        #: send-backs the broker moves to the DLQ (reconsume times at the maximum, or delay level -1)
        #: and orderly moves to it (the undecodable ones are in ``undecodable_to_dlq``)
        self.to_dlq = 0
        self.local_retries = 0
        #: messages that could not be decoded (a corrupt or unknown body): each logged at ERROR; push
        #: consumers move them to the DLQ (``undecodable_to_dlq`` done, ``undecodable_retries`` failed
        #: send-backs retried)
        self.undecodable = 0
        self.undecodable_to_dlq = 0
        self.undecodable_retries = 0
        #: undecodable messages passed over without being moved to the DLQ (push: broken framing
        #: that names no message the broker can move, after bounded retries), each at ERROR
        self.undecodable_skipped = 0
        #: pull bodies refused as a whole (broken framing): the connection is closed, the pull retried
        self.broken_bodies = 0
        self.started = time.monotonic()

    def __repr__(self) -> str:
        ts = self.topics.values()
        return (
            f"<ConsumerStats pulled={sum(t.pulled for t in ts)} consumed_ok={sum(t.consumed_ok for t in ts)} "
            f"consumed_failed={sum(t.consumed_failed for t in ts)} sent_back={self.sent_back} "
            f"to_dlq={self.to_dlq} topics={sorted(self.topics)}>"
        )

    def _t(self, topic: str) -> TopicStats:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = TopicStats()
            t.sample(time.monotonic())
        return t

    def pulled(self, topic: str, n: int, rt: float) -> None:
        t = self._t(topic)
        t.pulled += n
        t.pulls += 1
        t.pull_rt_total += rt

    def consumed(self, topic: str, n: int, rt: float, *, ok: bool) -> None:
        t = self._t(topic)
        if ok:
            t.consumed_ok += n
        else:
            t.consumed_failed += n
        t.consume_runs += 1
        t.consume_rt_total += rt

    @property
    def consumed_total(self) -> int:
        return sum(t.consumed_ok + t.consumed_failed for t in self.topics.values())

    def snapshot(self) -> dict[str, dict[str, float]]:
        now = time.monotonic()
        out: dict[str, dict[str, float]] = {}
        for topic, t in self.topics.items():
            pull_tps, ok_tps, failed_tps = t.rates(now)
            out[topic] = {
                "pullTPS": pull_tps,
                "pullRT": 1000 * t.pull_rt_total / t.pulls if t.pulls else 0.0,
                "consumeOKTPS": ok_tps,
                "consumeFailedTPS": failed_tps,
                "consumeRT": 1000 * t.consume_rt_total / t.consume_runs if t.consume_runs else 0.0,
                "consumeFailedMsgs": float(t.consumed_failed),
                "pulled": float(t.pulled),
                "consumedOK": float(t.consumed_ok),
            }
        return out
