"""mkdocs hooks (``hooks:`` in mkdocs.yml), run at every build, so the site cannot drift from the code.

* ``cli.md``: the ``<!-- cli-help -->`` marker becomes the ``--help`` of ``rmq-async`` and of every
  subcommand, taken from the argparse parser itself (``rmq_async.cli.app.build_parser``), at a fixed
  width so that the page does not depend on the terminal the build runs in.
* Links to files of the repository outside ``docs/`` (``../examples/quickstart.py``,
  ``../benchmarks/RESULTS.md``): they work on GitHub, where the pages are read in the tree, but the
  site has no such pages. The hook checks that the file exists (a broken one fails the build, as a
  broken link inside the site does under ``--strict``) and renders the link as its repository path.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
from pathlib import Path
from typing import Any

CLI_MARKER = "<!-- cli-help -->"
HELP_WIDTH = "100"

_ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand of ``parser``, depth first, as (its full command line, its parser)."""
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((f"{parser.prog} {name}", sub))
                out += _subcommands(sub)
    return out


def cli_reference() -> str:
    """The markdown of every command's ``--help``, from the parser."""
    from rmq_async.cli.app import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to the terminal's width
    try:
        parser = build_parser()
        parts = [f"## `{parser.prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"]
        for command, sub in _subcommands(parser):
            parts.append(f"## `{command}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(parts)


def _outside_link(page_src: str, match: re.Match[str]) -> str:
    text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
    if "://" in target or target.startswith(("mailto:", "/")):
        return match.group(0)
    path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src), target))
    if path.startswith("docs/"):
        return match.group(0)  # a page or file of the site: mkdocs checks it
    if not (_ROOT / path).exists():
        raise FileNotFoundError(f"docs/{page_src} links to {target}{anchor}, but {path} does not exist")
    return f"`{path}`" if text.strip("`") == path else f"{text} (`{path}`)"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    src = page.file.src_uri
    if src == "cli.md":
        if CLI_MARKER not in markdown:
            raise ValueError(f"docs/cli.md lost its {CLI_MARKER} marker")
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return _LINK.sub(lambda m: _outside_link(src, m), markdown)
