"""The embedded broker's ``MessageStore.get`` alone: CPU per 32-message pull, in process.

    python benchmarks/bench_store.py [--messages 4096] [--queues 8] [--filtered]

Two commit-log layouts of the same messages (1 KiB bodies, one producer's property string):
``batched``, each queue's messages back to back (a producer's batches, or one producer per queue),
and ``interleaved``, the queues' messages taking turns (single sends round-robin over the queues).
Every queue is then read from its start in pulls of 32, as a pull of the embedded broker asks
(``runs=True``); the best of five passes is reported. ``--filtered`` pulls with a tag subscription
every message matches (the loop that checks each message's tag code).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmq_async.embedded.store import MessageStore, host_bytes

HOST = host_bytes("127.0.0.1", 10911)
BORN = host_bytes("10.0.0.2", 5555)
PROPS = "UNIQ_KEY\x017F0000010F1A18B4AAC2000000000000\x02WAIT\x01true"


def fill(store: MessageStore, layout: str, queues: int, per_queue: int) -> None:
    body = b"x" * 1024
    if layout == "interleaved":
        for i in range(queues * per_queue):
            store.put("T", i % queues, body, 0, PROPS, 0, 0, 1, BORN)
    else:
        for q in range(queues):
            for _ in range(per_queue):
                store.put("T", q, body, 0, PROPS, 0, 0, 1, BORN)


def us_per_get(store: MessageStore, queues: int, per_queue: int, codes: frozenset[int] | None) -> float:
    best = float("inf")
    for _ in range(5):
        gets = 0
        t0 = time.process_time()
        for q in range(queues):
            for offset in range(0, per_queue, 32):
                store.get("T", q, offset, 32, codes, runs=True)
                gets += 1
        best = min(best, (time.process_time() - t0) / gets * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=4096, help="messages per queue")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--filtered", action="store_true", help="a tag subscription (every message matches)")
    args = ap.parse_args()
    codes = frozenset({0}) if args.filtered else None
    out: dict[str, float] = {}
    for layout in ("batched", "interleaved"):
        store = MessageStore(HOST)
        fill(store, layout, args.queues, args.messages)
        out[layout] = round(us_per_get(store, args.queues, args.messages, codes), 2)
        print(f"{layout}: {out[layout]:.2f} CPU-us a 32-message get", flush=True)
    print(json.dumps({"filtered": args.filtered, "us_per_get": out}))


if __name__ == "__main__":
    main()
