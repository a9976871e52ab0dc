"""The OpenTelemetry support is optional (``rmq_async[otel]``): without the API installed, the
producer and the consumers still import (they hold the observers' classes) and ``telemetry()`` is
None, so nothing is observed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_without_the_api_the_clients_import_and_nothing_is_observed() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # importing it raises ImportError now
        "from rmq_async import LitePullConsumer, Producer, PushConsumer\n"
        "from rmq_async.observability import otel\n"
        "print(otel.telemetry(), 'opentelemetry.metrics' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "None False"
