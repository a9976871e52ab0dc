"""Read a timeline the loop probe wrote (``sitecustomize.py`` here, whose docstring says how to take
one) and print:

* per callback kind: time a message, calls, time a call (``--messages N`` divides; default: the
  messages the stage samples counted);
* for the stage samples: between two stamps (``--between read,entered``), the mean time spent in
  each kind of callback and in the selector, per sample;
* for the samples over ``--over MS`` between those stamps: what dominated each (our CPU, a garbage
  collection, the process descheduled: a callback's wall time beyond the CPU it used).

    python benchmarks/loop_probe/analyze.py /tmp/probe.12345 [--between read,entered] [--over 1.0]
"""

from __future__ import annotations

import argparse
import bisect
import collections
import pickle
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--between", default="read,entered", help="two stage stamps (default read,entered)")
    ap.add_argument("--over", type=float, default=1.0, help="the long samples' bound, ms (default 1.0)")
    ap.add_argument("--messages", type=int, help="divide the per-kind totals by this many messages")
    args = ap.parse_args()
    with open(args.file, "rb") as f:
        d: dict[str, Any] = pickle.load(f)
    names = {v: k for k, v in d["labels"].items()}
    events = sorted(d["events"], key=lambda e: e[1])
    starts = [e[1] for e in events]
    gcs = d["gcs"]
    print(" ".join(d["argv"][:2]), f"{len(events)} events, {len(gcs)} collections")

    total: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for kind, t0, t1, what, _ in events:
        name = names[what] if kind == 1 else "(selector, its wait included)"
        total[name] += t1 - t0
        calls[name] += 1
    a, b = args.between.split(",")
    samples = [s for s in d["samples"] if s[a] and s[b] and events and s[a] >= starts[0]]
    n = args.messages or sum(s["count"] for s in d["samples"]) or 1
    print(f"\nper callback kind ({n:,} messages):")
    for name, t in total.most_common(12):
        a_call = t / calls[name] / 1000
        print(f"  {t / n:8.0f} ns a message  {calls[name]:8d} calls  {a_call:8.1f} us a call  {name}")
    if not samples:
        return

    def window(s: dict[str, int]) -> tuple[collections.Counter[str], int, int]:
        """Time of each kind inside the sample's window; and the CPU and descheduled time of it."""
        ta, tb = s[a], s[b]
        got: collections.Counter[str] = collections.Counter()
        cpu = off = 0
        i = max(0, bisect.bisect_left(starts, ta) - 1)
        while i < len(events) and events[i][1] < tb:
            kind, t0, t1, what, used = events[i]
            inside = max(0, min(t1, tb) - max(t0, ta))
            got[names[what] if kind == 1 else "(selector, its wait included)"] += inside
            if kind == 1 and t1 > t0:
                share = inside / (t1 - t0)
                cpu += int(used * share)
                off += int(max(0, (t1 - t0) - used) * share)
            i += 1
        return got, cpu, off

    mean: collections.Counter[str] = collections.Counter()
    for s in samples:
        mean.update(window(s)[0])
    span = sum(s[b] - s[a] for s in samples)
    print(f"\n{a} -> {b}: {len(samples):,} samples, mean {span / len(samples) / 1000:.1f} us; inside it:")
    for name, t in mean.most_common(8):
        print(f"  {t / len(samples) / 1000:8.1f} us  {name}")
    print(f"  {(span - sum(mean.values())) / len(samples) / 1000:8.1f} us  (between callbacks)")

    over = [s for s in samples if s[b] - s[a] > args.over * 1e6]
    causes: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[str] = collections.Counter()
    for s in over:
        _, cpu, off = window(s)
        g = sum(max(0, min(e, s[b]) - max(st, s[a])) for st, e, _ in gcs)
        split = {"our CPU": max(0, cpu - g), "garbage collection": g, "descheduled": off}
        causes[max(split, key=lambda k: split[k])] += 1
        parts.update(split)
    print(f"\n{len(over):,} samples over {args.over} ms; what dominated each: {dict(causes)}")
    if over:
        means = ", ".join(f"{k} {v / len(over) / 1000:.0f} us" for k, v in parts.items())
        print(f"  mean per long sample: {means}")


if __name__ == "__main__":
    main()
