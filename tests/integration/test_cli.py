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


async def test_consume_of_a_topic_created_later_consumes_it_once_it_exists(names: tuple[str, str]) -> None:
    # the name server does not know the topic when the command starts: it waits (no exit 2), and the
    # messages of the producer that then creates the topic are consumed
    topic, group = names
    async with EmbeddedCluster(queues=2, timing=Timing.fast()) as cluster:
        args = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", "consume"]
        args += ["--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic]
        args += ["--count", "5", "--idle-exit", "20", "--from", "first"]
        async with await anyio.open_process(args, env=child_env()) as proc:
            assert proc.stderr is not None
            err = b""
            with anyio.fail_after(20):  # it looked the topic up, found nothing, and waits
                async for chunk in proc.stderr:
                    err += chunk
                    if b"does not exist yet" in err:
                        break
            assert proc.returncode is None, err.decode()
            await produce(cluster.namesrv_addr, topic, 5)  # auto-creates the topic
            with anyio.fail_after(30):
                await proc.wait()
            assert proc.stdout is not None
            out = b""
            async for chunk in proc.stdout:
                out += chunk
    assert proc.returncode == 0
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["unique_keys"] == 5, summary
