"""SQL92 property filters, parsed and evaluated as the RocketMQ broker's ``filter`` module does.

Strategy. The broker compiles a subscription's SQL92 expression with a JavaCC grammar
(``filter/.../parser/SelectorParser.jj``, taken from ActiveMQ with LIKE, arithmetic and hex/octal
literals removed) into ``Expression`` objects, and evaluates them per message over the message's
properties, all of them Java ``String``s (``broker/.../filter/MessageEvaluationContext``). A null
result, a non-Boolean result or an exception means "no match" (``ExpressionMessageFilter
.isMatchedByCommitLog``). This module re-implements that behaviour without the Java code:

* a lazy, longest-match tokenizer: like JavaCC's token manager it lexes a token only when the
  parser looks at it, so text after a complete expression is ignored (the grammar never asks for
  EOF) unless its first token is lexically invalid; ``Expression.unparsed`` keeps that text and
  ``parse(..., strict=True)`` refuses it;
* a precedence-climbing parser over the grammar's four binary levels (OR < AND < ``=`` ``<>``
  ``IS [NOT] NULL`` < ``>`` ``>=`` ``<`` ``<=`` ``[NOT] BETWEEN`` ``[NOT] IN`` ``[NOT] CONTAINS``
  ...), left-associative, with prefix ``+``, ``-`` and ``NOT`` binding tighter than all of them
  (``NOT a = 'x'`` is ``(NOT a) = 'x'``), and the parse-time checks the Java factories make
  (``ComparisonExpression.checkLessThanOperand`` and friends);
* small frozen slotted nodes whose ``_eval`` follows the Java ``evaluate`` methods: Java's value
  classes are modelled as ``None`` (null), ``bool``, ``str``, ``int`` (Integer), ``_Long`` and
  ``float`` (Double); ``_jcmp`` is ``ComparisonExpression.__compare`` with string conversion on,
  and a Java exception is ``_Unevaluable``, caught once in ``Expression.evaluate``.

Flavour 4 is the grammar of 4.9.x and 5.0.0-5.1.2; flavour 5 (5.1.3 on) adds the keywords CONTAINS,
STARTSWITH and ENDSWITH (and their NOT forms). Evaluation is the same in both.

Sans-IO and pure: compile once with ``parse``, evaluate many times; nothing here raises during
evaluation.
"""

from __future__ import annotations

import math
import unicodedata
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from rmq_async.errors import ConfigError

__all__ = ["Expression", "FilterSyntaxError", "Flavour", "parse"]

Flavour: TypeAlias = Literal[4, 5]

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_JAVA_WS = "".join(chr(c) for c in range(0x21))  # String.trim(): every char <= ' '
_MAX_NESTING = 50  # parentheses and prefix operators (Java: a StackOverflowError, much deeper)
_MAX_DEPTH = 200  # nodes on one root-to-leaf path, so evaluation never hits the recursion limit


class FilterSyntaxError(ConfigError):
    """``expression`` is not a valid SQL92 filter; ``position`` is the 0-based offset of the fault.

    The broker answers such a subscription with an error (``MQFilterException``).
    """

    def __init__(self, message: str, expression: str, position: int) -> None:
        super().__init__(f"{message} at position {position} of SQL92 filter {expression!r}")
        self.expression = expression
        self.position = position


class _Unevaluable(Exception):
    """Where the Java evaluation throws (NumberFormatException, ClassCastException, ...)."""


class _Long(int):
    """A Java ``Long`` (an ``int`` is a Java ``Integer``): the class decides how a string converts."""

    __slots__ = ()


_Value: TypeAlias = "bool | str | int | float | None"


# --------------------------------------------------------------------------- Java value semantics


def _dcmp(a: float, b: float) -> int:
    """``Double.compare``: -0.0 < 0.0, NaN equals itself and is above +Infinity."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return 0 if sa == sb else (-1 if sa < sb else 1)
        return 0
    a_nan, b_nan = a != a, b != b
    if a_nan and b_nan:
        return 0
    return 1 if a_nan else -1


def _parse_int(s: str, lo: int, hi: int) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: optional sign, then BMP Unicode decimal digits."""
    n = len(s)
    if n == 0:
        raise _Unevaluable
    neg = False
    body = s
    if s[0] in "+-":
        if n == 1:
            raise _Unevaluable
        neg, body = s[0] == "-", s[1:]
    if body.isascii():
        if not body.isdigit():
            raise _Unevaluable
    elif all(c.isdecimal() and c <= "\uffff" for c in body):  # Character.digit(char, 10) >= 0
        body = "".join(str(unicodedata.decimal(c)) for c in body)
    else:
        raise _Unevaluable
    body = body.lstrip("0")
    if len(body) > 19:
        raise _Unevaluable
    v = int(body) if body else 0
    if neg:
        v = -v
    if not lo <= v <= hi:
        raise _Unevaluable
    return v


def _scan_digits(s: str, i: int, hexadecimal: bool = False) -> int:
    digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
    n = len(s)
    while i < n and s[i] in digits:
        i += 1
    return i


def _parse_double(s: str) -> float:
    """``Double.valueOf``: trimmed; sign; NaN, Infinity, decimal or hex; optional f/F/d/D suffix."""
    t = s.strip(_JAVA_WS)
    n = len(t)
    i = 1 if t[:1] in ("+", "-") else 0
    neg = t[:1] == "-"
    rest = t[i:]
    if rest == "NaN":
        return math.nan
    if rest == "Infinity":
        return -math.inf if neg else math.inf
    if rest[:2] in ("0x", "0X"):
        return _parse_hex_double(t, i + 2, neg)
    j, digits, dot = i, 0, False
    while j < n:
        c = t[j]
        if "0" <= c <= "9":
            digits += 1
        elif c == "." and not dot:
            dot = True
        else:
            break
        j += 1
    if digits == 0:
        raise _Unevaluable
    if j < n and t[j] in "eE":
        k = j + 1
        if k < n and t[k] in "+-":
            k += 1
        j = _scan_digits(t, k)
        if j == k:
            raise _Unevaluable
    if j < n and (j != n - 1 or t[j] not in "fFdD"):
        raise _Unevaluable
    return float(t[:j])


def _parse_hex_double(t: str, i: int, neg: bool) -> float:
    # FloatingDecimal.HEX_FLOAT_PATTERN: 0x (h+ .? | h* . h+) [pP] [+-]? d+ [fFdD]?
    n = len(t)
    j = _scan_digits(t, i, hexadecimal=True)
    ok = j > i
    if j < n and t[j] == ".":
        k = _scan_digits(t, j + 1, hexadecimal=True)
        ok = ok or k > j + 1
        j = k
    if not ok or j >= n or t[j] not in "pP":
        raise _Unevaluable
    k = j + 1
    if k < n and t[k] in "+-":
        k += 1
    e = _scan_digits(t, k)
    if e == k or (e < n and (e != n - 1 or t[e] not in "fFdD")):
        raise _Unevaluable
    try:
        return float.fromhex(t[:e])  # a zero significand is zero whatever the exponent, as in Java
    except OverflowError:
        return -math.inf if neg else math.inf


def _java_bool(s: str) -> bool:
    """``Boolean.valueOf(String)``: ``"true".equalsIgnoreCase(s)``."""
    return len(s) == 4 and s.isascii() and s.lower() == "true"


def _cmp(a: int | bool | str, b: int | bool | str) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def _jcmp(lv: bool | str | int | float, rv: bool | str | int | float) -> int:
    """``ComparisonExpression.__compare(lv, rv, true)`` for non-null values.

    Mixed numbers are promoted (Integer -> Long -> Double); a String meeting a number or a Boolean
    is converted to the other side's class (failure throws); a Boolean meeting a String throws (a
    ClassCastException in Java); any other mismatch answers -1. Two strings compare by code point
    here and by UTF-16 unit in Java: only equality is ever decided on that (``<`` and friends
    compare two strings as doubles, see ``_Compare``), so the difference cannot show.
    """
    lt, rt = type(lv), type(rv)
    if lt is rt:
        if lt is float:
            return _dcmp(lv, rv)  # type: ignore[arg-type]
        return _cmp(lv, rv)  # type: ignore[arg-type]
    if lt is str:
        s: str = lv  # type: ignore[assignment]
        if rt is bool:
            return _cmp(_java_bool(s), rv)  # type: ignore[arg-type]
        if rt is int:
            return _cmp(_parse_int(s, _INT_MIN, _INT_MAX), rv)  # type: ignore[arg-type]
        if rt is _Long:
            return _cmp(_parse_int(s, _LONG_MIN, _LONG_MAX), rv)  # type: ignore[arg-type]
        return _dcmp(_parse_double(s), rv)  # type: ignore[arg-type]
    if lt is bool:
        if rt is str:
            raise _Unevaluable
        return -1
    if rt is bool:
        return -1
    if rt is str:
        s = rv  # type: ignore[assignment]
        if lt is int:
            return _cmp(lv, _parse_int(s, _INT_MIN, _INT_MAX))  # type: ignore[arg-type]
        if lt is _Long:
            return _cmp(lv, _parse_int(s, _LONG_MIN, _LONG_MAX))  # type: ignore[arg-type]
        return _dcmp(lv, _parse_double(s))  # type: ignore[arg-type]
    if lt is float or rt is float:
        return _dcmp(float(lv), float(rv))
    return _cmp(lv, rv)  # type: ignore[arg-type]  # Integer and Long


# --------------------------------------------------------------------------- nodes


class _Node:
    __slots__ = ()

    def _eval(self, props: Mapping[str, str]) -> _Value:
        raise NotImplementedError

    def _children(self) -> tuple[_Node, ...]:
        return ()


class _BoolNode(_Node):
    """A Java ``BooleanExpression``: evaluates to a bool or None."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class _Literal(_Node):
    """``ConstantExpression``: a string, an Integer (int), a Long (_Long) or a Double (float)."""

    value: str | int | float

    def _eval(self, props: Mapping[str, str]) -> _Value:
        return self.value


@dataclass(frozen=True, slots=True)
class _BoolLiteral(_BoolNode):
    """``BooleanConstantExpression``: TRUE, FALSE or NULL (None)."""

    value: bool | None

    def _eval(self, props: Mapping[str, str]) -> _Value:
        return self.value


@dataclass(frozen=True, slots=True)
class _Property(_Node):
    name: str

    def _eval(self, props: Mapping[str, str]) -> _Value:
        return props.get(self.name)


@dataclass(frozen=True, slots=True)
class _BooleanCast(_BoolNode):
    """A bare property used as a condition: null stays null, a non-Boolean (any string) is FALSE."""

    name: str

    def _eval(self, props: Mapping[str, str]) -> _Value:
        return None if props.get(self.name) is None else False  # a String is not a Boolean


@dataclass(frozen=True, slots=True)
class _Negate(_Node):
    """Unary minus: a number is negated (class kept), anything else is null."""

    operand: _Node

    def _eval(self, props: Mapping[str, str]) -> _Value:
        v = self.operand._eval(props)
        t = type(v)
        if t is int:
            return -v  # type: ignore[operator]  # |v| <= 2**31 - 1: no overflow
        if t is _Long:
            return _Long(-v)  # type: ignore[operator]
        if t is float:
            return -v  # type: ignore[operator]
        return None

    def _children(self) -> tuple[_Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class _Not(_BoolNode):
    operand: _Node

    def _eval(self, props: Mapping[str, str]) -> _Value:
        v = self.operand._eval(props)
        return None if v is None else not v

    def _children(self) -> tuple[_Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class _And(_BoolNode):
    """``LogicExpression.createAND``, flattened: FALSE wins (and stops), then null, then TRUE."""

    operands: tuple[_Node, ...]

    def _eval(self, props: Mapping[str, str]) -> _Value:
        unknown = False
        for op in self.operands:
            v = op._eval(props)
            if v is False:
                return False
            if v is None:
                unknown = True
        return None if unknown else True

    def _children(self) -> tuple[_Node, ...]:
        return self.operands


@dataclass(frozen=True, slots=True)
class _Or(_BoolNode):
    """``LogicExpression.createOR``, flattened: TRUE wins (and stops), then null, then FALSE."""

    operands: tuple[_Node, ...]

    def _eval(self, props: Mapping[str, str]) -> _Value:
        unknown = False
        for op in self.operands:
            v = op._eval(props)
            if v is True:
                return True
            if v is None:
                unknown = True
        return None if unknown else False

    def _children(self) -> tuple[_Node, ...]:
        return self.operands


@dataclass(frozen=True, slots=True)
class _Equal(_BoolNode):
    """``doCreateEqual``: null = null is TRUE; a null left is null, a null right is FALSE."""

    left: _Node
    right: _Node

    def _eval(self, props: Mapping[str, str]) -> _Value:
        lv = self.left._eval(props)
        rv = self.right._eval(props)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return _jcmp(lv, rv) == 0

    def _children(self) -> tuple[_Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class _IsNull(_BoolNode):
    operand: _Node

    def _eval(self, props: Mapping[str, str]) -> _Value:
        return self.operand._eval(props) is None

    def _children(self) -> tuple[_Node, ...]:
        return (self.operand,)


_GT, _GE, _LT, _LE = ">", ">=", "<", "<="


@dataclass(frozen=True, slots=True)
class _Compare(_BoolNode):
    """``>``, ``>=``, ``<``, ``<=``: null if a side is null; two strings compare as doubles."""

    op: str
    left: _Node
    right: _Node

    def _eval(self, props: Mapping[str, str]) -> _Value:
        lv = self.left._eval(props)
        if lv is None:
            return None
        rv = self.right._eval(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            c = _dcmp(_parse_double(lv), _parse_double(rv))
        else:
            c = _jcmp(lv, rv)
        op = self.op
        if op == _GT:
            return c > 0
        if op == _GE:
            return c >= 0
        if op == _LT:
            return c < 0
        return c <= 0

    def _children(self) -> tuple[_Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class _In(_BoolNode):
    """``[NOT] IN ('a', ...)`` on a property: a missing property is null for both forms."""

    name: str
    values: frozenset[str]
    negated: bool

    def _eval(self, props: Mapping[str, str]) -> _Value:
        v = props.get(self.name)
        if type(v) is not str:
            return None
        return (v in self.values) != self.negated


_CONTAINS, _STARTSWITH, _ENDSWITH = "CONTAINS", "STARTSWITH", "ENDSWITH"


@dataclass(frozen=True, slots=True)
class _StringMatch(_BoolNode):
    """5.x ``[NOT] CONTAINS/STARTSWITH/ENDSWITH 'lit'``: FALSE (both forms) for an empty literal,
    a null or a non-string; never null."""

    op: str
    operand: _Node
    search: str
    negated: bool

    def _eval(self, props: Mapping[str, str]) -> _Value:
        if not self.search:
            return False  # decided before the operand is evaluated
        v = self.operand._eval(props)
        if type(v) is not str:
            return False
        op = self.op
        if op == _CONTAINS:
            hit = self.search in v
        elif op == _STARTSWITH:
            hit = v.startswith(self.search)
        else:
            hit = v.endswith(self.search)
        return hit != self.negated

    def _children(self) -> tuple[_Node, ...]:
        return (self.operand,)


# --------------------------------------------------------------------------- compiled expression


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled filter. ``unparsed`` is trailing text the broker's parser ignores ("" if none)."""

    source: str
    flavour: Flavour
    unparsed: str
    _root: _Node

    def evaluate(self, props: Mapping[str, str]) -> bool | None:
        """TRUE or FALSE, or None where the broker's result is null or its evaluation throws."""
        try:
            v = self._root._eval(props)
        except _Unevaluable:
            return None
        return v if type(v) is bool else None

    def matches(self, props: Mapping[str, str]) -> bool:
        """Whether the broker delivers a message with these properties (only a TRUE result does)."""
        return self.evaluate(props) is True

    def __str__(self) -> str:
        return self.source


# --------------------------------------------------------------------------- tokenizer

_EOF, _ID, _STRING, _DECIMAL, _FLOAT = "end of expression", "identifier", "string", "integer", "number"
_KEYWORDS_4 = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_KEYWORDS_5 = _KEYWORDS_4 | {_CONTAINS, _STARTSWITH, _ENDSWITH}
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ID_PART = _ID_START | frozenset("0123456789")
_OPERATORS = ("<>", "<=", ">=", "=", ">", "<", "(", ")", ",", "+", "-")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # _EOF, _ID, _STRING, _DECIMAL, _FLOAT, a keyword (upper case) or an operator
    text: str
    pos: int


class _Lexer:
    """JavaCC's token manager: longest match, keywords before identifiers, lexed on demand."""

    __slots__ = ("_buf", "_keywords", "_pos", "_src")

    def __init__(self, src: str, keywords: frozenset[str]) -> None:
        self._src, self._pos, self._keywords = src, 0, keywords
        self._buf: deque[_Token] = deque()

    def peek(self, k: int = 1) -> _Token:
        while len(self._buf) < k:
            self._buf.append(self._scan())
        return self._buf[k - 1]

    def next(self) -> _Token:
        tok = self.peek()
        self._buf.popleft()
        return tok

    def _error(self, message: str, pos: int) -> FilterSyntaxError:
        return FilterSyntaxError(message, self._src, pos)

    def _scan(self) -> _Token:
        src, n, i = self._src, len(self._src), self._pos
        while i < n:  # white space and complete comments
            c = src[i]
            if c in " \t\n\r\f":
                i += 1
            elif c == "-" and src.startswith("--", i):
                end = _line_comment_end(src, i + 2)
                if end < 0:
                    break  # no line end: "-" "-" tokens
                i = end
            elif c == "/" and src.startswith("/*", i):
                end = src.find("*/", i + 2)
                if end < 0:
                    raise self._error("unterminated comment", i)
                i = end + 2
            else:
                break
        if i >= n:
            self._pos = n
            return _Token(_EOF, "", n)
        c = src[i]
        if c in _ID_START:
            j = i + 1
            while j < n and src[j] in _ID_PART:
                j += 1
            kind = src[i:j].upper()
            tok = _Token(kind if kind in self._keywords else _ID, src[i:j], i)
        elif "0" <= c <= "9" or c == ".":
            kind, j = _scan_number(src, i)
            if j == i:
                raise self._error(f"unexpected character {c!r}", i)
            tok = _Token(kind, src[i:j], i)
        elif c == "'":
            j = _scan_string(src, i)
            if j < 0:
                raise self._error("unterminated string literal", i)
            tok = _Token(_STRING, src[i:j], i)
        else:
            for op in _OPERATORS:
                if src.startswith(op, i):
                    j = i + len(op)
                    tok = _Token(op, op, i)
                    break
            else:
                raise self._error(f"unexpected character {c!r}", i)
        self._pos = j
        return tok


def _line_comment_end(src: str, i: int) -> int:
    """End of a ``--`` comment whose text starts at ``i``, or -1 without a line end."""
    n = len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            return i + 1
        if c == "\r":
            return i + 2 if src.startswith("\n", i + 1) else i + 1
        i += 1
    return -1


def _scan_string(src: str, i: int) -> int:
    """End of the longest ``'` ( `''` | not `'` )* `'`` at ``i``, or -1."""
    n, j, end = len(src), i + 1, -1
    while j < n:
        if src[j] != "'":
            j += 1
            continue
        end = j + 1  # a quote can close the literal ...
        if not src.startswith("'", j + 1):
            break
        j += 2  # ... or, doubled, stand for one quote
    return end


def _exponent_end(src: str, i: int) -> int:
    """End of ``[eE] [+-]? digits`` at ``i``, or ``i`` when there is none."""
    if i < len(src) and src[i] in "eE":
        j = i + 1
        if j < len(src) and src[j] in "+-":
            j += 1
        k = _scan_digits(src, j)
        if k > j:
            return k
    return i


def _scan_number(src: str, i: int) -> tuple[str, int]:
    """The longest of DECIMAL_LITERAL (``0`` | ``[1-9][0-9]*[lL]?``) and FLOATING_POINT_LITERAL."""
    n = len(src)
    d = _scan_digits(src, i)
    best = (_DECIMAL, i)
    if d > i:
        decimal_end = i + 1 if src[i] == "0" else (d + 1 if d < n and src[d] in "lL" else d)
        best = (_DECIMAL, decimal_end)
        if d < n and src[d] == ".":
            end = _exponent_end(src, _scan_digits(src, d + 1))
        else:
            end = _exponent_end(src, d)
            if end == d:
                end = -1
    else:  # "." digits+ exponent?
        f = _scan_digits(src, i + 1)
        end = _exponent_end(src, f) if f > i + 1 else -1
    if end > best[1]:
        best = (_FLOAT, end)
    return best


# --------------------------------------------------------------------------- parser

_LEVEL = {
    "OR": 1,
    "AND": 2,
    "=": 3,
    "<>": 3,
    "IS": 3,
    ">": 4,
    ">=": 4,
    "<": 4,
    "<=": 4,
    "NOT": 4,
    "BETWEEN": 4,
    "IN": 4,
    _CONTAINS: 4,
    _STARTSWITH: 4,
    _ENDSWITH: 4,
}
_AFTER_NOT = frozenset({"BETWEEN", "IN", _CONTAINS, _STARTSWITH, _ENDSWITH})
_CONSTANTS = (_Literal, _BoolLiteral)


class _Parser:
    __slots__ = ("_after_not", "_depth", "_lex", "_src")

    def __init__(self, src: str, flavour: Flavour) -> None:
        self._src = src
        self._after_not = (
            "BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT"
            if flavour == 5
            else "BETWEEN or IN after NOT"
        )
        self._lex = _Lexer(src, _KEYWORDS_5 if flavour == 5 else _KEYWORDS_4)
        self._depth = 0

    def _error(self, message: str, pos: int) -> FilterSyntaxError:
        return FilterSyntaxError(message, self._src, pos)

    def _unexpected(self, tok: _Token, wanted: str) -> FilterSyntaxError:
        found = tok.kind if tok.kind == _EOF else repr(tok.text)
        return self._error(f"expected {wanted}, found {found}", tok.pos)

    def _expect(self, kind: str, wanted: str) -> _Token:
        tok = self._lex.next()
        if tok.kind != kind:
            raise self._unexpected(tok, wanted)
        return tok

    def parse(self) -> tuple[_Node, int]:
        start = self._lex.peek().pos
        root = self._boolean(self._expr(1), start)
        return root, self._lex.peek().pos  # JmsSelector() stops here: it never asks for EOF

    def _boolean(self, node: _Node, pos: int) -> _Node:
        """``asBooleanExpression``: a property becomes a boolean cast; a value is refused."""
        if isinstance(node, _BoolNode):
            return node
        if isinstance(node, _Property):
            return _BooleanCast(node.name)
        raise self._error("expression will not result in a boolean value", pos)

    def _expr(self, min_level: int) -> _Node:
        # Each grammar level loops over its own operators only: after ``x IS NULL`` (level 3)
        # a level-4 operator is not looked for, so ``a IS NULL > 1`` stops before ``>``.
        left, max_level = self._unary(), 4
        while True:
            tok = self._lex.peek()
            level = _LEVEL.get(tok.kind)
            if level is None or not min_level <= level <= max_level:
                return left
            left, max_level = self._operator(left, tok), level

    def _operator(self, left: _Node, tok: _Token) -> _Node:
        lex, kind, pos = self._lex, tok.kind, tok.pos
        if kind in ("OR", "AND"):
            lex.next()
            right_pos = lex.peek().pos
            right = self._expr(2 if kind == "OR" else 3)
            operands = (self._boolean(left, pos), self._boolean(right, right_pos))
            cls = _Or if kind == "OR" else _And
            flat: list[_Node] = []
            for op in operands:
                flat.extend(op.operands if isinstance(op, cls) else (op,))
            return cls(tuple(flat))
        if kind in ("=", "<>"):
            lex.next()
            right = self._expr(4)
            for side in (left, right):
                if isinstance(side, _BoolLiteral) and side.value is None:
                    raise self._error("NULL cannot be compared with = or <> (use IS NULL)", pos)
            if isinstance(left, _BoolLiteral) and isinstance(right, _Literal):
                raise self._error(f"{left.value} cannot be compared with a string or number", pos)
            eq = _Equal(left, right)
            return eq if kind == "=" else _Not(eq)
        if kind == "IS":
            if lex.peek(2).kind == "NULL":
                lex.next()
                lex.next()
                return _IsNull(left)
            lex.next()
            self._expect("NOT", "NULL or NOT NULL after IS")
            self._expect("NULL", "NULL after IS NOT")
            return _Not(_IsNull(left))
        if kind in (_GT, _GE, _LT, _LE):
            lex.next()
            right = self._unary()
            self._check_ordered(left, pos)
            self._check_ordered(right, pos)
            return _Compare(kind, left, right)
        negated = kind == "NOT"
        if negated:
            kind = lex.peek(2).kind
            if kind not in _AFTER_NOT:
                raise self._unexpected(lex.peek(2), self._after_not)
            lex.next()
        lex.next()
        if kind == "BETWEEN":
            return self._between(left, negated, pos)
        if kind == "IN":
            return self._in(left, negated, pos)
        search = self._expect(_STRING, f"a string literal after {kind}")
        return _StringMatch(kind, left, _decode_string(search.text), negated)

    def _check_ordered(self, node: _Node, pos: int) -> None:
        """``checkLessThanOperand``: no string, boolean or NULL constant, no condition."""
        if isinstance(node, _Literal) and not isinstance(node.value, str):
            return
        if isinstance(node, (*_CONSTANTS, _BoolNode)):
            raise self._error("only numbers can be compared with >, >=, <, <= or BETWEEN", pos)

    def _between(self, value: _Node, negated: bool, pos: int) -> _Node:
        low = self._unary()
        self._expect("AND", "AND in BETWEEN")
        high = self._unary()
        if not negated and isinstance(low, _CONSTANTS) and isinstance(high, _CONSTANTS):
            lv, hv = low.value, high.value
            if lv is None or hv is None:
                raise self._error("BETWEEN bounds cannot be NULL", pos)
            try:
                backwards = _jcmp(hv, lv) < 0
            except _Unevaluable:
                backwards = True
            if backwards:
                raise self._error(f"BETWEEN {lv!r} AND {hv!r}: the low bound exceeds the high one", pos)
        for node in (value, low, high):
            self._check_ordered(node, pos)
        if negated:
            return _Or((_Compare(_LT, value, low), _Compare(_GT, value, high)))
        return _And((_Compare(_GE, value, low), _Compare(_LE, value, high)))

    def _in(self, left: _Node, negated: bool, pos: int) -> _Node:
        self._expect("(", "'(' after IN")
        values = [_decode_string(self._expect(_STRING, "a string literal in the IN list").text)]
        while self._lex.peek().kind == ",":
            self._lex.next()
            values.append(_decode_string(self._expect(_STRING, "a string literal in the IN list").text))
        self._expect(")", "',' or ')' in the IN list")
        if not isinstance(left, _Property):
            raise self._error("IN needs a property on its left", pos)
        return _In(left.name, frozenset(values), negated)

    def _unary(self) -> _Node:
        self._depth += 1
        try:
            tok = self._lex.peek()
            if self._depth > _MAX_NESTING:
                raise self._error("expression nested too deeply", tok.pos)
            kind = tok.kind
            if kind == "+":
                self._lex.next()
                return self._unary()
            if kind == "-":
                self._lex.next()
                return _Negate(self._unary())
            if kind == "NOT":
                self._lex.next()
                operand_pos = self._lex.peek().pos
                return _Not(self._boolean(self._unary(), operand_pos))
            return self._primary()
        finally:
            self._depth -= 1

    def _primary(self) -> _Node:
        tok = self._lex.next()
        kind = tok.kind
        if kind == _ID:
            return _Property(tok.text)
        if kind == _STRING:
            return _Literal(_decode_string(tok.text))
        if kind == _DECIMAL:
            return _Literal(self._decimal(tok))
        if kind == _FLOAT:
            value = float(tok.text)
            if value == math.inf or value == 0.0:  # createFloat: > Double.MAX_VALUE, < MIN_VALUE
                raise self._error(f"number {tok.text} is out of range", tok.pos)
            return _Literal(value)
        if kind in ("TRUE", "FALSE", "NULL"):
            return _BoolLiteral(None if kind == "NULL" else kind == "TRUE")
        if kind == "(":
            inner = self._expr(1)
            self._expect(")", "')'")
            return inner
        raise self._unexpected(tok, "a value, a property or '('")

    def _decimal(self, tok: _Token) -> int:
        """``createFromDecimal``: an Integer when it fits, else a Long; beyond a Long is an error."""
        digits = tok.text.rstrip("lL")
        if len(digits) > 19 or int(digits) > _LONG_MAX:
            raise self._error(f"integer {tok.text} is out of range", tok.pos)
        value = int(digits)
        return value if value <= _INT_MAX else _Long(value)


def _decode_string(text: str) -> str:
    return text[1:-1].replace("''", "'")


def _depth(root: _Node) -> int:
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in node._children())
    return deepest


def parse(expr: str, *, flavour: Flavour = 5, strict: bool = False) -> Expression:
    """Compile ``expr`` as the broker does (flavour 4: 4.9.x-5.1.2; flavour 5: 5.1.3 on).

    Raises ``FilterSyntaxError`` where the broker's ``SelectorParser.parse`` throws. Like the
    broker, text after a complete expression is ignored (kept in ``Expression.unparsed``);
    ``strict=True`` refuses it instead.
    """
    if flavour not in (4, 5):
        raise ConfigError(f"SQL92 filter flavour must be 4 or 5, not {flavour!r}")
    try:
        root, end = _Parser(expr, flavour).parse()
    except RecursionError:
        raise FilterSyntaxError("expression nested too deeply", expr, 0) from None
    if strict and end < len(expr):
        raise FilterSyntaxError("unexpected text after the expression", expr, end)
    if _depth(root) > _MAX_DEPTH:
        raise FilterSyntaxError("expression nested too deeply", expr, 0)
    return Expression(expr, flavour, expr[end:], root)
