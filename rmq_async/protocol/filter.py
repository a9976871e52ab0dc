"""Subscriptions' filters: tag expressions, their Java hash codes, the client-side re-filter, and
:class:`Selector`, the user's choice between a tag expression and a SQL92 property filter.

Strategy. The broker filters a TAG subscription by the Java ``String.hashCode()`` of each tag (the
consume queue stores the message tag's hash code), so a subscription carries both the tag strings
and their codes (``FilterAPI.buildSubscriptionData``), and the client filters again by the string
(``PullAPIWrapper.processPullResult``), since different tags can share a hash code. The hash must be
Java's exactly: over UTF-16 code units (a character outside the BMP counts as two), wrapped to a
signed 32-bit int. Trimming is Java's ``String.trim()`` (code points up to U+0020), not Python's
``str.strip()``.

A SQL92 selector (``MessageSelector.bySql``) is sent as it is (``FilterAPI.build``: ``subString`` the
expression, no tags, no codes, ``expressionType`` ``SQL92``) and evaluated by the broker only
(:mod:`.sql92`); the client filters nothing again. A tag expression given as a plain string is checked
by :func:`check_tag_expression` first: Java takes any string, so a SQL-looking one (``a > 5``) or
``TagA,TagB`` silently matches nothing; here they are refused.

Sans-IO and pure: no state.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from .sql92 import FilterSyntaxError, parse

__all__ = [
    "SQL92",
    "SUB_ALL",
    "TAG",
    "Selector",
    "check_tag_expression",
    "is_tag_type",
    "java_string_hash",
    "java_trim",
    "parse_tag_expression",
    "tag_matches",
]

#: ``SubscriptionData.SUB_ALL``: subscribe to every tag.
SUB_ALL = "*"
#: ``ExpressionType.TAG`` / ``ExpressionType.SQL92``: a subscription's ``expressionType``.
TAG: Literal["TAG"] = "TAG"
SQL92: Literal["SQL92"] = "SQL92"

#: characters no tag of a sane tag expression contains: they make a string that matches nothing
#: (a SQL filter taken as a tag, ``TagA,TagB``, ``TagA | TagB``, ``TagA || *``)
_NOT_IN_TAGS = frozenset(",|*=<>()'\"!&")
_SQL_HINTS = frozenset("=<>()'")
_SQL_WORDS = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)

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


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: None, ``""`` and ``"TAG"`` are tag subscriptions."""
    return expression_type is None or expression_type == "" or expression_type == TAG


def check_tag_expression(expr: str | None) -> str:
    """``expr`` if it is a tag expression that can match what it says; else :class:`ConfigError`.

    Java (``FilterAPI.buildSubscriptionData``) splits on ``||``, trims each part and drops the empty
    ones; whatever is left is a tag, matched by its exact string. So ``"||"`` and ``"  "`` subscribe
    to no tag (nothing is delivered), ``"TagA,TagB"`` and ``"TagA | TagB"`` to one tag with a comma or
    a bar in it, ``"a > 5"`` to the tag ``a > 5``, and ``"TagA || *"`` to ``TagA`` and a tag named
    ``*``. Those are refused here. Accepted: None, ``""`` and ``"*"`` (every message), and ``||``
    separated tags without whitespace inside and without any of ``, | * = < > ( ) ' " ! &``
    (empty parts, as in ``"TagA ||"``, are dropped as Java drops them).
    """
    if expr is None or expr == "" or expr == SUB_ALL:
        return SUB_ALL if expr is None else expr
    if not isinstance(expr, str):
        raise ConfigError(f"a tag expression must be a string, not {type(expr).__name__}")
    tags = [java_trim(part) for part in expr.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise ConfigError(f"tag expression {expr!r} names no tag: it would match no message")
    for tag in tags:
        if any(ch in _SQL_HINTS for ch in tag) or not _SQL_WORDS.isdisjoint(tag.upper().split()):
            raise ConfigError(
                f"tag expression {expr!r} looks like a SQL92 filter: a tag expression is 'TagA || TagB'; "
                f"filter by message properties with Selector.sql({expr!r}) (the broker must enable "
                "enablePropertyFilter)"
            )
        if any(ch in _NOT_IN_TAGS for ch in tag) or any(ch.isspace() for ch in tag):
            raise ConfigError(
                f"tag expression {expr!r}: {tag!r} is not a tag (it would only match a tag spelled so); "
                "tags are separated by '||', as in 'TagA || TagB', and '*' stands alone"
            )
    return expr


@dataclass(frozen=True, slots=True)
class Selector:
    """What a consumer subscribes to on a topic (Java ``MessageSelector``): a tag expression
    (:meth:`tag`, the meaning of a plain string) or a SQL92 filter over message properties
    (:meth:`sql`, evaluated by the broker, which must run with ``enablePropertyFilter=true``).

    ``Selector.sql(...)`` parses the expression at once (:func:`.sql92.parse`, accepting what either
    the 4.x or the 5.x grammar accepts; trailing text the broker would ignore is refused) and raises
    :class:`~.sql92.FilterSyntaxError` (a :class:`ConfigError`) for one that cannot parse; the
    broker's check at ``start()`` is authoritative.
    """

    expression_type: Literal["TAG", "SQL92"]
    expression: str

    @classmethod
    def tag(cls, expression: str | None = SUB_ALL) -> Selector:
        """A tag expression: ``"*"`` (every message) or ``"TagA || TagB"``
        (:func:`check_tag_expression`)."""
        return cls(TAG, check_tag_expression(expression))

    @classmethod
    def sql(cls, expression: str) -> Selector:
        """A SQL92 property filter, e.g. ``"region = 'eu' AND amount > 100"`` (``MessageSelector.bySql``)."""
        if not isinstance(expression, str) or not java_trim(expression):
            # FilterAPI.build: "Expression can't be null!"
            raise ConfigError("a SQL92 selector needs an expression")
        try:
            parse(expression, flavour=5, strict=True)
        except FilterSyntaxError as exc5:
            try:  # a 4.x broker takes CONTAINS, STARTSWITH and ENDSWITH as property names
                parse(expression, flavour=4, strict=True)
            except FilterSyntaxError:
                raise exc5 from None
        return cls(SQL92, expression)

    @classmethod
    def of(cls, value: Selector | str | None) -> Selector:
        """``value`` as a selector: a plain string (or None, ``*``) is a tag expression."""
        if isinstance(value, Selector):
            return value
        return cls.tag(value)

    @property
    def is_sql(self) -> bool:
        return self.expression_type == SQL92

    def __str__(self) -> str:
        return f"SQL92 {self.expression!r}" if self.is_sql else self.expression


def tag_matches(tags: Collection[str], tag: str | None) -> bool:
    """The client-side re-filter: an empty ``tags`` collection subscribes to all; otherwise the
    message's tag must be one of them (a message without a tag matches only a subscribe-all)."""
    if not tags:
        return True
    return tag is not None and tag in tags
