"""The soak: an hour of produce + churn + faults, nothing lost, memory and tasks flat.

Strategy. The harness (this process, one asyncio loop) starts the cluster child
(:mod:`rmq_async.bench.soak_cluster`: 2 brokers and a name server, brokers behind cut proxies) and
member children (:mod:`rmq_async.bench.soak_member`), and runs:

* the producer: a steady rate (``rate`` msgs/s of ``size`` bytes); message ``i`` has key ``soak-i``.
  Three quarters go to the orders topic, queue ``k % n`` for the k-th of them, each queue fed by one
  sequential sender (so the send index grows along every queue: what the orderly members check), a
  failed send retried on its queue; one in ``pop_every`` goes to the POP topic (rotating queues,
  retried on another broker by the producer). A message counts as sent once a broker acknowledged it.
* the membership: ``concurrent`` and ``orderly`` members in one group on the orders topic, ``pop``
  members (``client_rebalance=False``) in a POP group on the POP topic (a group pops or pulls a topic,
  not both). One *anchor* member of each kind lives through the whole run (its RSS and task slopes are
  the verdicts: it sees every rebalance the churn causes); the others join, leave gracefully (SIGTERM),
  or are SIGKILLed and replaced, one change every ``change_every`` seconds.
* faults every ``fault_every`` seconds, in turn: every broker connection cut, broker-a restarted on
  its data dir, a name server outage, a cut, broker-b restarted, ...
* accounting: members append what their handlers consumed to their own files; the harness tails them.
  At the end (``duration`` elapsed, or SIGTERM/SIGINT) churn, faults and the producer stop, all members
  stay up for a drain (until every sent message was seen, at most ``drain`` s), then leave. *lost*:
  acknowledged at send time and never consumed by any member; *duplicates*: extra consumptions;
  *order violations*: an orderly member consumed for the first time (no member had consumed it before)
  a message at a lower queue offset than the previous one it consumed of that queue (per process):
  orderly consumption promises the queue's order, and the queue's order is not the send order here (the
  producer's sends run concurrently and a failed send is retried 0.2 s later, after later indexes); a
  lower offset consumed again (a replay from the committed offset after a lease ended or a take-over: in
  order, at least once) counts in *orderly_replays*.
* samples every ``sample_every`` s into ``samples.jsonl``; the verdicts (:func:`verdicts`) and plots
  (:func:`plot_samples`) are computed from them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shlex
import signal
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..client.instance import ClientInstance
from ..config import ClientConfig, ProducerConfig, Timing
from ..producer.producer import Producer
from ..protocol.message import Message
from ..protocol.mq import MessageQueue
from .cluster import create_topic
from .machine import machine_info
from .soak_member import process_sample

__all__ = [
    "KINDS",
    "Soak",
    "SoakConfig",
    "add_soak_arguments",
    "linear_slope",
    "main",
    "percentile",
    "run_cli",
    "run_soak",
    "verdicts",
]

KINDS = ("concurrent", "orderly", "pop")
OK, FAILED = 1, 2


@dataclass
class SoakConfig:
    duration: float = 3600.0
    rate: float = 2000.0
    size: int = 1024
    change_every: float = 60.0
    fault_every: float = 300.0
    sample_every: float = 10.0
    drain: float = 60.0
    queues: int = 4  # per broker, the concurrent and the orderly topic
    pop_queues: int = 2  # per broker, the POP topic
    fail: float = 0.01
    hang: float = 0.001
    work_ms: float = 5.0
    consume_timeout: float = 3.0
    ns_outage: float = 5.0
    max_per_kind: int = 3  # members of one kind, anchor included
    namesrv: str | None = None
    out: str = "soak-results"
    seed: int = 24
    # verdict bounds
    rss_bound_mb_per_10min: float = 1.0
    task_bound_per_10min: float = 10.0
    p99_ratio_bound: float = 1.5

    def timing(self) -> Timing:
        return Timing.fast(consume_timeout=self.consume_timeout)


# -- verdict arithmetic -----------------------------------------------------------------------------


def linear_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs (None with fewer than 3 points)."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of ``values`` (None when empty)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


def verdicts(
    samples: list[dict[str, Any]],
    lat_t: Sequence[float],
    lat_v: Sequence[float],
    duration: float,
    cfg: SoakConfig,
    *,
    lost: int,
    order_violations: int,
) -> dict[str, Any]:
    """Slopes of the anchors' RSS and task counts over the second half (a linear fit, per 10 min, the
    worst anchor), p99 latency of the first and last quarters, and pass/fail against the bounds."""
    half = duration / 2
    worst_rss: float | None = None
    worst_tasks: float | None = None
    per_anchor: dict[str, Any] = {}
    for kind in KINDS:
        name = f"{kind}-anchor"
        pts = [
            (s["elapsed"], s["members"][name])
            for s in samples
            if s["elapsed"] >= half and name in s.get("members", {})
        ]
        xs = [p[0] for p in pts]
        rs = linear_slope(xs, [p[1]["rss_mb"] for p in pts])
        ts = linear_slope(xs, [p[1]["tasks"] for p in pts])
        r10 = None if rs is None else rs * 600
        t10 = None if ts is None else ts * 600
        per_anchor[name] = {"rss_slope_mb_per_10min": r10, "task_slope_per_10min": t10, "points": len(pts)}
        if r10 is not None and (worst_rss is None or r10 > worst_rss):
            worst_rss = r10
        if t10 is not None and (worst_tasks is None or t10 > worst_tasks):
            worst_tasks = t10
    first = [lat for t, lat in zip(lat_t, lat_v, strict=True) if t < duration / 4]
    last = [lat for t, lat in zip(lat_t, lat_v, strict=True) if duration * 3 / 4 <= t < duration]
    p99a, p99b = percentile(first, 99), percentile(last, 99)
    ratio = None if not p99a or p99b is None else p99b / p99a
    v = {
        "rss_slope_mb_per_10min": _r(worst_rss),
        "task_slope_per_10min": _r(worst_tasks),
        "p99_first_quarter_ms": _r(None if p99a is None else p99a * 1000),
        "p99_last_quarter_ms": _r(None if p99b is None else p99b * 1000),
        "p99_ratio": _r(ratio),
        "anchors": per_anchor,
        "rss_flat": worst_rss is not None and worst_rss < cfg.rss_bound_mb_per_10min,
        "tasks_flat": worst_tasks is not None and worst_tasks < cfg.task_bound_per_10min,
        "latency_stable": ratio is not None and ratio <= cfg.p99_ratio_bound,
        "nothing_lost": lost == 0,
        "in_order": order_violations == 0,
        "bounds": {
            "rss_mb_per_10min": cfg.rss_bound_mb_per_10min,
            "tasks_per_10min": cfg.task_bound_per_10min,
            "p99_ratio": cfg.p99_ratio_bound,
        },
    }
    v["passed"] = all(v[k] for k in ("rss_flat", "tasks_flat", "latency_stable", "nothing_lost", "in_order"))
    return v


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# -- members ---------------------------------------------------------------------------------------


@dataclass
class Member:
    name: str
    kind: str
    path: Path
    proc: asyncio.subprocess.Process
    anchor: bool = False
    pos: int = 0
    partial: bytes = b""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    last_sample: dict[str, Any] | None = None
    bye: dict[str, Any] | None = None
    state: str = "starting"  # starting, up, leaving, killed, gone


class Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.mdir = self.out / "members"
        self.mdir.mkdir(exist_ok=True)
        self.timing = cfg.timing()
        tag = f"{os.getpid()}_{int(time.time())}"
        self.topics = {k: f"Soak_{k}_{tag}" for k in KINDS}
        self.groups = {k: f"soak_{k}_{tag}" for k in KINDS}
        self.namesrv = cfg.namesrv or ""
        self.cluster: asyncio.subprocess.Process | None = None
        self.cluster_lock = asyncio.Lock()
        self.stop = asyncio.Event()
        self.stopped_by: str | None = None
        self.members: dict[str, Member] = {}
        self.member_seq = 0
        self.bg: set[asyncio.Task[Any]] = set()
        # the ledger, indexed by send index
        self.status = bytearray()
        self.send_t = array("d")
        self.seen = bytearray()
        self.scheduled = 0
        self.sent_ok = 0
        self.send_failed = 0
        self.send_retries = 0
        self.consumed = 0
        self.first_seen = 0
        self.unknown_keys = 0
        self.order_violations = 0
        self.orderly_replays = 0
        self.violations_by_queue: Counter[str] = Counter()
        self.last_offset: dict[tuple[str, str, int], int] = {}  # (member, broker, queue id) -> offset
        # orderly consumptions at a lower offset than the member's last: (index, received, queue)
        self.order_candidates: list[tuple[int, float, str]] = []
        self.first_recv = array("d")  # by send index: the earliest receive time over all members
        # first deliveries: elapsed at receipt, latency (s)
        self.lat_t = array("f")
        self.lat_v = array("f")
        self.window_lat: list[float] = []
        self.window_consumed = 0
        self.window_sent = 0
        self.events: list[dict[str, Any]] = []
        self.window_events: list[str] = []
        self.samples: list[dict[str, Any]] = []
        self.t0 = 0.0
        self.low = 0  # every index below is settled (seen, or its send failed)
        self.cluster_rss: float | None = None
        self.producer_done = asyncio.Event()
        self.cluster_died = False

    # -- utilities -----------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def event(self, kind: str, /, **kw: Any) -> None:
        e = {"elapsed": round(self.elapsed(), 2), "event": kind, **kw}
        self.events.append(e)
        self.window_events.append(
            kind + ("" if not kw else " " + " ".join(f"{k}={v}" for k, v in kw.items()))
        )
        print(f"[soak {self.elapsed():7.1f}s] {kind} {kw if kw else ''}", file=sys.stderr, flush=True)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        t = asyncio.get_running_loop().create_task(coro)
        self.bg.add(t)
        t.add_done_callback(self.bg.discard)
        return t

    # -- cluster -------------------------------------------------------------------------------

    async def start_cluster(self, data_dir: str) -> None:
        args = [
            sys.executable, "-m", "rmq_async.bench.soak_cluster", "--data-dir", data_dir,
            "--queues", str(self.cfg.queues), "--timing-json", self.timing.model_dump_json(),
        ]  # fmt: skip
        # a session of its own: a Ctrl-C on the terminal reaches the harness only, which stops it
        self.cluster = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        assert self.cluster.stdout is not None
        line = (await asyncio.wait_for(self.cluster.stdout.readline(), 60)).decode().strip()
        if not line.startswith("namesrv="):
            raise RuntimeError(f"soak cluster child did not start (first line {line!r})")
        self.namesrv = line.partition("=")[2]

    async def watch_cluster(self) -> None:
        """The cluster child must outlive the run: if it dies, the run stops (and fails)."""
        assert self.cluster is not None
        code = await self.cluster.wait()
        self.cluster_died = True
        self.event("cluster-died", returncode=code)
        self.stop.set()

    async def cluster_cmd(self, cmd: str, timeout: float = 300) -> str:
        proc = self.cluster
        if proc is None:
            return "no cluster"
        assert proc.stdin is not None and proc.stdout is not None
        async with self.cluster_lock:
            proc.stdin.write(cmd.encode() + b"\n")
            await proc.stdin.drain()
            return (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()

    async def stop_cluster(self) -> None:
        proc, self.cluster = self.cluster, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 120)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def setup_topics(self) -> None:
        from ..admin import set_consume_mode

        for kind in KINDS:
            await create_topic(
                self.namesrv, self.topics[kind], self.cfg.pop_queues if kind == "pop" else self.cfg.queues
            )
        res = await set_consume_mode(self.topics["pop"], self.groups["pop"], "POP", namesrv_addr=self.namesrv)
        if not res or any(code != 0 for code, _ in res.values()):
            raise RuntimeError(f"set-consume-mode POP failed: {res}")

    # -- members -------------------------------------------------------------------------------

    async def start_member(self, kind: str, *, anchor: bool = False) -> Member:
        self.member_seq += 1
        name = f"{kind}-anchor" if anchor else f"{kind}-{self.member_seq}"
        path = self.mdir / f"{name}.log"
        params = {
            "namesrv": self.namesrv,
            "group": self.groups[kind],
            "topic": self.topics[kind],
            "kind": kind,
            "name": f"{name}-{os.getpid()}",
            "out": str(path),
            "timing": self.timing.model_dump_json(),
            "fail": self.cfg.fail,
            "hang": self.cfg.hang,
            "work_ms": self.cfg.work_ms,
            "sample_every": min(5.0, self.cfg.sample_every),
            "seed": self.cfg.seed * 1000 + self.member_seq,
        }
        with open(self.mdir / f"{name}.err", "ab") as err:  # noqa: ASYNC230 - a small local file
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "rmq_async.bench.soak_member", json.dumps(params),
                stdin=asyncio.subprocess.PIPE, stderr=err, start_new_session=True,
            )  # fmt: skip
        m = Member(name, kind, path, proc, anchor=anchor)
        self.members[name] = m
        return m

    async def wait_ready(self, m: Member, timeout: float = 60) -> bool:
        try:
            await asyncio.wait_for(m.ready.wait(), timeout)
        except TimeoutError:
            self.event("member-not-ready", member=m.name)
            return False
        m.state = "up"
        return True

    async def leave(self, m: Member) -> None:
        m.state = "leaving"
        with contextlib.suppress(ProcessLookupError):
            m.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(m.proc.wait(), self.timing.shutdown_timeout + 30)
        except TimeoutError:
            self.event("member-stuck-leaving", member=m.name)
            m.proc.kill()
            await m.proc.wait()
        self.tail(m)
        m.state = "gone"

    async def kill(self, m: Member) -> None:
        m.state = "killed"
        with contextlib.suppress(ProcessLookupError):
            m.proc.send_signal(signal.SIGKILL)
        await m.proc.wait()
        self.tail(m)
        m.state = "gone"

    def live(self, kind: str | None = None) -> list[Member]:
        return [
            m
            for m in self.members.values()
            if m.state in ("starting", "up") and (kind is None or m.kind == kind)
        ]

    # -- the ledger ----------------------------------------------------------------------------

    def tail(self, m: Member) -> None:
        try:
            with open(m.path, "rb") as f:
                f.seek(m.pos)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        m.pos += len(data)
        data = m.partial + data
        *complete, m.partial = data.split(b"\n")
        now = self.elapsed()
        for raw in complete:
            if raw.startswith(b"K "):
                self.consumed_line(m, raw, now)
            elif raw.startswith(b"S "):
                m.last_sample = json.loads(raw[2:])
            elif raw == b"READY":
                m.ready.set()
            elif raw.startswith(b"BYE "):
                m.bye = json.loads(raw[4:])

    def consumed_line(self, m: Member, raw: bytes, now: float) -> None:
        _, key, retry, broker, qid, offset, rt, recv = raw.decode().split()
        if not key.startswith("soak-"):
            self.unknown_keys += 1
            return
        idx = int(key[5:])
        if idx >= len(self.seen):
            self.unknown_keys += 1
            return
        self.consumed += 1
        self.window_consumed += 1
        n = self.seen[idx]
        if n < 255:
            self.seen[idx] = n + 1
        if n == 0:
            self.first_seen += 1
            if rt == "0" and self.send_t[idx] > 0:
                lat = float(recv) - self.send_t[idx]
                self.window_lat.append(lat)
                self.lat_t.append(float(recv) - self.t0)
                self.lat_v.append(lat)
        t = float(recv)
        if t < self.first_recv[idx]:
            self.first_recv[idx] = t
        if m.kind == "orderly" and retry == "0":
            q = (m.name, broker, int(qid))
            off = int(offset)
            prev = self.last_offset.get(q)
            if prev is not None and off < prev:
                # a lower offset than this member's last of the queue: a replay if any member consumed
                # the message earlier (a lease ended, a take-over: in order, at least once), else out of
                # order. Decided by the receive times, not by the order the member files are tailed in
                # (another member's earlier consumption may be read later): provisional until settled
                self.order_candidates.append((idx, t, f"{broker}/{qid}"))
                if n == 0:
                    self.order_violations += 1
                else:
                    self.orderly_replays += 1
            else:
                self.last_offset[q] = off

    def settle_order(self) -> None:
        """Classify the lower-offset consumptions of orderly members by the earliest receive time of
        their message over all members (every member file read to its end)."""
        self.order_violations = self.orderly_replays = 0
        self.violations_by_queue.clear()
        for idx, t, queue in self.order_candidates:
            if self.first_recv[idx] < t:
                self.orderly_replays += 1
            else:
                self.order_violations += 1
                self.violations_by_queue[queue] += 1

    def advance_low(self) -> int:
        """Move the low watermark over settled indices; returns the unsettled count up to the last
        scheduled index (sent and not seen, or not yet sent)."""
        st, seen = self.status, self.seen
        n = self.scheduled
        while self.low < n and (st[self.low] == FAILED or (st[self.low] == OK and seen[self.low])):
            self.low += 1
        return sum(1 for i in range(self.low, n) if st[i] != FAILED and not (st[i] == OK and seen[i]))

    async def tailer(self) -> None:
        while True:
            for m in list(self.members.values()):
                if m.state != "gone":
                    self.tail(m)
            await asyncio.sleep(0.25)  # the member files are polled: a schedule

    # -- the producer --------------------------------------------------------------------------

    async def produce(self, until_stop: asyncio.Event) -> None:
        cfg = self.cfg
        cc = ClientConfig(namesrv_addr=self.namesrv, timing=self.timing)
        producer = Producer(config=ProducerConfig(group=f"soak_producer_{os.getpid()}"), client_config=cc)
        body = b"x" * cfg.size

        async def send_one(idx: int, topic: str, mq: MessageQueue | None) -> None:
            msg = Message(topic, body, keys=f"soak-{idx}")
            deadline = time.monotonic() + 120
            while True:
                self.send_t[idx] = time.monotonic()
                try:
                    await producer.send(msg, queue=mq)
                except Exception as exc:  # any failure: retried until the deadline
                    if time.monotonic() > deadline or self.cluster_died:
                        self.status[idx] = FAILED
                        self.send_failed += 1
                        self.event("send-failed", index=idx, error=type(exc).__name__)
                        return
                    self.send_retries += 1
                    await asyncio.sleep(0.2)  # a retry schedule
                    continue
                self.status[idx] = OK
                self.sent_ok += 1
                self.window_sent += 1
                return

        async def sender(q: asyncio.Queue[int], topic: str, mq: MessageQueue | None) -> None:
            while (idx := await q.get()) >= 0:
                await send_one(idx, topic, mq)

        async with producer:
            lanes: list[list[asyncio.Queue[int]]] = []  # per kind, the queues its messages go to
            senders: list[asyncio.Task[None]] = []
            for kind in KINDS:
                topic = self.topics[kind]
                if kind == "pop":  # any queue, retried on another broker by the producer
                    q: asyncio.Queue[int] = asyncio.Queue()
                    lanes.append([q])
                    senders += [asyncio.create_task(sender(q, topic, None)) for _ in range(4)]
                    continue
                info = await producer.publish_info(topic, refresh=True)
                mqs = sorted(info.queues, key=lambda m: (m.broker_name, m.queue_id))
                qs = [asyncio.Queue[int]() for _ in mqs]  # one sequential sender per queue: in order
                lanes.append(qs)
                senders += [asyncio.create_task(sender(q, topic, mq)) for q, mq in zip(qs, mqs, strict=True)]
            counters = [0] * len(KINDS)
            t_start = time.monotonic()
            while not until_stop.is_set():
                due = int((time.monotonic() - t_start) * cfg.rate)
                while self.scheduled < due:
                    idx = self.scheduled
                    self.status.append(0)
                    self.seen.append(0)
                    self.first_recv.append(math.inf)
                    self.send_t.append(0.0)
                    self.scheduled += 1
                    k = idx % len(KINDS)
                    lane = lanes[k]
                    lane[counters[k] % len(lane)].put_nowait(idx)
                    counters[k] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(until_stop.wait(), 0.01)  # the send schedule
            for lane, kind in zip(lanes, KINDS, strict=True):
                for q in lane:
                    for _ in range(4 if kind == "pop" else 1):
                        q.put_nowait(-1)
            await asyncio.gather(*senders)
        self.producer_done.set()

    # -- schedules -----------------------------------------------------------------------------

    def _change_plan(self, i: int) -> tuple[str, str]:
        actions = ("kill", "join", "leave", "kill", "leave", "join")
        return actions[(i // len(KINDS)) % len(actions)], KINDS[i % len(KINDS)]

    async def one_change(self, i: int) -> None:
        action, kind = self._change_plan(i)
        churnable = [m for m in self.live(kind) if not m.anchor and m.state == "up"]
        if action == "join" and len(self.live(kind)) >= self.cfg.max_per_kind:
            action = "kill"
        if action in ("leave", "kill") and not churnable:
            action = "join"
        if action == "join":
            m = await self.start_member(kind)
            self.event("join", member=m.name)
            await self.wait_ready(m)
        elif action == "leave":
            victim = churnable[0]
            self.event("leave", member=victim.name)
            self.spawn(self.leave(victim))
        else:
            victim = churnable[0]
            await self.kill(victim)
            m = await self.start_member(kind)
            self.event("kill", member=victim.name, replacement=m.name)
            await self.wait_ready(m)

    async def until(self, at: float) -> bool:
        """Wait until ``at`` (elapsed seconds); True when the run was stopped first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, at - self.elapsed()))
        return self.stop.is_set()

    async def churn(self) -> None:
        i = 0
        while not await self.until((i + 1) * self.cfg.change_every):
            await self.one_change(i)
            i += 1

    async def faults(self) -> None:
        if self.cluster is None:
            return
        plan = ("cut", "restart 0", "nsdown", "cut", "restart 1", "nsdown")
        i = 0
        while not await self.until((i + 0.5) * self.cfg.fault_every):
            f = plan[i % len(plan)]
            if f == "nsdown":
                f = f"nsdown {self.cfg.ns_outage}"
            self.event("fault", what=f)
            t0 = time.monotonic()
            ans = await self.cluster_cmd(f)
            self.event("fault-done", what=f, answer=ans, seconds=round(time.monotonic() - t0, 2))
            i += 1

    async def sampler(self) -> None:
        fh = open(self.out / "samples.jsonl", "w")  # noqa: SIM115, ASYNC230 - closed in finally
        try:
            while True:
                await asyncio.sleep(self.cfg.sample_every - (self.elapsed() % self.cfg.sample_every))
                await self.take_sample(fh)
        finally:
            fh.close()

    async def take_sample(self, fh: Any) -> None:
        for m in list(self.members.values()):
            if m.state != "gone":
                self.tail(m)
        if self.cluster is not None and self.cluster.returncode is None:
            with contextlib.suppress(Exception):
                self.cluster_rss = float((await self.cluster_cmd("rss", 10)).split()[-1])
        lat = self.window_lat
        unsettled = self.advance_low()
        members = {
            m.name: {"kind": m.kind, **m.last_sample} for m in self.live() if m.last_sample is not None
        }
        lags: list[int] = [s["lag"] for s in members.values() if s.get("lag") is not None]
        s = {
            "elapsed": round(self.elapsed(), 2),
            "wall": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "harness": process_sample(),
            "cluster_rss_mb": self.cluster_rss,
            "scheduled": self.scheduled,
            "sent_ok": self.sent_ok,
            "send_failed": self.send_failed,
            "send_retries": self.send_retries,
            "consumed": self.consumed,
            "unique": self.first_seen,
            "unsettled": unsettled,
            "send_rate": round(self.window_sent / self.cfg.sample_every, 1),
            "consume_rate": round(self.window_consumed / self.cfg.sample_every, 1),
            "latency_ms": {
                "n": len(lat),
                **{
                    f"p{q}": _r(None if (v := percentile(lat, q)) is None else v * 1000, 2)
                    for q in (50, 90, 99)
                },
                "max": _r(max(lat) * 1000 if lat else None, 2),
            },
            "member_lag": sum(lags) if lags else None,
            "order_violations": self.order_violations,
            "orderly_replays": self.orderly_replays,
            "members": members,
            "events": self.window_events,
        }
        self.window_lat, self.window_consumed, self.window_sent, self.window_events = [], 0, 0, []
        self.samples.append(s)
        fh.write(json.dumps(s) + "\n")
        fh.flush()

    # -- the run -------------------------------------------------------------------------------

    async def dlq_count(self) -> dict[str, int]:
        out: dict[str, int] = {}
        cc = ClientConfig(namesrv_addr=self.namesrv, timing=self.timing)
        async with ClientInstance(cc, instance_name=f"soakdlq{os.getpid()}") as c:
            for g in self.groups.values():
                topic = f"%DLQ%{g}"
                try:
                    route = await c.api.get_route(self.namesrv, topic, 5)
                except Exception:  # no DLQ topic: nothing dead-lettered
                    out[topic] = 0
                    continue
                total = 0
                addrs = {bd.broker_name: bd.select_broker_addr() for bd in route.broker_datas}
                for qd in route.queue_datas:
                    addr = addrs.get(qd.broker_name)
                    if addr is None:
                        continue
                    for q in range(qd.read_queue_nums):
                        mq = MessageQueue(topic=topic, broker_name=qd.broker_name, queue_id=q)
                        total += await c.api.get_max_offset(addr, mq, 5)
                out[topic] = total
        return out

    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if self.stopped_by is None:
                self.stopped_by = sig.name
                self.event("signal", name=sig.name)
                self.stop.set()
            else:  # a second signal: at once
                os._exit(128 + sig.value)

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal, sig)
        data = tempfile.TemporaryDirectory(prefix="soak-data-")
        sampler = tailer = watcher = None
        try:
            self.t0 = time.monotonic()
            if not cfg.namesrv:
                await self.start_cluster(data.name)
            await self.setup_topics()
            tailer = asyncio.create_task(self.tailer())
            watcher = asyncio.create_task(self.watch_cluster()) if self.cluster is not None else None
            for kind in KINDS:
                await self.start_member(kind, anchor=True)
                await self.start_member(kind)
            for m in list(self.members.values()):
                await self.wait_ready(m)
            self.t0 = time.monotonic()  # the run starts with every member up
            self.event("start", namesrv=self.namesrv, members=len(self.members))
            sampler = asyncio.create_task(self.sampler())
            producer = asyncio.create_task(self.produce(self.stop))
            churn = asyncio.create_task(self.churn())
            faults = asyncio.create_task(self.faults())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), cfg.duration)
            self.stop.set()
            run_s = self.elapsed()
            self.event("stopping", run_s=round(run_s, 1))
            await asyncio.gather(churn, faults)
            await producer
            # wait for members that are still starting, then drain with everyone up and no faults
            for m in self.live():
                if m.state == "starting":
                    await self.wait_ready(m)
            t_drain = time.monotonic()
            while time.monotonic() - t_drain < cfg.drain:
                for m in list(self.members.values()):
                    if m.state != "gone":
                        self.tail(m)
                if self.advance_low() == 0:
                    break
                await asyncio.sleep(0.5)  # the drain is polled: member files
            drain_s = time.monotonic() - t_drain
            self.event("drained", seconds=round(drain_s, 1), unsettled=self.advance_low())
            # leave: every member gracefully
            await asyncio.gather(*(self.leave(m) for m in self.live()), *list(self.bg))
            dlq = await self.dlq_count()
        finally:
            for t in (sampler, tailer, watcher):
                if t is not None:
                    t.cancel()
            for m in self.members.values():
                if m.proc.returncode is None:
                    m.proc.kill()
                    await m.proc.wait()
            await self.stop_cluster()
            data.cleanup()
        return self.summarize(run_s, drain_s, dlq)

    def summarize(self, run_s: float, drain_s: float, dlq: dict[str, int]) -> dict[str, Any]:
        self.settle_order()
        st, seen = self.status, self.seen
        sent = lost = dup = 0
        lost_sample: list[int] = []
        for i in range(self.scheduled):
            if st[i] != OK:
                continue
            sent += 1
            n = seen[i]
            if n == 0:
                lost += 1
                if len(lost_sample) < 10:
                    lost_sample.append(i)
            else:
                dup += n - 1
        v = verdicts(
            self.samples,
            self.lat_t,
            self.lat_v,
            run_s,
            self.cfg,
            lost=lost,
            order_violations=self.order_violations,
        )
        kinds = Counter(e["event"] for e in self.events)
        faults = Counter(e["what"].split()[0] for e in self.events if e["event"] == "fault")
        summary = {
            "sent": sent,
            "consumed": self.consumed,
            "unique": sent - lost,
            "lost": lost,
            "duplicates": dup,
            "dlq": sum(dlq.values()),
            "order_violations": self.order_violations,
            "orderly_replays": self.orderly_replays,
            "send_failed": self.send_failed,
            "send_retries": self.send_retries,
            "run_s": round(run_s, 1),
            "drain_s": round(drain_s, 1),
            "rate": self.cfg.rate,
            "changes": {k: kinds[k] for k in ("join", "leave", "kill")},
            "faults": dict(faults),
            "rss_slope_mb_per_10min": v["rss_slope_mb_per_10min"],
            "task_slope_per_10min": v["task_slope_per_10min"],
            "p99_first_quarter_ms": v["p99_first_quarter_ms"],
            "p99_last_quarter_ms": v["p99_last_quarter_ms"],
            "p99_ratio": v["p99_ratio"],
            "rss_flat": v["rss_flat"],
            "tasks_flat": v["tasks_flat"],
            "latency_stable": v["latency_stable"],
            "nothing_lost": v["nothing_lost"],
            "in_order": v["in_order"],
            "passed": v["passed"],
        }
        if self.cluster_died:
            summary["cluster_died"] = True
            summary["passed"] = False
        if self.stopped_by:
            summary["stopped_by"] = self.stopped_by
        doc = {
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "machine": machine_info(),
            "summary": summary,
            "verdicts": v,
            "config": asdict(self.cfg),
            "lost_sample": lost_sample,
            "violations_by_queue": dict(self.violations_by_queue),
            "unknown_keys": self.unknown_keys,
            "dlq": dlq,
            "events": self.events,
            "members": {
                m.name: {"kind": m.kind, "anchor": m.anchor, "state": m.state, "bye": m.bye}
                for m in self.members.values()
            },
        }
        (self.out / "summary.json").write_text(json.dumps(doc, indent=1))
        return summary


# -- plots -----------------------------------------------------------------------------------------


def plot_samples(samples: list[dict[str, Any]], out: Path, title: str = "soak") -> list[str]:
    """One PNG of every sampled series over time (minutes); returns the file names written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    if not samples:
        return []
    t = [s["elapsed"] / 60 for s in samples]
    names = sorted({n for s in samples for n in s["members"]})
    anchors = [n for n in names if n.endswith("-anchor")]
    fig, axes = plt.subplots(4, 2, figsize=(12, 11), sharex=True)
    ax = list(axes.flat)

    def member_series(a: Any, key: str, label: str) -> None:
        for n in names:
            pts = [
                (x, s["members"][n].get(key)) for x, s in zip(t, samples, strict=True) if n in s["members"]
            ]
            pts = [(x, y) for x, y in pts if y is not None]
            if not pts:
                continue
            style = {"lw": 1.6} if n in anchors else {"lw": 0.6, "alpha": 0.5, "color": "grey"}
            a.plot([p[0] for p in pts], [p[1] for p in pts], label=n if n in anchors else None, **style)
        a.set_ylabel(label)

    member_series(ax[0], "rss_mb", "RSS (MB)")
    ax[0].plot(t, [s["harness"]["rss_mb"] for s in samples], "k--", lw=1, label="harness")
    ax[0].legend(fontsize=7)
    member_series(ax[1], "tasks", "asyncio tasks")
    member_series(ax[2], "fds", "open fds")
    member_series(ax[3], "pq", "process queues")
    member_series(ax[4], "cached", "cached messages")
    for q, st in (("p50", "-"), ("p90", "--"), ("p99", ":")):
        ax[5].plot(t, [s["latency_ms"][q] for s in samples], st, label=q)
    ax[5].set_yscale("log")
    ax[5].set_ylabel("end-to-end latency (ms)")
    ax[5].legend(fontsize=7)
    ax[6].plot(t, [s["send_rate"] for s in samples], label="sent/s")
    ax[6].plot(t, [s["consume_rate"] for s in samples], label="consumed/s")
    ax[6].set_ylabel("msgs/s")
    ax[6].legend(fontsize=7)
    unsent = [s["scheduled"] - s["sent_ok"] - s["send_failed"] for s in samples]
    ax[7].plot(t, unsent, label="not sent yet (producer behind)")
    ax[7].plot(
        t, [s["unsettled"] - u for s, u in zip(samples, unsent, strict=True)], label="sent, not consumed"
    )
    ax[7].plot(t, [s["member_lag"] or 0 for s in samples], label="members' lag")
    ax2 = ax[7].twinx()
    ax2.plot(t, [s["loadavg"][0] for s in samples], "r:", lw=0.8, label="load 1 min")
    ax2.set_ylabel("load average", color="r")
    ax[7].set_ylabel("messages")
    ax[7].legend(fontsize=7, loc="upper left")
    for a in axes[-1]:
        a.set_xlabel("minutes")
    for s, x in zip(samples, t, strict=True):
        for e in s["events"]:
            if e.startswith("fault "):
                for a in ax:
                    a.axvline(x, color="r", lw=0.4, alpha=0.4)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    name = "soak.png"
    fig.savefig(out / name, dpi=70)
    plt.close(fig)
    return [name]


# -- command line ----------------------------------------------------------------------------------


def add_soak_arguments(parser: argparse.ArgumentParser) -> None:
    """The soak's own options (``--duration``, ``--rate``, ``--out``, ``--namesrv`` are shared)."""
    parser.add_argument(
        "--change-every",
        type=float,
        default=60.0,
        metavar="S",
        help="soak: seconds between membership changes (60)",
    )
    parser.add_argument(
        "--fault-every", type=float, default=300.0, metavar="S", help="soak: seconds between faults (300)"
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=60.0,
        metavar="S",
        help="soak: at most this long to drain at the end (60)",
    )


def _one_rate(rate: float | list[float] | None) -> float:
    """``--rate``: one figure (``rmq-async bench`` parses it as a list), default 2000 msgs/s."""
    if rate is None:
        return 2000.0
    return rate[0] if isinstance(rate, list) else rate


def config_from_args(args: argparse.Namespace) -> SoakConfig:
    return SoakConfig(
        duration=args.duration if args.duration is not None else 3600.0,
        rate=_one_rate(args.rate),
        size=getattr(args, "size", 1024),
        change_every=args.change_every,
        fault_every=args.fault_every,
        drain=args.drain,
        namesrv=args.namesrv,
        out=args.out,
    )


def run_soak(cfg: SoakConfig, *, plots: bool = True) -> dict[str, Any]:
    """Run a soak; writes ``samples.jsonl``, ``summary.json``, ``soak.png`` under ``cfg.out``."""
    soak = Soak(cfg)
    summary = asyncio.run(soak.run())
    if plots:
        v = summary
        title = (
            f"soak: {cfg.rate:.0f} msgs/s x {cfg.size} B, {summary['run_s'] / 60:.0f} min, change every "
            f"{cfg.change_every:.0f} s, fault every {cfg.fault_every:.0f} s; lost {v['lost']}, "
            f"dup {v['duplicates']}, order violations {v['order_violations']}"
        )
        plot_samples(soak.samples, soak.out, title)
    return summary


def run_cli(args: argparse.Namespace) -> int:
    """``rmq-async bench soak``: run it, print the one-line JSON summary; 0 when every verdict passed."""
    cfg = config_from_args(args)
    summary = run_soak(cfg, plots=not getattr(args, "no_plots", False))
    print(json.dumps(summary), flush=True)
    return 0 if summary["passed"] else 1


def report(out: Path) -> str:
    """The Markdown figures of a finished soak (``summary.json`` and ``samples.jsonl`` under ``out``)."""
    doc = json.loads((out / "summary.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line]
    s, v, cfg = doc["summary"], doc["verdicts"], doc["config"]
    b = v["bounds"]
    load = [x["loadavg"][0] for x in samples]
    rows = [
        ("sent (acknowledged)", f"{s['sent']:,}"),
        ("consumed (handler calls that succeeded)", f"{s['consumed']:,}"),
        ("lost", f"**{s['lost']}**"),
        ("duplicates", f"{s['duplicates']:,}"),
        ("dead-lettered", f"{s['dlq']}"),
        ("order violations (orderly members)", f"**{s['order_violations']}**"),
        ("orderly replays (lower offset consumed again)", f"{s.get('orderly_replays', '-')}"),
        ("sends retried / failed", f"{s['send_retries']} / {s['send_failed']}"),
        ("run / drain (s)", f"{s['run_s']} / {s['drain_s']}"),
        ("membership changes", ", ".join(f"{k} {n}" for k, n in s["changes"].items())),
        ("faults", ", ".join(f"{k} {n}" for k, n in s["faults"].items())),
        ("load average (1 min) min / median / max", f"{min(load):.1f} / {sorted(load)[len(load) // 2]:.1f} / "
         f"{max(load):.1f}"),
    ]  # fmt: skip
    lines = ["| figure | value |", "|---|---:|", *(f"| {k} | {val} |" for k, val in rows)]
    lines += [
        "",
        "| verdict | measured | bound | passed |",
        "|---|---:|---:|---|",
        f"| RSS slope, 2nd half (worst anchor) | {s['rss_slope_mb_per_10min']} MB / 10 min | "
        f"< {b['rss_mb_per_10min']} | {v['rss_flat']} |",
        f"| task-count slope, 2nd half (worst anchor) | {s['task_slope_per_10min']} / 10 min | "
        f"< {b['tasks_per_10min']} | {v['tasks_flat']} |",
        f"| p99 latency, last / first quarter | {s['p99_last_quarter_ms']} / {s['p99_first_quarter_ms']} ms "
        f"= {s['p99_ratio']} | <= {b['p99_ratio']} | {v['latency_stable']} |",
        f"| lost | {s['lost']} | 0 | {v['nothing_lost']} |",
        f"| order violations | {s['order_violations']} | 0 | {v['in_order']} |",
        "",
        "| anchor | RSS slope (MB / 10 min) | task slope (/ 10 min) | samples |",
        "|---|---:|---:|---:|",
    ]
    for name, a in v["anchors"].items():
        lines.append(
            f"| {name} | {_r(a['rss_slope_mb_per_10min'])} | {_r(a['task_slope_per_10min'])} "
            f"| {a['points']} |"
        )
    lines += [
        "",
        f"config: `{json.dumps({k: cfg[k] for k in ('rate', 'size', 'change_every', 'fault_every')})}`",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="soak", description="an hour of produce, churn and faults: nothing lost, memory and tasks flat"
    )
    ap.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="run time (3600)")
    ap.add_argument("--rate", type=float, default=None, help="msgs/s offered (2000)")
    ap.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    ap.add_argument("--namesrv", help="a running cluster instead of the embedded one (no faults then)")
    ap.add_argument("--out", default="soak-results", help="output directory")
    ap.add_argument("--report", metavar="DIR", help="print the Markdown figures of a finished soak in DIR")
    ap.add_argument("--plot", metavar="DIR", help="(re)draw DIR/soak.png from DIR/samples.jsonl")
    add_soak_arguments(ap)
    args = ap.parse_args(argv)
    if args.report:
        print(report(Path(args.report)))
        return 0
    if args.plot:
        out = Path(args.plot)
        samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x]
        s = json.loads((out / "summary.json").read_text())["summary"]
        title = (
            f"soak: {s['rate']:.0f} msgs/s, {s['run_s'] / 60:.0f} min; lost {s['lost']}, "
            f"duplicates {s['duplicates']}, order violations {s['order_violations']}"
        )
        print(plot_samples(samples, out, title))
        return 0
    return run_cli(args)


if __name__ == "__main__":
    sys.exit(main())
