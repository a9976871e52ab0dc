"""EmbeddedCluster(process=True) and the ``python -m rmq_async.embedded`` command line."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient


async def test_process_cluster_starts_and_stops() -> None:
    cluster = EmbeddedCluster(brokers=2, timing=Timing.fast(), process=True)
    async with cluster:
        assert cluster.namesrv_addr.startswith("127.0.0.1:")
        assert [b.name for b in cluster.brokers] == ["broker-a", "broker-b"]
        proc = cluster._proc
        assert proc is not None
        async with RawClient(cluster.brokers[1].addr) as b:
            r = await b.send("ProcTopic", b"x")
            assert r.code == 0
        await cluster.create_topic("ProcCreated")
        async with RawClient(cluster.namesrv_addr) as ns:
            r = await ns.request(105, {"topic": "ProcCreated"})
            assert r.code == 0 and r.body.count(b'"brokerName"') == 4
    assert proc.returncode == 0


async def test_cli_prints_namesrv_first_and_exits_0_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rmq_async.embedded",
        "--port",
        "0",
        "--timing",
        "fast",
        "--queues",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert first.startswith("namesrv=127.0.0.1:")
        async with RawClient(first.strip().partition("=")[2]) as ns:
            r = await ns.request(105, {"topic": "TBW102"})
            assert r.code == 0 and b'"readQueueNums":2' in r.body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_child_dies_with_stdin_eof() -> None:
    cluster = EmbeddedCluster(timing=Timing.fast(), process=True)
    await cluster.__aenter__()
    proc = cluster._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what the OS does when the parent dies
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    await cluster.__aexit__(None, None, None)


async def test_pull_transfer_limits_reach_the_child_process() -> None:
    # maxTransferCountOnMessageInMemory raised on a child cluster (its command line): a pull asking
    # for 64 gets 50; Java's default answers 32
    from .rawclient import decode_messages

    for count in (50, 32):  # 32: the default, no flag on the command line
        cluster = EmbeddedCluster(timing=Timing.fast(), process=True, max_transfer_count=count)
        async with cluster, RawClient(cluster.brokers[0].addr) as b:
            for i in range(80):
                assert (await b.send("BigPulls", b"m%d" % i, queues=1)).code == 0
            r = await b.pull("g", "BigPulls", 0, 0, max_nums=64, sys_flag=4, subscription="*")
            assert r.code == 0 and len(list(decode_messages(r.body))) == count


def test_transfer_limits_must_be_positive() -> None:
    import argparse

    import pytest

    from rmq_async.embedded.cli import add_arguments

    def build_parser() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return parser

    with pytest.raises(ValueError, match="max_transfer_count must be a positive integer"):
        EmbeddedCluster(max_transfer_count=0)
    with pytest.raises(ValueError, match="max_transfer_bytes"):
        EmbeddedCluster(max_transfer_bytes=True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-transfer-count", "x"])
    assert build_parser().parse_args(["--max-transfer-bytes", "1048576"]).max_transfer_bytes == 1 << 20


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"brokers": 0}, "brokers"),
        ({"brokers": "2"}, "brokers"),
        ({"queues": 0}, "queues"),
        ({"port": -1}, "port"),
        ({"port": 99999}, "port"),
        ({"flavour": 3}, "flavour"),
        ({"max_transfer_count": 0}, "max_transfer_count"),
    ],
)
def test_a_bad_embedded_cluster_argument_is_a_config_error(kwargs: dict[str, object], words: str) -> None:
    from rmq_async import ConfigError

    with pytest.raises(ConfigError, match=words):
        EmbeddedCluster(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("subscriptions", [["T"], "T", {"T": 5}, {5: "*"}])
def test_push_consumer_subscriptions_of_the_wrong_shape_are_a_config_error(subscriptions: object) -> None:
    from rmq_async import ConfigError, PushConsumer

    with pytest.raises(ConfigError, match="subscriptions"):
        PushConsumer("g_shape", namesrv_addr="127.0.0.1:1", subscriptions=subscriptions)  # type: ignore[arg-type]
