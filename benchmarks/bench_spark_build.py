"""The Spark source's batch builder alone: CPU per row of ``build_batch`` on pull bodies in memory.

Strategy: an embedded :class:`~rmq_async.embedded.store.MessageStore` (no sockets) stores ``--rows``
messages of ``--size`` bytes on one queue, with the properties a producer sets: ``UNIQ_KEY``,
``WAIT``, ``TAGS``, and with ``--keys`` a ``KEYS`` of its own per message, so that the values of one
name differ in width. ``get`` cuts them into pull bodies of ``--pull`` messages, as a broker answers
them. ``build_batch`` then turns all of them into one Arrow batch, ``--repeat`` times per round; the
figure is the median over ``--rounds`` of CPU µs per row. ``--mixed`` gives every other message one
more property, so no two neighbouring rows name the same properties and the general (Arrow-kernel)
property split runs instead of the numpy one.

    python benchmarks/bench_spark_build.py [--rows 4096] [--pull 32] [--size 1024] [--keys] [--mixed]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from rmq_async.embedded.store import MessageStore, host_bytes
from rmq_async.spark.columns import Chunk, build_batch


def bodies(rows: int, pull: int, size: int, keys: bool, mixed: bool) -> list[Chunk]:
    store = MessageStore(host_bytes("127.0.0.1", 10911), max_transfer_count=pull)
    born = host_bytes("10.0.0.2", 5555)
    for i in range(rows):
        props = f"UNIQ_KEY\x017F0000010F1A18B4AAC2{i:012X}\x02WAIT\x01true\x02TAGS\x01TagA"
        if keys:
            props += f"\x02KEYS\x01k{i}"
        if mixed and i % 2:
            props += "\x02TRACE_ON\x01false"
        store.put("BenchBuild", 0, os.urandom(size), 0, props, 0, 0, 1_795_300_158_805, born)
    out = []
    for lo in range(0, rows, pull):
        res = store.get("BenchBuild", 0, lo, pull, None)
        out.append(Chunk(b"".join(res.parts), lo, lo + res.count))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096, help="rows per batch (the source cuts 4,096)")
    ap.add_argument("--pull", type=int, default=32, help="messages per pull body")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keys", action="store_true", help="a KEYS property of its own width per message")
    ap.add_argument("--mixed", action="store_true", help="rows that do not all name the same properties")
    args = ap.parse_args()
    chunks = bodies(args.rows, args.pull, args.size, args.keys, args.mixed)
    batch = build_batch(chunks, "BenchBuild", "broker-a")  # warm: imports, first kernels
    assert batch.num_rows == args.rows, batch.num_rows
    per_row = []
    for rnd in range(1, args.rounds + 1):
        c0 = time.process_time()
        for _ in range(args.repeat):
            build_batch(chunks, "BenchBuild", "broker-a")
        us = (time.process_time() - c0) / args.repeat / args.rows * 1e6
        per_row.append(us)
        print(f"round {rnd}: {us:.3f} CPU-us/row")
    summary = {
        "rows": args.rows,
        "pull": args.pull,
        "size": args.size,
        "keys": args.keys,
        "mixed": args.mixed,
    }
    print(json.dumps({**summary, "build_us_row": round(statistics.median(per_row), 3)}))


if __name__ == "__main__":
    main()
