"""Test-only encoder of the stored-message format (what a pull body holds, back to back).

Follows ``MessageDecoder.encode`` (apache/rocketmq 4.9.8) and the 5.x V2 magic (2-byte topic length).
It is written independently of ``rmq_async.protocol.stored`` so round-trip tests compare two
implementations, and it can produce deliberately odd input (wrong store size, V1/V2 magic, IPv6
hosts, compressed bodies, raw property strings with a trailing separator).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Mapping

__all__ = ["MAGIC_V1", "MAGIC_V2", "encode_stored", "host_bytes"]

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
COMPRESSED = 0x1
ZLIB_TYPE = 0x3 << 8


def host_bytes(ip: str) -> bytes:
    return ipaddress.ip_address(ip).packed


def _props_string(props: Mapping[str, str] | str | None, trailing: bool) -> str:
    if props is None:
        return ""
    if isinstance(props, str):
        return props
    s = "\x02".join(f"{k}\x01{v}" for k, v in props.items())
    return s + "\x02" if trailing and s else s


def encode_stored(
    *,
    topic: str,
    body: bytes,
    properties: Mapping[str, str] | str | None = None,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 1795300158805,
    born_host: tuple[str, int] = ("127.0.0.1", 50000),
    store_timestamp: int = 1795300158810,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body_crc: int | None = None,
    v2: bool = False,
    compress: bool = False,
    trailing_separator: bool = False,
    store_size: int | None = None,
) -> bytes:
    """One stored message. ``compress`` zlib-compresses ``body`` and sets COMPRESSED|ZLIB in the sys
    flag; the host flags follow the addresses' families; ``store_size`` overrides the computed size."""
    born_ip = host_bytes(born_host[0])
    store_ip = host_bytes(store_host[0])
    if len(born_ip) == 16:
        sys_flag |= BORNHOST_V6
    if len(store_ip) == 16:
        sys_flag |= STOREHOST_V6
    stored_body = body
    if compress:
        stored_body = zlib.compress(body, 5)
        sys_flag |= COMPRESSED | ZLIB_TYPE
    if body_crc is None:
        body_crc = zlib.crc32(stored_body) & 0x7FFFFFFF
    topic_b = topic.encode("utf-8")
    props_b = _props_string(properties, trailing_separator).encode("utf-8")
    parts = [
        struct.pack(
            ">iiiqqiq",
            body_crc,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp,
        ),
        born_ip,
        struct.pack(">i", born_host[1]),
        struct.pack(">q", store_timestamp),
        store_ip,
        struct.pack(">i", store_host[1]),
        struct.pack(">iqi", reconsume_times, prepared_transaction_offset, len(stored_body)),
        stored_body,
        struct.pack(">H", len(topic_b)) if v2 else struct.pack(">B", len(topic_b)),
        topic_b,
        struct.pack(">h", len(props_b)),
        props_b,
    ]
    rest = b"".join(parts)
    size = 8 + len(rest) if store_size is None else store_size
    return struct.pack(">ii", size, MAGIC_V2 if v2 else MAGIC_V1) + rest
