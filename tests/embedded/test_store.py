"""MessageStore in memory: the stored layout, getMessage statuses and limits, lookups by offset and time.

Recovery from a data directory and segment roll are in test_restart.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_async.embedded.store import MAX_MESSAGE_SIZE, MessageStore, StoredMessage, StoreError, host_bytes

HOST = host_bytes("127.0.0.1", 10911)
BORN = host_bytes("10.0.0.2", 5555)


def fill(
    store: MessageStore, n: int, *, topic: str = "T", tags: list[int] | None = None, size: int = 10
) -> None:
    for i in range(n):
        code = tags[i] if tags else 0
        store.put(topic, 0, b"x" * size, 0, f"KEYS\x01k{i}", code, 0, 1000 + i, BORN, store_ts=2000 + 10 * i)


def test_put_writes_the_stored_layout() -> None:
    store = MessageStore(HOST)
    res = store.put("T", 1, b"body", 3, "TAGS\x01a", 9, 0, 123, BORN, reconsume_times=2, store_ts=456)
    assert (res.queue_offset, res.phys_offset, res.store_ts) == (0, 0, 456)
    assert res.msg_id == HOST.hex().upper() + "0000000000000000"
    msg = store.lookup(res.phys_offset)
    assert msg is not None
    assert (msg.topic, msg.queue_id, msg.body, msg.flag, msg.props) == ("T", 1, b"body", 3, "TAGS\x01a")
    assert (msg.born_ts, msg.born_host, msg.store_ts, msg.store_host) == (123, BORN, 456, HOST)
    assert (msg.reconsume_times, msg.queue_offset, msg.msg_id) == (2, 0, res.msg_id)
    second = store.put("T", 1, b"more", 0, "", 0, 0, 124, BORN)
    assert (second.queue_offset, second.phys_offset) == (1, res.size)
    assert store.queue("T", 1) is not None and list(store.queue("T", 1).tags) == [9, 0]  # type: ignore[union-attr]


def test_illegal_messages_are_refused() -> None:
    store = MessageStore(HOST)
    with pytest.raises(StoreError) as exc:
        store.put("T", 0, b"x", 0, "K\x01" + "v" * 40000, 0, 0, 1, BORN)
    assert exc.value.status == "PROPERTIES_SIZE_EXCEEDED"
    with pytest.raises(StoreError) as exc:
        store.put("T" * 128, 0, b"x", 0, "", 0, 0, 1, BORN)
    assert exc.value.status == "MESSAGE_ILLEGAL"
    with pytest.raises(StoreError) as exc:
        store.put("T", 0, b"x" * MAX_MESSAGE_SIZE, 0, "", 0, 0, 1, BORN)
    assert exc.value.status == "MESSAGE_ILLEGAL"
    assert store.write_pos == 0 and store.max_offset("T", 0) == 0


@pytest.mark.parametrize(
    ("offset", "status", "next_begin"),
    [
        (-1, "OFFSET_TOO_SMALL", 0),
        (3, "OFFSET_OVERFLOW_ONE", 3),
        (9, "OFFSET_OVERFLOW_BADLY", 3),
        (1, "FOUND", 3),
    ],
)
def test_get_statuses(offset: int, status: str, next_begin: int) -> None:
    store = MessageStore(HOST)
    fill(store, 3)
    res = store.get("T", 0, offset, 32, None)
    assert (res.status, res.next_begin, res.min_offset, res.max_offset) == (status, next_begin, 0, 3)


def test_get_on_a_missing_or_empty_queue() -> None:
    res = MessageStore(HOST).get("Nope", 0, 0, 32, None)
    assert (res.status, res.next_begin, res.max_offset) == ("NO_MESSAGE_IN_QUEUE", 0, 0)


def test_get_limits_count_and_filters_by_tag_code() -> None:
    store = MessageStore(HOST)
    fill(store, 40)
    res = store.get("T", 0, 0, 5, None)
    assert (res.count, res.next_begin, len(res.parts)) == (5, 5, 5)
    res = store.get("T", 0, 0, 100, None)
    assert (res.count, res.next_begin) == (32, 32)  # maxTransferCountOnMessageInMemory
    assert res.total == sum(len(p) for p in res.parts)

    tagged = MessageStore(HOST)
    fill(tagged, 6, tags=[1, 2, 1, 2, 2, 2])
    res = tagged.get("T", 0, 0, 32, frozenset({1}))
    assert (res.status, res.count, res.next_begin) == ("FOUND", 2, 6)
    assert [StoredMessage(bytes(p)).props for p in res.parts] == ["KEYS\x01k0", "KEYS\x01k2"]
    res = tagged.get("T", 0, 3, 32, frozenset({1}))
    assert (res.status, res.count, res.next_begin) == ("NO_MATCHED_MESSAGE", 0, 6)


def test_get_stops_at_the_transfer_byte_limit_but_returns_one_big_message() -> None:
    store = MessageStore(HOST)
    fill(store, 4, size=100 * 1024)
    res = store.get("T", 0, 0, 32, None)
    assert res.count == 2  # 256 KiB per pull (maxTransferBytesOnMessageInMemory)
    big = MessageStore(HOST)
    fill(big, 2, size=300 * 1024)
    assert big.get("T", 0, 0, 32, None).count == 1


def test_back_to_back_messages_every_tag_takes_are_one_slice_within_the_limits() -> None:
    store = MessageStore(HOST)
    fill(store, 40, size=100)
    res = store.get("T", 0, 3, 32, None, runs=True)
    assert (res.status, res.count, res.next_begin, len(res.parts)) == ("FOUND", 32, 35, 1)
    assert bytes(res.parts[0]) == b"".join(store.get("T", 0, 3, 32, None).parts)
    assert store.get("T", 0, 30, 32, None, runs=True).count == 10  # the queue's end
    big = MessageStore(HOST)
    fill(big, 4, size=100 * 1024)
    res = big.get("T", 0, 0, 32, None, runs=True)
    assert (res.count, res.next_begin, len(res.parts)) == (2, 2, 1)  # the byte limit still cuts
    huge = MessageStore(HOST)
    fill(huge, 2, size=300 * 1024)
    res = huge.get("T", 0, 0, 32, None, runs=True)
    assert (res.count, res.total) == (1, res.parts[0].nbytes)  # one message over the limit goes whole
    for runs in (False, True):  # maxMsgNums 0 still gets the first message (isTheBatchFull), at the end too
        assert store.get("T", 0, 39, 0, None, runs=runs).count == 1
        assert store.get("T", 0, 5, 0, frozenset({0}), runs=runs).count == 1


def test_transfer_limits_are_settings() -> None:
    store = MessageStore(HOST, max_transfer_count=100, max_transfer_bytes=1 << 20)
    fill(store, 300, size=1000)
    assert store.get("T", 0, 0, 200, None).count == 100  # maxTransferCountOnMessageInMemory
    assert store.get("T", 0, 0, 50, None).count == 50  # never more than asked
    small = MessageStore(HOST, max_transfer_bytes=5000)
    fill(small, 10, size=1000)  # about 1,100 bytes stored each
    assert small.get("T", 0, 0, 32, None).count == 4
    assert MessageStore(HOST).max_transfer_count == 32  # Java's default


def test_message_at_only_where_a_message_starts() -> None:
    store = MessageStore(HOST)
    fill(store, 2)
    first = store.queue("T", 0).offsets[1]  # type: ignore[union-attr]
    assert store.message_at(first) is not None
    assert store.message_at(first + 1) is None
    assert store.message_at(-1) is None and store.message_at(store.write_pos) is None
    assert store.lookup(first + 4) is None


def test_times() -> None:
    store = MessageStore(HOST)
    assert store.earliest_time("T", 0) == -1 and store.offset_by_time("T", 0, 5) == 0
    fill(store, 5)  # store timestamps 2000, 2010, ..., 2040
    assert store.earliest_time("T", 0) == 2000
    assert store.offset_by_time("T", 0, 2020) == 2  # exact
    assert store.offset_by_time("T", 0, 2013) == 1  # nearest neighbour
    assert store.offset_by_time("T", 0, 2017) == 2
    assert store.offset_by_time("T", 0, 1) == 0 and store.offset_by_time("T", 0, 9999) == 4
    assert store.min_offset("T", 0) == 0


def test_truncate_head_moves_the_min_offset_as_retention_does() -> None:
    store = MessageStore(HOST)
    fill(store, 5)  # store timestamps 2000, 2010, ..., 2040
    assert store.truncate_head("T", 0, 2) == 2
    assert store.min_offset("T", 0) == 2 and store.max_offset("T", 0) == 5
    res = store.get("T", 0, 1, 32, None)
    assert (res.status, res.next_begin, res.min_offset, res.max_offset) == ("OFFSET_TOO_SMALL", 2, 2, 5)
    res = store.get("T", 0, 2, 32, None)
    assert (res.status, res.count, res.next_begin, res.min_offset) == ("FOUND", 3, 5, 2)
    assert store.earliest_time("T", 0) == 2020
    assert store.offset_by_time("T", 0, 1) == 2  # the search starts at the min offset
    assert store.truncate_head("T", 0, 1) == 2  # never moves back
    assert store.truncate_head("T", 0, 99) == 5  # at most every message
    assert store.earliest_time("T", 0) == -1 and store.offset_by_time("T", 0, 2040) == 5
    assert store.get("T", 0, 5, 32, None).status == "OFFSET_OVERFLOW_ONE"
    assert store.get("T", 0, 4, 32, None).status == "OFFSET_TOO_SMALL"
    assert store.min_offset("Other", 0) == 0


def test_get_with_runs_joins_messages_that_lie_back_to_back() -> None:
    store = MessageStore(HOST)
    # queue 0: 0-3 back to back, then 4-5 after a message of queue 1, then 6 (tag 7) after another
    for q, code in [(0, 1)] * 4 + [(1, 1)] + [(0, 1)] * 2 + [(1, 1), (0, 7)]:
        store.put("T", q, b"b" * 20, 0, "", code, 0, 1, BORN)
    per_message = store.get("T", 0, 0, 32, None)
    joined = store.get("T", 0, 0, 32, None, runs=True)
    assert [len(p) for p in per_message.parts] == [per_message.parts[0].nbytes] * 7
    assert len(joined.parts) == 3
    assert b"".join(joined.parts) == b"".join(per_message.parts)
    a, b = per_message, joined
    assert (a.status, a.count, a.total, a.next_begin) == (b.status, b.count, b.total, b.next_begin)
    # a message the tag filter skips ends a run; limits still count messages
    tagged = store.get("T", 0, 1, 32, frozenset({1}), runs=True)
    assert tagged.count == 5 and len(tagged.parts) == 2 and tagged.next_begin == 7
    assert store.get("T", 0, 0, 3, None, runs=True).count == 3
    assert len(store.get("T", 0, 0, 3, None, runs=True).parts) == 1


def test_a_run_ends_where_a_commit_log_segment_ends() -> None:
    store = MessageStore(HOST, max_transfer_bytes=64 << 20)
    for _ in range(5):  # 4 MB each: the fifth goes to a new segment, after the first one's blank end
        store.put("T", 0, b"x" * 4_000_000, 0, "", 0, 0, 1, BORN)
    assert len(store.segments) == 2
    joined = store.get("T", 0, 0, 32, None, runs=True)
    assert joined.count == 5 and len(joined.parts) == 2
    assert b"".join(joined.parts) == b"".join(store.get("T", 0, 0, 32, None).parts)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(0, 3)), min_size=1, max_size=60),
    st.integers(1, 40),
    st.integers(150, 5000),
    st.integers(0, 30),
    st.integers(0, 40),
    st.one_of(st.none(), st.frozensets(st.integers(0, 3), max_size=3)),
    st.booleans(),
)
def test_runs_give_the_same_messages_as_one_slice_each(
    puts: list[tuple[int, int, int]],
    count: int,
    nbytes: int,
    offset: int,
    want: int,
    codes: frozenset[int] | None,
    filtered: bool,
) -> None:
    store = MessageStore(HOST, max_transfer_count=count, max_transfer_bytes=nbytes)
    for q, size, code in puts:
        store.put("T", q, b"y" * size, 0, f"N\x01{size % 3}", code, 0, 1, BORN)
    accept = (lambda props: not props.endswith("2")) if filtered else None
    a = store.get("T", 0, offset, want, codes, accept=accept)
    b = store.get("T", 0, offset, want, codes, runs=True, accept=accept)
    # getMessage's rules written out: from the offset, matching messages until the count or the
    # byte limit (the first message always whole), at most max(800, asked) consume queue entries
    cq = store.queue("T", 0)
    if cq is not None and offset < len(cq):
        taken: list[bytes] = []
        size_sum, i = 0, offset
        while i < min(len(cq), offset + max(800, want)):
            size = cq.sizes[i]
            if taken and (len(taken) >= min(want, count) or size_sum + size > nbytes):
                break
            msg = bytes(store.slice(cq.offsets[i], size))
            props = StoredMessage(msg).props
            if (codes is None or cq.tags[i] in codes) and (accept is None or accept(props)):
                taken.append(msg)
                size_sum += size
            i += 1
        assert (a.count, a.total, a.next_begin) == (len(taken), size_sum, i)
        assert b"".join(a.parts) == b"".join(taken)
    assert (a.status, a.count, a.total, a.next_begin, a.min_offset, a.max_offset) == (
        b.status, b.count, b.total, b.next_begin, b.min_offset, b.max_offset
    )  # fmt: skip
    assert b"".join(a.parts) == b"".join(b.parts)
    assert len(b.parts) <= len(a.parts) == a.count
    if filtered:
        assert all(StoredMessage(bytes(p)).props != "N\x012" for p in a.parts)
