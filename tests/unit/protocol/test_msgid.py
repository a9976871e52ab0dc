"""rmq_async.protocol.msgid: offset message ids and the client's unique ids (UNIQ_KEY)."""

from __future__ import annotations

import ipaddress
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_async.errors import ProtocolError
from rmq_async.protocol import msgid as msgid_mod
from rmq_async.protocol.msgid import (
    UniqIdGenerator,
    create_offset_msg_id,
    new_uniq_id,
    new_uniq_ids,
    parse_offset_msg_id,
)

HOSTS = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str), st.sampled_from(["::ffff:10.0.0.1"])
)
I64 = st.integers(-(2**63), 2**63 - 1)


def _java_host(ip: str, port: int) -> str:
    """``host:port`` as Java prints it (IPv6 uncompressed, a mapped IPv4 address as IPv4)."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is None:
        return (
            ":".join(f"{int.from_bytes(addr.packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
            + f":{port}"
        )
    return f"{getattr(addr, 'ipv4_mapped', None) or addr}:{port}"


@given(HOSTS, st.integers(0, 65535), I64)
def test_offset_msg_id_round_trip(ip: str, port: int, offset: int) -> None:
    msg_id = create_offset_msg_id(ip, port, offset)
    v4 = ":" not in ip or ip.startswith("::ffff:")  # Java sees a mapped address as IPv4
    assert msg_id == msg_id.upper() and len(msg_id) == (32 if v4 else 56)
    assert parse_offset_msg_id(msg_id) == (_java_host(ip, port), offset)


def test_offset_msg_id_known_and_malformed() -> None:
    assert create_offset_msg_id("127.0.0.1", 10911, 24532281) == "7F00000100002A9F0000000001765539"
    assert parse_offset_msg_id("7f00000100002a9f0000000001765539") == ("127.0.0.1:10911", 24532281)
    for bad in (
        "",
        "7F",
        "7F00000100002A9F000000000176553X",
        " 7F00000100002A9F000000000176553",
        "7F000001FFFFFFFF0000000001765539",
    ):
        with pytest.raises(ProtocolError):
            parse_offset_msg_id(bad)


def test_uniq_id_format_matches_capture() -> None:
    """The 4.9.8 producer's UNIQ_KEY: IPv6 fd00::2, pid 0x38B4, class-loader hash 0x5FFD2B27."""
    captured = "FD00000000000000000000000000000238B45FFD2B276BD285540000"
    gen = UniqIdGenerator("fd00::2", pid=0x38B4, salt=0x5FFD2B27)
    uid = gen.next()
    assert len(uid) == len(captured) and uid[:44] == captured[:44] and uid.endswith("0000")
    assert gen.next().endswith("0001")
    v4 = UniqIdGenerator("10.1.2.3", pid=0x12345).next()
    assert re.fullmatch(r"0A0102032345[0-9A-F]{20}", v4)


def test_uniq_id_time_part_is_ms_since_month_start() -> None:
    before = time.time_ns() // 1_000_000
    uid = UniqIdGenerator().next()
    after = time.time_ns() // 1_000_000
    t = time.localtime(before // 1000)
    start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
    assert before - start <= int(uid[20:28], 16) <= after - start


def test_uniq_ids_unique_when_the_clock_stands_still(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = UniqIdGenerator()
    frozen = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    ids = [gen.next() for _ in range(150_000)]  # more than two counter wraps in one millisecond
    monkeypatch.undo()
    assert len(set(ids)) == len(ids)
    times = [int(i[20:28], 16) for i in ids]
    assert times[0] == times[65535] < times[65536] == times[131071] < times[131072]
    assert times[-1] - times[0] == 2  # runs ahead of the clock by 1 ms per wrap, no more


def test_ids_made_at_once_are_those_made_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """next_many: the same ids as as many next() calls in that millisecond, counter wraps included,
    and the generator goes on from them."""
    frozen = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    one, many = UniqIdGenerator(salt=7), UniqIdGenerator(salt=7)
    want = [one.next() for _ in range(70_000)]
    got = many.next_many(40_000) + many.next_many(0) + many.next_many(30_000)
    assert got == want
    assert many.next() == one.next()
    assert len(new_uniq_ids(3)) == 3


def test_uniq_ids_ignore_a_clock_stepping_back(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = UniqIdGenerator()
    now = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: now)
    first = gen.next()
    monkeypatch.setattr(time, "time_ns", lambda: now - 5_000_000_000)
    second = gen.next()
    monkeypatch.undo()
    assert int(second[20:28], 16) >= int(first[20:28], 16) and second != first


def test_new_uniq_id_is_unique_and_distinct_per_generator() -> None:
    ids = {new_uniq_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    assert UniqIdGenerator().next()[:20] != UniqIdGenerator().next()[:20]  # random per generator
    msgid_mod._reset_default_generator()
    assert new_uniq_id()[:20] not in {i[:20] for i in ids}
