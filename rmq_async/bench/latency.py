"""Scenarios with a paced producer, run inside a worker process: end-to-end latency and rebalance
under load; plus the two helper roles they exec (the pacer and the extra group member).

Strategy: latency runs the consumer in the worker and the paced producer in its own exec'd child
(``worker pace``) so the producer does not steal the consumer's loop; the handler records, per
message, wall clock minus ``store_timestamp`` (broker clock) and minus ``born_timestamp`` (producer
clock; same host). Rebalance runs member A and a paced producer in the worker and execs member B
(``worker member``), which reports its events as JSON lines; closing B's stdin makes B leave
gracefully. Times are measured on the wall clock that both processes share.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from array import array
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from ..consumer.push import PushConsumer
from ..consumer.stages import summarize
from ..consumer.types import ConsumeContext
from ..producer.producer import Producer
from ..protocol.message import Message
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .cluster import create_topic
from .machine import peak_rss_mb, percentile
from .scenarios import group_name

__all__ = ["latency", "member", "pace", "rebalance"]

_MAX_SAMPLES = 20_000  # latency samples kept in the result file (evenly thinned)


def _worker_cmd(role: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "rmq_async.bench.worker", role, json.dumps(params)]


async def _lines(proc: anyio.abc.Process) -> Any:
    """Yield stdout lines of ``proc`` parsed as JSON."""
    assert proc.stdout is not None
    buf = ""
    async for chunk in TextReceiveStream(proc.stdout):
        buf += chunk
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            if line.strip():
                yield json.loads(line)


#: the pacer's requests in flight at most: past it, the pacer falls behind (its offered rate says so)
#: instead of piling up requests that time out together when the broker lags, or that queue ahead
#: of the consumer's pulls in the broker (which would count as the broker's part of the latency)
_PACE_IN_FLIGHT = 8
#: messages per send request at most (one tick's worth at 20,000 msgs/s takes two)
_PACE_BATCH = 64


async def pace(p: dict[str, Any]) -> dict[str, Any]:
    """Send ``rate`` msgs/s for ``duration`` s: each 5 ms tick sends what is due, in requests of at
    most :data:`_PACE_BATCH` messages (``send_batch``; one message uses ``send``), without waiting for
    answers but with at most :data:`_PACE_IN_FLIGHT` requests in flight."""
    rate, duration, topic = float(p["rate"]), float(p["duration"]), p["topic"]
    body = b"x" * p["size"]
    tick = 0.005
    total = int(rate * duration)
    sent = failed = acked = 0
    room = anyio.Semaphore(_PACE_IN_FLIGHT)
    async with Producer(f"bench_pacer_{p['tag']}", namesrv_addr=p["namesrv"]) as prod:
        await prod.queues(topic)

        async def one(k: int) -> None:
            nonlocal failed, acked
            try:
                if k == 1:
                    await prod.send(Message(topic, body))
                else:
                    await prod.send_batch([Message(topic, body) for _ in range(k)])
                acked += k
            except Exception:
                failed += k
            finally:
                room.release()

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            i = 0
            while sent < total:
                due = min(total, int(rate * (i * tick))) - sent
                while due > 0:
                    k = min(_PACE_BATCH, due)
                    await room.acquire()  # (released by the request's task)
                    tg.start_soon(one, k)
                    sent += k
                    due -= k
                i += 1
                delay = t0 + i * tick - time.perf_counter()
                if delay > 0:
                    await anyio.sleep(delay)  # the pacing clock
            offered_s = time.perf_counter() - t0
    return {"sent": sent, "acked": acked, "failed": failed, "offered_msgs_per_s": sent / offered_s}


def _thinned(xs: Sequence[float]) -> list[float]:
    """``xs`` sorted, at most :data:`_MAX_SAMPLES` of them evenly spaced, rounded (for the CDF)."""
    xs = sorted(xs)
    step = max(1, len(xs) // _MAX_SAMPLES)
    return [round(x, 3) for x in xs[::step]]


def _quantiles(xs: Sequence[float]) -> dict[str, float | None]:
    s = sorted(xs)
    return {
        "p50": percentile(s, 0.50),
        "p90": percentile(s, 0.90),
        "p99": percentile(s, 0.99),
        "p99.9": percentile(s, 0.999),
        "max": s[-1] if s else None,
    }


class _GcPauses:
    """The collector's pauses during a run (``gc.callbacks``): count, the longest, the total, and how
    many were of the oldest generation; to tell a collection from the machine's scheduling in a
    latency tail."""

    def __init__(self) -> None:
        self.count = self.full = self.over_1ms = 0
        self.longest = self.total = 0.0
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
            return
        took = (time.perf_counter() - self._t) * 1000.0
        self.count += 1
        self.full += info.get("generation") == 2
        self.total += took
        self.over_1ms += took > 1.0
        self.longest = max(self.longest, took)

    def result(self) -> dict[str, Any]:
        return {
            "collections": self.count,
            "gen2": self.full,
            "over_1ms": self.over_1ms,
            "max_ms": self.longest,
            "total_ms": self.total,
        }


async def latency(p: dict[str, Any]) -> dict[str, Any]:
    """A consumer on a fresh topic; a paced producer child offers ``rate`` msgs/s for ``duration`` s.
    The consumer's stage recorder samples every ``stage_sample``-th pulled batch (default every one):
    ``stages`` holds the per-interval percentiles (:func:`rmq_async.consumer.stages.summarize`),
    ``client_over_100ms`` the sampled batches whose socket read -> handler took longer."""
    topic = f"BenchLat_{group_name('t')}"
    await create_topic(p["namesrv"], topic, p["queues"])
    # (arrays of doubles: no float object per message for the collector to count, or to pause over)
    born = array("d")
    store = array("d")
    measuring = False
    target = int(p["rate"] * p["duration"])  # lowered to what the broker acknowledged
    done = anyio.Event()
    warm = anyio.Event()
    warm_seen: set[int] = set()
    pauses = _GcPauses()

    def record(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        now = time.time() * 1000.0
        if not measuring:
            warm_seen.update(m.queue_id for m in msgs)
            if len(warm_seen) >= p["queues"]:
                warm.set()
            return
        for m in msgs:
            born.append(now - m.born_timestamp)
            store.append(now - m.store_timestamp)
        if len(born) >= target:
            done.set()

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        record(msgs, ctx)

    consumer = PushConsumer(
        group_name("lat"),
        namesrv_addr=p["namesrv"],
        # --plain-handler: called by the pulling task, no hand-off to a consume worker
        handler=record if p.get("plain_handler") else handler,
        subscriptions={topic: "*"},
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        stage_sample=p.get("stage_sample", 1),
    )
    async with consumer, Producer(f"bench_warm_{group_name('p')}", namesrv_addr=p["namesrv"]) as prod:
        with anyio.fail_after(60):
            while len(consumer.assignment()) < p["queues"]:
                await consumer.wait_rebalanced()
            # warm-up: one message per queue, seen before the paced run starts
            for mq in (await prod.publish_info(topic)).queues:
                await prod.send(Message(topic, b"w"), queue=mq)
            await warm.wait()
        stages = consumer.stages
        if stages is not None:
            stages.clear()
        if p.get("gc_freeze"):
            # what a latency-sensitive application may do once started: what lives now (modules,
            # classes, the consumer's long-lived parts) leaves the collector, so a full collection
            # walks only what came later (see docs/guides/consuming.md)
            gc.collect()
            gc.freeze()
        measuring = True
        gc.callbacks.append(pauses)
        params = {k: p[k] for k in ("namesrv", "rate", "duration", "size")}
        params.update(topic=topic, tag=group_name("x"))
        t0 = time.perf_counter()
        async with await anyio.open_process(_worker_cmd("pace", params), stderr=None) as proc:
            pacer: dict[str, Any] = {}
            async for ev in _lines(proc):
                pacer = ev
        target = int(pacer.get("acked", target))
        if len(born) >= target:
            done.set()
        with anyio.move_on_after(60):  # a message lost on the way is reported, not waited for
            await done.wait()
        seconds = time.perf_counter() - t0
        gc.callbacks.remove(pauses)
    samples = stages.samples if stages is not None else []
    client = [v for s in samples if (v := s.intervals().get("read_to_entered")) is not None]
    return {
        "msgs_per_s": len(born) / seconds if seconds > 0 else None,
        "target_rate": p["rate"],
        "offered_msgs_per_s": pacer.get("offered_msgs_per_s"),
        "pacer": pacer,
        "messages": len(born),
        "missing": max(0, target - len(born)),
        "p50_ms": percentile(store, 0.50),
        "p99_ms": percentile(store, 0.99),
        "born_p50_ms": percentile(born, 0.50),
        "born_p99_ms": percentile(born, 0.99),
        "max_ms": max(store, default=None),
        "store_to_handler": _quantiles(store),
        "stages": summarize(samples),
        "stage_sample": p.get("stage_sample", 1),
        "gc_freeze": bool(p.get("gc_freeze")),
        "plain_handler": bool(p.get("plain_handler")),
        "client_over_100ms": sum(1 for v in client if v > 100.0),
        "gc": pauses.result(),
        "samples_store_ms": _thinned(store),
        "samples_born_ms": _thinned(born),
        "samples_client_ms": _thinned(client),
        "peak_rss_mb": peak_rss_mb(),
    }


async def member(p: dict[str, Any]) -> dict[str, Any]:
    """Extra group member: prints ``started``, ``assigned``, ``covered`` (consumed from every queue
    it owns), and on stdin EOF ``stopping``/``stopped``; its result is its consumed count."""
    consumed: set[int] = set()
    owned: set[int] = set()
    count = 0
    covered = False

    def emit(ev: str, **kw: Any) -> None:
        print(json.dumps({"ev": ev, "t": time.time(), **kw}), flush=True)

    def check() -> None:
        nonlocal covered
        if not covered and owned and owned <= consumed:
            covered = True
            emit("covered", queues=sorted(owned))

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal count
        count += len(msgs)
        consumed.add(ctx.mq.queue_id)
        check()

    def assigned(topic: str, mqs: set[MessageQueue]) -> None:
        owned.update(mq.queue_id for mq in mqs)
        emit("assigned", queues=sorted(owned))
        check()

    def revoked(topic: str, mqs: set[MessageQueue]) -> None:
        owned.difference_update(mq.queue_id for mq in mqs)

    emit("starting")
    consumer = PushConsumer(
        p["group"],
        namesrv_addr=p["namesrv"],
        handler=handler,
        subscriptions={p["topic"]: "*"},
        on_assigned=assigned,
        on_revoked=revoked,
    )
    async with consumer:
        emit("started")
        stdin = anyio.wrap_file(sys.stdin.buffer)
        while await stdin.read(1):
            pass
        emit("stopping")
    emit("stopped")
    return {"consumed": count}


async def rebalance(p: dict[str, Any]) -> dict[str, Any]:
    """Member A consumes a paced topic; member B joins (time until B consumes every queue it got),
    then leaves (time until A consumes every queue again)."""
    queues = p["queues"]
    topic = f"BenchReb_{group_name('t')}"
    group = group_name("reb")
    await create_topic(p["namesrv"], topic, queues)
    since = float("inf")
    fresh: set[int] = set()
    all_again = anyio.Event()
    revoked_at: list[float] = []

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        if time.time() >= since:
            fresh.add(ctx.mq.queue_id)
            if len(fresh) >= queues:
                all_again.set()

    def revoked(topic: str, mqs: set[MessageQueue]) -> None:
        revoked_at.append(time.time())

    a = PushConsumer(
        group, namesrv_addr=p["namesrv"], handler=handler, subscriptions={topic: "*"}, on_revoked=revoked
    )
    rate = p.get("rate") or 200.0 * queues
    out: dict[str, Any] = {"rate": rate}
    async with a, Producer(f"bench_reb_{group}", namesrv_addr=p["namesrv"]) as prod:
        await prod.queues(topic)

        async def produce() -> None:
            tick, i, t0 = 0.01, 0, time.perf_counter()
            async with anyio.create_task_group() as ptg:
                while True:
                    for _ in range(max(1, round(rate * tick))):
                        ptg.start_soon(prod.send, Message(topic, b"x" * p["size"]))
                    i += 1
                    await anyio.sleep(max(0.0, t0 + i * tick - time.perf_counter()))  # pacing clock

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            with anyio.fail_after(60):  # steady state: A consumes every queue
                since = time.time()
                await all_again.wait()
            params = {"namesrv": p["namesrv"], "group": group, "topic": topic}
            async with await anyio.open_process(_worker_cmd("member", params), stderr=None) as proc:
                events: dict[str, float] = {}
                with anyio.fail_after(120):
                    async for ev in _lines(proc):
                        events.setdefault(ev["ev"], ev["t"])
                        if ev["ev"] == "covered":
                            out["b_queues"] = ev["queues"]
                            break
                out["join_s"] = events["covered"] - events["starting"]
                out["b_startup_s"] = events["started"] - events["starting"]
                out["a_released_s"] = (revoked_at[0] - events["starting"]) if revoked_at else None
                fresh.clear()
                all_again = anyio.Event()
                assert proc.stdin is not None
                since = time.time()
                await proc.stdin.aclose()  # B leaves gracefully
                with anyio.fail_after(120):
                    await all_again.wait()
                out["leave_s"] = time.time() - since
                async for _ in _lines(proc):
                    pass
            tg.cancel_scope.cancel()
    out["seconds"] = out["join_s"]
    out["peak_rss_mb"] = peak_rss_mb()
    return out
