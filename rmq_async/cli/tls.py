"""The client TLS options of the command line (``produce``, ``consume``, ``bench``).

``--tls`` turns TLS on (the server verified against the system's trust store), ``--tls-ca FILE`` trusts
that CA instead, ``--tls-insecure`` trusts any server (Java's test mode), ``--tls-cert`` / ``--tls-key``
present a client certificate (its key's password from ``RMQ_TLS_KEY_PASSWORD``, never an argument);
each of them implies ``--tls``. Without any, the ``RMQ_TLS*`` environment decides, as for every
``ClientConfig`` (:meth:`rmq_async.config.TLSConfig.from_env`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from pydantic import SecretStr

from ..config import (
    ENV_TLS,
    ENV_TLS_CA_FILE,
    ENV_TLS_CERT_FILE,
    ENV_TLS_INSECURE,
    ENV_TLS_KEY_FILE,
    ENV_TLS_KEY_PASSWORD,
    ENV_TLS_SERVER_HOSTNAME,
    TLSConfig,
)
from ..errors import ConfigError

__all__ = ["add_tls_arguments", "export_tls_env", "tls_options"]


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--tls``, ``--tls-ca``, ``--tls-insecure``, ``--tls-cert``, ``--tls-key``,
    ``--tls-server-hostname`` to ``parser``."""
    g = parser.add_argument_group("TLS (name server and broker connections; env: RMQ_TLS=1, RMQ_TLS_*)")
    g.add_argument("--tls", action="store_true", help="connect with TLS, verifying the server")
    g.add_argument("--tls-ca", metavar="FILE", help="trust this CA (PEM) instead of the system store")
    g.add_argument("--tls-insecure", action="store_true", help="TLS without verifying the server (tests)")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (PEM) for mutual TLS")
    g.add_argument(
        "--tls-key", metavar="FILE", help=f"its private key (PEM); password: ${ENV_TLS_KEY_PASSWORD}"
    )
    g.add_argument("--tls-server-hostname", metavar="NAME", help="the name the certificate must carry")


def _config(args: argparse.Namespace) -> TLSConfig | None:
    wanted = (args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_hostname)
    if not (args.tls or args.tls_insecure or any(wanted)):
        return None
    password = os.environ.get(ENV_TLS_KEY_PASSWORD) or None
    try:
        return TLSConfig(
            verify=not args.tls_insecure,
            ca_file=args.tls_ca,
            cert_file=args.tls_cert,
            key_file=args.tls_key,
            key_password=SecretStr(password) if password and args.tls_cert else None,
            server_hostname=args.tls_server_hostname,
        )
    except ConfigError as exc:
        raise SystemExit(f"rmq-async: bad TLS options: {exc}") from None


def tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """``{"tls": TLSConfig(...)}`` for ``ClientConfig(**...)`` when a TLS option was given, else ``{}``
    (the environment then decides)."""
    cfg = _config(args)
    return {} if cfg is None else {"tls": cfg}


def export_tls_env(args: argparse.Namespace) -> None:
    """Put the TLS options into this process's environment (``RMQ_TLS*``), for the clients of child
    processes (bench workers) and of this one alike."""
    cfg = _config(args)
    if cfg is None:
        return
    values = {
        ENV_TLS: "1",
        ENV_TLS_INSECURE: "0" if cfg.verify else "1",
        ENV_TLS_CA_FILE: cfg.ca_file or "",
        ENV_TLS_CERT_FILE: cfg.cert_file or "",
        ENV_TLS_KEY_FILE: cfg.key_file or "",
        ENV_TLS_SERVER_HOSTNAME: cfg.server_hostname or "",
    }
    os.environ.update(values)
