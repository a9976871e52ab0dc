"""TLS cost (#18): push no-op consumption and producing, TLS vs plain, in paired runs on one cluster.

One embedded cluster in its own process, in ``permissive`` mode (TLS and plain on one port, certificates
made by trustme), so both sides of a pair talk to the same broker. Each run is a fresh process whose
clients are switched to TLS (or not) by ``RMQ_TLS`` / ``RMQ_TLS_CA_FILE``; the sides alternate ABBA so
that each pair shares a spell of the shared machine, and the report gives each side's median and the
median of the per-pair ratios TLS / plain.

    python benchmarks/bench_tls.py [--pairs 4] [--messages 100000] [--produce 40000] [--loop uvloop]

push: drain ``--messages`` preloaded 1 KiB messages over 8 queues with a no-op handler (fresh group,
first offset), ``rmq_async.bench.scenarios.run_push``. produce: ``--produce`` single 1 KiB sends, 64
in flight (``rmq_async.bench.cluster.preload`` with batch 1). The broker's side of TLS runs in the
embedded broker's process (Python's ssl module), so the cost measured is the client's and the broker's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import asyncio, json, resource, sys, time
kind, loop, namesrv, topic, n = sys.argv[1:6]
if kind == "push":
    from rmq_async.bench import scenarios
    p = {"scenario": "push", "namesrv": namesrv, "topic": topic, "messages": int(n), "timeout": 300}
    coro = lambda: scenarios.run_push(p)
else:
    from rmq_async.bench.cluster import preload
    async def produce():
        t0 = resource.getrusage(resource.RUSAGE_SELF)
        rate = await preload(namesrv, topic, int(n), 1024, batch=1, inflight=64, progress=False)
        t1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime) / int(n) * 1e6
        return {"msgs_per_s": rate, "cpu_us_per_msg": cpu}
    coro = produce
if loop == "uvloop":
    import uvloop
    r = uvloop.run(coro())
else:
    r = asyncio.run(coro())
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"]}))
"""


def _run(
    kind: str, tls: bool, args: argparse.Namespace, namesrv: str, topic: str, n: int, ca: str
) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_TLS")}
    env["PYTHONPATH"] = str(ROOT)
    if tls:
        env.update(RMQ_TLS="1", RMQ_TLS_CA_FILE=ca)
    cmd = [sys.executable, "-c", _CHILD, kind, args.loop, namesrv, topic, str(n)]
    out = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--messages", type=int, default=100_000, help="push: messages drained per run")
    ap.add_argument("--produce", type=int, default=40_000, help="produce: messages sent per run")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    args = ap.parse_args()

    from rmq_async.bench.cluster import create_topic, preload

    tmp = Path(tempfile.mkdtemp(prefix="bench_tls_"))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp / "srv.pem"))
    emb = [sys.executable, "-m", "rmq_async.embedded", "--port", "0", "--queues", "8", "--exit-on-stdin-eof",
           "--tls-mode", "permissive", "--tls-cert", str(tmp / "srv.pem")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(emb, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as broker:
        assert broker.stdout is not None and broker.stdin is not None
        namesrv = broker.stdout.readline().strip().partition("=")[2]
        broker.stdout.readline()
        topic = f"BenchTls_{os.getpid()}"
        asyncio.run(create_topic(namesrv, topic, 8))
        # each push run drains the whole topic with a fresh group
        rate = asyncio.run(preload(namesrv, topic, args.messages, 1024, progress=False))
        print(f"preloaded {args.messages:,} x 1 KiB: {rate:,.0f}/s", file=sys.stderr)
        results: dict[tuple[str, bool], list[dict[str, float]]] = {}
        ratios: dict[str, list[float]] = {"push": [], "produce": []}
        t0 = time.perf_counter()
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
            for kind, n in (("push", args.messages), ("produce", args.produce)):
                pair = {}
                for tls in order:
                    target = topic if kind == "push" else f"{topic}_p{i}_{int(tls)}"
                    r = _run(kind, tls, args, namesrv, target, n, str(tmp / "ca.pem"))
                    results.setdefault((kind, tls), []).append(r)
                    pair[tls] = r["msgs_per_s"]
                    side = "tls  " if tls else "plain"
                    print(f"pair {i + 1} {kind:7} {side}: {r['msgs_per_s']:>9,.0f} msgs/s, "
                          f"{r['cpu_us_per_msg']:6.1f} us CPU/msg", file=sys.stderr)  # fmt: skip
                ratios[kind].append(pair[True] / pair[False])
        broker.stdin.close()
        broker.wait(30)
    print(f"\n{args.pairs} pairs, {args.loop}, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print("| scenario | plain msgs/s | TLS msgs/s | TLS / plain (median of pairs, min-max) "
          "| client CPU us/msg plain / TLS |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for kind in ("push", "produce"):
        plain_runs, tls_runs = results[kind, False], results[kind, True]
        med = statistics.median
        rate_plain, rate_tls = (
            med(r["msgs_per_s"] for r in plain_runs),
            med(r["msgs_per_s"] for r in tls_runs),
        )
        print(
            f"| {kind} | {rate_plain:,.0f} | {rate_tls:,.0f} "
            f"| {med(ratios[kind]):.2f} ({min(ratios[kind]):.2f}-{max(ratios[kind]):.2f}) "
            f"| {med(r['cpu_us_per_msg'] for r in plain_runs):.1f} "
            f"/ {med(r['cpu_us_per_msg'] for r in tls_runs):.1f} |"
        )


if __name__ == "__main__":
    main()
