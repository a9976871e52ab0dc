"""rmq_async.protocol.properties: Java's parse rules, the wire form, and single lookups that agree
with the dict for any property string (hypothesis, and every string in the wire captures)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, frames

from rmq_async.errors import ProtocolError
from rmq_async.protocol.properties import (
    check_property,
    encode_properties,
    lookup_property,
    parse_properties,
    properties_well_formed,
)


def test_parse_properties_rules() -> None:
    assert parse_properties("") == {}
    assert parse_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}  # 5.x trailing separator
    assert parse_properties("a\x011\x02\x02b\x012") == {"a": "1", "b": "2"}  # empty item
    assert parse_properties("a\x011\x02a\x012") == {"a": "2"}  # the later one wins, as HashMap.put
    assert parse_properties("a\x01x\x01y") == {"a": "x\x01y"}
    assert parse_properties("a\x01\x02\x01v\x02b\x01B") == {"b": "B"}  # Java drops empty names/values
    for bad in ("abc", "a\x011\x02junk", "junk\x02a\x011"):
        with pytest.raises(ProtocolError, match="separator"):
            parse_properties(bad)


def test_encode_properties_rules() -> None:
    assert encode_properties({}) == "" and encode_properties({}, trailing_separator=True) == ""
    assert encode_properties({"a": "1", "b": ""}) == "a\x011\x02b\x01"
    assert encode_properties({"a": "1"}, trailing_separator=True) == "a\x011\x02"
    for bad in ({"a\x02": "1"}, {"a": "1\x01"}, {"": "1"}):
        with pytest.raises(ValueError):
            encode_properties(bad)


NAME = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), min_size=1)
PROPS = st.dictionaries(NAME, NAME, max_size=8)


@given(PROPS, st.booleans())
def test_properties_round_trip(props: dict[str, str], trailing: bool) -> None:
    assert parse_properties(encode_properties(props, trailing_separator=trailing)) == props


def test_parse_properties_lenient() -> None:
    """strict=False ignores an item without a separator, as Java's reader (and MessageExt) does."""
    assert parse_properties("a\x011\x02junk\x02b\x01\x02\x02c\x01x\x01y", strict=False) == {
        "a": "1",
        "c": "x\x01y",
    }
    assert parse_properties("abc", strict=False) == {}


def test_properties_well_formed() -> None:
    for good in ("", "a\x011", "a\x011\x02", "a\x011\x02\x02b\x01", "a\x01\x01"):
        assert properties_well_formed(good), repr(good)
    for bad in ("abc", "a\x011\x02junk", "junk\x02a\x011", "a\x011\x02junk\x02"):
        assert not properties_well_formed(bad), repr(bad)


def test_check_property() -> None:
    check_property("a", "")
    for name, value in (("", "v"), ("a\x01", "v"), ("a\x02", "v"), ("a", "v\x01"), ("a", "v\x02"), (1, "v")):
        with pytest.raises(ValueError):
            check_property(name, value)  # type: ignore[arg-type]


# -- lookup_property ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "name", "expected"),
    [
        ("", "TAGS", None),
        ("TAGS\x01t", "TAGS", "t"),  # the only item: no separator on either side
        ("TAGS\x01t\x02", "TAGS", "t"),  # 5.x trailing separator
        ("KEYS\x01k\x02TAGS\x01t", "TAGS", "t"),  # the last item, no trailing separator
        ("KEYS\x01k\x02TAGS\x01t", "KEYS", "k"),  # the first item
        ("KEYS\x01k\x02TAGS\x01t\x02", "KEYS", "k"),
        ("\x02TAGS\x01t", "TAGS", "t"),  # a leading empty item
        ("a\x01\x02\x02TAGS\x01t\x02\x02", "TAGS", "t"),  # empty items
        ("XTAGS\x01x\x02TAGSX\x01y", "TAGS", None),  # names that contain the name
        ("XTAGS\x01x\x02TAGS\x01t\x02TAGSX\x01y", "TAGS", "t"),
        ("TAGS\x01t\x02XTAGS\x01x", "TAGS", "t"),  # a suffix match after the real item
        ("a\x01TAGS\x01x", "TAGS", None),  # the name inside a value
        ("a\x01TAGS\x01x", "a", "TAGS\x01x"),  # a value holding \x01
        ("a\x01x\x02TAGS\x01t", "a", "x"),
        ("TAGS\x011\x02TAGS\x012", "TAGS", "2"),  # the later one wins
        ("TAGS\x011\x02TAGS\x01", "TAGS", "1"),  # an empty value is skipped: the earlier one stands
        ("TAGS\x011\x02TAGS\x01\x02", "TAGS", "1"),
        ("x\x01y\x02TAGS\x011\x02TAGS\x01\x02TAGS\x01", "TAGS", "1"),
        ("TAGS\x01\x02TAGS\x01", "TAGS", None),
        ("TAGS\x01", "TAGS", None),
        ("TAGS", "TAGS", None),  # an item without \x01 is ignored
        ("TAGS\x02TAGS\x01t", "TAGS", "t"),
        ("\x01t", "", None),  # an empty name is never a key
        ("a\x01b\x01c", "a\x01b", None),  # nor a name holding a separator
        ("a\x02b\x01c", "a\x02b", None),
        ("KEYS\x01键-1\x02TAGS\x01标签中文", "TAGS", "标签中文"),
    ],
)
def test_lookup_property_cases(raw: str, name: str, expected: str | None) -> None:
    assert lookup_property(raw, name) == expected == parse_properties(raw, strict=False).get(name)


def _probes(names: list[str]) -> list[str]:
    """The names, their prefixes and suffixes, and names that contain them."""
    out = {"", "a\x01b", "a\x02b", "\x01", "\x02"}
    for n in names:
        out.update(n[:k] for k in range(1, len(n) + 1))
        out.update(n[k:] for k in range(len(n)))
        out.update((f"X{n}", f"{n}X", n + n))
    return sorted(out)


def _agree(raw: str, names: list[str]) -> None:
    expected = parse_properties(raw, strict=False)
    for name in _probes([*names, *expected]):
        assert lookup_property(raw, name) == expected.get(name), (raw, name)


WORD = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("标签éß"), min_size=1, max_size=5
)
TEXT = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), max_size=8)


@st.composite
def related_names(draw: st.DrawFn) -> list[str]:
    """A few words and names made of them: prefixes, suffixes and concatenations of each other."""
    words = draw(st.lists(WORD, min_size=1, max_size=3))
    derived = [*words, *(a + b for a in words for b in words)]
    derived += [w[:k] for w in words for k in range(1, len(w))] + [
        w[k:] for w in words for k in range(1, len(w))
    ]
    return [*derived, "TAGS", "KEYS", "UNIQ_KEY"]


@st.composite
def raw_property_strings(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Any string a broker could hand us: items ``name\\x01value`` whose names are related and whose
    values hold other names (also as ``name\\x01value``), duplicates, empty values, empty items,
    items without \\x01, with or without the 5.x trailing separator."""
    names = draw(related_names())
    name = st.sampled_from(names)
    value = st.one_of(
        st.just(""), name, TEXT, st.tuples(name, TEXT).map("\x01".join), st.tuples(TEXT, name).map("".join)
    )
    item = st.one_of(
        st.tuples(name, value).map("\x01".join),
        st.tuples(TEXT, value).map("\x01".join),
        st.just(""),  # an empty item
        name,  # an item without \x01
    )
    items = draw(st.lists(item, max_size=8))
    return "\x02".join(items) + draw(st.sampled_from(["", "\x02"])), names


@given(raw_property_strings())
def test_lookup_property_agrees_with_the_dict(case: tuple[str, list[str]]) -> None:
    raw, names = case
    _agree(raw, names)


@given(
    related_names().flatmap(lambda ns: st.dictionaries(st.sampled_from(ns), TEXT | st.sampled_from(ns))),
    st.booleans(),
)
def test_lookup_property_on_encoded_maps(props: dict[str, str], trailing: bool) -> None:
    """For a property map as a producer writes it, each name (and none of its relatives) is found."""
    raw = encode_properties(props, trailing_separator=trailing)
    _agree(raw, list(props))
    for name, value in props.items():
        assert lookup_property(raw, name) == (value or None)


@given(PROPS, st.booleans())
def test_lookup_property_on_any_map(props: dict[str, str], trailing: bool) -> None:
    raw = encode_properties(props, trailing_separator=trailing)
    assert {name: lookup_property(raw, name) for name in props} == props


def _captured_property_strings() -> list[str]:
    """The property strings the captured producers sent (SEND_MESSAGE_V2 field ``i``): 4.9.8 and the
    5.x form with its trailing separator."""
    return sorted({
        fr.header["extFields"]["i"]
        for f in CAPTURE_FILES
        for fr in frames(f)
        if fr.code == 310 and fr.kind != "response"
    })  # fmt: skip


def test_lookup_property_on_captures() -> None:
    raws = _captured_property_strings()
    assert (
        len(raws) > 100
        and any(r.endswith("\x02") for r in raws)
        and not all(r.endswith("\x02") for r in raws)
    )
    for raw in raws:
        _agree(raw, ["CLUSTER", "KEY", "QID", "TOPIC", "ID"])
