"""TLS for client connections: the ``ssl.SSLContext`` a :class:`~rmq_async.config.TLSConfig` asks
for, and the mapping of handshake failures to :class:`~rmq_async.errors.TLSError`.

Strategy: one context per client instance, built once (loading the system trust store costs
milliseconds) and shared by every connection; asyncio's (or uvloop's) SSL transport does the rest, so
a plain connection runs exactly the code it ran before TLS existed. Handshake failures come out of
``create_connection`` as ``ssl.SSLError`` (an ``OSError``), or as a reset when the server drops the
ClientHello (a server in TLS ``disabled`` mode); :func:`handshake_error` names the cause.
"""

from __future__ import annotations

import ssl

from ..config import TLSConfig
from ..errors import ConfigError, TLSError

__all__ = ["client_ssl_context", "handshake_error"]


def client_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    """A client-side context for ``cfg``; unreadable files or a wrong key password: :class:`ConfigError`."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cfg.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"TLSConfig.ca_file: cannot load {cfg.ca_file!r}: {exc}") from None
    if not cfg.verify:  # Java's tls.test.mode.enable: trust any server
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif not cfg.check_hostname:
        ctx.check_hostname = False
    if cfg.cert_file:
        password = cfg.key_password.get_secret_value() if cfg.key_password is not None else None
        try:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file, password)
        except (OSError, ssl.SSLError) as exc:  # the password is never part of the message
            what = f"{cfg.cert_file!r}" + (f" / {cfg.key_file!r}" if cfg.key_file else "")
            msg = f"TLSConfig.cert_file: cannot load the client certificate {what}: {exc}"
            raise ConfigError(msg) from None
    return ctx


def handshake_error(exc: OSError, addr: str) -> TLSError | None:
    """The :class:`TLSError` for a failed TLS connect, or None for a TCP-level failure (refused, ...)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        hint = ""
        code = getattr(exc, "verify_code", None)
        if code in (20, 19, 2, 21):  # unable to get (local) issuer, self-signed in chain
            hint = " (the server's CA is not trusted: set TLSConfig.ca_file, or verify=False for tests)"
        elif code == 62:  # hostname mismatch
            hint = " (set TLSConfig.server_hostname to the name in the certificate, or check_hostname=False)"
        return TLSError(f"TLS: server certificate verification failed: {why}{hint}", addr)
    if isinstance(exc, ssl.SSLError):
        return TLSError(f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}", addr)
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return TLSError(
            f"TLS handshake failed: the server closed the connection ({exc!r}); "
            "is TLS enabled on the server (its TLS mode not 'disabled')?",
            addr,
        )
    return None
