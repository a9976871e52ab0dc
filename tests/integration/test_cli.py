"""``rmq-async consume`` as a user runs it against a cluster (a child process, real sockets)."""

from __future__ import annotations

import json
import sys

import anyio
from helpers import child_env, produce

from rmq_async import EmbeddedCluster, Timing


async def test_consume_fail_every_waits_for_the_retries_longer_than_the_idle_exit(
    names: tuple[str, str],
) -> None:
    # delay level 3 (what a send-back with level 0 gets first) is 3 s here, longer than --idle-exit 1:
    # the command must still see every message, the failed ones through their retries (on a real
    # broker level 3 is 10 s, the default --idle-exit)
    topic, group = names
    async with EmbeddedCluster(queues=2, timing=Timing.fast(), delay_levels="1s 2s 3s 4s 5s") as cluster:
        await cluster.create_topic(topic, queues=2)
        await produce(cluster.namesrv_addr, topic, 20)
        args = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", "consume"]
        args += ["--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic]
        args += ["--fail-every", "5", "--idle-exit", "1"]
        with anyio.fail_after(60):
            out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["unique_keys"] == 20, summary  # the 4 failed first deliveries came back
    assert summary["consumed"] == 20 and summary["duplicates"] == 0, summary
