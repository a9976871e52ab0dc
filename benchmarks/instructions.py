"""Instructions a message, counted by valgrind's callgrind: what a change saves or costs, free of the
machine's noise (paired CPU ratios, ``ab.py``, still move by a few percent a run on a shared VM).

    python benchmarks/instructions.py [TREE:]SCENARIO ... [--warm 3000] [--measure 10000]
                                      [--loop uvloop|asyncio] [--reps 1] [--python-table N] [--keep DIR]
    python benchmarks/instructions.py raw-pull push push-plain             # this tree
    python benchmarks/instructions.py /tmp/base:push .:push                 # a change, tree against tree
    python benchmarks/instructions.py raw-pull cli-consume                  # `rmq-async consume`

Each spec runs in a fresh process under ``valgrind --tool=callgrind`` with ``PYTHONPATH`` set to its
tree (default: this one), draining a preloaded topic (1 KiB messages, 8 queues) of one embedded
cluster that runs outside valgrind, in its own process. Nothing is counted until the scenario's
meter has seen ``--warm`` messages (imports, start-up, the first pulls and rebalance are left out);
then every instruction of the process (every thread) is counted until ``--measure`` more are seen,
and the count is divided by the messages seen in between. The meter is watched by a task of the
scenario's own loop every 20 ms (a few dozen instructions a message), not wrapped: its ``add`` runs
as in ``ab.py`` and ``rmq-async bench``. ``cli-consume`` runs ``rmq-async consume --count N --quiet``
(its handler wrapped by a counter, one call a batch of up to 32), and every spec of a run with it drains
messages with keys ``k-<i>``, as ``rmq-async produce`` sends them.

What it cannot tell: time. Under valgrind the consumer runs ~50x slower while the broker does not,
so whatever depends on the clock happens more often per message (a worker's ~1 ms acknowledgement
groups, timers); the count is of the instructions, not of cache misses or system calls. Compare a
change with ``ab.py`` too; use this where ``ab.py``'s noise hides what the change is worth.

``--python-table N`` (Python 3.12+): runs with ``-X perf`` and prints, for each spec, the ``N``
Python functions with the most instructions a message, callees included (the perf trampolines, one
a code object, resolved through ``/tmp/perf-PID.map``). The trampolines cost instructions of their
own, and make every Python call go through the C evaluator: the table's total is higher than the
plain count, and only its proportions mean anything.

Needs valgrind with its headers (``callgrind.h``: Debian's valgrind package) and a C compiler, for the
few lines of C that start and stop the count from Python (callgrind client requests).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ["raw-pull", "push", "push-plain", "push-orderly", "cli-consume"]

_SHIM = """
#include <valgrind/callgrind.h>
void rmq_count_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void rmq_count_stop(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
"""

_CHILD = """
import asyncio, ctypes, sys
from rmq_async.bench import scenarios
shim = ctypes.CDLL(sys.argv[1])
kind, loop, namesrv, topic, total, warm, measure = sys.argv[2:9]
warm, measure = int(warm), int(measure)
init = scenarios.Meter.__init__


async def watch(meter):
    while meter.seen < warm:
        await asyncio.sleep(0.02)
    first = meter.seen
    shim.rmq_count_start()
    while meter.seen < first + measure:
        await asyncio.sleep(0.02)
    last = meter.seen
    shim.rmq_count_stop()
    print("COUNTED", last - first, flush=True)


def meter_init(self, target):
    init(self, target)
    watch.task = asyncio.get_running_loop().create_task(watch(self))


if kind == "cli-consume":
    # `rmq-async consume --count N --quiet` as a user runs it: its handler (a plain function, called
    # with up to 32 messages) is wrapped by a counter the watcher reads (one call a batch)
    from rmq_async.cli import app
    from rmq_async.consumer import push

    push_init = push.PushConsumer.__init__

    def consumer_init(self, *a, handler, **kw):
        meter = scenarios.Meter(int(total))

        def counted(msgs, ctx):
            r = handler(msgs, ctx)
            meter.seen += len(msgs)
            return r

        push_init(self, *a, handler=counted, **kw)

    push.PushConsumer.__init__ = consumer_init
    argv = ["consume", "--namesrv", namesrv, "--topic", topic, "--group", "instr_cli",
            "--from", "first", "--count", total, "--quiet", "--idle-exit", "600"]
    if loop != "uvloop":
        argv.append("--no-uvloop")
    scenarios.Meter.__init__ = meter_init
    sys.exit(app.main(argv))
scenarios.Meter.__init__ = meter_init
p = {"scenario": kind, "namesrv": namesrv, "topic": topic, "messages": int(total), "timeout": 1800,
     "interval": 3600}
fn = scenarios.raw_pull if kind == "raw-pull" else scenarios.run_push
if loop == "uvloop":
    import uvloop
    uvloop.run(fn(p))
else:
    asyncio.run(fn(p))
"""


def _shim(workdir: str) -> str:
    src = os.path.join(workdir, "shim.c")
    lib = os.path.join(workdir, "shim.so")
    Path(src).write_text(_SHIM)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("a C compiler (cc) is needed for the callgrind client requests")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


def _perf_map(path: str) -> tuple[list[int], list[tuple[int, int, str]]]:
    entries = []
    for line in Path(path).read_text().splitlines():
        start, size, name = line.split(" ", 2)
        entries.append((int(start, 16), int(size, 16), name.removeprefix("py::")))
    entries.sort()
    return [e[0] for e in entries], entries


def _python_table(out_file: str, map_file: str, messages: int, top: int) -> list[str]:
    """Inclusive instructions a message of each Python function (its perf trampoline)."""
    starts, entries = _perf_map(map_file)
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=yes", out_file],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+\?\?\?:0x([0-9a-f]+)", line)
        if not m:
            continue
        addr = int(m.group(2), 16)
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or not entries[i][0] <= addr < entries[i][0] + entries[i][1]:
            continue
        name = entries[i][2]
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    ranked = sorted(costs.items(), key=lambda kv: -kv[1])[:top]
    return [f"    {cost / messages:>9,.0f}  {name}" for name, cost in ranked]


def _count(
    spec: str, args: argparse.Namespace, shim: str, namesrv: str, total: int, out_file: str
) -> tuple[float, list[str]]:
    tree, _, kind = spec.rpartition(":")
    env = {**os.environ, "PYTHONPATH": str(Path(tree or ROOT).resolve())}
    py_flags = ["-X", "perf"] if args.python_table else []
    before = set(glob.glob("/tmp/perf-*.map"))
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out_file}",
        sys.executable,
        *py_flags,
        "-c",
        _CHILD,
        shim,
        kind,
        args.loop,
        namesrv,
        "InstrTopic",
        str(total),
        str(args.warm),
        str(args.measure),
    ]
    run = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True)
    counted = re.search(r"COUNTED (\d+)", run.stdout)
    dumps = [f for f in glob.glob(out_file + ".*")]
    if run.returncode != 0 or counted is None or not dumps:
        raise SystemExit(f"{spec}: the run failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    text = Path(dumps[0]).read_text()
    total_ir = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    assert total_ir is not None, dumps[0]
    messages = int(counted.group(1))
    table: list[str] = []
    if args.python_table:
        maps = sorted(set(glob.glob("/tmp/perf-*.map")) - before)
        if maps:
            table = _python_table(dumps[0], maps[-1], messages, args.python_table)
            if not args.keep:
                for m in maps:
                    os.remove(m)
    return int(total_ir.group(1)) / messages, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", metavar="[TREE:]SCENARIO", help=f"scenarios: {', '.join(SCENARIOS)}")
    ap.add_argument("--warm", type=int, default=3000, help="messages before the count starts")
    ap.add_argument("--measure", type=int, default=10000, help="messages counted")
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    ap.add_argument("--reps", type=int, default=1, help="runs of each spec (in turn)")
    ap.add_argument("--python-table", type=int, default=0, metavar="N", help="top-N Python functions")
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind files (and perf maps) in DIR")
    args = ap.parse_args()
    for spec in args.specs:
        if spec.rpartition(":")[2] not in SCENARIOS:
            ap.error(f"{spec}: the scenario must be one of {', '.join(SCENARIOS)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    if args.python_table and sys.version_info < (3, 12):
        ap.error("--python-table needs Python 3.12+ (-X perf)")
    sys.path.insert(0, str(ROOT))
    from rmq_async.bench.cluster import ChildCluster, create_topic, preload

    total = args.warm + args.measure + 4000  # room for what is pulled ahead of the meter
    with tempfile.TemporaryDirectory() as work:
        out_dir = args.keep or work
        os.makedirs(out_dir, exist_ok=True)
        shim = _shim(work)
        with ChildCluster(queues=8, flavour=4) as cluster:
            ns = cluster.namesrv_addr
            asyncio.run(create_topic(ns, "InstrTopic", 8))
            # with cli-consume: keys "k-<i>", as `rmq-async produce` sends them (the CLI's handler
            # reads them), for every spec of the run
            keys = "k-" if any(s.endswith("cli-consume") for s in args.specs) else None
            asyncio.run(preload(ns, "InstrTopic", total, 1024, keys_prefix=keys))
            print(
                f"Python {sys.version.split()[0]}, {args.loop}: instructions a message over {args.measure:,} "
                f"messages after {args.warm:,}",
                flush=True,
            )
            for rep in range(args.reps):
                for j, spec in enumerate(args.specs):
                    out_file = os.path.join(out_dir, f"callgrind.{j}.{rep}.out")
                    per_msg, table = _count(spec, args, shim, ns, total, out_file)
                    print(f"{spec}: {per_msg:,.0f}", flush=True)
                    for line in table:
                        print(line)


if __name__ == "__main__":
    main()
