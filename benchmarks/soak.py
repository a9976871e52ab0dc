"""The soak of issue #24: an hour of churn and faults, nothing lost, memory and tasks flat.

Usage: ``python benchmarks/soak.py [--duration SECONDS] [--rate N] [--change-every S] [--fault-every S]
[--drain S] [--out DIR] [--namesrv ADDR]``, the same as ``rmq-async bench soak``. The engine is
:mod:`rmq_async.bench.soak` (see its docstring); this is a thin entry point. Prints one JSON summary
line; exit 0 when every verdict passed, 1 otherwise. Results of the one-hour run:
``benchmarks/RESULTS.md``, section "Soak (#24)".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmq_async.bench.soak import main

if __name__ == "__main__":
    sys.exit(main())
