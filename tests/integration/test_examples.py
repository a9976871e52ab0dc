"""The README's first command runs the quickstart with no address given (embedded cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, timeout: float = 120) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_quickstart_runs_on_the_embedded_cluster() -> None:
    summary = _run("quickstart.py")
    assert summary["sent"] == summary["consumed_unique"] == 1000
    assert str(summary["namesrv"]).startswith("127.0.0.1:")


def test_broadcasting_example_delivers_everything_to_every_member() -> None:
    assert _run("broadcasting.py") == {"member-1": 50, "member-2": 50}
