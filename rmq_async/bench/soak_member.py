"""One member of the soak's churning group, in its own process (so a SIGKILL is real).

Usage: ``python -m rmq_async.bench.soak_member PARAMS_JSON`` (see :func:`main` for the keys). Kinds:
``concurrent`` and ``orderly`` (``orderly=True``) share one group on the orders topic; ``pop``
(``client_rebalance=False``) is a member of the POP group on the POP topic.

Everything goes to the member's own file (``out``), appended with ``os.write`` (no user-space buffer,
so a line written is on its way to the file even if the process is SIGKILLed the next instant):

* ``READY`` once started; ``BYE {json}`` after a graceful stop (``stopped_cleanly``, counters);
* ``K <key> <retry> <broker> <queue id> <offset> <reconsume times> <received>`` per message its
  handler consumed successfully, written after the work and before the handler returns (no await in
  between): a message acknowledged was written first. ``retry`` is 1 when it came from the retry
  topic; ``received`` is ``time.monotonic()`` at the handler's start (CLOCK_MONOTONIC, comparable
  across the processes of one Linux host);
* ``S {json}`` every ``sample_every`` seconds: RSS (MB, ``/proc/self/statm``), open fds
  (``/proc/self/fd``), ``len(asyncio.all_tasks())``, process queues (``table.pqs``), cached messages,
  owned queues, retry queues, lag, pop in flight, counters.

Handlers fail (RECONSUME_LATER / SUSPEND) with probability ``fail``, hang past the consume timeout
with probability ``hang`` (they are cancelled by the consumer and their messages come again), and
otherwise take 0 to ``work_ms`` ms. SIGTERM, SIGINT or stdin EOF stop the member gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from typing import Any

from ..config import Timing
from ..consumer.push import PushConsumer
from ..consumer.types import ConsumeContext, ConsumeResult, OrderlyContext, OrderlyResult
from ..protocol.stored import MessageExt

__all__ = ["main", "sample"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_sample() -> dict[str, Any]:
    """RSS (MB), open fds and asyncio tasks of this process (call it inside the event loop)."""
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * _PAGE / 2**20
    return {
        "rss_mb": round(rss, 2),
        "fds": len(os.listdir("/proc/self/fd")),
        "tasks": len(asyncio.all_tasks()),
    }


def sample(c: PushConsumer) -> dict[str, Any]:
    """:func:`process_sample` plus the consumer's process queues, cached messages, lag, pop state."""
    h = c.health()
    pop = h.pop or {}
    in_flight = pop.get("in_flight") if isinstance(pop, dict) else None
    st = c.stats
    return {
        "t": time.monotonic(),
        **process_sample(),
        "pq": len(h.queues) + len(h.retry_queues),
        "cached": sum(q.cached for q in h.queues),
        "owned": len(h.queues),
        "retry_queues": len(h.retry_queues),
        "lag": h.lag,
        "pop_in_flight": in_flight if isinstance(in_flight, int) else None,
        "sent_back": st.sent_back,
        "to_dlq": st.to_dlq,
    }


async def main(p: dict[str, Any]) -> int:
    fd = os.open(p["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(text: str) -> None:
        os.write(fd, text.encode())

    timing = Timing.model_validate_json(p["timing"])
    kind: str = p["kind"]
    rnd = random.Random(p.get("seed"))
    fail, hang, work_ms = float(p["fail"]), float(p["hang"]), float(p["work_ms"])
    hang_s = max(timing.consume_timeout, timing.pop_invisible_time) + 1.0
    retry_prefix = "%RETRY%"

    async def work() -> bool:
        """The handler's work; False: it fails this time."""
        r = rnd.random()
        if r < hang:
            await asyncio.sleep(hang_s)  # cancelled at the consume timeout
        await asyncio.sleep(rnd.random() * work_ms / 1000)
        return rnd.random() >= fail

    def lines(msgs: list[MessageExt], retry: int, broker: str, qid: int, t: float) -> str:
        return "".join(
            f"K {m.keys} {retry} {broker} {qid} {m.queue_offset} {m.reconsume_times} {t:.6f}\n" for m in msgs
        )

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        t = time.monotonic()
        if not await work():
            return ConsumeResult.RECONSUME_LATER
        mq = ctx.mq
        emit(lines(msgs, int(mq.topic.startswith(retry_prefix)), mq.broker_name, mq.queue_id, t))
        return ConsumeResult.SUCCESS

    async def orderly_handler(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyResult:
        t = time.monotonic()
        if not await work():
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        mq = ctx.mq
        emit(lines(msgs, int(mq.topic.startswith(retry_prefix)), mq.broker_name, mq.queue_id, t))
        return OrderlyResult.SUCCESS

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def stdin_eof() -> None:
        await reader.read()
        stop.set()

    eof = loop.create_task(stdin_eof())
    c = PushConsumer(
        p["group"],
        namesrv_addr=p["namesrv"],
        handler=orderly_handler if kind == "orderly" else handler,
        subscriptions={p["topic"]: "*"},
        timing=timing,
        instance_name=p["name"],
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        concurrency=int(p.get("concurrency", 20)),
        orderly=kind == "orderly",
        client_rebalance=kind != "pop",
    )
    async with c:
        emit("READY\n")
        every = float(p["sample_every"])
        while not stop.is_set():
            emit("S " + json.dumps(sample(c)) + "\n")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
    emit("BYE " + json.dumps({"stopped_cleanly": c.stopped_cleanly, **sample(c)}) + "\n")
    eof.cancel()
    os.close(fd)
    return 0


if __name__ == "__main__":
    params = json.loads(sys.argv[1])
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the harness
    except OSError:
        pass
    sys.exit(asyncio.run(main(params)))
