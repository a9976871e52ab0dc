"""Pool the paired push/raw-pull ratios of several ``rmq-async bench`` invocations.

One invocation of ``rmq-async bench push raw-pull --runs 5`` gives five pairs per loop, and on a shared
VM one pair moves by +-0.15, so its median moves by about +-0.07 from one invocation to the next. This
reads the ``result.json`` of any number of invocations, re-pairs their runs exactly as the harness does
(run r of push with run r of raw-pull on the same loop) and prints, per loop and overall: the median,
the quartiles and the range of the per-pair ratios of msgs/s and of consumer CPU per message, how many
pairs reach ``--target``, and the same over the invocations' own medians.

    for i in 1 2 3 4 5 6; do
        rmq-async bench push raw-pull --runs 5 --loop both --no-plots --out /tmp/pr$i
    done
    python benchmarks/pool_ratio.py /tmp/pr*/result.json [--target 0.7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pairs(doc: dict[str, Any]) -> dict[str, list[tuple[float, float | None]]]:
    """Per loop: (push / raw msgs/s, raw / push CPU per message or None) for each pair of runs, paired
    by position in the invocation's full run lists (``runs`` of result.json, failed runs included) as
    the harness pairs them; a pair where either run failed or was skipped is left out."""
    runs: dict[str, list[dict[str, Any]]] = doc.get("runs", {})
    out: dict[str, list[tuple[float, float | None]]] = {}
    for key, push_runs in runs.items():
        scenario, _, loop = key.partition("/")
        raw_runs = runs.get(f"raw-pull/{loop}")
        if scenario != "push" or raw_runs is None:
            continue
        got = out.setdefault(loop, [])
        for p, r in zip(push_runs, raw_runs, strict=False):
            if any("error" in x or "skipped" in x for x in (p, r)):
                continue
            if not p.get("msgs_per_s") or not r.get("msgs_per_s"):
                continue
            cpu = None
            if p.get("cpu_us_per_msg") and r.get("cpu_us_per_msg"):
                cpu = r["cpu_us_per_msg"] / p["cpu_us_per_msg"]
            got.append((p["msgs_per_s"] / r["msgs_per_s"], cpu))
    return out


def describe(xs: Sequence[float], target: float) -> dict[str, Any]:
    """Median, quartiles, range and how many reach ``target``; empty input gives ``{"n": 0}``."""
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    n = len(s)
    return {
        "n": n,
        "median": round(statistics.median(s), 3),
        "q1": round(s[n // 4], 3),
        "q3": round(s[(3 * n) // 4], 3),
        "min": round(s[0], 3),
        "max": round(s[-1], 3),
        "reach_target": sum(x >= target for x in s),
    }


def pool(docs: Sequence[dict[str, Any]], target: float) -> dict[str, Any]:
    """The pooled statistics, per loop and for all loops together."""
    rates: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    medians: dict[str, list[float]] = {}
    for doc in docs:
        for loop, ps in pairs(doc).items():
            rates.setdefault(loop, []).extend(r for r, _ in ps)
            cpus.setdefault(loop, []).extend(c for _, c in ps if c is not None)
            if ps:
                medians.setdefault(loop, []).append(statistics.median(r for r, _ in ps))
    out: dict[str, Any] = {"target": target, "invocations": len(docs)}
    for loop in sorted(rates):
        out[loop] = {
            "pairs": describe(rates[loop], target),
            "pairs_cpu": describe(cpus[loop], target),
            "invocation_medians": describe(medians[loop], target),
        }
    out["all"] = {
        "pairs": describe([x for v in rates.values() for x in v], target),
        "pairs_cpu": describe([x for v in cpus.values() for x in v], target),
        "invocation_medians": describe([x for v in medians.values() for x in v], target),
    }
    return out


def _line(name: str, d: dict[str, Any]) -> str:
    if not d["n"]:
        return f"  {name:<19} none"
    return (
        f"  {name:<19} n={d['n']:<4} median {d['median']:.3f}  quartiles {d['q1']:.3f}-{d['q3']:.3f}  "
        f"range {d['min']:.3f}-{d['max']:.3f}  >= target: {d['reach_target']}/{d['n']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="result.json files of rmq-async bench")
    ap.add_argument("--target", type=float, default=0.7)
    ap.add_argument("--json", action="store_true", help="print the pooled statistics as one JSON line")
    args = ap.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in args.results]
    out = pool(docs, args.target)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['invocations']} invocations, push / raw-pull, target {args.target}")
    for loop in [k for k in out if isinstance(out[k], dict)]:
        print(loop)
        print(_line("pairs, msgs/s", out[loop]["pairs"]))
        print(_line("pairs, CPU a msg", out[loop]["pairs_cpu"]))
        print(_line("invocation medians", out[loop]["invocation_medians"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
