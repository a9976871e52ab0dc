"""The ``rmq-async`` command: ``embedded | produce | consume | bench | admin`` (``python -m rmq_async``).

``app.py`` the parser and the subcommands, ``args.py`` the one-line ``rmq-async: ...`` parser and
value types, ``tls.py`` and ``auth.py`` the TLS and ACL flags, ``admin.py`` ``rmq-async admin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["main"]

if TYPE_CHECKING:
    from .app import main as main


def __getattr__(name: str) -> Any:
    # ``main`` loads the whole command on first use: ``rmq_async.cli.progress`` (the benchmark
    # harness's progress line) imports without it
    if name == "main":
        from .app import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
