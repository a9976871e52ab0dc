"""Secured clusters (#18): push no-op and produce with ACL signing, TLS, and both, as ratios to plain.

One embedded cluster in a child process serves all four client kinds at once: TLS in ``permissive``
mode (TLS and plain on one port, trustme certificates) and ACL on, with 127.0.0.1 in the ACL's
``globalWhiteRemoteAddresses``. A globally whitelisted address passes 4.9.8's check before the access
key is even read (``PlainPermissionManager.validate``), so unsigned and signed requests both get
through and the broker does the same work for every kind (it parses each request's resources, then
stops at the whitelist): the difference between the kinds is the client's. The broker does not verify
the signatures here; its own (Python) check is not what a user of a Java broker pays.

* ``plain``   -- unsigned, plain TCP (the baseline of each round);
* ``acl``     -- every request signed (``RMQ_ACCESS_KEY`` / ``RMQ_SECRET_KEY``: HMAC-SHA1 over the
  ext fields and the body);
* ``tls``     -- TLS (``RMQ_TLS=1``, ``RMQ_TLS_CA_FILE``), server verified;
* ``acl+tls`` -- both.

Every run is a fresh process on ``--loop`` (uvloop, asyncio or both). push: drain ``--messages``
preloaded 1 KiB messages over 8 queues with a no-op handler, fresh group
(``rmq_async.bench.scenarios.run_push``); produce: ``--sends`` single 1 KiB sends, 64 in flight. In
each round, each loop and scenario run the four kinds back to back, in an order rotated round by round
(each kind takes each place equally often), so a shared machine's drift hits them alike. Reported per
loop and scenario: the median msgs/s per kind, the median of the per-round ratios kind / plain with
their range, and the client's CPU per message (median, and the median of the per-round ratios to
plain). A run that fails (its stderr is printed) leaves its round out of its loop and scenario.

    python benchmarks/bench_secure.py [--rounds 8] [--messages 200000] [--sends 20000] [--loop both]
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
sys.path.insert(0, str(ROOT))

from rmq_async.bench.cli import _bench_acl  # noqa: E402
from rmq_async.bench.cluster import ChildCluster, create_topic, preload  # noqa: E402
from rmq_async.cli.auth import export_credentials  # noqa: E402
from rmq_async.config import ENV_TLS, ENV_TLS_CA_FILE, Credentials  # noqa: E402

KINDS = ("plain", "acl", "tls", "acl+tls")

_CHILD = """
import asyncio, json, sys, time
scenario, loop, namesrv, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

async def produce():
    import anyio
    from rmq_async import Message, Producer
    body = b"x" * 1024
    async with Producer("bench_secure_pg", namesrv_addr=namesrv) as p:
        await p.send(Message(topic, body))  # route and connection
        left = n
        c0, t0 = time.process_time(), time.perf_counter()

        async def lane():
            nonlocal left
            while left > 0:
                left -= 1
                await p.send(Message(topic, body))

        async with anyio.create_task_group() as tg:
            for _ in range(64):
                tg.start_soon(lane)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"msgs_per_s": n / secs, "cpu_us_per_msg": cpu / n * 1e6}

def push():
    from rmq_async.bench import scenarios
    p = {"scenario": "push", "namesrv": namesrv, "topic": topic, "messages": n, "timeout": 300}
    return scenarios.run_push(p)

coro = push() if scenario == "push" else produce()
if loop == "uvloop":
    import uvloop
    r = uvloop.run(coro)
else:
    r = asyncio.run(coro)
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"]}))
"""


def _env(kind: str, creds: Credentials, ca: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_TLS")}
    env["PYTHONPATH"] = str(ROOT)
    export_credentials(creds if "acl" in kind else None, env)  # secrets in the environment, not argv
    if "tls" in kind:
        env.update({ENV_TLS: "1", ENV_TLS_CA_FILE: ca})
    return env


def _run(
    scenario: str, loop: str, namesrv: str, topic: str, n: int, env: dict[str, str]
) -> dict[str, float] | None:
    """One run's result; None (its stderr printed) if it failed: its round is left out of the table."""
    cmd = [sys.executable, "-c", _CHILD, scenario, loop, namesrv, topic, str(n)]
    proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{scenario} run on {loop} failed ({proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--messages", type=int, default=200_000, help="push: messages drained per run")
    ap.add_argument("--sends", type=int, default=20_000, help="produce: messages sent per run")
    ap.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    args = ap.parse_args()
    loops = ("uvloop", "asyncio") if args.loop == "both" else (args.loop,)
    tmp_dir = tempfile.TemporaryDirectory()
    # 127.0.0.1 globally whitelisted: unsigned and signed requests both pass (see the docstring)
    creds, acl_file = _bench_acl(Path(tmp_dir.name), global_white=("127.0.0.1",))
    # (loop, scenario) -> one {kind: result} per round whose four runs all completed
    rounds: dict[tuple[str, str], list[dict[str, dict[str, float]]]] = {}
    t0 = time.perf_counter()
    with tmp_dir as tmp:
        ca = trustme.CA()
        ca_file, srv = str(Path(tmp) / "ca.pem"), str(Path(tmp) / "srv.pem")
        ca.cert_pem.write_to_path(ca_file)
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(srv)
        cluster = ChildCluster(queues=8, acl_file=acl_file, tls_mode="permissive", tls_cert=srv)
        with cluster:
            ns = cluster.namesrv_addr
            export_credentials(None)
            asyncio.run(create_topic(ns, "SecureBenchPush", 8))
            asyncio.run(create_topic(ns, "SecureBenchSend", 8))
            rate = asyncio.run(preload(ns, "SecureBenchPush", args.messages, 1024, progress=False))
            print(f"preloaded {args.messages:,} x 1 KiB at {rate:,.0f}/s", file=sys.stderr, flush=True)
            envs = {k: _env(k, creds, ca_file) for k in KINDS}
            for r in range(args.rounds):
                order = KINDS[r % 4 :] + KINDS[: r % 4]
                for loop in loops:
                    for scenario, topic, n in (
                        ("push", "SecureBenchPush", args.messages),
                        ("produce", "SecureBenchSend", args.sends),
                    ):
                        got = {}
                        for kind in order:
                            res = _run(scenario, loop, ns, topic, n, envs[kind])
                            if res is None:
                                continue
                            got[kind] = res
                            print(
                                f"round {r + 1} {loop:7} {scenario:7} {kind:7}: {res['msgs_per_s']:>9,.0f} "
                                f"msgs/s, {res['cpu_us_per_msg']:6.2f} us CPU/msg",
                                file=sys.stderr,
                                flush=True,
                            )
                        if len(got) == len(KINDS):
                            rounds.setdefault((loop, scenario), []).append(got)
    print(f"\n{args.rounds} rounds, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    _table(rounds, loops)


def _table(rounds: dict[tuple[str, str], list[dict[str, dict[str, float]]]], loops: tuple[str, ...]) -> None:
    """Per loop, scenario and kind: median msgs/s, median and range of the per-round ratios to plain,
    median CPU per message and the median of the per-round CPU ratios to plain."""
    med = statistics.median
    print("| loop | scenario | kind | rounds | msgs/s (median) | ratio to plain (median of rounds, range) "
          "| client CPU us/msg (median) | CPU / plain (median of rounds) |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for loop in loops:
        for scenario in ("push", "produce"):
            done = rounds.get((loop, scenario), [])
            if not done:
                continue
            for kind in KINDS:
                rate = [g[kind]["msgs_per_s"] for g in done]
                cpu = [g[kind]["cpu_us_per_msg"] for g in done]
                rs = [g[kind]["msgs_per_s"] / g["plain"]["msgs_per_s"] for g in done]
                cs = [g[kind]["cpu_us_per_msg"] / g["plain"]["cpu_us_per_msg"] for g in done]
                plain = kind == "plain"
                ratio = "1" if plain else f"**{med(rs):.2f}** ({min(rs):.2f}-{max(rs):.2f})"
                label = "push no-op" if scenario == "push" else "produce"
                cpu_ratio = "1" if plain else f"{med(cs):.2f}"
                print(
                    f"| {loop} | {label} | {kind} | {len(done)} | {med(rate):,.0f} | {ratio} "
                    f"| {med(cpu):.2f} | {cpu_ratio} |"
                )


if __name__ == "__main__":
    main()
