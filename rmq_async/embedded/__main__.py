"""``python -m rmq_async.embedded``: see :mod:`rmq_async.embedded.cli`."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio

from ..errors import ConfigError
from .cli import add_arguments, run

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmq_async.embedded", description="embedded RocketMQ cluster"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        import uvloop  # noqa: F401

        options = {"use_uvloop": True}
    except ImportError:  # pragma: no cover
        options = {}
    profile = os.environ.get("RMQ_EMBEDDED_PROFILE")  # benchmarks: cProfile the whole child
    if profile:
        import cProfile

        prof = cProfile.Profile()
        try:
            code: int = prof.runcall(lambda: anyio.run(run, args, backend="asyncio", backend_options=options))
            return code
        finally:
            prof.dump_stats(profile)
    try:
        return anyio.run(run, args, backend="asyncio", backend_options=options)
    except ConfigError as exc:  # bad input only the start shows (a port in use): one line, exit 2
        print(f"{parser.prog}: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
