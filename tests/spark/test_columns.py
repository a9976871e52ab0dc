"""Arrow batches built straight from pull bodies (``spark/columns.py``) against the careful path
(``decode_messages`` + ``to_arrow``): the same rows for every kind of stored message, the fallbacks
taken where the fast path cannot go, malformed input refused. No Spark needed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers_stored import encode_stored

from rmq_async.errors import ProtocolError
from rmq_async.protocol.stored import UndecodableMessageError
from rmq_async.spark import columns
from rmq_async.spark.columns import Chunk, build_batch

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")


def careful(chunks: list[Chunk], tags: frozenset[str] = frozenset(), properties: bool = True) -> Any:
    return columns._careful(chunks, "T", "broker-a", tags=tags, properties=properties)


DEFAULT_PROPS = {"UNIQ_KEY": "ID{i:030d}", "KEYS": "k-{i} x", "TAGS": "TagA", "WAIT": "true"}


def msg(i: int, **kw: Any) -> bytes:
    props = kw.pop("properties", {k: v.format(i=i) for k, v in DEFAULT_PROPS.items()})
    kw.setdefault("queue_offset", i)
    kw.setdefault("commit_log_offset", 1000 + i)
    body = kw.pop("body", b"b%d." % i * 7)
    return encode_stored(topic=kw.pop("topic", "T"), body=body, properties=props, **kw)


def same(
    chunks: list[Chunk], *, fast: bool, tags: frozenset[str] = frozenset(), properties: bool = True
) -> Any:
    calls: list[bool] = []
    real = columns._careful

    def spy(*a: Any, **k: Any) -> Any:
        calls.append(True)
        return real(*a, **k)

    columns._careful = spy
    try:
        got = build_batch(chunks, "T", "broker-a", tags=tags, properties=properties)
    finally:
        columns._careful = real
    want = careful(chunks, tags, properties)
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    assert (not calls) == fast, "fast path taken" if calls == [] else "fell back"
    return got


def test_plain_messages_take_the_fast_path_and_match() -> None:
    body = b"".join(msg(i, queue_id=3, reconsume_times=i % 3) for i in range(50))
    got = same([Chunk(body, 0, 50)], fast=True)
    assert got.num_rows == 50
    row = got.to_pylist()[7]
    assert row["keys"] == "k-7 x" and row["tags"] == "TagA" and row["queue_id"] == 3
    assert row["msg_id"] == f"ID{7:030d}" and dict(row["properties"])["WAIT"] == "true"


def test_offsets_outside_the_chunk_are_trimmed_and_chunks_join() -> None:
    a = b"".join(msg(i) for i in range(0, 32))
    b = b"".join(msg(i) for i in range(32, 64))
    got = same([Chunk(a, 5, 40), Chunk(b, 40, 60)], fast=True)
    assert got.column("queue_offset").to_pylist() == list(range(5, 32)) + list(range(40, 60))


def test_tag_refilter() -> None:
    body = b"".join(msg(i, properties={"TAGS": "A" if i % 2 else "B", "KEYS": str(i)}) for i in range(20))
    got = same([Chunk(body, 0, 20)], fast=True, tags=frozenset({"A"}))
    assert got.column("keys").to_pylist() == [str(i) for i in range(1, 20, 2)]
    untagged = msg(0, properties={"KEYS": "k"})
    assert same([Chunk(untagged, 0, 1)], fast=True, tags=frozenset({"A"})).num_rows == 0


@pytest.mark.parametrize(
    "raw",
    [
        "KEYS\x01a\x02KEYS\x01\x02TAGS\x01x\x01y\x02noval\x02\x01z\x02",  # empty value, \x01 in a value
        "",  # no properties: the offset message id
        "TAGS\x01t\x02",  # 5.x trailing separator
        "WAIT\x01true\x02UNIQ_KEY\x01\x02MIN_OFFSET\x010",  # an empty UNIQ_KEY
        "\x02\x02KEYS\x01k",
        "UNIQ_KEY\x01u1\x02KEYS\x01a\x02UNIQ_KEY\x01u2",  # a repeated name: first place, last value
        "WAIT\x01true\x02UNIQ_KEY\x01u\x02CLUSTER\x01c\x02WAIT\x01true",  # a producer's batch
    ],
)
def test_odd_property_strings(raw: str) -> None:
    same([Chunk(msg(3, properties=raw), 0, 10)], fast=True)


def test_short_and_empty_bodies() -> None:
    # values of up to 12 bytes are inline in the Arrow binary views the columns are cast from
    sizes = [0, 1, 4, 11, 12, 13, 40, 0]
    body = b"".join(msg(i, body=bytes(range(65, 65 + k))) for i, k in enumerate(sizes))
    got = same([Chunk(body, 0, len(sizes))], fast=True)
    assert [len(b) for b in got.column("body").to_pylist()] == sizes


def test_without_binary_view_casts(monkeypatch: pytest.MonkeyPatch) -> None:
    # an older pyarrow: the values are joined from slices, same rows
    monkeypatch.setattr(columns, "_views_cast", False)
    body = b"".join(msg(i, body=b"x" * (i * 5)) for i in range(8))
    same([Chunk(body, 0, 8)], fast=True)
    same([Chunk(msg(3, properties="KEYS\x01a\x02KEYS\x01\x02TAGS\x01x\x01y\x02WAIT\x01t"), 0, 9)], fast=True)


def test_without_the_properties_column() -> None:
    body = b"".join(msg(i) for i in range(10))
    got = same([Chunk(body, 0, 10)], fast=True, properties=False)
    assert got.column("properties").null_count == 10 and got.column("keys").null_count == 0


@pytest.mark.parametrize(
    "kw",
    [
        {"compress": True},
        {"v2": True},
        {"born_host": ("::1", 5)},
        {"store_host": ("fe80::1", 10911)},
    ],
)
def test_what_the_fast_path_leaves_to_decode_messages(kw: dict[str, Any]) -> None:
    body = msg(0) + msg(1, **kw) + msg(2)
    same([Chunk(body, 0, 3)], fast=False)


def test_retry_topic_messages() -> None:
    props = {"RETRY_TOPIC": "Orders", "ORIGIN_MESSAGE_ID": "AB", "UNIQ_KEY": "U1", "REAL_TOPIC": "%RETRY%g"}
    body = b"".join(msg(i, topic="%RETRY%g", properties=props, reconsume_times=2) for i in range(4))
    got = same([Chunk(body, 0, 4)], fast=True)
    assert set(got.column("reconsume_times").to_pylist()) == {2}


def test_malformed_bodies_raise_protocol_errors() -> None:
    good = msg(0)
    bad_magic = good[:4] + b"\x00\x00\x00\x00" + good[8:]
    for bad in (good[:-3], bad_magic, msg(0, store_size=len(good) + 2) + b"xx"):
        with pytest.raises(ProtocolError):
            build_batch([Chunk(bad, 0, 10)], "T", "broker-a")


def test_an_undecodable_message_of_the_range_fails_naming_it() -> None:
    bad_utf8 = msg(7, properties="K\x01v").replace(b"K\x01v", b"K\x01\xff")
    body = msg(6) + bad_utf8 + msg(8)
    with pytest.raises(UndecodableMessageError, match="7") as info:
        build_batch([Chunk(body, 0, 10)], "T", "broker-a")
    assert info.value.record.queue_offset == 7
    # outside the chunk's range it is not this batch's to read
    assert build_batch([Chunk(body, 8, 10)], "T", "broker-a").column("queue_offset").to_pylist() == [8]


names = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "WAIT", "a", "KEYSX", "XKEYS", ""])
values = st.text(alphabet=st.sampled_from("ab\x01 é"), max_size=4)
items = st.lists(st.tuples(names, st.booleans(), values), max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.lists(items, min_size=1, max_size=6), st.booleans())
def test_any_property_strings(rows: list[list[tuple[str, bool, str]]], trailing: bool) -> None:
    body = b""
    for i, its in enumerate(rows):
        raw = "\x02".join(f"{n}\x01{v}" if sep else n + v.replace("\x01", "") for n, sep, v in its)
        body += msg(i, properties=raw + ("\x02" if trailing and raw else ""))
    got = build_batch([Chunk(body, 0, len(rows))], "T", "broker-a")
    assert got.to_pylist() == careful([Chunk(body, 0, len(rows))]).to_pylist()


def split_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which splitter built each batch: "fixed" (one layout, read by rows), "uniform" (numpy, rows
    alike) or "general" (Arrow kernels)."""
    used: list[str] = []
    uniform, general = columns._Uniform.split.__func__, columns._Props.split.__func__  # type: ignore[attr-defined]
    fixed = columns._Uniform.fixed.__func__  # type: ignore[attr-defined]

    def spy_fixed(cls: Any, *a: Any) -> Any:
        got = fixed(cls, *a)
        if got is not None:
            used.append("fixed")
        return got

    def spy_uniform(cls: Any, *a: Any) -> Any:
        got = uniform(cls, *a)
        if got is not None:
            used.append("uniform")
        return got

    def spy_general(cls: Any, *a: Any) -> Any:
        used.append("general")
        return general(cls, *a)

    monkeypatch.setattr(columns._Uniform, "split", classmethod(spy_uniform))
    monkeypatch.setattr(columns._Uniform, "fixed", classmethod(spy_fixed))
    monkeypatch.setattr(columns._Props, "split", classmethod(spy_general))
    return used


@pytest.mark.parametrize("trailing", [False, True])
def test_one_producers_rows_are_split_with_numpy(monkeypatch: pytest.MonkeyPatch, trailing: bool) -> None:
    used = split_by(monkeypatch)
    # values of every size around a view's 12 inline bytes, a repeated name (first place, last value),
    # text beyond ASCII, and short properties on the last message (within 12 bytes of the end)
    rows = []
    for i in range(40):
        keys = "k" * (i % 16 + 1)
        raw = f"UNIQ_KEY\x01U{i:031d}\x02WAIT\x01true\x02KEYS\x01{keys}\x02TAGS\x01é{i}\x02WAIT\x01f{i}"
        rows.append(msg(i, properties=raw + ("\x02" if trailing else "")))
    same([Chunk(b"".join(rows), 0, 40)], fast=True)
    assert used == ["uniform"]
    got = same(
        [Chunk(b"".join(msg(i, properties="A\x01b\x02B\x01c\x02A\x01d") for i in range(3)), 0, 3)], fast=True
    )
    assert got.column("properties").to_pylist()[2] == [("A", "d"), ("B", "c")]
    assert used == ["uniform", "fixed"]  # the second batch: one layout


@pytest.mark.parametrize(
    "raws",
    [
        ["K\x01a\x02T\x01b", "K\x01a\x02X\x01b"],  # another name
        ["K\x01a\x02T\x01b", "K\x01a\x02TT\x01b"],  # a longer name
        ["K\x01a\x02T\x01b", "K\x01a"],  # fewer items
        ["K\x01a\x02T\x01b", "K\x01a\x02T\x01b\x02"],  # a trailing separator on one row only
        ["K\x01a\x02T\x01b", "K\x01a\x01c\x02T\x01b"],  # \x01 in a value
        ["K\x01a\x02T\x01b", "K\x01\x02T\x01b"],  # an empty value
        ["K\x01a\x02T\x01b", "K\x01a\x00\x02T\x01b"],  # \x00 in a value
        ["K\x01a\x02T\x01b", ""],  # no properties
        ["", ""],
    ],
)
def test_rows_not_alike_are_split_the_general_way(monkeypatch: pytest.MonkeyPatch, raws: list[str]) -> None:
    used = split_by(monkeypatch)
    same([Chunk(b"".join(msg(i, properties=r) for i, r in enumerate(raws)), 0, 9)], fast=True)
    assert used == ["general"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "WAIT", "a", "é"]), min_size=1, max_size=5),
    st.lists(
        st.lists(
            st.text(alphabet=st.sampled_from("ab\x01 é"), min_size=1, max_size=14), min_size=5, max_size=5
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
def test_rows_of_the_same_names(names: list[str], rows: list[list[str]], trailing: bool) -> None:
    body = b""
    for i, vals in enumerate(rows):
        raw = "\x02".join(f"{n}\x01{v}" for n, v in zip(names, vals, strict=False))
        body += msg(i, properties=raw + ("\x02" if trailing else ""))
    got = build_batch([Chunk(body, 0, len(rows))], "T", "broker-a")
    assert got.to_pylist() == careful([Chunk(body, 0, len(rows))]).to_pylist()


@pytest.mark.parametrize("trailing", [False, True])
def test_values_of_one_width_per_name_are_copied_by_rows(
    monkeypatch: pytest.MonkeyPatch, trailing: bool
) -> None:
    used = split_by(monkeypatch)
    copied: list[int] = []
    real = columns._fixed_width_values

    def spy(*a: Any) -> Any:
        got = real(*a)
        copied.append(len(got))
        return got

    monkeypatch.setattr(columns, "_fixed_width_values", spy)
    # every value of a name has the same width (in bytes: "é" is two); a repeated name keeps its
    # first place and its last value; the last message's values end at the buffer's end
    raw = "UNIQ_KEY\x01U{i:031d}\x02WAIT\x01true\x02TAGS\x01é{d}\x02WAIT\x01f{d}\x02C\x01x"
    body = b"".join(
        msg(i, properties=raw.format(i=i, d=i % 10) + ("\x02" if trailing else "")) for i in range(30)
    )
    got = same([Chunk(body, 0, 30)], fast=True)
    assert used == ["uniform"] and copied == [30 * 4]
    assert got.column("properties").to_pylist()[7] == [
        ("UNIQ_KEY", f"U{7:031d}"), ("WAIT", "f7"), ("TAGS", "é7"), ("C", "x")
    ]  # fmt: skip
    assert got.column("tags").to_pylist()[3] == "é3" and got.column("msg_id").to_pylist()[0] == f"U{0:031d}"


def test_captured_producers_property_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    # the property strings real Java producers sent (4.9.8, and 5.x with its trailing separator):
    # a batch of each one repeated goes the numpy way, a batch of all of them the general way
    from support.wire import CAPTURE_FILES, frames

    raws = sorted({
        fr.header["extFields"]["i"]
        for f in CAPTURE_FILES
        for fr in frames(f)
        if fr.code == 310 and fr.kind != "response"
    })  # fmt: skip
    assert len(raws) > 100
    used = split_by(monkeypatch)
    for raw in raws[::10]:
        same([Chunk(b"".join(msg(i, properties=raw) for i in range(4)), 0, 4)], fast=True)
        assert used.pop() == ("fixed" if raw.isascii() else "uniform")
    used.clear()
    same([Chunk(b"".join(msg(i, properties=r) for i, r in enumerate(raws)), 0, len(raws))], fast=True)
    assert used == ["general"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "WAIT", "a", "é"]), min_size=1, max_size=5),
    st.lists(st.integers(min_value=0, max_value=3), min_size=5, max_size=5),
    st.data(),
    st.booleans(),
)
def test_rows_of_one_layout(names: list[str], widths: list[int], data: st.DataObject, trailing: bool) -> None:
    # every row with the same names and values of one width per name: the layout the fixed path reads
    # by rows; a value may hold a separator, \x00 or text beyond ASCII (then it must not take them)
    text = st.text(alphabet=st.sampled_from("ab\x01\x00 é"), min_size=0, max_size=3)

    def of_width(w: int) -> st.SearchStrategy[str]:
        return text.filter(lambda v: len(v.encode()) == w)

    body = b""
    n = data.draw(st.integers(min_value=1, max_value=6))
    for i in range(n):
        vals = [data.draw(of_width(w)) for w in widths[: len(names)]]
        raw = "\x02".join(f"{k}\x01{v}" for k, v in zip(names, vals, strict=True))
        body += msg(i, properties=raw + ("\x02" if trailing else ""))
    got = build_batch([Chunk(body, 0, n)], "T", "broker-a")
    assert got.to_pylist() == careful([Chunk(body, 0, n)]).to_pylist()


def walked(buf: bytes) -> list[int] | None:
    """Where each message starts, message by message (the rule ``_starts`` must keep)."""
    out, pos = [], 0
    while pos <= len(buf) - columns._MIN_STORED:
        total = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if total < columns._MIN_STORED:
            return None
        out.append(pos)
        pos += total
    return out if pos == len(buf) else None


def starts_of(buf: bytes) -> list[int] | None:
    import numpy as np

    got = columns._starts(np, buf)
    return None if got is None else got.tolist()


def test_messages_of_one_size_are_found_without_a_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    # fixed-size bodies and properties of one width: every message as long as the first
    one = [msg(i, body=b"%04d" % i * 8, properties={"UNIQ_KEY": f"U{i:05d}", "TAGS": "A"}) for i in range(40)]
    assert len({len(m) for m in one}) == 1
    buf = b"".join(one)
    unpacks: list[int] = []

    class Counting:
        def __init__(self, real: Any) -> None:
            self.real = real

        def unpack_from(self, b: Any, pos: int = 0) -> Any:
            unpacks.append(pos)
            return self.real.unpack_from(b, pos)

    monkeypatch.setattr(columns, "_SIZE", Counting(columns._SIZE))
    assert starts_of(buf) == walked(buf) == [i * len(one[0]) for i in range(40)]
    assert unpacks == [0]  # the first size only; the others in one strided read
    got = same([Chunk(buf[: 20 * len(one[0])], 0, 20), Chunk(buf[20 * len(one[0]) :], 20, 40)], fast=True)
    assert got.column("body").to_pylist() == [b"%04d" % i * 8 for i in range(40)]


@pytest.mark.parametrize(
    "sizes",
    [
        [100, 200],  # as long as a whole number of the first's, not of one size: walked
        [200, 100, 100],
        [100, 100, 100, 50],  # too short to be a message
        [150, 150, 150, 10],  # a size field that does not add up
        [100],
        [91, 91],
    ],
)
def test_message_starts_of_uneven_and_bad_sizes(sizes: list[int]) -> None:
    buf = b"".join(k.to_bytes(4, "big") + bytes(k - 4) if k >= 4 else bytes(k) for k in sizes)
    assert starts_of(buf) == walked(buf)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=12), st.integers(0, 3))
def test_message_starts_as_a_walk_finds_them(body_lengths: list[int], cut: int) -> None:
    # messages of one size or not, and buffers cut short: the same starts (or None) as the walk
    buf = b"".join(msg(0, body=b"x" * k, properties={"K": "v"}) for k in body_lengths)
    buf = buf[: len(buf) - cut]
    assert starts_of(buf) == walked(buf)


@pytest.mark.parametrize("width", [1, 12, 13, 1024])
def test_bodies_of_one_size_are_copied_by_rows(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    # bodies of one size: one row copy each; the same column as the binary views' cast
    body = b"".join(msg(i, body=bytes([65 + i % 26]) * width) for i in range(30))
    fast = same([Chunk(body, 0, 30)], fast=True)
    col = fast.column("body")
    assert col.type == pa.binary() and col.to_pylist() == [bytes([65 + i % 26]) * width for i in range(30)]
    viewed: list[Any] = []
    real = columns._from_views

    def spy(*a: Any, **k: Any) -> Any:
        viewed.append(a[6])  # the kind of array asked for
        return real(*a, **k)

    monkeypatch.setattr(columns, "_from_views", spy)
    build_batch([Chunk(body, 0, 30)], "T", "broker-a")
    assert pa.binary() not in viewed  # the body column did not go through views


@pytest.mark.parametrize("uneven", [False, True], ids=["one-layout", "uneven"])
def test_a_batch_does_not_share_memory_with_the_join_buffer_the_next_one_reuses(uneven: bool) -> None:
    """The joined pull bodies of a batch go to a buffer each thread keeps: a batch built from it
    must hold copies only, or the next batch would overwrite the last one while Spark reads it."""

    def chunks(first: int, n: int) -> list[Chunk]:
        def one(i: int) -> bytes:
            if not uneven:
                return msg(i, body=b"%08d" % i * 16)  # one size, one property layout
            return msg(
                i,
                body=b"x" * (i % 7 + 13 * (i % 3)),
                properties={"UNIQ_KEY": f"u{i}", "KEYS": "k" * (i % 5 + 1)},
            )

        return [
            Chunk(b"".join(one(i) for i in range(lo, lo + 32)), lo, lo + 32)
            for lo in range(first, first + n, 32)
        ]

    # offsets 100-227 and 310-437: three digits each, and the uneven sizes repeat every 105 offsets,
    # so the second batch is as long as the first
    first = same(chunks(100, 128), fast=True)
    rows = first.to_pylist()
    joined = columns._join_buffer.buf
    assert joined is not None
    lo = pa.py_buffer(joined).address
    hi = lo + len(joined)
    for col in first.columns:
        for arr in [col, *(getattr(col, f) for f in ("keys", "items") if hasattr(col, f))]:
            for b in arr.buffers():
                if b is not None and b.size:
                    assert b.address + b.size <= lo or b.address >= hi, "a column points into the join buffer"
    second = same(chunks(310, 128), fast=True)
    assert columns._join_buffer.buf is joined, "the join buffer was not reused"
    assert first.to_pylist() == rows
    assert second.column("queue_offset").to_pylist() == list(range(310, 438))


def test_a_join_larger_than_the_kept_buffer_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = b"".join(msg(i) for i in range(32)), b"".join(msg(i) for i in range(32, 64))
    monkeypatch.setattr(columns._join_buffer, "buf", None)
    monkeypatch.setattr(columns, "KEEP_JOIN", len(a) + len(b) - 1)
    assert same([Chunk(a, 0, 32), Chunk(b, 32, 64)], fast=True).num_rows == 64
    assert columns._join_buffer.buf is None
    monkeypatch.setattr(columns, "KEEP_JOIN", len(a) + len(b))
    assert same([Chunk(a, 0, 32), Chunk(b, 32, 64)], fast=True).num_rows == 64
    assert columns._join_buffer.buf is not None and len(columns._join_buffer.buf) == len(a) + len(b)
