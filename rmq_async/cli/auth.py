"""ACL credentials on the command line: ``--access-key`` / ``--secret-key`` / ``--security-token``.

Shared by ``rmq-async produce``, ``consume`` and ``bench``. A flag not given falls back to its
environment variable (``RMQ_ACCESS_KEY``, ``RMQ_SECRET_KEY``, ``RMQ_SECURITY_TOKEN``), which is also
the way to keep the secret out of the process list. The secret is never printed: errors name the
flag or the variable, never the value.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import MutableMapping

from ..config import ENV_ACCESS_KEY, ENV_SECRET_KEY, ENV_SECURITY_TOKEN, Credentials

__all__ = ["add_credential_arguments", "credentials_from_args", "export_credentials"]


def add_credential_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--access-key``, ``--secret-key`` and ``--security-token`` to ``parser``."""
    group = parser.add_argument_group("ACL (signed requests; default: the RMQ_* environment variables)")
    group.add_argument("--access-key", default=None, help=f"ACL access key (default ${ENV_ACCESS_KEY})")
    group.add_argument(
        "--secret-key",
        default=None,
        help=f"ACL secret key (default ${ENV_SECRET_KEY}, which keeps it out of the process list)",
    )
    group.add_argument(
        "--security-token", default=None, help=f"ACL security token (default ${ENV_SECURITY_TOKEN})"
    )


def credentials_from_args(args: argparse.Namespace) -> Credentials | None:
    """The flags over the environment; None when no access key is given anywhere.

    Raises SystemExit (naming the missing flag or variable) for an access key without a secret key.
    """
    ak = getattr(args, "access_key", None) or os.environ.get(ENV_ACCESS_KEY)
    if not ak:
        if getattr(args, "secret_key", None):
            raise SystemExit(f"rmq-async: --secret-key needs --access-key (or ${ENV_ACCESS_KEY})")
        return None
    sk = getattr(args, "secret_key", None) or os.environ.get(ENV_SECRET_KEY)
    if not sk:
        raise SystemExit(f"rmq-async: --access-key needs --secret-key (or ${ENV_SECRET_KEY})")
    token = getattr(args, "security_token", None) or os.environ.get(ENV_SECURITY_TOKEN) or None
    return Credentials(access_key=ak, secret_key=sk, security_token=token)


def export_credentials(creds: Credentials | None, env: MutableMapping[str, str] | None = None) -> None:
    """Put ``creds`` into the environment (``os.environ`` by default), for child processes whose
    clients read them from there (the bench workers); None removes them."""
    target = os.environ if env is None else env
    for name in (ENV_ACCESS_KEY, ENV_SECRET_KEY, ENV_SECURITY_TOKEN):
        target.pop(name, None)
    if creds is None:
        return
    target[ENV_ACCESS_KEY] = creds.access_key
    target[ENV_SECRET_KEY] = creds.secret_key.get_secret_value()
    if creds.security_token is not None:
        target[ENV_SECURITY_TOKEN] = creds.security_token.get_secret_value()
