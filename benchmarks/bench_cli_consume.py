"""``rmq-async consume --count N`` against the no-op push of ``rmq-async bench push`` (#25), or against
the raw pull loop (``--against raw-pull``, #46), on the same data.

One embedded cluster (``rmq-async embedded``, a child process, asyncio) or ``--namesrv``;
``rmq-async produce`` writes ``--messages`` messages of ``--size`` bytes over ``--queues`` queues to one
topic (keys ``k-<i>``). Then, ``--pairs`` times, in alternating order:

* ``bench``: the benchmark's push worker (``python -m rmq_async.bench.worker push``, the process ``rmq-async
  bench push`` runs, with its no-op handler) drains that topic with a fresh group; it reports msgs/s and its
  CPU time per message from the first to the last message (``Meter``);
* ``consume``: ``rmq-async consume --count N --quiet`` drains it with a fresh group; msgs/s is its summary's
  ``msgs_per_s`` (first to last message). Its CPU per message is the marginal CPU of the whole process
  between a run of ``N`` and a run of ``N // 10`` messages (start-up, the idle wait and shutdown cancel out).

Wall rates depend on what else runs on the machine; CPU per message much less (the consumer is CPU-bound,
the broker runs in another process). Reported: medians, and the medians of the per-pair ratios
consume / bench of msgs/s and bench / consume of CPU per message (both: above 1 is consume faster).

    python benchmarks/bench_cli_consume.py --messages 200000 --pairs 5
    python benchmarks/bench_cli_consume.py --against raw-pull --loop uvloop   # #46's ratio
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any


def _run(cmd: list[str]) -> str:
    """Run ``cmd`` to its end; its stdout."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:6]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _cpu_of(cmd: list[str]) -> tuple[str, float]:
    """Run ``cmd``; its stdout and the CPU seconds (user + system) its process used (the reaped child's
    rusage, taken as the difference of RUSAGE_CHILDREN: only one child runs at a time here)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = _run(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, cpu


def _last_json(out: str) -> dict[str, Any]:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    raise SystemExit(f"no JSON line in {out[-500:]!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="a running cluster (default: start rmq-async embedded)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batch", type=int, help="consume --batch (default: consume's own default)")
    ap.add_argument("--bench-batch", type=int, default=1, help="the bench worker's batch (default 1)")
    ap.add_argument(
        "--against",
        choices=("push", "raw-pull"),
        default="push",
        help="the bench worker's scenario: the no-op push consumer (default) or the raw pull loop",
    )
    ap.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="both sides' event loop (uvloop: consume without --no-uvloop, as a user runs it)",
    )
    ap.add_argument("--json", help="write the runs and the summary here")
    args = ap.parse_args()
    py = sys.executable
    embedded = None
    namesrv = args.namesrv
    if namesrv is None:
        embedded = subprocess.Popen(
            [py, "-m", "rmq_async", "--no-uvloop", "embedded", "--port", "0", "--queues", str(args.queues)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert embedded.stdout is not None
        line = embedded.stdout.readline().strip()
        if not line.startswith("namesrv="):
            raise SystemExit(f"embedded cluster did not start: {line!r}")
        namesrv = line.split("=", 1)[1]
    try:
        topic = f"BenchCliConsume{os.getpid()}"
        n = args.messages
        produce = [py, "-m", "rmq_async", "produce", "--namesrv", namesrv, "--topic", topic]
        produce += ["--count", str(n), "--size", str(args.size), "--queues", str(args.queues), "--quiet"]
        out = _run(produce)
        print("produce:", out.strip(), file=sys.stderr)

        def bench() -> dict[str, Any]:
            params = {"namesrv": namesrv, "topic": topic, "messages": n, "timeout": 300, "loop": args.loop}
            params["batch"] = args.bench_batch
            params["queues"] = args.queues
            out = _run([py, "-m", "rmq_async.bench.worker", args.against, json.dumps(params)])
            r = _last_json(out)
            return {"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"]}

        def consume(count: int) -> tuple[dict[str, Any], float]:
            group = f"cli_consume_{os.getpid()}_{time.monotonic_ns() % 10**9}"
            cmd = [py, "-m", "rmq_async", *(["--no-uvloop"] if args.loop == "asyncio" else []), "consume"]
            cmd += ["--namesrv", namesrv, "--topic", topic]
            cmd += ["--group", group, "--count", str(count), "--quiet"]
            if args.batch is not None:
                cmd += ["--batch", str(args.batch)]
            out, cpu = _cpu_of(cmd)
            return _last_json(out), cpu

        runs: list[dict[str, Any]] = []
        for p in range(args.pairs):
            b = c = None
            for which in ("bench", "consume") if p % 2 == 0 else ("consume", "bench"):
                if which == "bench":
                    b = bench()
                else:
                    _, cpu_small = consume(n // 10)
                    summary, cpu_full = consume(n)
                    assert summary["consumed"] >= n and summary["duplicates"] == 0, summary
                    c = {
                        "msgs_per_s": summary["msgs_per_s"],
                        "cpu_us_per_msg": (cpu_full - cpu_small) / (n - n // 10) * 1e6,
                        "summary": summary,
                    }
            assert b is not None and c is not None
            run = {
                "pair": p,
                "load1": os.getloadavg()[0],
                "bench": b,
                "consume": c,
                "rate_ratio": c["msgs_per_s"] / b["msgs_per_s"],
                "cpu_ratio": b["cpu_us_per_msg"] / c["cpu_us_per_msg"],
            }
            runs.append(run)
            print(json.dumps(run, default=str), file=sys.stderr)
        med = statistics.median
        result = {
            "messages": n,
            "size": args.size,
            "queues": args.queues,
            "pairs": args.pairs,
            "consume_batch": args.batch,
            "bench_batch": args.bench_batch,
            "against": args.against,
            "loop": args.loop,
            "bench_msgs_per_s": med(r["bench"]["msgs_per_s"] for r in runs),
            "consume_msgs_per_s": med(r["consume"]["msgs_per_s"] for r in runs),
            "bench_cpu_us_per_msg": med(r["bench"]["cpu_us_per_msg"] for r in runs),
            "consume_cpu_us_per_msg": med(r["consume"]["cpu_us_per_msg"] for r in runs),
            "rate_ratio": med(r["rate_ratio"] for r in runs),
            "cpu_ratio": med(r["cpu_ratio"] for r in runs),
        }
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"result": result, "runs": runs}, f, indent=1)
    finally:
        if embedded is not None:
            embedded.terminate()
            embedded.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
