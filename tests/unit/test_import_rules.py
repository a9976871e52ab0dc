"""Which room of the package may import which: the table in docs/architecture.md (between the
``import-rules`` markers), checked against every import written in rmq_async/ (parsed with ``ast``,
as tests/unit/test_import_graph.py reads them: module level, ``TYPE_CHECKING``, inside functions).

A room is the first part of a module's name under ``rmq_async`` (``consumer`` for
``rmq_async.consumer.push``, ``config`` for ``rmq_async.config``); ``rmq_async`` is the root package."""

from __future__ import annotations

import re
from pathlib import Path

from support.import_graph import edges, modules

ROOT = Path(__file__).resolve().parents[2]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def documented_rules() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- import-rules: begin -->", 1)[1].split("<!-- import-rules: end -->", 1)[0]
    rules: dict[str, set[str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        rules[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", cells[1]))
    return rules


def actual_rules() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in edges(modules()).items():
        for b in targets:
            ra, rb = _room(a), _room(b)
            if ra != rb:
                out.setdefault(ra, set()).add(rb)
    return out


def test_every_import_is_one_the_architecture_allows() -> None:
    rules = documented_rules()
    assert "consumer" in rules and "protocol" in rules, "the import-rules table was not found"
    rooms = {_room(m) for m in modules()}
    assert rooms - set(rules) == set(), f"rooms the table does not list: {sorted(rooms - set(rules))}"
    broken = {
        f"{room} imports {sorted(used - rules[room])}"
        for room, used in actual_rules().items()
        if used - rules[room]
    }
    assert not broken, sorted(broken)


def test_the_table_lists_no_import_that_is_not_made() -> None:
    """The table states what is, not what might be: an allowed import nobody makes is taken out."""
    actual = actual_rules()
    unused = {
        f"{room} -> {sorted(allowed - actual.get(room, set()))}"
        for room, allowed in documented_rules().items()
        if allowed - actual.get(room, set())
    }
    assert not unused, sorted(unused)


def test_the_rules_keep_the_bottom_at_the_bottom() -> None:
    rules = documented_rules()
    assert rules["errors"] == set()
    assert rules["protocol"] == {"errors"}  # sans-IO: no transport, client, consumer, config
    assert "consumer" not in rules["config"]  # config validated strategy names with the consumer
    assert "embedded" not in rules["rmq_async"]  # the root is the client API
    # observability too: the producer and the consumer import it (its trace dispatcher is handed a
    # factory for the inner producer it sends with)
    for low in ("protocol", "config", "transport", "client", "observability"):
        assert not rules[low] & {"consumer", "producer", "cli", "bench", "spark", "embedded"}, low
