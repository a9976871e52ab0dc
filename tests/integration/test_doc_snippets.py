"""Every complete program in the README and the docs runs, so that the docs cannot drift from the code.

A program is a fenced ``python`` block right after a ``<!-- run -->`` line (``<!-- run: slow -->``:
left out of the default run, as the other slow tests); docs/contributing.md states the convention.
Each one runs as a script in a fresh interpreter, with no name server address in its environment (so
it starts its own embedded cluster) and a home and working directory of its own (a broadcasting
consumer writes its offsets under the home). Blocks without the marker are excerpts and only read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- run(?P<slow>: slow)? -->$")
#: seconds a program may take (a fresh interpreter, an embedded cluster, its clients)
PROGRAM_TIMEOUT = 50


@dataclass(frozen=True)
class Snippet:
    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    code: str
    slow: bool

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _markers(text: str) -> int:
    return sum(1 for line in text.splitlines() if MARKER.match(line))


def collect(path: Path) -> list[Snippet]:
    """The marked blocks of one markdown file; a marker not followed by a python fence is an error."""
    lines = path.read_text().splitlines()
    rel = str(path.relative_to(ROOT))
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if m is None:
            continue
        if i + 1 >= len(lines) or lines[i + 1] != "```python":
            raise ValueError(f"{rel}:{i + 1}: {line} is not followed by a ```python fence")
        end = lines.index("```", i + 2)
        out.append(Snippet(rel, i + 2, "\n".join(lines[i + 2 : end]) + "\n", m.group("slow") is not None))
    return out


SNIPPETS = [s for doc in _documents() for s in collect(doc)]


def _param(s: Snippet) -> object:
    return pytest.param(s, id=s.id, marks=[pytest.mark.slow] if s.slow else [])


@pytest.mark.timeout(PROGRAM_TIMEOUT + 10)
@pytest.mark.parametrize("snippet", [_param(s) for s in SNIPPETS])
def test_the_program_runs(snippet: Snippet, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code)
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "PYTHONWARNINGS")}
    env["HOME"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT,
        check=False,
    )
    assert out.returncode == 0, f"{snippet.id} exited {out.returncode}:\n{out.stderr[-3000:]}"


#: guides without a program of their own: the Spark one needs a Spark session and Java (tests/spark runs
#: the source), the operating one is about the command line and mqadmin
GUIDES_WITHOUT_A_PROGRAM = {"docs/guides/spark.md"}


def test_every_marker_names_a_program_and_every_one_was_collected() -> None:
    """The parametrized test ran one program per marker in the files, and every guide but those named
    above has one (a collector that silently found none would pass everything)."""
    markers = sum(_markers(doc.read_text()) for doc in _documents())
    assert len(SNIPPETS) == markers
    guides = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md")}
    with_programs = {s.path for s in SNIPPETS}
    assert sorted(guides - with_programs) == sorted(GUIDES_WITHOUT_A_PROGRAM)
    assert {"README.md", "docs/getting-started.md"} <= with_programs
    print(f"\n{len(SNIPPETS)} programs in {len(with_programs)} files, {sum(s.slow for s in SNIPPETS)} slow")
