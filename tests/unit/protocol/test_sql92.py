"""rmq_async.protocol.sql92: SQL92 filters parsed and evaluated as the broker's ``filter`` module.

Where each case comes from (apache/rocketmq, ``filter/src/...``):

* ``ExpressionTest.m`` / ``ParserTest.m``: that test method in
  ``filter/src/test/java/org/apache/rocketmq/filter/``. Their contexts sometimes hold Java numbers
  or Booleans; the broker's ``MessageEvaluationContext`` only ever holds strings, so those rows use
  the value's string form, or a constant operand where the point is "not a string".
* ``derived from C.m``: read off class ``C`` method ``m`` in ``filter/src/main/java/.../filter/``
  (``expression/`` or ``parser/SelectorParser.jj``), or the broker's
  ``ExpressionMessageFilter.isMatchedByCommitLog`` (null, non-Boolean or exception: no match).

``expected`` is what ``Expression.evaluate`` answers: True, False, or None where the Java result is
null or the Java evaluation throws (noted "throws"). Every row was also run through the Java
classes of rocketmq-all-4.9.8 and of the 5.x branch (8fc57f1) compiled locally; the two agree
except where a row is limited to one flavour.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_async.errors import ConfigError
from rmq_async.protocol.sql92 import Expression, FilterSyntaxError, parse

E = "ExpressionTest."
P = "ParserTest."
CMP = "derived from ComparisonExpression"
GRAMMAR = "derived from SelectorParser.jj"

AND_EXPR = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPR = "a=3 or b<>4 Or c>5 OR d<=4"
FIVE = (5,)
BOTH = (4, 5)

# (expression, properties, expected, flavours, source)
ROWS: list[tuple[str, dict[str, str], bool | None, tuple[int, ...], str]] = [
    # ---- the broker's own ExpressionTest (values as the strings the broker would see)
    (AND_EXPR, {"a": "3", "b": "5", "c": "6", "d": "1"}, True, BOTH, E + "testEvaluate_andTrue"),
    (AND_EXPR, {"a": "4", "b": "5", "c": "6", "d": "1"}, False, BOTH, E + "testEvaluate_andFalse"),
    (OR_EXPR, {"a": "3"}, True, BOTH, E + "testEvaluate_orTrue (first)"),
    (OR_EXPR, {"a": "4", "b": "5"}, True, BOTH, E + "testEvaluate_orTrue (second)"),
    (OR_EXPR, {"a": "4", "b": "4", "c": "6"}, True, BOTH, E + "testEvaluate_orTrue (third)"),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True, BOTH, E + "testEvaluate_orTrue (forth)"),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False, BOTH, E + "testEvaluate_orFalse"),
    ("a in ('3', '4', '5')", {"a": "3"}, True, BOTH, E + "testEvaluate_inTrue"),
    ("a in ('3', '4', '5')", {"a": "5"}, True, BOTH, E + "testEvaluate_inTrue"),
    ("a in ('3', '4', '5')", {"a": "8"}, False, BOTH, E + "testEvaluate_inFalse"),
    ("a not in ('3', '4', '5')", {"a": "8"}, True, BOTH, E + "testEvaluate_notInTrue"),
    ("a not in ('3', '4', '5')", {"a": "4"}, False, BOTH, E + "testEvaluate_notInFalse"),
    ("a between 2 and 10", {"a": "2"}, True, BOTH, E + "testEvaluate_betweenTrue"),
    ("a between 2 and 10", {"a": "10"}, True, BOTH, E + "testEvaluate_betweenTrue"),
    ("a between 2 and 10", {"a": "3"}, True, BOTH, E + "testEvaluate_betweenTrue"),
    ("a between 2 and 10", {"a": "1"}, False, BOTH, E + "testEvaluate_betweenFalse"),
    ("a between 2 and 10", {"a": "11"}, False, BOTH, E + "testEvaluate_betweenFalse"),
    ("a not between 2 and 10", {"a": "1"}, True, BOTH, E + "testEvaluate_notBetweenTrue"),
    ("a not between 2 and 10", {"a": "11"}, True, BOTH, E + "testEvaluate_notBetweenTrue"),
    ("a not between 2 and 10", {"a": "2"}, False, BOTH, E + "testEvaluate_notBetweenFalse"),
    ("a not between 2 and 10", {"a": "3"}, False, BOTH, E + "testEvaluate_notBetweenFalse"),
    ("a is null", {"abc": "2"}, True, BOTH, E + "testEvaluate_isNullTrue"),
    ("a is null", {"a": "2"}, False, BOTH, E + "testEvaluate_isNullFalse"),
    ("a is not null", {"a": "2"}, True, BOTH, E + "testEvaluate_isNotNullTrue"),
    ("a is not null", {"abc": "2"}, False, BOTH, E + "testEvaluate_isNotNullFalse"),
    ("a is not null and a='hello'", {"a": "hello"}, True, BOTH, E + "testEvaluate_equal"),
    ("a is not null and a='hello'", {}, False, BOTH, E + "testEvaluate_equal"),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True, BOTH, E + "testEvaluate_boolean"),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False, BOTH, E + "testEvaluate_boolean"),
    ("a is null OR a='hello'", {}, True, BOTH, E + "testEvaluate_nullOr"),
    ("a is null OR a='hello'", {"a": "hello"}, True, BOTH, E + "testEvaluate_nullOr"),
    ("a is null OR a='hello'", {"a": "abc"}, False, BOTH, E + "testEvaluate_nullOr"),
    (
        "TAGS is not null and TAGS='''''tag'''''",
        {"TAGS": "''tag''"},
        True,
        BOTH,
        E + "testEvaluate_stringHasString",
    ),
    ("a > 3.1E10", {"a": "3.1415E10"}, True, BOTH, E + "testEvaluate_exponent"),
    ("a > 3.14", {"a": "3.1415"}, True, BOTH, E + "testEvaluate_floatNumber"),
    ("a > b", {"a": "10", "b": "20"}, False, BOTH, E + "testEvaluate_twoVariable"),
    ("a > b", {"a": "20", "b": "10"}, True, BOTH, E + "testEvaluate_twoVariableGt"),
    ("a between up and low", {"a": "3.14"}, None, BOTH, E + "testEvaluate_stringCompare"),
    (
        "a between up and low",
        {"a": "3.14", "up": "up", "low": "low"},
        None,
        BOTH,
        E + "testEvaluate_stringCompare (throws)",
    ),
    (
        "key is not null and key between 0 and 100",
        {"key": "con"},
        None,
        BOTH,
        E + "testEvaluate_stringCompare (throws)",
    ),
    ("a between 0 and 100", {"a": "abc"}, None, BOTH, E + "testEvaluate_stringCompare (throws)"),
    ("a=b", {"a": "3.14", "b": "3.14"}, True, BOTH, E + "testEvaluate_stringCompare"),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False, BOTH, E + "testEvaluate_stringCompare"),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True, BOTH, E + "testEvaluate_stringCompare"),
    ("value contains 'x'", {"value": "axb"}, True, FIVE, E + "testContains_StartsWith_EndsWith_has"),
    ("value startswith 'ax'", {"value": "axb"}, True, FIVE, E + "testContains_StartsWith_EndsWith_has"),
    ("value endswith 'xb'", {"value": "axb"}, True, FIVE, E + "testContains_StartsWith_EndsWith_has"),
    (
        "value not contains 'x'",
        {"value": "axb"},
        False,
        FIVE,
        E + "test_notContains_notStartsWith_notEndsWith_has",
    ),
    (
        "value not endswith 'xb'",
        {"value": "axb"},
        False,
        FIVE,
        E + "test_notContains_notStartsWith_notEndsWith_has",
    ),
    ("value startswith 'x'", {"value": "abb"}, False, FIVE, E + "testContains_StartsWith_EndsWith_has_not"),
    ("value not startswith 'x'", {"value": "abb"}, True, FIVE, E + "test_notContains_..._has_not"),
    ("value contains ''", {"value": "axb"}, False, FIVE, E + "testContains_StartsWith_EndsWith_hasEmpty"),
    ("value not contains ''", {"value": "axb"}, False, FIVE, E + "test_notContains_..._hasEmpty"),
    ("value not endswith ''", {"value": "axb"}, False, FIVE, E + "test_notContains_..._hasEmpty"),
    ("value contains 'x'", {}, False, FIVE, E + "testContains_StartsWith_EndsWith_null_has_2"),
    ("value not contains 'x'", {}, False, FIVE, E + "test_notContains_..._null_has_2"),
    ("value not startswith 'x'", {}, False, FIVE, E + "test_notContains_..._null_has_2"),
    ("1.23 contains 'x'", {}, False, FIVE, E + "testContains_StartsWith_EndsWith_number_has"),
    ("1.23 not contains 'x'", {}, False, FIVE, E + "test_notContains_..._number_has"),
    ("TRUE not endswith 'x'", {}, False, FIVE, E + "test_notContains_..._boolean_has"),
    ("'axb' contains 'x'", {}, True, FIVE, E + "testContains_StartsWith_EndsWith_string_has_string"),
    ("'axb' not startswith 'ax'", {}, False, FIVE, E + "test_notContains_..._string_has_string"),
    ("'axb' endswith 'u'", {}, False, FIVE, E + "testContains_startsWith_endsWith_string_has_not_string"),
    ("'axb' not contains 'u'", {}, True, FIVE, E + "test_notContains_..._string_has_not_string"),
    ("'axb' startswith ''", {}, False, FIVE, E + "testContains_StartsWith_EndsWith_string_has_empty"),
    ("' ' contains ' '", {}, True, FIVE, E + "testContains_StartsWith_EndsWith_string_has_space"),
    ("' ' not endswith ' '", {}, False, FIVE, E + "test_notContains_..._string_has_space"),
    ("'axb' contains '.'", {}, False, FIVE, E + "testContains_StartsWith_EndsWith_string_has_special_1"),
    ("'axb' not startswith '.'", {}, True, FIVE, E + "test_notContains_..._string_has_special_1"),
    ("'s' contains '\\'", {}, False, FIVE, E + "testContains_StartsWith_EndsWith_string_has_special_2"),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
        FIVE,
        E + "testContainsAllInOne",
    ),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not startswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
        FIVE,
        E + "testStartsWithAllInOne",
    ),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not endswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
        FIVE,
        E + "testEndsWithAllInOne",
    ),
    ("a <= now", {"a": "1", "now": "2"}, True, BOTH, P + "testParse_valid (now is a property)"),
    ("(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))", {"b": "4"}, True, BOTH, P + "testParse_valid"),
    (
        "(a between 2 and 10) AND (b not between 6 and 9)",
        {"a": "2", "b": "10"},
        True,
        BOTH,
        P + "testParse_valid",
    ),
    # ---- numbers: a property is a String, converted to the other side's class
    ("a > 5", {"a": "10"}, True, BOTH, CMP + ".__compare (String vs Integer: Integer.valueOf)"),
    ("a > 5", {"a": "10.5"}, None, BOTH, CMP + ".__compare (Integer.valueOf('10.5') throws)"),
    ("a > 5", {"a": "3000000000"}, None, BOTH, CMP + ".__compare (beyond an Integer: throws)"),
    ("a > 5", {"a": "+7"}, True, BOTH, CMP + ".__compare (Integer.valueOf takes a sign)"),
    ("a > 5", {"a": " 7"}, None, BOTH, CMP + ".__compare (Integer.valueOf does not trim: throws)"),
    ("a > 5", {"a": "\u0667"}, True, BOTH, CMP + ".__compare (Character.digit: Arabic-Indic 7)"),
    ("a > 5.0", {"a": "10.5"}, True, BOTH, CMP + ".__compare (String vs Double: Double.valueOf)"),
    ("a > 5.0", {"a": " 10.5\n"}, True, BOTH, CMP + ".__compare (Double.valueOf trims)"),
    ("a > 5.0", {"a": "1e1"}, True, BOTH, CMP + ".__compare (Double.valueOf exponent)"),
    ("a > 5.0", {"a": "0x1p4"}, True, BOTH, CMP + ".__compare (Double.valueOf hex: 16)"),
    ("a > 5.0", {"a": "5f"}, False, BOTH, CMP + ".__compare (Double.valueOf suffix f)"),
    ("a > 5.0", {"a": "NaN"}, True, BOTH, CMP + ".__compare (Double.compareTo: NaN is greatest)"),
    ("a < 5.0", {"a": "-Infinity"}, True, BOTH, CMP + ".__compare (Double.valueOf Infinity)"),
    ("a > 5.0", {"a": "abc"}, None, BOTH, CMP + ".__compare (NumberFormatException: throws)"),
    ("a > 5.0", {"a": "1_0"}, None, BOTH, CMP + ".__compare (no underscores in Java: throws)"),
    ("a > 3000000000", {"a": "3000000001"}, True, BOTH, CMP + ".__compare (String vs Long: Long.valueOf)"),
    (
        "a = 2147483648",
        {"a": "2147483648"},
        True,
        BOTH,
        "derived from ConstantExpression.createFromDecimal (Long)",
    ),
    ("a = 5", {"a": "5.0"}, None, BOTH, CMP + ".__compare (Integer.valueOf('5.0') throws)"),
    ("a = 5.0", {"a": "5"}, True, BOTH, CMP + ".__compare (Double.valueOf('5'))"),
    ("a <> 5", {"a": "x"}, None, BOTH, CMP + ".createNotEqual (NOT of a throw throws)"),
    ("5 = 5.0", {}, True, BOTH, CMP + ".__compare (Integer promoted to Double)"),
    ("2147483648 > 2147483647", {}, True, BOTH, CMP + ".__compare (Integer promoted to Long)"),
    ("'5' = 5", {}, True, BOTH, CMP + ".__compare (String constant vs Integer)"),
    ("a > b", {"a": "10", "b": "9"}, True, BOTH, CMP + ".evaluate (two Strings compare as doubles)"),
    ("a > b", {"a": "abc", "b": "1"}, None, BOTH, CMP + ".evaluate (two Strings, not numbers: throws)"),
    ("a = b", {"a": "5", "b": "5.0"}, False, BOTH, CMP + ".doCreateEqual (two Strings compare as strings)"),
    ("a < b", {"a": "-0.0", "b": "0.0"}, True, BOTH, CMP + ".evaluate (Double.compareTo: -0.0 < 0.0)"),
    ("a >= b", {"a": "NaN", "b": "NaN"}, True, BOTH, CMP + ".evaluate (Double.compareTo: NaN = NaN)"),
    ("a < -5", {"a": "-6"}, True, BOTH, "derived from UnaryExpression.createNegate"),
    (
        "-a > 1",
        {"a": "-5"},
        None,
        BOTH,
        "derived from UnaryExpression.createNegate (a String negates to null)",
    ),
    ("- -5 = 5", {}, True, BOTH, "derived from UnaryExpression.createNegate"),
    ("a between 1 and 2.5", {"a": "2"}, True, BOTH, CMP + ".createBetween"),
    (
        "a between 1 and 2.5",
        {"a": "1.5"},
        None,
        BOTH,
        CMP + ".createBetween (a >= 1: Integer.valueOf throws)",
    ),
    ("a between -5 and -10", {"a": "-7"}, False, BOTH, CMP + ".createBetween (negations are not constants)"),
    ("a not between 10 and 1", {"a": "5"}, True, BOTH, CMP + ".createNotBetween (no bound check)"),
    ("a between 1 and 1", {"a": "1"}, True, BOTH, CMP + ".createBetween"),
    # ---- booleans
    ("a = TRUE", {"a": "TRUE"}, True, BOTH, CMP + ".__compare (Boolean.valueOf ignores case)"),
    ("a = TRUE", {"a": "yes"}, False, BOTH, CMP + ".__compare (Boolean.valueOf('yes') is false)"),
    ("a = FALSE", {"a": "yes"}, True, BOTH, CMP + ".__compare (Boolean.valueOf('yes') is false)"),
    ("TRUE = a", {"a": "true"}, None, BOTH, CMP + ".__compare (Boolean vs String: ClassCastException)"),
    ("1 = TRUE", {}, False, BOTH, CMP + ".__compare (Integer vs Boolean: -1)"),
    ("TRUE = TRUE", {}, True, BOTH, CMP + ".doCreateEqual"),
    (
        "a",
        {"a": "true"},
        False,
        BOTH,
        "derived from UnaryExpression.createBooleanCast (a String is not a Boolean)",
    ),
    ("a", {}, None, BOTH, "derived from UnaryExpression.createBooleanCast"),
    ("NOT a", {"a": "x"}, True, BOTH, "derived from UnaryExpression.createBooleanCast"),
    # ---- nulls and three-valued logic
    ("a = b", {}, True, BOTH, CMP + ".doCreateEqual (null = null is TRUE)"),
    ("a = b", {"a": "x"}, False, BOTH, CMP + ".doCreateEqual (null on the right: FALSE)"),
    ("a = b", {"b": "x"}, None, BOTH, CMP + ".doCreateEqual (null on the left: null)"),
    ("'x' <> a", {}, True, BOTH, CMP + ".doCreateEqual (NOT FALSE: a missing property matches)"),
    ("a <> 'x'", {}, None, BOTH, CMP + ".doCreateEqual (NOT null)"),
    ("a > 5", {}, None, BOTH, CMP + ".evaluate (null side: null)"),
    ("a in ('x')", {}, None, BOTH, "derived from UnaryExpression.createInExpression"),
    ("a not in ('x')", {}, None, BOTH, "derived from UnaryExpression.createInExpression"),
    ("a in ('it''s')", {"a": "it's"}, True, BOTH, "derived from UnaryExpression.createInExpression"),
    ("NULL IS NULL", {}, True, BOTH, CMP + ".createIsNull"),
    ("'x' IS NULL", {}, False, BOTH, CMP + ".createIsNull"),
    ("a = 'x' AND b = 'y'", {"a": "x"}, None, BOTH, "derived from LogicExpression.createAND (TRUE AND null)"),
    (
        "a = 'x' AND b = 'y'",
        {"a": "z"},
        False,
        BOTH,
        "derived from LogicExpression.createAND (FALSE AND null)",
    ),
    ("a = 'x' OR b = 'y'", {"a": "x"}, True, BOTH, "derived from LogicExpression.createOR (TRUE OR null)"),
    ("a = 'x' OR b = 'y'", {"a": "z"}, None, BOTH, "derived from LogicExpression.createOR (FALSE OR null)"),
    ("TRUE OR a > b", {"a": "x", "b": "y"}, True, BOTH, "derived from LogicExpression.createOR (short cut)"),
    (
        "a > b OR TRUE",
        {"a": "x", "b": "y"},
        None,
        BOTH,
        "derived from LogicExpression.createOR (left throws)",
    ),
    (
        "FALSE AND a > b",
        {"a": "x", "b": "y"},
        False,
        BOTH,
        "derived from LogicExpression.createAND (short cut)",
    ),
    ("NOT (a = 'x')", {}, None, BOTH, "derived from UnaryExpression.createNOT"),
    ("NOT (a = 'x')", {"a": "y"}, True, BOTH, "derived from UnaryExpression.createNOT"),
    ("TRUE", {}, True, BOTH, GRAMMAR + " literal"),
    ("FALSE", {}, False, BOTH, GRAMMAR + " literal"),
    ("NULL", {}, None, BOTH, GRAMMAR + " literal"),
    ("NOT NULL", {}, None, BOTH, "derived from UnaryExpression.createNOT"),
    # ---- precedence: OR < AND < = <> IS < > >= < <= BETWEEN IN ... < prefix + - NOT
    ("a = 'x' OR a = 'y' AND b = 'z'", {"a": "x"}, True, BOTH, GRAMMAR + " (AND binds tighter than OR)"),
    ("(a = 'x' OR a = 'y') AND b = 'z'", {"a": "x"}, None, BOTH, GRAMMAR + " (parentheses)"),
    ("NOT a = 'x'", {"a": "x"}, None, BOTH, GRAMMAR + " unaryExpr ((NOT a) = 'x': Boolean vs String throws)"),
    ("NOT a IS NULL", {}, True, BOTH, GRAMMAR + " unaryExpr ((NOT a) IS NULL)"),
    ("a > 1 = TRUE", {"a": "2"}, True, BOTH, GRAMMAR + " (comparison binds tighter than =)"),
    ("a IS NULL = TRUE", {}, True, BOTH, GRAMMAR + " (equality loop)"),
    ("+a = 'x'", {"a": "x"}, True, BOTH, GRAMMAR + " unaryExpr (+ is the identity)"),
    (
        "a BETWEEN 1 AND 2 AND b = 'x'",
        {"a": "1", "b": "x"},
        True,
        BOTH,
        GRAMMAR + " (BETWEEN takes the first AND)",
    ),
    # ---- lexical forms
    ("A = 'x' aNd b Is NoT nUlL", {"A": "x", "b": "1"}, True, BOTH, GRAMMAR + " (keywords ignore case)"),
    ("A = 'x'", {"a": "x"}, None, BOTH, GRAMMAR + " (property names keep case)"),
    ("$a_1 = 'x'", {"$a_1": "x"}, True, BOTH, GRAMMAR + " ID"),
    (
        "a\t=\n'x' /* c */ --c\r\n AND\fb = 'y'",
        {"a": "x", "b": "y"},
        True,
        BOTH,
        GRAMMAR + " (blanks, comments)",
    ),
    ("a = 'it''s'", {"a": "it's"}, True, BOTH, GRAMMAR + " stringLitteral ('' is a quote)"),
    ("a = ''", {"a": ""}, True, BOTH, GRAMMAR + " stringLitteral"),
    ("a = '\u00e9\n'", {"a": "\u00e9\n"}, True, BOTH, GRAMMAR + " STRING_LITERAL (any character)"),
    ("a = 5L", {"a": "5"}, True, BOTH, GRAMMAR + " DECIMAL_LITERAL (L suffix)"),
    ("a = 5l", {"a": "5"}, True, BOTH, GRAMMAR + " DECIMAL_LITERAL (l suffix)"),
    ("a > .5", {"a": "1"}, True, BOTH, GRAMMAR + " FLOATING_POINT_LITERAL"),
    ("a > 5.", {"a": "6"}, True, BOTH, GRAMMAR + " FLOATING_POINT_LITERAL"),
    ("a = 1E3", {"a": "1000"}, True, BOTH, GRAMMAR + " FLOATING_POINT_LITERAL (exponent)"),
    ("a = 5e-1", {"a": "0.5"}, True, BOTH, GRAMMAR + " FLOATING_POINT_LITERAL (exponent)"),
    ("a = 00.5", {"a": "0.5"}, True, BOTH, GRAMMAR + " FLOATING_POINT_LITERAL (leading zeros)"),
    ("a = 9223372036854775807", {"a": "9223372036854775807"}, True, BOTH, "derived from createFromDecimal"),
    ("a = -9223372036854775807", {"a": "-9223372036854775807"}, True, BOTH, "derived from createFromDecimal"),
    # ---- 4.x reads CONTAINS, STARTSWITH, ENDSWITH as property names
    ("contains = 'x'", {"contains": "x"}, True, (4,), GRAMMAR + " (4.9.8: no CONTAINS token)"),
    ("a = 'x' OR endswith = 'y'", {"endswith": "y"}, True, (4,), GRAMMAR + " (4.9.8: no ENDSWITH token)"),
    ("a contains 'x'", {"a": "x"}, False, (4,), GRAMMAR + " (4.9.8: parses as 'a', the rest ignored)"),
]


@pytest.mark.parametrize(("expr", "props", "expected", "flavours", "source"), ROWS)
def test_evaluate(
    expr: str, props: dict[str, str], expected: bool | None, flavours: tuple[int, ...], source: str
) -> None:
    for flavour in flavours:
        compiled = parse(expr, flavour=4 if flavour == 4 else 5)
        assert compiled.evaluate(props) is expected, (flavour, source)
        assert compiled.matches(props) is (expected is True)


# (expression, flavour, position, source)
ERRORS: list[tuple[str, int, int, str]] = [
    ("a and between 2 and 10", 5, 6, P + "testParse_invalid"),
    ("a > 100000000000000000000000", 5, 4, P + "testParse_decimalOverFlow"),
    ("a > 1" + "1" * 3000 + "." + "1" * 3000, 5, 4, P + "testParse_floatOverFlow (shortened)"),
    (" a between 10 and 0", 5, 3, P + "testParse_illegalBetween"),
    ("a between 2 and 1.5", 5, 2, CMP + ".createBetween (bounds compared as numbers)"),
    ("value contains x", 5, 15, E + "testContains_has_not_string_1"),
    ("value not contains x", 5, 19, E + "test_notContains_has_not_string_1"),
    ("value contains 123", 5, 15, E + "testContains_has_not_string_2"),
    ("value not contains 123", 5, 19, E + "test_notContains_has_not_string_2"),
    ("'axb' contains ", 5, 15, E + "testContains_string_has_nothing"),
    ("'axb' not contains ", 5, 19, E + "test_notContains_string_has_nothing"),
    ("a not contains 'x'", 4, 6, GRAMMAR + " (4.9.8: NOT must precede BETWEEN or IN)"),
    ("a not endswith 'x'", 4, 6, GRAMMAR + " (4.9.8: NOT must precede BETWEEN or IN)"),
    ("contains = 'x'", 5, 0, GRAMMAR + " (5.x: CONTAINS is a keyword)"),
    ("a = NULL", 5, 2, CMP + ".checkEqualOperand"),
    ("NULL <> a", 5, 5, CMP + ".checkEqualOperand"),
    ("TRUE = 'x'", 5, 5, CMP + ".checkEqualOperandCompatability"),
    ("FALSE = 1", 5, 6, CMP + ".checkEqualOperandCompatability"),
    ("a > 'x'", 5, 2, CMP + ".checkLessThanOperand (string constant)"),
    ("'x' <= a", 5, 4, CMP + ".checkLessThanOperand (string constant)"),
    ("a < TRUE", 5, 2, CMP + ".checkLessThanOperand (boolean constant)"),
    ("a >= NULL", 5, 2, CMP + ".checkLessThanOperand (NULL)"),
    ("a > b > c", 5, 6, CMP + ".checkLessThanOperand (a condition)"),
    ("NOT a > 1", 5, 6, CMP + ".checkLessThanOperand ((NOT a) > 1)"),
    ("a BETWEEN 'a' AND 'b'", 5, 2, CMP + ".createBetween (strings)"),
    ("a BETWEEN NULL AND 5", 5, 2, CMP + ".createBetween (NULL bound)"),
    ("'x' IN ('x')", 5, 4, CMP + ".createInFilter (property expected)"),
    ("a IN (1)", 5, 6, GRAMMAR + " (IN takes string literals)"),
    ("a IN ()", 5, 6, GRAMMAR + " (IN needs one value)"),
    ("a IN 'x'", 5, 5, GRAMMAR + " (IN needs parentheses)"),
    ("5", 5, 0, GRAMMAR + " asBooleanExpression"),
    ("'x'", 5, 0, GRAMMAR + " asBooleanExpression"),
    ("-a", 5, 0, GRAMMAR + " asBooleanExpression"),
    ("NOT 5", 5, 4, GRAMMAR + " asBooleanExpression"),
    ("a = 1 AND 'x'", 5, 10, GRAMMAR + " asBooleanExpression"),
    ("a NOT LIKE 'x'", 5, 6, GRAMMAR + " (no LIKE)"),
    ("a IS 5", 5, 5, GRAMMAR + " (IS NULL / IS NOT NULL)"),
    ("a IS NOT 5", 5, 9, GRAMMAR + " (IS NOT NULL)"),
    ("a == 1", 5, 3, GRAMMAR + " (one =)"),
    ("a != 1", 5, 2, GRAMMAR + " (no !=: lexical error)"),
    ("a.b = 1", 5, 1, GRAMMAR + " ID (no dots in property names)"),
    ("a = 1 #", 5, 6, GRAMMAR + " (the first token after the expression is still lexed)"),
    ("a = 'x", 5, 4, GRAMMAR + " STRING_LITERAL (unterminated)"),
    ("a = /* x", 5, 4, GRAMMAR + " BLOCK_COMMENT (unterminated)"),
    ("a > 0.0", 5, 4, "derived from ConstantExpression.createFloat (below Double.MIN_VALUE)"),
    ("a > 1e-400", 5, 4, "derived from ConstantExpression.createFloat (below Double.MIN_VALUE)"),
    ("a > 1e400", 5, 4, "derived from ConstantExpression.createFloat (above Double.MAX_VALUE)"),
    ("a > 9223372036854775808", 5, 4, "derived from ConstantExpression.createFromDecimal"),
    ("a > -9223372036854775808", 5, 5, "derived from ConstantExpression.createFromDecimal (negated later)"),
    ("", 5, 0, GRAMMAR + " (empty)"),
    ("  -- only a comment\n", 5, 20, GRAMMAR + " (empty)"),
    ("(a = 1", 5, 6, GRAMMAR + " primaryExpr"),
    ("a BETWEEN 1 + 2 AND 3", 5, 12, GRAMMAR + " comparisonExpression"),
]


@pytest.mark.parametrize(("expr", "flavour", "position", "source"), ERRORS)
def test_syntax_error(expr: str, flavour: int, position: int, source: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse(expr, flavour=4 if flavour == 4 else 5)
    assert info.value.position == position, source
    assert info.value.expression == expr
    assert f"at position {position}" in str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("expr", "flavour", "unparsed", "props", "expected"),
    [
        ("a = 'x' garbage", 5, "garbage", {"a": "x"}, True),
        ("a = 'x' b = 'y'", 5, "b = 'y'", {"a": "x"}, True),
        ("a = 1)", 5, ")", {"a": "1"}, True),
        ("a = 0123", 5, "123", {"a": "0"}, True),  # DECIMAL_LITERAL: "0" alone, no octal
        ("a = 0x1F", 5, "x1F", {"a": "0"}, True),  # no hex literals
        ("a > 5E", 5, "E", {"a": "6"}, True),  # an exponent needs digits
        ("a = 1 -- no line end", 5, "-- no line end", {"a": "1"}, True),  # LINE_COMMENT needs one
        ("a IS NULL > 1", 5, "> 1", {}, True),  # the equality loop does not look for >
        ("a contains 'x'", 4, "contains 'x'", {"a": "x"}, False),
        ("a = 1 + 1", 5, "+ 1", {"a": "1"}, True),  # no arithmetic: "+" ends the expression
        ("a = 'x' -- c\n", 5, "", {"a": "x"}, True),
    ],
)
def test_trailing_text_is_ignored_like_the_broker(
    expr: str, flavour: int, unparsed: str, props: dict[str, str], expected: bool
) -> None:
    """``SelectorParser.JmsSelector()`` parses one orExpression and never asks for EOF."""
    compiled = parse(expr, flavour=4 if flavour == 4 else 5)
    assert compiled.unparsed == unparsed
    assert compiled.evaluate(props) is expected
    if unparsed:
        with pytest.raises(FilterSyntaxError) as info:
            parse(expr, flavour=4 if flavour == 4 else 5, strict=True)
        assert info.value.position == len(expr) - len(unparsed)
    else:
        assert parse(expr, strict=True).evaluate(props) is expected


def test_the_parse_is_flavoured() -> None:
    assert parse("a = 1").flavour == 5
    assert parse("a = 1", flavour=4).flavour == 4
    with pytest.raises(ConfigError):
        parse("a = 1", flavour=6)  # type: ignore[arg-type]
    assert str(parse("a = 1")) == "a = 1"


def test_nesting_is_capped() -> None:
    """Java fails with a StackOverflowError far deeper; we refuse beyond 50 levels (a divergence)."""
    assert parse("(" * 40 + "a = 1" + ")" * 40).evaluate({"a": "1"}) is True
    with pytest.raises(FilterSyntaxError):
        parse("(" * 60 + "a = 1" + ")" * 60)
    with pytest.raises(FilterSyntaxError):
        parse("NOT " * 60 + "a")
    with pytest.raises(FilterSyntaxError):  # a long left-deep chain: too deep to evaluate
        parse("a" + " = a" * 300)
    long_or = " OR ".join(f"a = '{i}'" for i in range(5000))  # flattened: fine
    assert parse(long_or).evaluate({"a": "4999"}) is True


def test_compile_once_evaluate_many() -> None:
    compiled = parse("a BETWEEN 1 AND 100 AND (b IN ('x', 'y', 'z') OR c IS NULL) AND d <> 'gone'")
    props = {"a": "50", "b": "y", "d": "here"}
    start = time.perf_counter()
    for _ in range(10_000):
        assert compiled.matches(props)
    assert time.perf_counter() - start < 2.0  # ~2 us each; generous for shared cores


# ---- hypothesis: evaluation never raises, parsing raises nothing but FilterSyntaxError

_NAMES = ["a", "b", "c", "contains", "TAGS"]
_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "5",
            "-5",
            "5.0",
            "1e3",
            "NaN",
            "-Infinity",
            "0x1p3",
            "true",
            "TRUE",
            "x",
            "2147483648",
            "\u0665",
            " 5",
        ]
    ),
    st.text(max_size=12),
    st.integers().map(str),
    st.floats().map(repr),
)
_PROPS = st.dictionaries(st.sampled_from(_NAMES), _VALUES, max_size=5)
_ATOMS = st.one_of(
    st.sampled_from(_NAMES),
    st.sampled_from(["0", "5", "-3", "2147483648", "1.5", ".5", "1e3", "5L", "TRUE", "FALSE", "NULL"]),
    st.text(max_size=6).map(lambda s: "'" + s.replace("'", "''") + "'"),
)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.sampled_from(["OR", "AND", "=", "<>", ">", ">=", "<", "<="])
    text = st.sampled_from(["'x'", "''", "'5'"])
    return st.one_of(
        st.tuples(inner, binary, inner).map(" ".join),
        st.tuples(st.sampled_from(["NOT ", "-", "+", ""]), inner).map("".join),
        inner.map(lambda s: f"({s})"),
        st.tuples(inner, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        st.tuples(inner, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), inner, inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]} AND {t[3]}"
        ),
        st.tuples(inner, st.sampled_from(["IN", "NOT IN"]), st.lists(text, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"
        ),
        st.tuples(
            inner, st.sampled_from(["CONTAINS", "NOT STARTSWITH", "ENDSWITH", "NOT CONTAINS"]), text
        ).map(" ".join),
    )


_EXPRESSIONS = st.recursive(_ATOMS, _extend, max_leaves=12)


def _compile(expr: str, flavour: int) -> Expression | None:
    try:
        return parse(expr, flavour=4 if flavour == 4 else 5)
    except FilterSyntaxError:
        return None


@settings(max_examples=400, deadline=None)
@given(expr=_EXPRESSIONS, props=st.lists(_PROPS, min_size=1, max_size=4), flavour=st.sampled_from([4, 5]))
def test_evaluation_never_raises(expr: str, props: list[dict[str, str]], flavour: int) -> None:
    compiled = _compile(expr, flavour)
    if compiled is None:
        return
    for p in props:
        result = compiled.evaluate(p)
        assert result is None or isinstance(result, bool)
        assert compiled.matches(p) is (result is True)


@settings(max_examples=300, deadline=None)
@given(
    expr=st.one_of(
        st.text(max_size=40),
        st.lists(
            st.sampled_from(
                [
                    "a",
                    "'x'",
                    "''",
                    "5",
                    "1.5",
                    ".",
                    "e",
                    "L",
                    "(",
                    ")",
                    ",",
                    "=",
                    "<>",
                    "<",
                    ">",
                    "-",
                    "--",
                    "/*",
                    "*/",
                    "\n",
                    " AND ",
                    " OR ",
                    " NOT ",
                    " IS ",
                    " NULL ",
                    " IN ",
                    " BETWEEN ",
                    " CONTAINS ",
                    " ",
                ]
            ),
            max_size=12,
        ).map("".join),
    ),
    props=_PROPS,
)
def test_parse_raises_only_filter_syntax_errors(expr: str, props: dict[str, str]) -> None:
    for flavour in (4, 5):
        compiled = _compile(expr, flavour)
        if compiled is not None:
            assert compiled.evaluate(props) in (True, False, None)
            assert expr.endswith(compiled.unparsed)


@given(
    value=st.floats(allow_nan=False, allow_infinity=False), bound=st.floats(min_value=1e-300, max_value=1e300)
)
def test_double_comparison_follows_the_value(value: float, bound: float) -> None:
    """A property compared with a Double literal is read with Double.valueOf (repr is Java syntax)."""
    assert parse(f"a > {bound!r}").evaluate({"a": repr(value)}) is (value > bound)
    assert parse(f"a = {bound!r}").evaluate({"a": repr(value)}) is (value == bound)
