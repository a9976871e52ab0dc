"""The concurrent consume path in a hot loop: one worker's ``ProcessQueue.put``, ``_consume`` and
pulled-batch-done over decoded pulled batches, without a broker, a socket or a task switch.

Run: ``python benchmarks/bench_consume_hot.py [--loop uvloop|asyncio] [--batch 1] [--reps 20]``.
Prints ns per message for each stage (the minimum over ``--reps`` passes over 500 pulled batches of
32 decoded 1 KiB messages, so a slow spell of the machine does not decide it) and for a bare
``await handler([m], ctx)`` loop, the floor of one handler call a message; then the same for a plain
(``def``) handler: the pulling task's inline consumption of a batch not held in the process queue
(``take_now``), against a bare ``handler([m], ctx)`` loop; and an async handler's batch taken by a
task started eagerly (``take_now`` too). This is what moves when
the consume loop changes; whole-consumer figures (``rmq-async bench``, ``benchmarks/ab.py``) are
what a change is judged by.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import anyio  # noqa: E402
from support.helpers_stored import encode_stored  # noqa: E402

from rmq_async.client.instance import ClientInstance  # noqa: E402
from rmq_async.config import ClientConfig, ConsumerConfig, Timing  # noqa: E402
from rmq_async.consumer.concurrently import ConcurrentConsumeService, _Slot  # noqa: E402
from rmq_async.consumer.context import ConsumerContext, Subscriptions  # noqa: E402
from rmq_async.consumer.eager import EagerStarter  # noqa: E402
from rmq_async.consumer.offset_store import OffsetStore, _MemoryTable  # noqa: E402
from rmq_async.consumer.process_queue import ProcessQueue  # noqa: E402
from rmq_async.consumer.types import ConsumeContext  # noqa: E402
from rmq_async.protocol.mq import MessageQueue  # noqa: E402
from rmq_async.protocol.stored import MessageExt, PulledMessages, decode_messages  # noqa: E402

MQ = MessageQueue("T", "b", 0)
BATCHES = 500


class _NoClient:
    client_id = "bench@hot"


def pulled_batches() -> list[PulledMessages]:
    props = {"UNIQ_KEY": "A" * 32, "TAGS": "TagA"}
    return [
        decode_messages(
            b"".join(
                encode_stored(topic="T", body=b"x" * 1024, queue_offset=o, queue_id=0, properties=props)
                for o in range(base, base + 32)
            ),
            broker_name="b",
        )
        for base in range(0, 32 * BATCHES, 32)
    ]


def _taken_ns(svc: ConcurrentConsumeService, store: _MemoryTable, batches: list[PulledMessages]) -> float:
    """ns a message for ``svc.take_now`` of every batch (consumed in full, nothing held)."""
    pq = ProcessQueue(MQ)
    pq.offset = store.cell(MQ)  # as the queue table starts a queue
    t0 = time.perf_counter()
    for msgs in batches:
        assert svc.take_now(pq, msgs)
    ns = (time.perf_counter() - t0) / (len(batches) * 32) * 1e9
    assert pq.offset.value == len(batches) * 32 and pq.count == 0
    return ns


async def measure(batch_size: int, reps: int) -> dict[str, Any]:
    seen = 0

    async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal seen
        seen += len(msgs)

    c = ConsumerContext(
        group="g",
        config=ConsumerConfig(group="g", consume_batch_max_size=batch_size),
        client_config=ClientConfig(timing=Timing()),
        subscriptions=Subscriptions("%RETRY%g"),
    )
    # no client: nothing on this path sends (every handler call succeeds); only its id is read
    store = _MemoryTable()
    c.attach(cast(ClientInstance, _NoClient()), cast(OffsetStore, store))
    svc = ConcurrentConsumeService(c, handler)
    svc._loop_time = asyncio.get_running_loop().time
    batches = pulled_batches()
    n = BATCHES * 32
    put, consume, done, bare = [], [], [], []
    pc = time.perf_counter
    for _ in range(reps):
        pq = ProcessQueue(MQ)
        pq.offset = store.cell(MQ)  # as the queue table starts a queue
        w = _Slot()
        a = b = d = 0.0
        with anyio.CancelScope() as scope:
            w.scope = scope
            for msgs in batches:
                t0 = pc()
                pq.put(msgs)
                t1 = pc()
                w.pq, w.msgs, w.i = pq, msgs, 0
                svc.active += 1
                await svc._consume(w)
                t2 = pc()
                svc._pulled_batch_done(w)
                t3 = pc()
                a += t1 - t0
                b += t2 - t1
                d += t3 - t2
        put.append(a / n * 1e9)
        consume.append(b / n * 1e9)
        done.append(d / n * 1e9)
        ctx = ConsumeContext(MQ)
        t0 = pc()
        for msgs in batches:
            for m in msgs:
                await handler([m], ctx)
        bare.append((pc() - t0) / n * 1e9)
    assert seen == 2 * reps * n

    # the async handler's eager path (take_now: the batch consumed in a task started eagerly, not
    # held in the process queue), where this Python has it
    eager: list[float] = []
    if svc._eager:
        svc._loop = asyncio.get_running_loop()
        svc._starter = EagerStarter(svc._loop)
        eager = [_taken_ns(svc, store, batches) for _ in range(reps)]
        svc._starter.close()
        assert seen == 3 * reps * n
    seen = 2 * reps * n

    def plain(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal seen
        seen += len(msgs)

    psvc = ConcurrentConsumeService(c, plain)
    fn = psvc.invoker.plain_handler()
    assert fn is not None
    pconsume, pbare = [], []
    for _ in range(reps):
        pconsume.append(_taken_ns(psvc, store, batches))
        ctx = ConsumeContext(MQ)
        t0 = pc()
        for msgs in batches:
            for m in msgs:
                plain([m], ctx)
        pbare.append((pc() - t0) / n * 1e9)
    assert seen == 4 * reps * n
    return {
        "put_ns": round(min(put)),
        "consume_ns": round(min(consume)),
        "done_ns": round(min(done)),
        "bare_handler_calls_ns": round(min(bare)),
        "eager_consume_ns": round(min(eager)) if eager else None,
        "plain_consume_ns": round(min(pconsume)),
        "plain_bare_calls_ns": round(min(pbare)),
        "batch": batch_size,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    ap.add_argument("--batch", type=int, default=1, help="consume_batch_max_size")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    async def run() -> dict[str, Any]:
        return await measure(args.batch, args.reps)

    if args.loop == "uvloop":
        import uvloop

        out = uvloop.run(run())
    else:
        out = asyncio.run(run())
    out["loop"] = args.loop
    print(
        f"ns a message: put {out['put_ns']}  consume {out['consume_ns']}  done {out['done_ns']}  "
        f"(a bare handler call a message: {out['bare_handler_calls_ns']}); taken eagerly "
        f"{out['eager_consume_ns']}; plain handler: taken "
        f"unheld {out['plain_consume_ns']}  (a bare call: {out['plain_bare_calls_ns']})"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
