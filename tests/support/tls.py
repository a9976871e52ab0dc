"""Test certificates, made at test time with trustme: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate (plain and with a password-protected key) for mutual TLS, and a second,
unrelated CA with its own client certificate (the "wrong CA")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization

from rmq_async import TLSConfig
from rmq_async.embedded import ServerTLS
from rmq_async.embedded.tls import TLSMode

KEY_PASSWORD = "s3cret-key-pw"


@dataclass(frozen=True)
class Certs:
    ca: str  # the test CA (PEM)
    wrong_ca: str  # an unrelated CA
    server: str  # server chain + key, for 127.0.0.1 and localhost, signed by ``ca``
    client_cert: str  # a client certificate signed by ``ca`` (chain)
    client_key: str  # its key, unencrypted
    client_key_encrypted: str  # the same key, encrypted with KEY_PASSWORD
    wrong_client: str  # a client chain + key signed by ``wrong_ca``

    def server_tls(self, mode: TLSMode = "permissive", client_auth: Any = "none") -> ServerTLS:
        return ServerTLS(
            mode=mode,
            cert_file=self.server,
            ca_file=self.ca if client_auth != "none" else None,
            client_auth=client_auth,
        )

    def client_tls(self, **kw: Any) -> TLSConfig:
        kw.setdefault("ca_file", self.ca)
        return TLSConfig(**kw)


def make_certs(directory: Path) -> Certs:
    ca, wrong = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("rmq-client.example")
    wrong_client = wrong.issue_cert("rmq-client.example")
    p = {n: str(directory / f"{n}.pem") for n in Certs.__dataclass_fields__}
    ca.cert_pem.write_to_path(p["ca"])
    wrong.cert_pem.write_to_path(p["wrong_ca"])
    server.private_key_and_cert_chain_pem.write_to_path(p["server"])
    Path(p["client_cert"]).write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    client.private_key_pem.write_to_path(p["client_key"])
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    Path(p["client_key_encrypted"]).write_bytes(encrypted)
    wrong_client.private_key_and_cert_chain_pem.write_to_path(p["wrong_client"])
    return Certs(**p)
