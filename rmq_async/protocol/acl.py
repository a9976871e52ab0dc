"""ACL 1.0 request signing: the sans-IO part of Java's ``AclClientRPCHook`` and of the broker's check.

Strategy. Just before a request goes out (oneways too, to name servers and brokers alike) the Java
hook adds ``AccessKey`` (and ``SecurityToken`` when the credentials have one) to ``extFields``, fills
in the request header's non-null fields (``makeCustomHeaderToNet``), and signs *every* ext field then
present, fields added earlier by the caller or by other hooks included (``_UNIQUE_KEY_QUERY``,
``ReqT``)::

    content   = UTF-8(values of all ext fields but "Signature", concatenated in TreeMap key order) + body
    Signature = Base64(HmacSHA1(key=UTF-8(secretKey), content))

No keys and no separators go into the content; ``code``, ``opaque``, ``flag``, ``remark`` etc. are
not signed; the body is appended raw (nothing when there is none). The header is encoded after
signing, so the ext map on the wire is exactly the signed map plus ``Signature``, whichever the
serialize type: JSON and ROCKETMQ binary headers sign alike (a binary 310/320/11 header writes its
fast-coded fields and then the same keys again from the map; the receiver's map keeps one of each).

Java details reproduced here:

* ``TreeMap<String, String>`` orders keys by ``String.compareTo``, i.e. by UTF-16 code units. That is
  Python's code-point order except where a supplementary character (surrogates 0xD800-0xDFFF) meets
  a BMP character from U+E000 up, so non-ASCII key sets are sorted by their UTF-16-BE bytes.
* ``String.getBytes(UTF_8)`` runs over the concatenated text, so a surrogate pair split across two
  values still encodes as one 4-byte character, and an unpaired surrogate becomes ``?``.

The broker (4.9.8 ``PlainAccessValidator.parse``) recomputes over the received ext fields without
``Signature`` and **without** ``_UNIQUE_KEY_QUERY``, which the 4.9.8 client does sign: a stock 4.9.8
client's QUERY_MESSAGE is always refused by a 4.9.8 ACL broker. 5.x brokers
(``DefaultAuthenticationContextBuilder``) leave that field out only for request ``version`` <= 399
(V4_9_3). See :func:`verify`.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Mapping, MutableMapping
from typing import TypeAlias

from .command import RemotingCommand
from .fastjson import java_map_order

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNIQUE_KEY_QUERY",
    "V4_9_3",
    "RequestSigner",
    "sign_fields",
    "signature",
    "verify",
]

ACCESS_KEY = "AccessKey"  # SessionCredentials.ACCESS_KEY
SECURITY_TOKEN = "SecurityToken"  # SessionCredentials.SECURITY_TOKEN
SIGNATURE = "Signature"  # SessionCredentials.SIGNATURE
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG, added by queryMessage
#: ``MQVersion.Version.V4_9_3.ordinal()``: 5.x brokers drop ``_UNIQUE_KEY_QUERY`` up to this version.
V4_9_3 = 399

_Body: TypeAlias = bytes | bytearray | memoryview | None


def _java_utf8(text: str) -> bytes:
    """``text.getBytes(UTF_8)`` as Java does it for a String holding these UTF-16 units."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # surrogate code points: pair them as Java would, "?" for the rest
        units = text.encode("utf-16-be", "surrogatepass")
        return units.decode("utf-16-be", "surrogatepass").encode("utf-8", "replace")


def _utf16_units(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _content(ext_fields: Mapping[str, str], skip_unique_key_query: bool = False) -> bytes:
    """The signed text (before the body): values in Java ``TreeMap`` key order, ``Signature`` left out."""
    keys = sorted(ext_fields)
    if not "".join(keys).isascii():
        keys.sort(key=_utf16_units)  # String.compareTo: UTF-16 code units, not code points
    text = "".join(
        [
            ext_fields[k]
            for k in keys
            if k != SIGNATURE and not (skip_unique_key_query and k == UNIQUE_KEY_QUERY)
        ]
    )
    return _java_utf8(text)


def _secret_bytes(secret_key: bytes | str) -> bytes:
    return secret_key if isinstance(secret_key, bytes) else _java_utf8(secret_key)


def _sign(head: bytes, body: _Body, key: bytes) -> str:
    if body:
        mac = hmac.new(key, head, "sha1")
        mac.update(body)  # no copy of a large body into the content
        digest = mac.digest()
    else:
        digest = hmac.digest(key, head, "sha1")
    return base64.b64encode(digest).decode("ascii")


def signature(ext_fields: Mapping[str, str], body: _Body, secret_key: bytes | str) -> str:
    """``Signature`` of a request whose ext fields (already holding ``AccessKey``) and body are given.

    A ``Signature`` key in ``ext_fields`` is ignored, so re-signing a signed request gives the same
    value. ``secret_key`` as ``str`` is UTF-8 encoded as Java does; pass ``bytes`` to encode it once.
    """
    return _sign(_content(ext_fields), body, _secret_bytes(secret_key))


def sign_fields(
    ext_fields: MutableMapping[str, str],
    body: _Body,
    access_key: str,
    secret_key: bytes | str,
    security_token: str | None = None,
) -> None:
    """Sign a request in place as ``AclClientRPCHook.doBeforeRequest`` does.

    ``ext_fields`` must already hold every header field as it will go on the wire (our typed headers'
    ``to_ext_fields()`` plus fields such as ``ReqT`` or ``_UNIQUE_KEY_QUERY``). Adds ``AccessKey``,
    ``SecurityToken`` (only when given) and ``Signature``. A ``dict`` is then re-ordered into the
    iteration order of the Java client's ``HashMap`` (which took ``AccessKey`` and ``SecurityToken``
    before the header fields and ``Signature`` last), so our JSON header stays byte-identical to the
    Java client's.
    """
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields.pop(SIGNATURE, None)
    sig = signature(ext_fields, body, secret_key)
    if isinstance(ext_fields, dict):
        inserted: dict[str, str] = {ACCESS_KEY: access_key}
        if security_token is not None:
            inserted[SECURITY_TOKEN] = security_token
        for k, v in ext_fields.items():
            inserted.setdefault(k, v)
        inserted[SIGNATURE] = sig
        ordered = java_map_order(inserted)
        ext_fields.clear()
        ext_fields.update(ordered)
    else:
        ext_fields[SIGNATURE] = sig


def verify(
    ext_fields: Mapping[str, str],
    body: _Body,
    secret_key: bytes | str,
    *,
    request_version: int | None = None,
) -> bool:
    """Whether the request's ``Signature`` is what the broker recomputes with ``secret_key``.

    The broker side: the content is made from the received ext fields without ``Signature`` and
    ``_UNIQUE_KEY_QUERY`` -- always, as a 4.9.8 broker (``request_version=None``), or only when
    ``request_version`` <= :data:`V4_9_3`, as a 5.x broker given the request header's ``version``.
    A missing ``Signature`` fails. Only the signature is checked: the caller looks the secret up by
    ``AccessKey`` first (the broker refuses a missing or unknown key before getting here).
    """
    received = ext_fields.get(SIGNATURE)
    if received is None:
        return False
    skip = request_version is None or request_version <= V4_9_3
    expected = _sign(_content(ext_fields, skip), body, _secret_bytes(secret_key))
    # 5.x compares with MessageDigest.isEqual (4.9.8 with String.equals): constant time here
    return hmac.compare_digest(expected.encode("ascii"), received.encode("utf-8", "surrogatepass"))


class RequestSigner:
    """Signs outgoing requests in place with one set of credentials (``AclClientRPCHook``).

    Called by the transport on every request and oneway right before it is encoded, after every other
    field (``ReqT``, ``_UNIQUE_KEY_QUERY``) was set; responses are never signed. The secret is held as
    bytes, encoded once; the repr shows only the access key.
    """

    __slots__ = ("_access_key", "_secret", "_token")

    def __init__(self, access_key: str, secret_key: bytes | str, security_token: str | None = None) -> None:
        self._access_key = access_key
        self._secret = _secret_bytes(secret_key)
        self._token = security_token

    @property
    def access_key(self) -> str:
        return self._access_key

    def __repr__(self) -> str:
        return f"<RequestSigner access_key={self._access_key!r}>"

    def __call__(self, cmd: RemotingCommand) -> None:
        # sign_fields without its re-ordering into the Java client's HashMap order (which only makes
        # our JSON header byte-identical to Java's; brokers do not care): half the cost per request
        ext = cmd.ext_fields
        ext[ACCESS_KEY] = self._access_key
        if self._token is not None:
            ext[SECURITY_TOKEN] = self._token
        ext[SIGNATURE] = _sign(_content(ext), cmd.body, self._secret)
