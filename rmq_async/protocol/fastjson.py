"""The JSON dialect the Java side writes with fastjson (``RemotingSerializable``).

Strategy: reading tries the stdlib ``json.loads`` first, which handles almost every body (route data
from 4.9.4+ servers, heartbeats, lock bodies). Only when it refuses the text do we run a small
recursive-descent parser that also accepts fastjson's two non-standard map key forms:

* unquoted integer keys, ``{"brokerAddrs":{0:"127.0.0.1:10911"}}`` (route bodies for old clients),
  read back as ``int`` keys;
* object keys, ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}`` (maps keyed by a
  MessageQueue: reset offset, consumer status, running info), read back as an :class:`ObjectKeyMap`,
  a list of ``(key, value)`` pairs, because a dict cannot be a dict key.

Nesting is capped (:data:`MAX_DEPTH`) so hostile input cannot exhaust the stack; every failure is a
:class:`~rmq_async.errors.ProtocolError` naming the character position.

Writing (:func:`dumps`) is compact, keeps non-ASCII as raw UTF-8 (``ensure_ascii=False``, as fastjson
does), keeps dict keys in the order given (callers pass bean properties already sorted, fastjson's
default), quotes int keys (standard JSON, what 4.9.4+ servers send a 4.9.8 client) and writes
``MessageQueue``/dict/``ObjectKeyMap`` keys in the object-key form the Java side reads back.
Floats are written the way Java's ``Double.toString`` does (``0.0``, ``1.0E10``), and
:func:`java_map_order` gives the order fastjson writes a ``java.util.HashMap`` in (header extFields).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from ..errors import ProtocolError
from .mq import MessageQueue

__all__ = ["MAX_DEPTH", "ObjectKeyMap", "dumps", "java_double", "java_map_order", "loads"]

#: Deepest nesting of objects/arrays the fallback parser accepts.
MAX_DEPTH = 200

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "null": None}


class ObjectKeyMap(list[tuple[Any, Any]]):
    """A JSON map whose keys are objects (``{{mq}:value}``), as ``(key, value)`` pairs in wire order.

    Keys are whatever the parser read (dicts for object keys); :func:`dumps` writes it back as a map.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ObjectKeyMap({list.__repr__(self)})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- reading ------------------------------------------------------------------------------------


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson output: strict JSON plus unquoted int keys and object keys (see module doc)."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"fastjson: invalid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ProtocolError("fastjson: nesting too deep for the parser") from None
    except ValueError:
        pass  # not strict JSON: the dialect parser decides, and reports the position if it fails too
    return _Parser(text).parse()


class _Parser:
    """Recursive descent over the text; strings and numbers use compiled regexes and ``json.loads``."""

    __slots__ = ("_n", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._n = len(text)

    def _fail(self, what: str, pos: int) -> ProtocolError:
        near = self._text[pos : pos + 20]
        return ProtocolError(f"fastjson: {what} at position {pos} (near {near!r})")

    def _ws(self, pos: int) -> int:
        m = _WS.match(self._text, pos)
        return m.end() if m else pos

    def parse(self) -> Any:
        value, pos = self._value(self._ws(0), 0)
        pos = self._ws(pos)
        if pos != self._n:
            raise self._fail("extra data after the value", pos)
        return value

    def _value(self, pos: int, depth: int) -> tuple[Any, int]:
        if pos >= self._n:
            raise self._fail("unexpected end of input", pos)
        ch = self._text[pos]
        if ch == "{":
            return self._object(pos, depth + 1)
        if ch == "[":
            return self._array(pos, depth + 1)
        if ch == '"':
            return self._string(pos)
        if ch == "-" or ch.isdigit():
            return self._number(pos)
        for word, val in _CONSTANTS.items():
            if self._text.startswith(word, pos):
                return val, pos + len(word)
        raise self._fail("expected a value", pos)

    def _string(self, pos: int) -> tuple[str, int]:
        m = _STRING.match(self._text, pos)
        if m is None:
            raise self._fail("bad string", pos)
        return json.loads(m.group()), m.end()

    def _number(self, pos: int) -> tuple[int | float, int]:
        m = _NUMBER.match(self._text, pos)
        if m is None:
            raise self._fail("bad number", pos)
        if m.group(1) is None and m.group(2) is None:
            return int(m.group()), m.end()
        return float(m.group()), m.end()

    def _array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            raise self._fail(f"nesting deeper than {MAX_DEPTH}", pos)
        out: list[Any] = []
        pos = self._ws(pos + 1)
        if pos < self._n and self._text[pos] == "]":
            return out, pos + 1
        while True:
            value, pos = self._value(pos, depth)
            out.append(value)
            pos = self._ws(pos)
            if pos >= self._n:
                raise self._fail("unterminated array", pos)
            ch = self._text[pos]
            if ch == "]":
                return out, pos + 1
            if ch != ",":
                raise self._fail("expected ',' or ']'", pos)
            pos = self._ws(pos + 1)

    def _key(self, pos: int, depth: int) -> tuple[Any, int]:
        if pos >= self._n:
            raise self._fail("unterminated object", pos)
        ch = self._text[pos]
        if ch == '"':
            return self._string(pos)
        if ch == "{":
            return self._object(pos, depth + 1)
        if ch == "-" or ch.isdigit():
            key, end = self._number(pos)
            if isinstance(key, float):
                raise self._fail("a map key must be a string, an integer or an object", pos)
            return key, end
        raise self._fail("expected a map key", pos)

    def _object(self, pos: int, depth: int) -> tuple[dict[Any, Any] | ObjectKeyMap, int]:
        if depth > MAX_DEPTH:
            raise self._fail(f"nesting deeper than {MAX_DEPTH}", pos)
        pairs: list[tuple[Any, Any]] = []
        object_keys = False
        pos = self._ws(pos + 1)
        if pos < self._n and self._text[pos] == "}":
            return {}, pos + 1
        while True:
            key, pos = self._key(pos, depth)
            if isinstance(key, (dict, ObjectKeyMap)):
                object_keys = True
            pos = self._ws(pos)
            if pos >= self._n or self._text[pos] != ":":
                raise self._fail("expected ':'", pos)
            value, pos = self._value(self._ws(pos + 1), depth)
            pairs.append((key, value))
            pos = self._ws(pos)
            if pos >= self._n:
                raise self._fail("unterminated object", pos)
            ch = self._text[pos]
            if ch == "}":
                pos += 1
                break
            if ch != ",":
                raise self._fail("expected ',' or '}'", pos)
            pos = self._ws(pos + 1)
        if object_keys:
            return ObjectKeyMap(pairs), pos
        return dict(pairs), pos


# -- Java HashMap iteration order ---------------------------------------------------------------


def _java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit value."""
    h = 0
    if s.isascii():
        for ch in s:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return h
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h


@functools.lru_cache(maxsize=512)
def _hash_order(keys: tuple[str, ...], initial_capacity: int) -> tuple[int, ...]:
    cap = 1
    while cap < initial_capacity:  # HashMap.tableSizeFor
        cap <<= 1
    while len(keys) > cap * 3 // 4:  # resized once size exceeds 0.75 * capacity
        cap <<= 1
    return java_bucket_order(keys, cap)


def java_bucket_order(keys: tuple[str, ...], capacity: int) -> tuple[int, ...]:
    """Indexes of ``keys`` (in insertion order) in the order a ``java.util.HashMap`` whose table has
    ``capacity`` buckets (a power of two) iterates them. Leaving keys out keeps the others' order as
    long as the capacity is the same."""
    mask = capacity - 1

    def bucket(i: int) -> tuple[int, int]:
        h = _java_string_hash(keys[i])
        return ((h ^ (h >> 16)) & mask, i)  # HashMap.hash spreads the high bits; ties keep insertion order

    return tuple(sorted(range(len(keys)), key=bucket))


def java_map_order(ext: Mapping[str, str], initial_capacity: int = 16) -> dict[str, str]:
    """``ext`` re-ordered as a ``java.util.HashMap`` filled in ``ext``'s order iterates it.

    That is the order fastjson writes a Java ``extFields`` map in. ``initial_capacity`` is the map's
    constructor argument (16 by default; 5.x brokers pre-size some response maps to 256).
    """
    keys = tuple(ext)
    return {keys[i]: ext[keys[i]] for i in _hash_order(keys, initial_capacity)}


# -- writing ------------------------------------------------------------------------------------


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it (fastjson's form); NaN and infinities are null."""
    if math.isnan(x) or math.isinf(x):
        return "null"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    a = abs(x)
    if 1e-3 <= a < 1e7:
        r = repr(x)
        if "e" in r or "E" in r:  # cannot happen in this range, but stay safe
            r = format(x, "f")
        return r if "." in r else r + ".0"
    # Scientific: shortest round-trip digits (repr), one digit before the point, "E" exponent.
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    e10 = exp + len(digits) - 1
    mant = ds[0] + "." + (ds[1:] or "0")
    return ("-" if sign else "") + f"{mant}E{e10}"


def dumps(obj: Any, *, ensure_ascii: bool = False) -> str:
    """Write ``obj`` compactly in fastjson's dialect (see module doc).

    Supported: dict (keys str, int, MessageQueue, dict), :class:`ObjectKeyMap`, list, tuple, str,
    int, float, bool, None and :class:`MessageQueue` values (written as their bean form).
    ``ensure_ascii=True`` escapes non-ASCII (fastjson's ``BrowserCompatible``).
    """
    enc = encode_basestring_ascii if ensure_ascii else encode_basestring
    parts: list[str] = []
    _write(obj, parts, enc)
    return "".join(parts)


def _write(obj: Any, out: list[str], enc: Any) -> None:
    if isinstance(obj, str):
        out.append(enc(obj))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(java_double(obj))
    elif isinstance(obj, ObjectKeyMap):
        _write_map(obj, out, enc)
    elif isinstance(obj, Mapping):
        _write_map(obj.items(), out, enc)
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        first = True
        for item in obj:
            if not first:
                out.append(",")
            first = False
            _write(item, out, enc)
        out.append("]")
    elif isinstance(obj, MessageQueue):
        _write_map(obj.to_json().items(), out, enc)
    else:
        raise TypeError(f"fastjson.dumps cannot write {type(obj).__name__}")


def _write_map(items: Iterable[tuple[Any, Any]], out: list[str], enc: Any) -> None:
    out.append("{")
    first = True
    for key, value in items:
        if not first:
            out.append(",")
        first = False
        _write_key(key, out, enc)
        out.append(":")
        _write(value, out, enc)
    out.append("}")


def _write_key(key: Any, out: list[str], enc: Any) -> None:
    if isinstance(key, str):
        out.append(enc(key))
    elif isinstance(key, bool):
        out.append('"true"' if key else '"false"')
    elif isinstance(key, int):
        out.append(f'"{int(key)}"')
    elif isinstance(key, (MessageQueue, Mapping, ObjectKeyMap)):
        _write(key, out, enc)
    elif key is None:
        out.append('"null"')
    elif isinstance(key, float):
        out.append(f'"{java_double(key)}"')
    else:
        raise TypeError(f"fastjson.dumps cannot write a {type(key).__name__} map key")
