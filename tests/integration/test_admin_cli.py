"""``rmq-async admin ...`` run in-process (``main(argv)`` in a worker thread, its own event loop)
against the embedded cluster: one JSON object per command off a terminal, exit 1 for a refusal, 2 for
bad input; the table a terminal gets."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from support.integration import Collector, consumer, produce

from rmq_async import Timing
from rmq_async.cli import main
from rmq_async.cli.admin import _table
from rmq_async.embedded import EmbeddedCluster


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """(exit status, the JSON object printed or None, stderr)."""
    capsys.readouterr()

    def run() -> int:
        try:
            return main(["--no-uvloop", "admin", *argv])
        except SystemExit as exc:  # argparse's errors (one line, exit 2): what the process exits with
            return int(exc.code or 0)

    with anyio.fail_after(30):
        code = await anyio.to_thread.run_sync(run)
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None, err


async def test_topic_commands(
    cluster: EmbeddedCluster, names: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    topic, _ = names
    ns = ["--namesrv", cluster.namesrv_addr]
    code, obj, err = await _cli(
        capsys, "topic", "create", *ns, "--topic", topic, "--read-queues", "2", "--write-queues", "2"
    )
    assert code == 0 and obj == {"topic": topic, "brokers": [cluster.brokers[0].registered_addr]}, err
    code, obj, _ = await _cli(capsys, "topic", "list", *ns)
    assert code == 0 and topic in obj["topics"]
    code, obj, _ = await _cli(capsys, "topic", "route", *ns, "--topic", topic)
    assert code == 0 and obj["route"]["queueDatas"][0]["readQueueNums"] == 2
    await produce(cluster.namesrv_addr, topic, 3)
    code, obj, _ = await _cli(capsys, "topic", "status", *ns, "--topic", topic)
    assert code == 0 and sum(q["max_offset"] for q in obj["queues"]) == 3
    assert obj["queues"][0]["mq"] == {"topic": topic, "broker": cluster.brokers[0].name, "queue": 0}
    code, obj, _ = await _cli(capsys, "cluster", *ns)
    assert code == 0 and obj["brokers"][0]["stats"]["brokerVersionDesc"] == "V4_9_8"
    code, obj, _ = await _cli(capsys, "topic", "delete", *ns, "--topic", topic)
    assert code == 0 and obj == {"topic": topic, "deleted": True}
    code, obj, err = await _cli(capsys, "topic", "route", *ns, "--topic", topic)
    assert code == 1 and obj is None and err.count("\n") == 1 and topic in err


async def test_group_and_message_commands(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = names
    ns = ["--namesrv", cluster.namesrv_addr]
    await cluster.create_topic(topic, 1)
    sent = await produce(cluster.namesrv_addr, topic, 4)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing):
        await col.wait_unique(4)
        code, obj, _ = await _cli(capsys, "group", "connections", *ns, "--group", group)
        assert code == 0 and obj["online"] and obj["subscriptions"] == {topic: "*", f"%RETRY%{group}": "*"}
    code, obj, _ = await _cli(capsys, "group", "list", *ns)
    assert code == 0 and group in obj["groups"]
    code, obj, _ = await _cli(
        capsys, "group", "reset", *ns, "--group", group, "--topic", topic, "--to-offset", "0=1"
    )
    assert code == 0 and obj["offsets"] == [
        {"topic": topic, "broker": cluster.brokers[0].name, "queue": 0, "offset": 1}
    ]
    code, obj, _ = await _cli(capsys, "group", "progress", *ns, "--group", group, "--topic", topic)
    assert code == 0 and obj["total_lag"] == 3
    code, obj, _ = await _cli(
        capsys, "group", "reset", *ns, "--group", group, "--topic", topic, "--to-latest"
    )
    assert code == 0 and obj["offsets"][0]["offset"] == 4
    code, obj, _ = await _cli(capsys, "message", "get", *ns, "--id", sent[2].offset_msg_id, "--body")
    assert code == 0 and obj["message"]["keys"] == "k-2" and obj["message"]["body"].startswith("body-2-")
    code, obj, _ = await _cli(capsys, "message", "get", *ns, "--id", sent[3].msg_id, "--topic", topic)
    assert code == 0 and obj["message"]["msg_id"] == sent[3].msg_id
    code, obj, _ = await _cli(capsys, "message", "query", *ns, "--topic", topic, "--key", "k-1")
    assert code == 0 and [m["keys"] for m in obj["messages"]] == ["k-1"]
    code, obj, err = await _cli(capsys, "message", "trace", *ns, "--id", sent[0].msg_id)
    assert code == 1 and "RMQ_SYS_TRACE_TOPIC" in err  # this cluster has no trace topic


async def test_running_info_and_resend_of_a_live_member(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, capsys: pytest.CaptureFixture[str]
) -> None:
    """``group running-info`` (mqadmin consumerStatus -g -i) and ``message resend`` (queryMsgById -g
    -d -i), over Admin.running_info and Admin.consume_directly."""
    topic, group = names
    ns = ["--namesrv", cluster.namesrv_addr]
    await cluster.create_topic(topic, 2)
    sent = await produce(cluster.namesrv_addr, topic, 3)
    col = Collector()
    async with consumer(cluster, group, topic, col, timing) as c:
        await col.wait_unique(3)
        member = ["--group", group, "--client-id", c.client_id]
        code, obj, err = await _cli(capsys, "group", "running-info", *ns, *member)
        assert code == 0, err
        assert obj["client_id"] == c.client_id and obj["properties"]["consumerGroup"] == group
        assert obj["subscriptions"] == {topic: "*", f"%RETRY%{group}": "*"}
        mine = [q for q in obj["queues"] if q["topic"] == topic]
        assert [q["queue"] for q in mine] == [0, 1] and all("commitOffset" in q for q in mine)
        # by offset id, and by UNIQ_KEY with the topic: the member's handler gets it again
        code, obj, err = await _cli(capsys, "message", "resend", *ns, *member, "--id", sent[1].offset_msg_id)
        assert (
            code == 0 and obj["consume_result"] == "CR_SUCCESS" and obj["msg_id"] == sent[1].offset_msg_id
        ), err
        await col.wait_until(lambda: col.seen["k-1"] == 2)
        code, obj, _ = await _cli(
            capsys, "message", "resend", *ns, *member, "--id", sent[2].msg_id, "--topic", topic
        )
        assert code == 0 and obj["consume_result"] == "CR_SUCCESS"
        await col.wait_until(lambda: col.seen["k-2"] == 2)
        # refused by the broker (no such member): exit 1, one line
        nobody = ["--group", group, "--client-id", "127.0.0.1@nobody"]
        code, obj, err = await _cli(capsys, "group", "running-info", *ns, *nobody)
        assert code == 1 and obj is None and err.count("\n") == 1 and "group running-info failed" in err
        code, obj, err = await _cli(capsys, "message", "resend", *ns, *nobody, "--id", sent[0].offset_msg_id)
        assert code == 1 and obj is None and err.count("\n") == 1 and "message resend failed" in err
        # bad input: exit 2, one line (a UNIQ_KEY without its topic, a missing flag)
        for argv in (
            ["message", "resend", *ns, *member, "--id", sent[0].msg_id],
            ["message", "resend", *ns, "--group", group, "--id", sent[0].offset_msg_id],
            ["group", "running-info", *ns, "--group", group],
        ):
            code, obj, err = await _cli(capsys, *argv)
            assert code == 2 and obj is None and err.count("\n") == 1, (argv, err)
    assert col.seen["k-0"] == 1  # nothing was handed over for the refused ones


async def test_bad_input_is_one_line_and_exit_2(
    cluster: EmbeddedCluster, names: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    ns = ["--namesrv", cluster.namesrv_addr]
    topic, _ = names
    await cluster.create_topic(topic, 2)
    for argv in (
        ["group", "reset", *ns, "--group", "g", "--topic", "T"],  # no target
        ["group", "reset", *ns, "--group", "g", "--topic", "T", "--to-earliest", "--to-latest"],
        ["group", "reset", *ns, "--group", "g", "--topic", "T", "--to-timestamp", "1700000000"],  # seconds
        ["group", "reset", *ns, "--group", "g", "--topic", "T", "--to-offset", "q0=1"],
        ["group", "reset", *ns, "--group", "g", "--topic", topic, "--to-offset", "7=1"],  # no queue 7
        ["topic", "create", *ns, "--topic", "T", "--read-queues", "0"],
        ["message", "get", *ns, "--id", "not-an-id-and-no-topic"],
        ["topic", "list", "--namesrv", "nohost"],
    ):
        code, obj, err = await _cli(capsys, *argv)
        assert code == 2 and obj is None, (argv, err)
        assert err.startswith("rmq-async") and err.count("\n") == 1, (argv, err)


async def test_set_consume_mode_json(capsys: pytest.CaptureFixture[str]) -> None:
    async with EmbeddedCluster(queues=2, timing=Timing.fast(), flavour=5) as cluster:
        await cluster.create_topic("AdmCliPop", 2)
        argv = ["set-consume-mode", "--namesrv", cluster.namesrv_addr, "--topic", "AdmCliPop", "--group", "g"]
        code, obj, _ = await _cli(capsys, *argv, "--mode", "POP", "--json")
        addr = cluster.brokers[0].registered_addr
        assert code == 0 and obj["ok"] and obj["brokers"] == {addr: {"code": 0, "remark": None}}


def test_the_terminal_table(capsys: pytest.CaptureFixture[str]) -> None:
    _table("progress of g: lag 3", ("topic", "queue", "lag"), [("T", 0, 3), ("T", 1, None)])
    out = capsys.readouterr().out
    assert "progress of g: lag 3" in out and "topic" in out and "│ T" in out.replace("┃", "│")
