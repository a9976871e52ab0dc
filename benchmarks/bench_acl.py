"""The throughput cost of ACL (#18): push no-op consumption and produce, with ACL off and on, in one run.

Two embedded clusters run side by side in child processes, one plain and one enforcing a plain_acl.yml
(one account made for the run). Three variants take turns, round by round in rotating order, so a
shared machine's drift hits them alike:

* ``off``  -- unsigned clients against the plain cluster (the baseline);
* ``sign`` -- clients signing every request (HMAC-SHA1 over the ext fields and the body) against the
  plain cluster, which ignores the signature: the client's own cost;
* ``acl``  -- signing clients against the ACL cluster, which checks every request: what a user sees
  with the embedded broker (a real broker's check costs what it costs on the JVM).

Every run is a fresh process (uvloop): the push run drains ``--messages`` preloaded 1 KiB messages over
8 queues with a fresh group (``rmq_async.bench.scenarios.run_push``), the produce run sends
``--sends`` 1 KiB messages one by one, 64 in flight. Reported: the median msgs/s per variant and the
median of the per-round ratios to ``off``, with the consumer's or producer's CPU per message.

    python benchmarks/bench_acl.py [--rounds 6] [--messages 200000] [--sends 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async.bench.cluster import ChildCluster, create_topic, preload  # noqa: E402
from rmq_async.cli_auth import export_credentials  # noqa: E402
from rmq_async.config import Credentials  # noqa: E402

_PUSH = """
import json, sys, uvloop
from rmq_async.bench import scenarios
namesrv, topic, n = sys.argv[1:4]
p = {"scenario": "push", "namesrv": namesrv, "topic": topic, "messages": int(n), "timeout": 300}
r = uvloop.run(scenarios.run_push(p))
print(json.dumps({"msgs_per_s": r["msgs_per_s"], "cpu_us_per_msg": r["cpu_us_per_msg"]}))
"""

_PRODUCE = """
import json, sys, time, anyio, uvloop
from rmq_async import Message, Producer
namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = b"x" * 1024

async def main():
    async with Producer("bench_acl_pg", namesrv_addr=namesrv) as p:
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
    print(json.dumps({"msgs_per_s": n / secs, "cpu_us_per_msg": cpu / n * 1e6}))

uvloop.run(main())
"""


def _run(code: str, namesrv: str, topic: str, n: int, creds: Credentials | None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    export_credentials(creds, env)  # the child's clients sign when these are set
    cmd = [sys.executable, "-c", code, namesrv, topic, str(n)]
    out = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--messages", type=int, default=200_000, help="push: messages drained per run")
    ap.add_argument("--sends", type=int, default=30_000, help="produce: messages sent per run")
    args = ap.parse_args()
    creds = Credentials(access_key="benchAdmin", secret_key=secrets.token_urlsafe(24))
    account = {
        "accessKey": creds.access_key,
        "secretKey": creds.secret_key.get_secret_value(),
        "admin": True,
        "defaultTopicPerm": "PUB|SUB",
        "defaultGroupPerm": "PUB|SUB",
    }
    variants: dict[str, tuple[str, Credentials | None]] = {}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        acl_file = Path(tmp) / "plain_acl.yml"
        acl_file.write_text(json.dumps({"accounts": [account]}))
        with ChildCluster(queues=8) as plain, ChildCluster(queues=8, acl_file=str(acl_file)) as secured:
            for name, cluster, c in (("plain", plain, None), ("acl", secured, creds)):
                export_credentials(c)
                asyncio.run(create_topic(cluster.namesrv_addr, "AclBenchPush", 8))
                asyncio.run(create_topic(cluster.namesrv_addr, "AclBenchSend", 8))
                rate = asyncio.run(preload(cluster.namesrv_addr, "AclBenchPush", args.messages, 1024))
                print(f"{name}: preloaded {args.messages:,} at {rate:,.0f}/s", flush=True)
            export_credentials(None)
            variants = {
                "off": (plain.namesrv_addr, None),
                "sign": (plain.namesrv_addr, creds),
                "acl": (secured.namesrv_addr, creds),
            }
            order = list(variants)
            for r in range(args.rounds):
                rot = order[r % 3 :] + order[: r % 3]
                for kind, code, topic, n in (
                    ("push", _PUSH, "AclBenchPush", args.messages),
                    ("produce", _PRODUCE, "AclBenchSend", args.sends),
                ):
                    for v in rot:
                        ns, c = variants[v]
                        res = _run(code, ns, topic, n, c)
                        results.setdefault((kind, v), []).append(res)
                        print(
                            f"round {r} {kind:7} {v:4}: {res['msgs_per_s']:>9,.0f} msgs/s, "
                            f"{res['cpu_us_per_msg']:.2f} us CPU/msg",
                            flush=True,
                        )
    print()
    print("| scenario | variant | msgs/s (median) | ratio to off (median of rounds) | CPU us/msg (median) |")
    print("|---|---|---:|---:|---:|")
    for kind in ("push", "produce"):
        base = results[(kind, "off")]
        for v in variants:
            runs = results[(kind, v)]
            ratio = statistics.median(
                x["msgs_per_s"] / b["msgs_per_s"] for x, b in zip(runs, base, strict=True)
            )
            med = statistics.median(x["msgs_per_s"] for x in runs)
            cpu = statistics.median(x["cpu_us_per_msg"] for x in runs)
            label = "push no-op" if kind == "push" else "produce"
            print(f"| {label} | {v} | {med:,.0f} | {ratio:.3f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
