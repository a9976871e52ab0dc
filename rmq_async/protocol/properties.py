"""Message properties: the ``name\\x01value\\x02name\\x01value`` string a message carries.

Strategy. The string is parsed with Java's rules (``MessageDecoder.string2messageProperties``):
items are split on ``\\x02``, each item's first ``\\x01`` separates name and value, an item with an
empty name or value is ignored and a later duplicate name wins. :func:`parse_properties` builds the
whole dict; :func:`lookup_property` gives one value of it without building it, for a consumer that
reads two or three properties of each message. Items are delimited by ``\\x02``, which no name or
value holds, so an item starts at position 0 or right after a ``\\x02``: ``"\\x02" + name + "\\x01"``
found from the end (or ``name + "\\x01"`` at position 0) is the last item of that name, never a name
that merely ends with it, nor text inside a value. Its value runs to the next ``\\x02``; an empty one
is skipped as the dict skips it, and the search goes on to earlier items.

Writing checks every name and value for the two separators (:func:`check_property`), so each item
is read back as written (except one with an empty value, which Java's reader drops too). Reading does
not check the items unless asked (:func:`properties_well_formed`): Java's reader ignores an item
without ``\\x01``.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from operator import contains

from ..errors import ProtocolError

__all__ = [
    "NAME_VALUE_SEPARATOR", "PROPERTIES_MAX", "PROPERTY_SEPARATOR", "check_property", "encode_properties",
    "lookup_property", "parse_properties", "properties_well_formed",
]  # fmt: skip

NAME_VALUE_SEPARATOR = "\x01"  # MessageDecoder.NAME_VALUE_SEPARATOR
PROPERTY_SEPARATOR = "\x02"  # MessageDecoder.PROPERTY_SEPARATOR
#: the properties length is a Java short on the wire (stored messages, batch bodies)
PROPERTIES_MAX = 0x7FFF

_NV, _SEP = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
_NEEDS_NV = repeat(_NV)


def parse_properties(s: str, *, strict: bool = True) -> dict[str, str]:
    """``name\\x01value\\x02...`` to a dict (``MessageDecoder.string2messageProperties``).

    Empty items (the 5.x trailing ``\\x02``) are skipped; an item without ``\\x01`` raises
    :class:`ProtocolError`, or is ignored with ``strict=False``, as Java's reader ignores it. As in
    Java, an item with an empty name or value is ignored and a later duplicate name wins; a value may
    contain ``\\x01`` (the first one separates).
    """
    out: dict[str, str] = {}
    for item in s.split(_SEP):
        name, nv, value = item.partition(_NV)
        if name and value:
            out[name] = value
        elif strict and item and not nv:
            raise ProtocolError(f"property item without a name/value separator: {item[:40]!r}")
    return out


def lookup_property(s: str, name: str) -> str | None:
    """``parse_properties(s, strict=False).get(name)``, read from the string without a dict."""
    if not name or _NV in name or _SEP in name:
        return None  # never a key of the dict
    key = _SEP + name + _NV
    n = len(key)
    i = s.rfind(key)
    while i >= 0:
        value = s[i + n :].partition(_SEP)[0]
        if value:
            return value
        i = s.rfind(key, 0, i)  # an empty value: the dict keeps an earlier item of that name
    if s.startswith(name + _NV):
        return s[n - 1 :].partition(_SEP)[0] or None
    return None


def properties_well_formed(s: str) -> bool:
    """True if every non-empty item of ``s`` has its ``\\x01``; the common case stays in C."""
    items = s.split(_SEP)
    if not items[-1]:
        items.pop()
    if all(map(contains, items, _NEEDS_NV)):
        return True
    return all(_NV in it for it in items if it)


def encode_properties(props: Mapping[str, str], *, trailing_separator: bool = False) -> str:
    """A property dict to the wire string (``MessageDecoder.messageProperties2String``).

    4.9.8 form by default (no trailing ``\\x02``); ``trailing_separator=True`` gives the 5.x form.
    Names must be non-empty; names and values must not contain ``\\x01`` or ``\\x02`` (ValueError).
    """
    parts = []
    for name, value in props.items():
        check_property(name, value)
        parts.append(f"{name}{_NV}{value}")
    s = _SEP.join(parts)
    return s + _SEP if trailing_separator and s else s


def check_property(name: str, value: str) -> None:
    """Raise ValueError unless ``name`` is a non-empty str and neither it nor the str ``value`` holds
    a separator."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"property names and values must be str, got {name!r}: {value!r}")
    if not name:
        raise ValueError("property name must not be empty")
    if _NV in name or _SEP in name or _NV in value or _SEP in value:
        raise ValueError(f"property {name!r} contains a reserved separator (\\x01 or \\x02)")
