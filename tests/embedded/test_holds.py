"""HoldService: which parked pulls a message or a check wakes, and how they are answered."""

from __future__ import annotations

import time
from typing import cast

from rmq_async.embedded.holds import HeldPull, HoldService
from rmq_async.embedded.server import Connection, Reply
from rmq_async.embedded.store import MessageStore, host_bytes
from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import FLAG_ONEWAY, RemotingCommand


class FakeConn:
    def __init__(self) -> None:
        self.closed = False
        self.sent: list[tuple[RemotingCommand, object]] = []

    def send(self, cmd: RemotingCommand, parts: object = ()) -> None:
        self.sent.append((cmd, parts))


class Reruns:
    def __init__(self, reply: str = "answer") -> None:
        self.seen: list[RemotingCommand] = []
        self.reply = reply

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> Reply:
        self.seen.append(cmd)
        if self.reply == "parts":
            return cmd.make_response(0), [b"a", b"b"]
        return None if self.reply == "none" else cmd.make_response(0)


def park(
    holds: HoldService,
    offset: int = 0,
    codes: frozenset[int] | None = None,
    timeout_ms: int = 30_000,
    *,
    topic: str = "T",
    conn: FakeConn | None = None,
    rerun: Reruns | None = None,
    oneway: bool = False,
) -> tuple[FakeConn, Reruns, RemotingCommand]:
    conn = conn or FakeConn()
    rerun = rerun or Reruns()
    cmd = RemotingCommand.request(11, {}, serialize_type=SerializeType.ROCKETMQ)
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    holds.hold(topic, 0, HeldPull(cast(Connection, conn), cmd, offset, timeout_ms, codes, rerun))
    return conn, rerun, cmd


def test_new_data_wakes_only_pulls_below_the_end_with_a_matching_tag() -> None:
    holds = HoldService()
    star, r_star, _ = park(holds, 0)
    tagged, r_tagged, _ = park(holds, 0, frozenset({7}))
    ahead, r_ahead, _ = park(holds, 5)
    holds.notify("T", 0, 1, 8)  # a message with tag code 8 at offset 0
    assert (len(r_star.seen), len(r_tagged.seen), len(r_ahead.seen)) == (1, 0, 0)
    assert [len(c.sent) for c in (star, tagged, ahead)] == [1, 0, 0]
    holds.notify("T", 0, 2, None)  # a check: the tag is unknown, any filter may match
    assert (len(r_tagged.seen), len(r_ahead.seen)) == (1, 0)
    assert len(holds.table[("T", 0)]) == 1
    holds.notify("U", 0, 100, None)  # another topic: nothing parked there
    assert len(holds.table[("T", 0)]) == 1


def test_deadline_wakes_without_data() -> None:
    holds = HoldService()
    _, rerun, _ = park(holds, 3, timeout_ms=0)
    time.sleep(0.001)
    holds.notify("T", 0, 0, None)
    assert len(rerun.seen) == 1 and holds.table == {}


def test_rerun_answers_in_json_with_its_parts() -> None:
    holds = HoldService()
    conn, _, cmd = park(holds, rerun=Reruns("parts"))
    holds.notify("T", 0, 1, None)
    assert cmd.serialize_type == SerializeType.JSON  # the wake-up path answers in JSON
    (answer, parts), *_ = conn.sent
    assert answer.serialize_type == SerializeType.JSON and parts == [b"a", b"b"]


def test_no_answer_to_closed_connection_oneway_or_parked_again() -> None:
    holds = HoldService()
    closed, r_closed, _ = park(holds)
    closed.closed = True
    oneway, r_oneway, _ = park(holds, oneway=True)
    none, r_none, _ = park(holds, rerun=Reruns("none"))
    holds.notify("T", 0, 1, None)
    assert (len(r_closed.seen), len(r_oneway.seen), len(r_none.seen)) == (0, 1, 1)
    assert closed.sent == oneway.sent == none.sent == []


def test_connection_closed_drops_its_pulls() -> None:
    holds = HoldService()
    gone, _, _ = park(holds)
    park(holds, topic="U", conn=gone)
    kept, _, _ = park(holds)
    holds.connection_closed(cast(Connection, gone))
    assert list(holds.table) == [("T", 0)]
    assert [r.conn for r in holds.table[("T", 0)]] == [cast(Connection, kept)]


def test_check_compares_with_the_store_end() -> None:
    store = MessageStore(host_bytes("127.0.0.1", 10911))
    holds = HoldService()
    _, rerun, _ = park(holds, 0)
    holds.check(store)
    assert rerun.seen == []
    store.put("T", 0, b"x", 0, "", 0, 0, 1, host_bytes("127.0.0.1", 1))
    holds.check(store)
    assert len(rerun.seen) == 1 and holds.table == {}
