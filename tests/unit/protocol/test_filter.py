"""rmq_async.protocol.filter: Java String.hashCode, tag expressions, the client re-filter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, frames

from rmq_async.protocol.filter import SUB_ALL, java_string_hash, java_trim, parse_tag_expression, tag_matches
from rmq_async.protocol.stored import decode_messages


def reference_hash(s: str) -> int:
    """Polynomial over UTF-16 code units, then two's complement: sum(c[i] * 31^(n-1-i)) mod 2^32."""
    data = s.encode("utf-16-le", "surrogatepass")
    units = [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    ("s", "code"),
    [
        ("TagA", 2598919),
        ("TagC", 2598921),
        ("TagX", 2598942),
        ("TagZip", -1797378745),
        ("TagKeys", 115383438),
        ("标签中文", 824391569),
        ("", 0),
        ("*", 42),
        ("😀", 1772899),  # one code point, two UTF-16 units: 0xD83D * 31 + 0xDE00
    ],
)
def test_known_java_hashes(s: str, code: int) -> None:
    assert java_string_hash(s) == code == reference_hash(s)


@given(st.text(st.characters(codec=None)))
def test_hash_matches_utf16_reference(s: str) -> None:
    assert java_string_hash(s) == reference_hash(s)
    assert -(2**31) <= java_string_hash(s) < 2**31


@given(st.text(alphabet=st.characters(min_codepoint=0x10000), min_size=1))
def test_hash_astral_plane(s: str) -> None:
    assert java_string_hash(s) == reference_hash(s)


def test_hash_lone_surrogate() -> None:
    assert java_string_hash("a\ud800") == 97 * 31 + 0xD800


@pytest.mark.parametrize("expr", [None, "", "*"])
def test_subscribe_all(expr: str | None) -> None:
    assert parse_tag_expression(expr) == (SUB_ALL, [], []) == ("*", [], [])


def test_parse_tag_expression() -> None:
    assert parse_tag_expression("TagA || TagC") == ("TagA || TagC", ["TagA", "TagC"], [2598919, 2598921])
    assert parse_tag_expression(" b ||a|| b ||||  ") == (" b ||a|| b ||||  ", ["b", "a"], [98, 97])
    assert parse_tag_expression("a|||b") == ("a|||b", ["a", "|b"], [97, java_string_hash("|b")])
    assert parse_tag_expression("   ") == ("   ", [], [])  # Java: not "*", yet no tag
    # Java's trim() strips control characters but not U+3000 or U+00A0, unlike str.strip()
    expr = "\x01TagA\x1f||\u3000TagB"
    assert parse_tag_expression(expr) == (
        expr,
        ["TagA", "\u3000TagB"],
        [2598919, java_string_hash("\u3000TagB")],
    )
    assert java_trim("\t\n x \x00") == "x" and java_trim("\xa0x\xa0") == "\xa0x\xa0"


def test_codes_are_distinct_even_for_colliding_tags() -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    assert parse_tag_expression("Aa||BB") == ("Aa||BB", ["Aa", "BB"], [java_string_hash("Aa")])


def test_heartbeat_subscriptions_match_java() -> None:
    """Every subscription in the captured heartbeats has the tags and codes we compute (as sets)."""
    seen = 0
    for f in CAPTURE_FILES:
        for fr in frames(f):
            if fr.code != 34 or fr.kind != "request":
                continue
            for consumer in fr.body_json["consumerDataSet"]:
                for sub in consumer["subscriptionDataSet"]:
                    sub_string, tags, codes = parse_tag_expression(sub["subString"])
                    assert sub_string == sub["subString"]
                    assert set(tags) == set(sub["tagsSet"]) and set(codes) == set(sub["codeSet"])
                    assert len(tags) == len(sub["tagsSet"]) and len(codes) == len(sub["codeSet"])
                    seen += bool(tags)
    assert seen >= 3


def test_client_refilter() -> None:
    assert tag_matches([], None) and tag_matches((), "x") and tag_matches(set(), "")
    assert tag_matches({"TagA", "TagC"}, "TagA")
    assert not tag_matches({"TagA", "TagC"}, "TagB")
    assert not tag_matches({"TagA"}, None)
    assert not tag_matches({"Aa"}, "BB")  # same hash code, different tag: the broker lets it through


def test_refilter_over_captured_pull() -> None:
    """The TagA || TagC consumer's pulls hold only matching messages; a TagX filter drops them all."""
    _, tags, _ = parse_tag_expression("TagA || TagC")
    msgs = [
        m
        for fr in frames("tags-filter.jsonl")
        if fr.kind == "response" and fr.code == 0 and fr.body_len and fr.body[4:8] == b"\xda\xa3\x20\xa7"
        for m in decode_messages(fr.body)
    ]
    assert len(msgs) == 40
    assert all(tag_matches(tags, m.tags) for m in msgs)
    assert not any(tag_matches(["TagX"], m.tags) for m in msgs)
