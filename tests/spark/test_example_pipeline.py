"""examples/spark_pipeline.py runs end to end: embedded cluster, streaming query, Parquet totals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_pipeline_example(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "spark_pipeline.py"), str(tmp_path), "--orders", "300"],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["orders"] == 300
    assert (tmp_path / "totals").exists()
