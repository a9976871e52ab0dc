"""The benchmark entry point: ``python benchmarks/bench.py [SCENARIO ...] [options]``.

Same as ``rmq-async bench`` (see ``rmq_async/bench/cli.py`` and benchmarks/RESULTS.md, section
"Harness"): works from a fresh clone without installing the package. The older single-purpose
scripts (bench_codec, bench_transport, bench_broker, bench_orderly, bench_spark) stay for their own sections.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmq_async.bench import cli  # noqa: E402

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/bench.py", description="rmq_async benchmark harness")
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
