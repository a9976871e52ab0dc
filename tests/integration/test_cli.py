"""``rmq-async consume`` as a user runs it against a cluster (a child process, real sockets)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.integration import child_env, produce

from rmq_async import Message, Producer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.mq import MessageQueue


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


async def test_cli_order_violations_does_not_merge_same_queue_id_of_two_brokers(
    names: tuple[str, str],
) -> None:
    # A real cluster has several brokers: the topic's queue 0 on broker-a and its queue 0 on broker-b
    # are different queues, consumed concurrently. Message i goes to broker (i % 2), queue 0, so each
    # queue holds strictly increasing send indexes and an orderly consumer consumes each in order: the
    # summary must report 0 order violations (cli.py keys its per-queue check on (topic, queue_id)).
    topic, group = names
    async with EmbeddedCluster(brokers=2, queues=1, timing=Timing.fast()) as cluster:
        await cluster.create_topic(topic, queues=1)
        async with Producer("review_orderly_pg", namesrv_addr=cluster.namesrv_addr) as p:

            def by_index(queues: Sequence[MessageQueue], msg: Message, arg: int) -> MessageQueue:
                ordered = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
                return ordered[arg % len(ordered)]

            for i in range(40):
                await p.send(Message(topic, b"x", keys=f"k-{i}"), selector=by_index, arg=i)
        args = [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", "consume", "--orderly"]
        args += ["--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic]
        args += ["--count", "40", "--idle-exit", "5"]
        with anyio.fail_after(25):
            out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["unique_keys"] == 40, summary
    assert summary["order_violations"] == 0, summary


async def _consume_keys_by_queue(
    names: tuple[str, str], keys_by_queue: Sequence[Sequence[str]], *flags: str
) -> dict[str, Any]:
    """Send each queue's keys to it (queue i of a fresh topic), then ``consume`` them all: the summary."""
    topic, group = names
    count = sum(map(len, keys_by_queue))
    async with EmbeddedCluster(queues=len(keys_by_queue), timing=Timing.fast()) as cluster:
        await cluster.create_topic(topic, queues=len(keys_by_queue))
        async with Producer("order_check_pg", namesrv_addr=cluster.namesrv_addr) as p:

            def to_queue(queues: Sequence[MessageQueue], msg: Message, arg: int) -> MessageQueue:
                return sorted(queues, key=lambda q: q.queue_id)[arg]

            for q, keys in enumerate(keys_by_queue):
                for key in keys:
                    await p.send(Message(topic, b"x", keys=key), selector=to_queue, arg=q)
        args = _cli("consume", *flags, "--namesrv", cluster.namesrv_addr, "--group", group)
        args += ["--topic", topic, "--count", str(count), "--idle-exit", "5"]
        with anyio.fail_after(25):
            out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["unique_keys"] == count and summary["duplicates"] == 0, summary
    return summary


async def test_cli_counts_order_violations_of_each_queue(names: tuple[str, str]) -> None:
    # queue 0 holds k-9 ... k-0 (send indexes going down: 9 violations in offset order), queue 1 holds
    # k-10 ... k-19 (in order: none); the retries and repeats the summary leaves out are not in play
    down = [f"k-{i}" for i in range(9, -1, -1)]
    summary = await _consume_keys_by_queue(names, [down, [f"k-{i}" for i in range(10, 20)]], "--orderly")
    assert summary["order_violations"] == 9, summary


async def test_cli_order_check_across_key_lengths_and_prefixes(names: tuple[str, str]) -> None:
    # one batch a queue: queue 0 k-95 ... k-104 (in order across a change of length: none), queue 1
    # k-8, k-9, k-10, then x-5 (another prefix, its integer going down: one) and k-11 (up again)
    across = [f"k-{i}" for i in range(95, 105)]
    summary = await _consume_keys_by_queue(names, [across, ["k-8", "k-9", "k-10", "x-5", "k-11"]], "--quiet")
    assert summary["order_violations"] == 1, summary


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rmq_async.cli", "--no-uvloop", *args]


async def test_cli_produce_seconds_exclude_the_shutdown(timing: Timing) -> None:
    # _produce measures "seconds" after `await producer.stop()` (unregister from every broker, up to
    # request_timeout each), so a slow or dead broker at shutdown inflates seconds and deflates
    # msgs_per_s. Here UNREGISTER_CLIENT is answered after 2 s: 10 sends report >= 2 s.
    topic = "ReviewSecs"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        await cluster.create_topic(topic, queues=4)
        cluster.brokers[0].faults.delay(RequestCode.UNREGISTER_CLIENT, 2.0)
        with anyio.fail_after(30):
            out = await anyio.run_process(
                _cli(
                    "produce", "--namesrv", cluster.namesrv_addr, "--topic", topic, "--count", "10", "--quiet"
                ),
                env=child_env(),
                check=False,
            )
    assert out.returncode == 0, out.stderr.decode()[-1000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["sent"] == 10 and summary["failed"] == 0, summary
    assert summary["seconds"] < 1.5, summary


async def test_cli_consume_waits_for_a_topic_not_created_yet(timing: Timing) -> None:
    # Java DefaultMQPushConsumer on a topic the name server does not know yet keeps running and
    # picks the route up at a later refresh; the usual "start consume --from last, then produce to a
    # new (auto-created) topic" works. `rmq-async consume` exits 2 at once ("cannot reach the cluster
    # or topic") although the name server answered.
    topic = "ReviewLater"
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        args = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", "review_later_cg")
        args += ["--topic", topic, "--from", "last", "--idle-exit", "30"]
        proc = await anyio.open_process(args, env=child_env())
        try:
            await anyio.sleep(4.0)
            code = proc.returncode
            err = b""
            if code is not None and proc.stderr is not None:
                err = await proc.stderr.receive()
        finally:
            if proc.returncode is None:
                proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
            await proc.aclose()
    assert code is None, (code, err.decode()[-500:])


async def test_cli_produce_illegal_topic_prints_a_message_not_a_traceback(timing: Timing) -> None:
    # Java: Validators.checkTopic throws MQClientException "The specified topic[...] contains illegal
    # characters". The CLI lets the ValueError from Message() escape its task group: an exception
    # group traceback, no JSON line, no "rmq-async:" message.
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        with anyio.fail_after(20):
            out = await anyio.run_process(
                _cli("produce", "--namesrv", cluster.namesrv_addr, "--topic", "bad.topic", "--count", "2"),
                env=child_env(),
                check=False,
            )
    err = out.stderr.decode()
    assert out.returncode != 0
    assert "Traceback" not in err and "rmq-async:" in err, err[-800:]


async def _consume_in_child(namesrv: str, topic: str, group: str, *extra: str) -> dict[str, Any]:
    args = _cli("consume", "--namesrv", namesrv, "--group", group, "--topic", topic, *extra)
    with anyio.fail_after(60):
        out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return summary


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_consume_stops_gracefully_on_a_signal_and_commits(
    names: tuple[str, str], signum: signal.Signals
) -> None:
    # Docker and Kubernetes stop a container with SIGTERM (Ctrl-C is SIGINT): the command stops
    # pulling, lets its handlers finish, commits, unregisters, prints its JSON summary and exits 0; a
    # re-run of the group then has nothing left to consume
    topic, group = names
    async with EmbeddedCluster(queues=2, timing=Timing.fast()) as cluster:
        await cluster.create_topic(topic, queues=2)
        await produce(cluster.namesrv_addr, topic, 40)
        args = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic)
        args += ["--idle-exit", "60", "--print"]
        async with await anyio.open_process(args, env=child_env()) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            out = b""
            with anyio.fail_after(30):
                async for chunk in proc.stdout:  # every message printed: the command idles now
                    out += chunk
                    if out.count(b'"topic"') >= 40:
                        break
            proc.send_signal(signum)
            with anyio.fail_after(30):
                async for chunk in proc.stdout:
                    out += chunk
                await proc.wait()
            err = b"".join([chunk async for chunk in proc.stderr])
        assert proc.returncode == 0, err.decode()[-2000:]
        summary = json.loads(out.decode().strip().splitlines()[-1])
        assert summary["unique_keys"] == 40 and summary["consumed"] == 40, summary
        assert summary["signal"] == signum.name and summary["stopped_cleanly"], summary
        again = await _consume_in_child(cluster.namesrv_addr, topic, group, "--idle-exit", "3")
        assert again["consumed"] == 0, again


async def test_bench_stops_gracefully_on_sigterm_and_reports_the_runs_done(tmp_path: Path) -> None:
    # SIGTERM between or during runs: the running worker is killed, the embedded cluster stopped, the
    # completed runs reported (stdout JSON line, result.json) marked stopped_by, exit 0
    args = _cli("bench", "push", "--messages", "2000", "--queues", "2", "--runs", "30", "--loop", "asyncio")
    args += ["--out", str(tmp_path), "--no-plots"]
    async with await anyio.open_process(args, env=child_env()) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        err = b""
        with anyio.fail_after(60):
            async for chunk in proc.stderr:
                err += chunk
                if b"run 1/30" in err:
                    break
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            async for chunk in proc.stderr:
                err += chunk
            await proc.wait()
        out = b"".join([chunk async for chunk in proc.stdout])
    assert proc.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["stopped_by"] == "SIGTERM" and summary["scenario"] == "push", summary
    assert 1 <= len(summary["runs"]) < 30, summary
    assert json.loads((tmp_path / "result.json").read_text())["stopped_by"] == "SIGTERM"


async def _embedded_until_sigterm(data_dir: Path, during: Callable[[str], Awaitable[None]]) -> None:
    args = _cli("embedded", "--port", "0", "--timing", "fast", "--queues", "2", "--data-dir", str(data_dir))
    async with await anyio.open_process(args, env=child_env()) as proc:
        assert proc.stdout is not None
        out = b""
        with anyio.fail_after(20):
            async for chunk in proc.stdout:
                out += chunk
                if b"\n" in out:
                    break
        namesrv = out.decode().splitlines()[0].partition("=")[2]
        await during(namesrv)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            await proc.wait()
    assert proc.returncode == 0


async def test_embedded_flushes_its_data_dir_on_sigterm(tmp_path: Path) -> None:
    # `rmq-async embedded --data-dir` stopped by SIGTERM keeps the messages and the committed offsets:
    # the next run on that directory has them
    topic, group = "SigtermKept", "sigterm_kept_cg"

    async def first(namesrv: str) -> None:
        await produce(namesrv, topic, 10)
        done = await _consume_in_child(namesrv, topic, group, "--count", "10", "--idle-exit", "10")
        assert done["unique_keys"] == 10, done

    async def second(namesrv: str) -> None:
        again = await _consume_in_child(namesrv, topic, group, "--idle-exit", "3")
        assert again["consumed"] == 0, again  # the offsets were kept
        other = await _consume_in_child(
            namesrv, topic, "sigterm_other_cg", "--count", "10", "--idle-exit", "10"
        )
        assert other["unique_keys"] == 10, other  # and the messages

    await _embedded_until_sigterm(tmp_path, first)
    await _embedded_until_sigterm(tmp_path, second)


async def test_consume_says_what_it_compared_and_when_keys_repeat_from_before_the_start(
    names: tuple[str, str],
) -> None:
    # an earlier producer run left k-0..k-9 in the topic, a later one sent the same keys again: the
    # duplicates and the order violations are those repeated keys, which the summary must say
    topic, group = names
    async with EmbeddedCluster(queues=1, timing=Timing.fast()) as cluster:
        await cluster.create_topic(topic, queues=1)
        await produce(cluster.namesrv_addr, topic, 10)
        await produce(cluster.namesrv_addr, topic, 10)
        args = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic)
        args += ["--from", "first", "--idle-exit", "2", "--quiet"]
        with anyio.fail_after(60):
            out = await anyio.run_process(args, env=child_env(), check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert summary["consumed"] == 20 and summary["duplicates"] == 10, summary
    assert summary["order_violations"] == 1, summary  # k-9 then k-0 in the one queue
    assert "by key" in summary["compared"], summary
    assert summary["produced_before_start"] == 20, summary
    # all of them are repeats of keys sent before the run (the second k-0..k-9), not redeliveries
    assert "10 of the duplicates and 1 of the order violations involve their keys" in summary["note"], summary
    assert "10 of the duplicates and 1 of the order violations" in summary["note"], summary
