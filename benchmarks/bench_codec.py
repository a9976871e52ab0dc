"""Codec micro-benchmarks: pull-body decoding and SEND_MESSAGE_V2 frame encoding, on one core.

Run: ``python benchmarks/bench_codec.py`` (``--profile`` adds a short cProfile of each case).
Prints a table and one JSON line. Each figure is the median of ``--runs`` runs of ``--seconds`` each.
The pull body is 32 stored messages of 1 KiB with KEYS, TAGS, UNIQ_KEY and one user property, built
with the test encoder (tests/support/helpers_stored.py), as a 4.9.8 broker stores them (plus CLUSTER).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.helpers_stored import encode_stored  # noqa: E402

from rmq_async.protocol.command import RemotingCommand  # noqa: E402
from rmq_async.protocol.message import Message, encode_batch_body  # noqa: E402
from rmq_async.protocol.msgid import new_uniq_id  # noqa: E402
from rmq_async.protocol.properties import encode_properties, parse_properties  # noqa: E402
from rmq_async.protocol.stored import decode_messages  # noqa: E402

N_MSGS = 32


def pull_body() -> bytes:
    parts = []
    for i in range(N_MSGS):
        props = {
            "KEYS": f"k-{i}",
            "UNIQ_KEY": new_uniq_id(),
            "CLUSTER": "DefaultCluster",
            "TAGS": "TagA" if i % 2 == 0 else "TagB",
            "orderId": f"order-{i:06d}",
        }
        body = (f"wire-BenchTopic-{i} ".encode() * 64)[:1024]
        parts.append(
            encode_stored(
                topic="BenchTopic",
                body=body,
                properties=props,
                queue_id=i % 4,
                queue_offset=i,
                commit_log_offset=24_000_000 + i * 1200,
            )
        )
    return b"".join(parts)


def send_frame() -> RemotingCommand:
    msg = Message("BenchTopic", bytes(1024), tags="TagA", keys="k-0")
    msg.ensure_uniq_id()
    ext = {
        "a": "bench_pg",
        "b": msg.topic,
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1795300158805",
        "h": "0",
        "i": encode_properties(msg.properties),
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    return RemotingCommand.request(310, ext, msg.body)


def measure(fn: Callable[[], object], per_call: int, runs: int, seconds: float) -> tuple[float, float]:
    """(median, best) items per CPU second over ``runs`` runs of about ``seconds`` each.

    CPU time of this process (``time.process_time``), not wall time: on a shared machine other
    processes take the core away now and then, which wall time would count as ours.
    """
    rates = []
    for _ in range(runs):
        calls = 0
        t0 = time.process_time()
        deadline = t0 + seconds
        while True:
            for _ in range(20):
                fn()
            calls += 20
            now = time.process_time()
            if now >= deadline:
                break
        rates.append(calls * per_call / (now - t0))
    return statistics.median(rates), max(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--profile", action="store_true", help="print a short cProfile of each case")
    args = ap.parse_args()

    body = pull_body()
    raw_props = decode_messages(body)[0].raw_properties
    cmd = send_frame()
    batch = [Message("BenchTopic", bytes(1024), tags="TagA", keys=f"k-{i}") for i in range(N_MSGS)]
    for m in batch:
        m.ensure_uniq_id()

    def decode_only() -> None:
        decode_messages(body)

    def decode_keys_tags() -> None:
        for m in decode_messages(body):
            m.keys  # noqa: B018
            m.tags  # noqa: B018

    def decode_hot() -> None:
        for m in decode_messages(body):
            m.tags  # noqa: B018
            m.msg_id  # noqa: B018

    def decode_get_property() -> None:
        for m in decode_messages(body):
            m.get_property("orderId")

    def decode_props() -> None:
        for m in decode_messages(body):
            m.properties  # noqa: B018

    cases: list[tuple[str, str, Callable[[], object], int]] = [
        ("decode", "decode_messages, 32 x 1 KiB body", decode_only, N_MSGS),
        ("decode_keys_tags", "  + .keys and .tags per message", decode_keys_tags, N_MSGS),
        ("decode_tags_msgid", "  + .tags and .msg_id per message", decode_hot, N_MSGS),
        ("decode_get_property", "  + .get_property('orderId') per message", decode_get_property, N_MSGS),
        ("decode_properties", "  + .properties (dict built) per message", decode_props, N_MSGS),
        ("parse_properties", "parse_properties (5 items)", lambda: parse_properties(raw_props), 1),
        ("encode_send_v2", "SEND_MESSAGE_V2 frame encode (1 KiB)", cmd.encode, 1),
        ("encode_batch_body", "encode_batch_body, 32 x 1 KiB", lambda: encode_batch_body(batch), N_MSGS),
    ]
    results = {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
        f"load {load:.2f}; {args.runs} runs x {args.seconds}s of CPU time each"
    )
    print(f"{'case':<45} {'median/s':>12} {'best/s':>12}")
    for key, label, fn, per_call in cases:
        median, best = measure(fn, per_call, args.runs, args.seconds)
        results[key] = round(median)
        unit = "msgs" if per_call > 1 else "ops"
        print(f"{label:<45} {median:>12,.0f} {best:>12,.0f} {unit}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(2000):
                fn()
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(6)
            print("\n".join(line for line in out.getvalue().splitlines()[6:16] if line.strip()))
    summary = {
        "bench": "codec",
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load": round(load, 2),
        "runs": args.runs,
        "cpu_seconds_per_run": args.seconds,
        "median_per_cpu_second": results,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
