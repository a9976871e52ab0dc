"""Codec micro-benchmarks: pull-body decoding and SEND_MESSAGE_V2 frame encoding, on one core.

Run: ``python benchmarks/bench_codec.py`` (``--profile`` adds a short cProfile of each case).
Prints a table and one JSON line. Each figure is the median of ``--runs`` runs of ``--seconds`` each;
the cost of ``.keys`` + ``.tags`` relative to decoding alone is also measured in ``--pairs`` alternating
short runs (``keys_tags_paired_ratio``: decode + keys + tags rate / decode rate, median of the pairs).
The pull body is 32 stored messages of 1 KiB with KEYS, TAGS, UNIQ_KEY and one user property, built
with the test encoder (tests/support/helpers_stored.py), as a 4.9.8 broker stores them (plus CLUSTER).

Compressed bodies (#19): the same pull body with each body compressed by ``compress_body`` as the
Java producer's compressor of each type writes it (zlib and ZSTD at the default level 5, LZ4 frames),
1 KiB bodies (32 a pull) and 64 KiB bodies (4 a pull, the broker's 256 KiB transfer limit); the body
text is log-like JSON (compresses about 3-5x). Rates are messages and decompressed MB per CPU
second. ``--only compressed`` runs just those rows.
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
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.helpers_stored import encode_stored  # noqa: E402

from rmq_async.protocol.command import RemotingCommand  # noqa: E402
from rmq_async.protocol.message import (  # noqa: E402
    COMPRESSION_TYPES,
    Message,
    compress_body,
    compression_flag,
    encode_batch_body,
)
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


def json_body(i: int, size: int) -> bytes:
    """Log-like JSON lines, ``size`` bytes: what compressed topics usually carry."""
    out = bytearray()
    j = 0
    while len(out) < size:
        out += (
            f'{{"seq":{i * 1000 + j},"user":"u{(i * 7 + j) % 9973:05d}","event":"'
            f'{("click", "view", "buy", "scroll")[j % 4]}","ts":{1795300158805 + j * 13},'
            f'"path":"/shop/item/{(i * 31 + j * 17) % 100000}","ok":{str(j % 5 != 0).lower()}}}\n'
        ).encode()
        j += 1
    return bytes(out[:size])


def compressed_pull_body(kind: str, size: int, count: int) -> bytes:
    parts = []
    for i in range(count):
        props = {"KEYS": f"k-{i}", "UNIQ_KEY": new_uniq_id(), "CLUSTER": "DefaultCluster", "TAGS": "TagA"}
        body = compress_body(json_body(i, size), 5, kind)  # type: ignore[arg-type]
        parts.append(
            encode_stored(
                topic="BenchTopic",
                body=body,
                properties=props,
                sys_flag=compression_flag(kind),  # type: ignore[arg-type]
                queue_offset=i,
                commit_log_offset=24_000_000 + i * (size + 200),
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


def paired_ratio(a: Callable[[], object], b: Callable[[], object], pairs: int, seconds: float) -> float:
    """The median over ``pairs`` alternating short runs (ABBA) of b's rate / a's rate: each pair
    shares a spell of the machine, so the ratio holds still where the two rates, measured minutes
    apart, move by 10-30 % on a shared VM."""
    ratios = []
    for i in range(pairs):
        if i % 2 == 0:
            ra, _ = measure(a, 1, 1, seconds)
            rb, _ = measure(b, 1, 1, seconds)
        else:
            rb, _ = measure(b, 1, 1, seconds)
            ra, _ = measure(a, 1, 1, seconds)
        ratios.append(rb / ra)
    return statistics.median(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--profile", action="store_true", help="print a short cProfile of each case")
    ap.add_argument("--only", help="run only the cases whose key starts with this (e.g. compressed)")
    ap.add_argument(
        "--pairs", type=int, default=20, help="alternating runs for the keys+tags / decode ratio (20)"
    )
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
    sizes: dict[str, int] = {}  # decompressed bytes per message, for the MB/s column
    for size, count, label in ((1024, N_MSGS, "1 KiB"), (64 * 1024, 4, "64 KiB")):
        plain = b"".join(
            encode_stored(
                topic="BenchTopic", body=json_body(i, size), properties={"KEYS": f"k-{i}"}, queue_offset=i
            )
            for i in range(count)
        )
        key = f"compressed_none_{size // 1024}k"
        cases.append((key, f"decode, {count} x {label} uncompressed", partial(decode_messages, plain), count))
        sizes[key] = size
        for kind in COMPRESSION_TYPES:
            pulled = compressed_pull_body(kind, size, count)
            assert [m.body for m in decode_messages(pulled)] == [json_body(i, size) for i in range(count)]
            key = f"compressed_{kind.lower()}_{size // 1024}k"
            ratio = count * size / len(pulled)
            cases.append(
                (
                    key,
                    f"decode, {count} x {label} {kind} (x{ratio:.1f})",
                    partial(decode_messages, pulled),
                    count,
                )
            )
            sizes[key] = size
    if args.only:
        cases = [c for c in cases if c[0].startswith(args.only)]
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
        mbs = f"  {median * sizes[key] / 1e6:,.0f} MB/s" if key in sizes else ""
        print(f"{label:<45} {median:>12,.0f} {best:>12,.0f} {unit}{mbs}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(2000):
                fn()
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(6)
            print("\n".join(line for line in out.getvalue().splitlines()[6:16] if line.strip()))
    ratio = None
    if not args.only or "decode".startswith(args.only):
        ratio = paired_ratio(decode_only, decode_keys_tags, args.pairs, min(args.seconds, 0.25))
        print(f"decode + .keys + .tags / decode alone, {args.pairs} alternating pairs: {ratio:.3f}x")
    summary = {
        "bench": "codec",
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load": round(load, 2),
        "runs": args.runs,
        "cpu_seconds_per_run": args.seconds,
        "median_per_cpu_second": results,
        "keys_tags_paired_ratio": None if ratio is None else round(ratio, 3),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
