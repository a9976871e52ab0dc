"""Arrow record batches built straight from pull bodies (sans-IO; numpy and pyarrow, no asyncio).

Strategy. A pull body is stored messages back to back (see ``protocol/stored.py``). One Python loop
only finds where each message starts (one ``unpack_from`` of its size, over the joined bodies of the
batch; when every message is as long as the first, one strided numpy read of the size fields checks
that instead); the fixed part of every message is then copied out as one row each (numpy, a
structured big-endian dtype over the 88 bytes), which gives every fixed field for all messages at
once. Bodies and raw property strings are never sliced one by one in Python: numpy writes an Arrow
*binary view* array over the pull bytes (16 bytes per value: length, and the first bytes or the
whole value if it has at most 12), and one Arrow cast copies the values into the plain binary/string
column (checking UTF-8 for strings, once); values of one length (bodies of one size) are copied by
rows instead. The property strings are split once. When every row names the same properties in the
same order (one producer's messages: the common case), numpy finds the separators and cuts every
value out as a view, without a kernel per item (:class:`_Uniform`); otherwise Arrow kernels split
them (on ``\x02``, then each item on its first ``\x01``; :class:`_Props`). Either way items without
a name or value are dropped and a name repeated in one message keeps its first place and its last
value, as a dict filled item by item. ``keys``, ``tags`` and ``msg_id`` are picked from those items
by name, and the ``properties`` map is made of them unless the query leaves it out. These are
:func:`~rmq_async.protocol.properties.parse_properties`' rules, Java's.

What this path does not take (a message with a V2 magic code, an IPv6 host, a compressed body,
anything malformed) makes :func:`build_batch` go the careful way for that batch:
:func:`~rmq_async.protocol.stored.decode_messages` and :func:`to_arrow`, which also raise
:class:`~rmq_async.errors.ProtocolError` for malformed input, and
:class:`~rmq_async.protocol.stored.UndecodableMessageError` for a message of the range that cannot be
decoded (a body that does not decompress, text that is not UTF-8). The two give the same rows
(``tests/spark/test_columns.py``).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol.codes import MessageSysFlag, Prop
from ..protocol.msgid import _ip_hex
from ..protocol.stored import MAGIC_CODE_V1, MessageExt, UndecodableMessageError, decode_messages

log = logging.getLogger("rmq_async.spark")

__all__ = ["Chunk", "arrow_schema", "build_batch", "to_arrow"]

_SIZE = struct.Struct(">i")
_FIXED = 88  # the fixed part of a stored message with IPv4 hosts, up to the body
_MIN_STORED = _FIXED + 1 + 2  # empty body and topic, properties length
_SLOW_FLAGS = (
    MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
)
# field offsets in the fixed part (IPv4 hosts): see _FIXED4 in protocol/stored.py
_QID, _QOFF, _PHYS, _SYSFLAG, _BORN_TS, _STORE_IP, _STORE_PORT, _STORE_TS, _RECONSUME, _BODY_LEN = (
    12, 20, 28, 36, 40, 64, 68, 56, 72, 84,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Chunk:
    """One pull body, and the queue offsets [lo, hi) of it that belong to the batch."""

    body: bytes
    lo: int
    hi: int


def arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("topic", pa.string()),
            ("broker_name", pa.string()),
            ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()),
            ("msg_id", pa.string()),
            ("keys", pa.string()),
            ("tags", pa.string()),
            ("body", pa.binary()),
            ("born_timestamp", ts),
            ("store_timestamp", ts),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("reconsume_times", pa.int32()),
        ]
    )


def to_arrow(msgs: Sequence[MessageExt], topic: str, broker_name: str, *, properties: bool = True) -> Any:
    """One Arrow record batch of decoded ``msgs`` in the source's schema (the careful path)."""
    import pyarrow as pa

    n = len(msgs)
    ts = pa.timestamp("us", tz="UTC")
    map_type = pa.map_(pa.string(), pa.string())
    props = [list(m.properties.items()) for m in msgs] if properties else None
    cols = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array([broker_name] * n, pa.string()),
        pa.array([m.queue_id for m in msgs], pa.int32()),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([m.msg_id for m in msgs], pa.string()),
        pa.array([m.keys for m in msgs], pa.string()),
        pa.array([m.tags for m in msgs], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([m.born_timestamp * 1000 for m in msgs], ts),
        pa.array([m.store_timestamp * 1000 for m in msgs], ts),
        pa.array(props, map_type) if props is not None else pa.nulls(n, map_type),
        pa.array([m.reconsume_times for m in msgs], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema())


def _starts(np: Any, buf: bytes | memoryview) -> Any | None:
    """Where each message of ``buf`` starts (an int64 array), or None if the sizes do not add up (the
    magic codes are checked later, all at once). Messages of one size (one producer's fixed-size
    payloads with the same properties layout) are checked with one strided read of every size field;
    any other batch is walked message by message."""
    n = len(buf)
    if n >= _MIN_STORED:
        (total,) = _SIZE.unpack_from(buf, 0)
        if total >= _MIN_STORED and n % total == 0:
            sizes = np.ndarray((n // total,), dtype=">i4", buffer=buf, strides=(total,))
            if bool((sizes == total).all()):
                return np.arange(0, n, total, dtype=np.int64)
    out: list[int] = []
    append = out.append
    unpack = _SIZE.unpack_from
    pos, last = 0, n - _MIN_STORED
    while pos <= last:
        (total,) = unpack(buf, pos)
        if total < _MIN_STORED:
            return None
        append(pos)
        pos += total
    return np.array(out, dtype=np.int64) if pos == n else None


def _fixed_parts(np: Any, data: Any, starts: Any) -> Any:
    """The fixed part (``_FIXED`` bytes, IPv4 hosts) of every message at ``starts``, as a structured
    array of its big-endian fields: one row copy per message (``data`` holds at least ``_FIXED`` bytes
    from every start)."""
    global _fixed_dtype
    if _fixed_dtype is None:
        fields = [
            ("total", ">i4", 0), ("magic", ">i4", 4), ("qid", ">i4", _QID), ("qoff", ">i8", _QOFF),
            ("phys", ">i8", _PHYS), ("sys_flag", ">i4", _SYSFLAG), ("born_ts", ">i8", _BORN_TS),
            ("store_ts", ">i8", _STORE_TS), ("store_ip", ">u4", _STORE_IP),
            ("store_port", ">i4", _STORE_PORT),
            ("reconsume", ">i4", _RECONSUME), ("body_len", ">i4", _BODY_LEN),
        ]  # fmt: skip
        _fixed_dtype = np.dtype(
            {
                "names": [f[0] for f in fields],
                "formats": [f[1] for f in fields],
                "offsets": [f[2] for f in fields],
                "itemsize": _FIXED,
            }
        )
    rows = np.lib.stride_tricks.sliding_window_view(data, _FIXED)[starts]
    return rows.view(_fixed_dtype).ravel()


_fixed_dtype: Any = None


def _strings(
    pa: Any, np: Any, data: Any, buf: Any, begin: Any, length: Any, kind: Any, *, utf8: bool = False
) -> Any:
    """A binary or string array (``kind``) of ``buf[begin[i]:begin[i] + length[i]]`` (``data``: ``buf``
    as numpy bytes). Built as an Arrow binary view array over ``buf`` (16 bytes per value, made with
    numpy; values of up to 12 bytes inline) and cast: one copy of the values in C++, no Python slice
    per value. Casting to string checks the UTF-8 (:class:`pyarrow.ArrowInvalid`), unless ``utf8``
    says the values are already known to be (pieces of checked text cut at ASCII bytes). A pyarrow
    that cannot cast views gets the values joined from slices instead."""
    global _views_cast
    n = len(begin)
    if n == 0:
        return pa.array([], kind)
    width = int(length[0])
    if (
        (utf8 or kind == pa.binary())
        and width > 0
        and bool((length == width).all())
        and int(begin.max()) + width <= len(data)
    ):
        return _fixed_width_values(pa, np, data, begin[:, None], [width], kind)  # one row copy per value
    if _views_cast:
        try:
            return _from_views(pa, np, data, buf, begin, length, kind, utf8)
        except pa.ArrowNotImplementedError:
            _views_cast = False
    view = memoryview(buf)
    values = b"".join([view[b : b + k] for b, k in zip(begin.tolist(), length.tolist(), strict=True)])
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(length, out=offsets[1:])
    out = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])
    out.validate(full=True)  # UTF-8 of a string array
    return out


_views_cast = True  # pyarrow casts binary views (pyarrow >= 16)
_INLINE = 12  # a view holds a value of up to 12 bytes itself


def _view_masks(np: Any) -> Any:
    """Per value length (13: longer), which of the 12 bytes after a view's length it keeps from the
    value: all of an inline value's bytes, the 4-byte prefix of a longer one."""
    global _masks
    if _masks is None:
        keep = np.zeros((_INLINE + 2, _INLINE), dtype=np.uint8)
        for k in range(_INLINE + 1):
            keep[k, :k] = 0xFF
        keep[_INLINE + 1, :4] = 0xFF
        _masks = keep.view("<u4")
    return _masks


_masks: Any = None


def _from_views(pa: Any, np: Any, data: Any, buf: Any, begin: Any, length: Any, kind: Any, utf8: bool) -> Any:
    n = len(begin)
    # the 12 bytes from every begin, one row copy each (the few values within 12 bytes of the end
    # are copied on their own)
    near = len(data) - _INLINE
    within = begin <= near  # all False when data is shorter than 12 bytes
    if near >= 0 and bool(within.all()):
        heads = np.lib.stride_tricks.sliding_window_view(data, _INLINE)[begin]
    else:
        heads = np.zeros((n, _INLINE), dtype=np.uint8)
        if near >= 0:
            heads[within] = np.lib.stride_tricks.sliding_window_view(data, _INLINE)[begin[within]]
        for i in np.flatnonzero(~within).tolist():
            b = int(begin[i])
            tail = data[b : b + _INLINE]
            heads[i, : len(tail)] = tail
    words = heads.view("<u4")  # (n, 3), contiguous
    words &= _view_masks(np)[np.minimum(length, _INLINE + 1)]
    words[:, 2] += np.where(length > _INLINE, begin, 0).astype("<u4")
    views = np.empty((n, 4), dtype="<u4")  # length, then 12 inline bytes or (prefix, buffer 0, offset)
    views[:, 0] = length
    views[:, 1:] = words
    if not isinstance(buf, pa.Buffer):
        buf = pa.py_buffer(buf)
    if utf8 and kind == pa.string():
        view = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), buf])
    else:
        view = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), buf])
    return view.cast(kind)


class _Props:
    """The items of the raw property strings, split once: (row, name, value) of every item with a
    non-empty name and value, one per name and row (a repeated name: the first place, the last value,
    as a dict built item by item)."""

    __slots__ = ("n", "names", "parents", "values")

    def __init__(self, n: int, parents: Any, names: Any, values: Any) -> None:
        self.n, self.parents, self.names, self.values = n, parents, names, values

    @classmethod
    def split(cls, pa: Any, pc: Any, np: Any, props: Any) -> _Props:
        n = len(props)
        items = pc.split_pattern(props, "\x02")
        parents = pc.list_parent_indices(items).to_numpy()
        kv = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
        # the items split in two with a non-empty name and value, picked with numpy over the parts
        # (offsets and lengths) and taken once: fewer Arrow kernel calls than filtering the lists
        offsets = kv.offsets.to_numpy()
        parts = kv.values
        if offsets[0]:  # a sliced list array: its values start at its first offset
            parts = parts.slice(offsets[0], offsets[-1] - offsets[0])
            offsets = offsets - offsets[0]
        lengths = pc.binary_length(parts).to_numpy(zero_copy_only=False)
        first = offsets[:-1]
        keep = np.flatnonzero(np.diff(offsets) == 2)
        keep = keep[(lengths[first[keep]] > 0) & (lengths[first[keep] + 1] > 0)]
        at = first[keep]
        names, values = parts.take(pa.array(at)), parts.take(pa.array(at + 1))
        parents = parents[keep]
        codes = pc.dictionary_encode(names)
        idx = codes.indices.to_numpy().astype(np.int64)
        distinct = len(codes.dictionary)
        if len(idx) and _repeats(np, parents, idx, distinct):
            # a name again in one message (producers' batches repeat WAIT): the dict keeps the first
            # item's place and the last item's value
            key = parents * distinct + idx
            order = np.argsort(key, kind="stable")
            ks = key[order]
            change = ks[1:] != ks[:-1]
            first, last = order[np.r_[True, change]], order[np.r_[change, True]]
            keep = np.argsort(first, kind="stable")
            first, last = first[keep], last[keep]
            parents = parents[first]
            codes = codes.take(pa.array(first))
            values = values.take(pa.array(last))
        return cls(n, parents, codes, values)

    def column(self, pa: Any, np: Any, name: str) -> Any:
        """The value of ``name`` per row (null where absent)."""
        dictionary = self.names.dictionary
        where = dictionary.index(name).as_py() if len(dictionary) else -1
        if where < 0:
            return pa.nulls(self.n, pa.string())
        hit = np.flatnonzero(self.names.indices.to_numpy() == where)
        pick = np.full(self.n, -1, dtype=np.int64)
        pick[self.parents[hit]] = hit
        return self.values.take(pa.array(pick, mask=pick < 0))

    def map(self, pa: Any, np: Any) -> Any:
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(np.bincount(self.parents, minlength=self.n), out=offsets[1:])
        return pa.MapArray.from_arrays(pa.array(offsets), self.names.dictionary_decode(), self.values)


class _Uniform:
    """The common case of :class:`_Props`, split with numpy alone: every row of the batch has the same
    property names in the same order (one producer's messages), each item ``name\\x01value`` with a
    non-empty name and value, one ``\\x01`` in it, and every row with a trailing ``\\x02`` or none.
    Row ``r``'s kept items are ``values[r * m : (r + 1) * m]``, named ``names`` (a repeated name: its
    first place, its last value, as :class:`_Props`)."""

    __slots__ = ("m", "n", "names", "values")

    def __init__(self, n: int, names: Any, values: Any) -> None:
        self.n, self.names, self.values, self.m = n, names, values, len(names)

    @classmethod
    def fixed(cls, pa: Any, np: Any, data: Any, begin: Any, length: Any) -> _Uniform | None:
        """The commonest case, read straight from the stored messages (``data[begin[r]:][:length[r]]``,
        no string array first): every row's property string is as long as the first's, ASCII, with
        its separators at the same places and the same names (one producer's messages whose values
        have one width per name: ``UNIQ_KEY``, ``WAIT``, a fixed ``TAGS``). Each value is then a
        column of the rows. None when the rows are not so (:meth:`split` and :class:`_Props` decide,
        checking UTF-8)."""
        n = len(begin)
        width = int(length[0]) if n else 0
        if width == 0 or not (length == width).all():
            return None
        rows = np.lib.stride_tricks.sliding_window_view(data, width)[begin]  # (n, width), one copy per row
        first = rows[0]
        if int(rows.max()) >= 0x80:  # text beyond ASCII: split checks its UTF-8
            return None
        seps = np.flatnonzero(first < 3)
        k = len(seps)
        kinds = first[seps]
        if k == 0 or not ((kinds[0::2] == 1).all() and (kinds[1::2] == 2).all()):
            return None
        if k % 2 == 0 and seps[-1] != width - 1:  # a trailing \x02 must end the string
            return None
        bounds = [-1, *seps.tolist()]
        if k % 2:
            bounds.append(width)
        # item j: name bounds[2j] + 1 .. bounds[2j + 1], value bounds[2j + 1] + 1 .. bounds[2j + 2]
        spans = [(bounds[i] + 1, bounds[i + 1], bounds[i + 2]) for i in range(0, len(bounds) - 2, 2)]
        if any(
            name_end <= name_begin or value_end <= name_end + 1 for name_begin, name_end, value_end in spans
        ):
            return None
        # names and separators as in the first row, no separator (nor \x00) inside a value
        structure = np.zeros(width, dtype=bool)
        for name_begin, name_end, _ in spans:
            structure[name_begin : name_end + 1] = True
        structure[seps] = True
        if ((rows != first) & structure).any() or ((rows < 3) & ~structure).any():
            return None
        place: dict[str, int] = {}  # name -> its last item (a dict keeps the first insertion's place)
        for j, (name_begin, name_end, _) in enumerate(spans):
            place[bytes(first[name_begin:name_end]).decode()] = j
        kept = [spans[j] for j in place.values()]
        widths = [value_end - name_end - 1 for _, name_end, value_end in kept]
        out = np.empty((n, sum(widths)), dtype=np.uint8)
        at = 0
        for (_, name_end, value_end), w in zip(kept, widths, strict=True):
            out[:, at : at + w] = rows[:, name_end + 1 : value_end]
            at += w
        offsets = np.zeros(n * len(kept) + 1, dtype=np.int32)
        np.cumsum(np.tile(np.array(widths, dtype=np.int32), n), out=offsets[1:])
        values = pa.Array.from_buffers(
            pa.string(), n * len(kept), [None, pa.py_buffer(offsets), pa.py_buffer(out)]
        )
        return cls(n, pa.array(list(place), pa.string()), values)

    @classmethod
    def split(cls, pa: Any, np: Any, props: Any) -> _Uniform | None:
        """The items of ``props`` (a string array), or None if its rows are not all alike."""
        n = len(props)
        if n == 0 or props.null_count:
            return None
        _, offsets, raw = props.buffers()
        off = np.frombuffer(offsets, dtype=np.int32)[props.offset : props.offset + n + 1].astype(np.int64)
        if raw is None or off[-1] == off[0]:
            return None
        data = np.frombuffer(raw, dtype=np.uint8)
        sep = np.flatnonzero(data[off[0] : off[-1]] < 3) + off[0]  # \x01, \x02 (and \x00: refused below)
        k = len(sep) // n
        if k == 0 or len(sep) != k * n:
            return None
        at = sep.reshape(n, k)  # sorted: k separators in every row iff each row's first and last are its own
        begins, ends = off[:-1], off[1:]
        if not ((at[:, 0] >= begins).all() and (at[:, -1] < ends).all()):
            return None
        kinds = data[at]
        if not (kinds[:, 0::2] == 1).all() or not (kinds[:, 1::2] == 2).all():
            return None
        trailing = k % 2 == 0  # every row ends with \x02 or none does
        if trailing and not (at[:, -1] == ends - 1).all():
            return None
        name_end = at[:, 0::2]
        items = name_end.shape[1]
        name_begin = np.empty_like(name_end)
        name_begin[:, 0] = begins
        value_end = np.empty_like(name_end)
        seconds = at[:, 1::2]
        if trailing:
            name_begin[:, 1:] = seconds[:, :-1] + 1
            value_end[:] = seconds
        else:
            name_begin[:, 1:] = seconds + 1
            value_end[:, :-1] = seconds
            value_end[:, -1] = ends
        name_len = name_end - name_begin
        value_begin = name_end + 1
        value_len = value_end - value_begin
        if not ((name_len > 0).all() and (value_len > 0).all() and (name_len == name_len[0]).all()):
            return None
        # the same name bytes in every row as in the first: the names' first ``width`` bytes, one row
        # copy per name, compared where they belong to the name
        width = int(name_len[0].max())
        if int(name_begin.max()) + width > len(data):
            data = np.concatenate([data, np.zeros(width, dtype=np.uint8)])
        heads = np.lib.stride_tricks.sliding_window_view(data, width)[name_begin]  # (n, items, width)
        own = np.arange(width) < name_len[0][:, None]
        if not ((heads == heads[0]) | ~own).all():
            return None
        template = [bytes(heads[0, j, : name_len[0, j]]).decode() for j in range(items)]
        place: dict[str, int] = {}  # name -> its last item (a dict keeps the first insertion's place)
        for j, name in enumerate(template):
            place[name] = j
        cols = list(place.values())
        begin, length = value_begin[:, cols], value_len[:, cols]
        if (length == length[0]).all():
            values = _fixed_width_values(pa, np, data, begin, length[0])
        else:
            values = _strings(pa, np, data, raw, begin.ravel(), length.ravel(), pa.string(), utf8=True)
        return cls(n, pa.array(list(place), pa.string()), values)

    def column(self, pa: Any, np: Any, name: str) -> Any:
        """The value of ``name`` per row (null where absent)."""
        names = self.names.to_pylist()
        if name not in names:
            return pa.nulls(self.n, pa.string())
        return self.values.take(pa.array(np.arange(self.n, dtype=np.int64) * self.m + names.index(name)))

    def map(self, pa: Any, np: Any) -> Any:
        offsets = np.arange(0, self.n * self.m + 1, self.m, dtype=np.int32)
        keys = self.names.take(pa.array(np.tile(np.arange(self.m, dtype=np.int64), self.n)))
        return pa.MapArray.from_arrays(pa.array(offsets), keys, self.values)


def _fixed_width_values(pa: Any, np: Any, data: Any, begin: Any, widths: Any, kind: Any = None) -> Any:
    """The string (or ``kind``) array of ``data[begin[r, j] : begin[r, j] + widths[j]]`` in row-major
    order, when every row's ``j``-th value has the same width (``UNIQ_KEY``, ``WAIT``, one producer's
    ``TAGS``, bodies of one size): one row copy per column into the values buffer, no views. String
    values must be known to be valid UTF-8 (pieces of checked text cut at ASCII bytes)."""
    n, m = begin.shape
    widths = [int(w) for w in widths]
    if m == 1:
        out = np.lib.stride_tricks.sliding_window_view(data, widths[0])[begin[:, 0]]
    else:
        out = np.empty((n, sum(widths)), dtype=np.uint8)
        at = 0
        for j, w in enumerate(widths):
            out[:, at : at + w] = np.lib.stride_tricks.sliding_window_view(data, w)[begin[:, j]]
            at += w
    offsets = np.zeros(n * m + 1, dtype=np.int32)
    np.cumsum(np.tile(np.array(widths, dtype=np.int32), n), out=offsets[1:])
    return pa.Array.from_buffers(kind or pa.string(), n * m, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def _repeats(np: Any, parents: Any, idx: Any, distinct: int) -> bool:
    """Whether some row has two items of one name (``parents`` ascend, ``idx`` are name codes)."""
    if distinct <= 62:
        bits = np.left_shift(np.int64(1), idx)
        cuts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
        return bool((np.add.reduceat(bits, cuts) != np.bitwise_or.reduceat(bits, cuts)).any())
    codes = np.sort(parents * distinct + idx)
    return bool((codes[1:] == codes[:-1]).any())


class _JoinBuffer(threading.local):
    """Each thread's buffer for the joined pull bodies of a batch, kept between batches: a fresh
    12 MB join per batch made the C allocator hand those pages back to the system and fault them in
    again. At most ``KEEP_JOIN`` bytes are kept. Nothing :func:`build_batch` returns points into it
    (every column is a copy)."""

    buf: bytearray | None = None


_join_buffer = _JoinBuffer()


#: the largest join buffer a thread keeps (a larger batch's bodies are joined once, not kept)
KEEP_JOIN = 32 << 20


def _joined(chunks: Sequence[Chunk]) -> bytes | memoryview:
    """The bodies of ``chunks`` back to back, in this thread's join buffer (valid until its next
    call in this thread)."""
    total = sum(len(c.body) for c in chunks)
    if total > KEEP_JOIN:
        return b"".join(c.body for c in chunks)
    buf = _join_buffer.buf
    if buf is None or len(buf) < total:
        buf = _join_buffer.buf = bytearray(total)  # a new one: the old may still be exported
    view = memoryview(buf)
    at = 0
    for c in chunks:
        end = at + len(c.body)
        view[at:end] = c.body
        at = end
    return view[:total]


def build_batch(
    chunks: Iterable[Chunk],
    topic: str,
    broker_name: str,
    *,
    tags: frozenset[str] = frozenset(),
    properties: bool = True,
    skip_undecodable: bool = False,
) -> Any:
    """One Arrow record batch of the messages of ``chunks`` whose queue offsets fall in their chunk's
    [lo, hi) and, if ``tags`` is not empty, whose tag is one of them (the client-side re-filter). A
    message of the range that cannot be decoded raises :class:`UndecodableMessageError`, or with
    ``skip_undecodable`` is left out with an ERROR record."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = list(chunks)
    buf = chunks[0].body if len(chunks) == 1 else _joined(chunks)
    # the messages of the joined bodies, found in one walk; every chunk must start with one of them
    # (else a chunk's walk would not end at its end: the careful path says where and why)
    starts = _starts(np, buf)
    batch = None
    if starts is not None:
        ends = np.cumsum([len(c.body) for c in chunks], dtype=np.int64)
        first = np.searchsorted(starts, ends[:-1])
        if (first < len(starts)).all() and (starts[first] == ends[:-1]).all():
            batch = _fast(pa, pc, np, buf, starts, topic, broker_name, properties)
    if batch is None or starts is None:
        return _careful(
            chunks, topic, broker_name, tags=tags, properties=properties, skip_undecodable=skip_undecodable
        )
    chunk_of = np.searchsorted(ends, starts, side="right")  # the chunk each message came in
    qoff = batch.column(3).to_numpy()
    keep = (qoff >= np.array([c.lo for c in chunks], dtype=np.int64)[chunk_of]) & (
        qoff < np.array([c.hi for c in chunks], dtype=np.int64)[chunk_of]
    )
    if tags:
        keep &= pc.fill_null(pc.is_in(batch.column(6), value_set=pa.array(sorted(tags))), False).to_numpy(
            zero_copy_only=False
        )
    return batch if keep.all() else batch.filter(pa.array(keep))


def _fast(
    pa: Any, pc: Any, np: Any, buf: bytes | memoryview, starts: Any, topic: str, broker: str, properties: bool
) -> Any | None:
    n = len(starts)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=arrow_schema())
    data = np.frombuffer(buf, dtype=np.uint8)
    fixed = _fixed_parts(np, data, starts)
    if (fixed["sys_flag"] & _SLOW_FLAGS).any() or (fixed["magic"] != MAGIC_CODE_V1).any():
        return None
    end = starts + fixed["total"]
    body_len = fixed["body_len"].astype(np.int64)
    body_begin = starts + _FIXED
    q = body_begin + body_len  # topic length byte
    if (body_len < 0).any() or (q + 3 > end).any():
        return None
    p = q + 1 + data[q]  # properties length (2 bytes)
    if (p + 2 > end).any():
        return None
    props_begin = p + 2
    if ((data[p].astype(np.int64) << 8 | data[p + 1]) != end - props_begin).any():
        return None
    items: _Uniform | _Props | None = _Uniform.fixed(pa, np, data, props_begin, end - props_begin)
    if items is None:
        try:
            props = _strings(pa, np, data, buf, props_begin, end - props_begin, pa.string())  # UTF-8 checked
        except pa.ArrowInvalid:
            return None
        items = _Uniform.split(pa, np, props) or _Props.split(pa, pc, np, props)
    map_col = items.map(pa, np) if properties else pa.nulls(n, pa.map_(pa.string(), pa.string()))
    msg_id = items.column(pa, np, Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if msg_id.null_count:
        msg_id = _with_offset_ids(pa, fixed, msg_id)
    ts = pa.timestamp("us", tz="UTC")
    cols = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.array(fixed["qid"].astype(np.int32)),
        pa.array(fixed["qoff"].astype(np.int64)),
        msg_id,
        items.column(pa, np, Prop.KEYS),
        items.column(pa, np, Prop.TAGS),
        _strings(pa, np, data, buf, body_begin, body_len, pa.binary()),
        pa.array(fixed["born_ts"].astype(np.int64) * 1000).cast(ts),
        pa.array(fixed["store_ts"].astype(np.int64) * 1000).cast(ts),
        map_col,
        pa.array(fixed["reconsume"].astype(np.int32)),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema())


def _with_offset_ids(pa: Any, fixed: Any, msg_id: Any) -> Any:
    """Fill the rows without ``UNIQ_KEY`` with the offset message id (store host + commit log offset),
    as :attr:`MessageExt.msg_id` does."""
    ids = msg_id.to_pylist()
    ips = fixed["store_ip"].tolist()
    ports = (fixed["store_port"].astype("i8") & 0xFFFFFFFF).tolist()
    phys = fixed["phys"].tolist()
    for i, v in enumerate(ids):
        if v is None:
            ids[i] = f"{_ip_hex(ips[i])}{ports[i]:08X}{phys[i] & 0xFFFFFFFFFFFFFFFF:016X}"
    return pa.array(ids, pa.string())


def _careful(
    chunks: Sequence[Chunk],
    topic: str,
    broker_name: str,
    *,
    tags: frozenset[str],
    properties: bool,
    skip_undecodable: bool = False,
) -> Any:
    msgs: list[MessageExt] = []
    for c in chunks:
        pulled = decode_messages(c.body, broker_name=broker_name)
        for u in pulled.undecodable:  # the query fails on it, naming it (as failOnDataLoss would)
            if c.lo <= u.queue_offset < c.hi:
                if not skip_undecodable:
                    raise UndecodableMessageError(u)
                log.error("rocketmq source: undecodable message skipped: %s", u.describe())
        for m in pulled:
            if c.lo <= m.queue_offset < c.hi and (not tags or m.tags in tags):
                msgs.append(m)
    return to_arrow(msgs, topic, broker_name, properties=properties)
