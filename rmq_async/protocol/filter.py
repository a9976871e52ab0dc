"""Tag subscriptions: expressions, their Java hash codes, and the client-side re-filter.

Strategy. The broker filters a TAG subscription by the Java ``String.hashCode()`` of each tag (the
consume queue stores the message tag's hash code), so a subscription carries both the tag strings
and their codes (``FilterAPI.buildSubscriptionData``), and the client filters again by the string
(``PullAPIWrapper.processPullResult``), since different tags can share a hash code. The hash must be
Java's exactly: over UTF-16 code units (a character outside the BMP counts as two), wrapped to a
signed 32-bit int. Trimming is Java's ``String.trim()`` (code points up to U+0020), not Python's
``str.strip()``.

Sans-IO and pure: no state.
"""

from __future__ import annotations

import struct
from collections.abc import Collection

__all__ = ["SUB_ALL", "java_string_hash", "java_trim", "parse_tag_expression", "tag_matches"]

#: ``SubscriptionData.SUB_ALL``: subscribe to every tag.
SUB_ALL = "*"

_JAVA_WHITESPACE = "".join(chr(c) for c in range(0x21))  # String.trim(): every char <= ' '


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` of ``s``: ``h = 31 * h + c`` over UTF-16 code units, as a signed int32."""
    h = 0
    if s.isascii() or max(s) <= "\uffff":
        for ch in s:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        for unit in struct.unpack(f">{len(data) // 2}H", data):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_trim(s: str) -> str:
    """Java ``String.trim()``: strip characters up to U+0020 from both ends."""
    return s.strip(_JAVA_WHITESPACE)


def parse_tag_expression(expr: str | None) -> tuple[str, list[str], list[int]]:
    """``(sub_string, tags, codes)`` for a TAG expression, as ``FilterAPI.buildSubscriptionData``.

    ``None``, ``""`` and ``"*"`` subscribe to everything: ``("*", [], [])``. Otherwise the
    expression is split on ``||``, each part trimmed, empty parts dropped, duplicates removed with
    the first occurrence kept; ``codes`` are the distinct Java hash codes of ``tags`` (Java keeps both
    in sets; the order here is the expression's). ``sub_string`` is the expression as given.
    """
    if expr is None or expr == "" or expr == SUB_ALL:
        return SUB_ALL, [], []
    tags: list[str] = []
    codes: list[int] = []
    for part in expr.split("||"):
        tag = java_trim(part)
        if tag and tag not in tags:
            tags.append(tag)
            code = java_string_hash(tag)
            if code not in codes:
                codes.append(code)
    return expr, tags, codes


def tag_matches(tags: Collection[str], tag: str | None) -> bool:
    """The client-side re-filter: an empty ``tags`` collection subscribes to all; otherwise the
    message's tag must be one of them (a message without a tag matches only a subscribe-all)."""
    if not tags:
        return True
    return tag is not None and tag in tags
