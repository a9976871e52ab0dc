"""Run every benchmark that benchmarks/RESULTS.md quotes, on the tree it is run from, one after the
other, each command's output kept whole: what RESULTS.md is rewritten from.

Strategy: a fixed list of named steps (the same commands RESULTS.md gives for its figures, with the
round counts this list states); each runs as a child process with this interpreter, its stdout and
stderr to ``OUT/NAME.log``; ``OUT/manifest.json`` records, per step, the command, start and end (UTC),
the load average before and after, and the exit status, plus the machine (CPU model, cores, Python,
uvloop, anyio) and the commit (``git describe --always --dirty``). Nothing is parsed or summarised
here: the figures are read off the logs. A step that fails is recorded and the next one runs.

    python benchmarks/regenerate.py [--out DIR] [--only NAME,...] [--skip NAME,...] [--list]

Run it on a machine doing nothing else (the load averages in the manifest say whether it was); the
whole list takes about an hour on two cores. The one-hour soak is not in it (``rmq-async bench
soak --duration 3600 ...``: see RESULTS.md, "Other figures").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
B = "benchmarks/"
AB = "--a-scenario raw-pull --b-scenario push"
AB_PLAIN = "--a-scenario raw-pull --b-scenario push-plain"
LAT = "--rate 2000,20000 --seconds 60 --runs 1 --loop both"
SPARK_READ = " ".join(
    f"--only '{case}'"
    for case in ("memory batch", "rocketmq batch", "memory availableNow", "rocketmq availableNow")
)


def steps(out: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) in the order they run: ``rmq-async ...`` as ``python -m rmq_async ...``, the
    scripts with this interpreter."""
    table = [
        ("push-vs-raw-uvloop", f"{B}ab.py --a . --b . {AB} --pairs 24 --messages 200000 --loop uvloop"),
        ("push-vs-raw-asyncio", f"{B}ab.py --a . --b . {AB} --pairs 24 --messages 200000 --loop asyncio"),
        (
            "plain-vs-raw-uvloop",
            f"{B}ab.py --a . --b . {AB_PLAIN} --pairs 24 --messages 200000 --loop uvloop",
        ),
        (
            "plain-vs-raw-asyncio",
            f"{B}ab.py --a . --b . {AB_PLAIN} --pairs 24 --messages 200000 --loop asyncio",
        ),
        ("bench-all", f"-m rmq_async bench all --runs 3 --out {out / 'harness'}"),
        ("latency", f"-m rmq_async bench latency {LAT} --out {out / 'latency'}"),
        (
            "latency-gc-freeze",
            f"-m rmq_async bench latency {LAT} --gc-freeze --out {out / 'latency-gc-freeze'}",
        ),
        (
            "latency-plain",
            f"-m rmq_async bench latency {LAT} --plain-handler --out {out / 'latency-plain'}",
        ),
        ("backlog-1m", f"-m rmq_async bench backlog --messages 1000000 --loop both --out {out / 'backlog'}"),
        ("cli-consume", f"{B}bench_cli_consume.py --messages 200000 --pairs 5"),
        (
            "cli-consume-raw",
            f"{B}bench_cli_consume.py --messages 200000 --pairs 9 --against raw-pull --loop uvloop",
        ),
        ("orderly", f"{B}bench_orderly.py --runs 3"),
        ("orderly-uvloop", f"{B}bench_orderly.py --runs 3 --loop uvloop"),
        ("pop", f"{B}bench_pop.py --messages 20000 --runs 3"),
        ("codec", f"{B}bench_codec.py --runs 5"),
        ("producer", f"{B}bench_producer.py --runs 3"),
        ("secure", f"{B}bench_secure.py --rounds 4 --messages 200000 --sends 20000"),
        ("observability", f"{B}bench_observability.py --rounds 3 --messages 100000"),
        ("broker", f"{B}bench_broker.py --messages 200000 --runs 3"),
        ("transport", f"{B}bench_transport.py"),
        ("spark-read", f"{B}bench_spark.py --messages 400000 --warmup 2 --rounds 3 {SPARK_READ}"),
        ("spark-write", f"{B}bench_spark.py --mode write --messages 100000 --rounds 3"),
    ]
    return [(name, [PY, *shlex.split(args)]) for name, args in table]


def machine() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    versions: dict[str, str] = {}
    for dist in ("uvloop", "anyio", "pyspark", "opentelemetry-sdk"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        **versions,
    }


def commit() -> str:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="directory for the logs (default /tmp/rmq-results-<time>)")
    ap.add_argument("--only", default="", help="comma-separated step names to run")
    ap.add_argument("--skip", default="", help="comma-separated step names to leave out")
    ap.add_argument("--list", action="store_true", help="print the steps and their commands, run nothing")
    args = ap.parse_args(argv)
    out: Path = args.out or Path(f"/tmp/rmq-results-{time.strftime('%Y%m%d-%H%M%S')}")
    todo = steps(out)
    known = {name for name, _ in todo}
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    unknown = (only | skip) - known
    if unknown:
        ap.error(f"unknown steps: {', '.join(sorted(unknown))} (known: {', '.join(n for n, _ in todo)})")
    todo = [(n, a) for n, a in todo if (not only or n in only) and n not in skip]
    if args.list:
        for name, cmd in todo:
            print(f"{name}: {subprocess.list2cmdline(cmd)}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {"commit": commit(), "machine": machine(), "started": now(), "steps": []}
    records: list[dict[str, object]] = manifest["steps"]  # type: ignore[assignment]
    path = out / "manifest.json"
    failed = 0
    # this tree, whatever else the interpreter has installed (its children inherit it)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for name, cmd in todo:
        record: dict[str, object] = {
            "name": name,
            "command": subprocess.list2cmdline(cmd),
            "start": now(),
            "load_before": os.getloadavg()[0],
        }
        print(f"[{record['start']}] {name}: {record['command']}", flush=True)
        t0 = time.monotonic()
        with (out / f"{name}.log").open("w") as log:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        record.update(
            end=now(), seconds=round(time.monotonic() - t0, 1), load_after=os.getloadavg()[0], rc=rc
        )
        failed += rc != 0
        records.append(record)
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"    rc={rc} in {record['seconds']} s", flush=True)
    manifest["ended"] = now()
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"logs and manifest.json in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
