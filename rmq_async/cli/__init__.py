"""The ``rmq-async`` command: ``embedded | produce | consume | bench | admin`` (``python -m rmq_async``).

``app.py`` the parser and the subcommands, ``args.py`` the one-line ``rmq-async: ...`` parser and
value types, ``tls.py`` and ``auth.py`` the TLS and ACL flags, ``admin.py`` ``rmq-async admin``.
"""

from __future__ import annotations

from .app import main as main

__all__ = ["main"]
