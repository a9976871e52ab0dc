"""The CLI's common flags work before and after the command, as users type them."""

from __future__ import annotations

import pytest

from rmq_async.cli import build_parser

BASE = ["consume", "--group", "g", "--topic", "T"]


@pytest.mark.parametrize(
    ("argv", "no_uvloop", "verbose"),
    [
        (BASE, False, 0),
        (["--no-uvloop", "-vv", *BASE], True, 2),
        ([*BASE, "--no-uvloop", "-v"], True, 1),
        (["--no-uvloop", *BASE, "-v"], True, 1),  # a flag after the command never undoes one before it
        (["produce", "--topic", "T", "--no-uvloop"], True, 0),
        (["embedded", "--no-uvloop"], True, 0),
        (["bench", "push", "--no-uvloop"], True, 0),
    ],
)
def test_common_flags_before_or_after_the_command(argv: list[str], no_uvloop: bool, verbose: int) -> None:
    args = build_parser().parse_args(argv)
    assert (args.no_uvloop, args.verbose) == (no_uvloop, verbose)
