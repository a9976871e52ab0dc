"""``rmq-async admin set-consume-mode`` and ``rmq-async consume --pop``, as child processes."""

from __future__ import annotations

import json
import sys

import anyio
import pytest
from support.integration import child_env, produce

from rmq_async import Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.embedded.pop import pop_state

CLI = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop"]


@pytest.mark.slow  # two CLI child processes, about 14 s; .ci/run's `-m slow` step runs it
async def test_set_consume_mode_then_consume_pop(names: tuple[str, str]) -> None:
    topic, group = names
    async with EmbeddedCluster(brokers=2, queues=2, timing=Timing.fast(), flavour=5) as cluster:
        await cluster.create_topic(topic, queues=2)
        admin = [*CLI, "admin", "set-consume-mode", "--namesrv", cluster.namesrv_addr]
        admin += ["--topic", topic, "--group", group, "--mode", "POP", "--pop-share-queue-num", "3"]
        with anyio.fail_after(20):
            out = await anyio.run_process(admin, env=child_env(), check=False)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        lines = out.stdout.decode().splitlines()
        assert sorted(lines) == sorted(f"{b.addr}: OK" for b in cluster.brokers)  # every broker of the topic
        for b in cluster.brokers:
            assert pop_state(b.context).modes[(topic, group)] == ("POP", 3)
        await produce(cluster.namesrv_addr, topic, 30)
        args = [
            *CLI,
            "consume",
            "--pop",
            "--namesrv",
            cluster.namesrv_addr,
            "--group",
            group,
            "--topic",
            topic,
        ]
        args += ["--from", "first", "--fail-every", "5", "--idle-exit", "3"]
        with anyio.fail_after(60):
            out = await anyio.run_process(args, env=child_env(), check=False)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
        assert summary["unique_keys"] == 30, summary  # the failed first deliveries came back by POP
        assert any(pop_state(b.context).changed for b in cluster.brokers)


async def test_set_consume_mode_refusals_exit_1(names: tuple[str, str]) -> None:
    topic, group = names
    async with EmbeddedCluster(queues=2, timing=Timing.fast(), flavour=5) as cluster:
        await cluster.create_topic(topic, queues=2)
        args = [*CLI, "admin", "set-consume-mode", "--namesrv", cluster.namesrv_addr, "--group", group]
        with anyio.fail_after(20):
            out = await anyio.run_process(
                [*args, "--topic", "NoSuchPopTopic", "--mode", "PULL"], env=child_env(), check=False
            )
        assert out.returncode == 1 and b"NoSuchPopTopic" in out.stderr + out.stdout
        with anyio.fail_after(20):
            out = await anyio.run_process(
                [*args, "--topic", topic, "--mode", "PULL"], env=child_env(), check=False
            )
        assert out.returncode == 0, out.stderr.decode()
        assert pop_state(cluster.brokers[0].context).modes[(topic, group)] == ("PULL", 0)
