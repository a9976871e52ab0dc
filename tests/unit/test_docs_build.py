"""The documentation site: its API reference covers the public names and only those, the CLI page's
synopsis names only flags the parser has, and ``mkdocs build --strict`` passes (when the ``docs``
extra is installed; ``.ci/run`` installs it and builds the site as a step of its own)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

#: the documented modules, and the names of each that the reference shows (None: its ``__all__``)
DOCUMENTED: dict[str, list[str] | None] = {
    "rmq_async": None,
    "rmq_async.admin": None,
    "rmq_async.embedded": None,
    "rmq_async.spark": None,
    "rmq_async.observability.trace": ["query_trace"],
}


def _directives() -> list[str]:
    return [
        m.group(1)
        for page in sorted(REFERENCE.glob("*.md"))
        for m in re.finditer(r"^::: (\S+)$", page.read_text(), flags=re.M)
    ]


def _documented_as(path: str) -> tuple[str, str]:
    """(the documented module a ``:::`` path belongs to, the name): ``rmq_async.PushConsumer`` is
    ``rmq_async``'s; ``rmq_async.spark.source.RocketMQDataSource`` is ``rmq_async.spark``'s (a name it
    imports lazily, shown from its defining module, which needs pyspark)."""
    module, _, name = path.rpartition(".")
    while module not in DOCUMENTED:
        module = module.rpartition(".")[0]
        assert module, f"{path} is not in a documented module"
    return module, name


def test_the_reference_shows_every_public_name_once_and_nothing_else() -> None:
    shown: dict[str, list[str]] = {m: [] for m in DOCUMENTED}
    for path in _directives():
        module, name = _documented_as(path)
        shown[module].append(name)
    for module, names in DOCUMENTED.items():
        public = names if names is not None else list(importlib.import_module(module).__all__)
        assert sorted(shown[module]) == sorted(public), module


def test_the_cli_synopsis_names_only_flags_the_parser_has() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)  # docs/hooks.py: the mkdocs hook that generates the page
    spec.loader.exec_module(hooks)
    reference = hooks.cli_reference()
    page = (ROOT / "docs" / "cli.md").read_text()
    assert hooks.CLI_MARKER in page
    synopsis = page.split("```sh", 1)[1].split("```", 1)[0]
    flags = set(re.findall(r"--[a-z][a-z-]*", synopsis))
    assert len(flags) > 20, flags
    assert sorted(f for f in flags if f not in reference) == []
    for command in ("embedded", "produce", "consume", "bench", "admin"):
        assert f"## `rmq-async {command}`" in reference, command


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="mkdocs and mkdocstrings are not installed (the docs extra: pip install -e '.[docs]')",
)
@pytest.mark.timeout(120)
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "WARNING" not in out.stderr, out.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "consumers" / "index.html").is_file()
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "--idle-exit" in cli and "set-consume-mode" in cli
