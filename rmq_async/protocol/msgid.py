"""Message ids: offset message ids (store host + commit-log offset, ``MessageDecoder.createMessageId``)
and the client's unique ids (``MessageClientIDSetter``), kept apart from the codec in message.py.

Sans-IO apart from the wall clock and pid that unique ids embed.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import struct
import threading
import time

from ..errors import ProtocolError

__all__ = ["UniqIdGenerator", "create_offset_msg_id", "new_uniq_id", "new_uniq_ids", "parse_offset_msg_id"]

_V4_MAPPED = b"\0" * 10 + b"\xff\xff"


def _ip_text(ip: int | bytes) -> str:
    if isinstance(ip, int):
        return f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}"
    if ip[:12] == _V4_MAPPED:  # InetAddress.getByAddress turns these into an Inet4Address
        return ".".join(str(b) for b in ip[12:])
    # Inet6Address.getHostAddress: eight groups in lower-case hex, no "::" compression
    return ":".join(f"{g:x}" for g in struct.unpack(">8H", ip))


def _ip_hex(ip: int | bytes) -> str:
    if isinstance(ip, int):
        return f"{ip:08X}"
    return (ip[12:] if ip[:12] == _V4_MAPPED else ip).hex().upper()


def _parse_host(hostport: str) -> tuple[int | bytes, int]:
    host, sep, port_s = hostport.rpartition(":")
    try:
        if not sep:
            raise ValueError("no port")
        addr = ipaddress.ip_address(host.strip("[]"))
        port = int(port_s)
    except ValueError as exc:
        raise ValueError(f"not an 'ip:port' address: {hostport!r} ({exc})") from None
    return (int(addr) if addr.version == 4 else addr.packed), port


def create_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """The offset message id (``MessageDecoder.createMessageId``): store host IP, port and commit-log
    offset as upper-case hex; 32 characters for IPv4, 56 for IPv6."""
    addr = ipaddress.ip_address(host.strip("[]"))
    if addr.version == 6 and addr.ipv4_mapped is not None:  # Java sees an Inet4Address
        addr = addr.ipv4_mapped
    return f"{addr.packed.hex().upper()}{port & 0xFFFFFFFF:08X}{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``("ip:port", commit_log_offset)`` from an offset message id (``MessageDecoder.decodeMessageId``)."""
    n = len(msg_id)
    if n not in (32, 56) or not all(c in "0123456789abcdefABCDEF" for c in msg_id):
        raise ProtocolError(f"not an offset message id (32 or 56 hex digits): {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if n == 32 else 16
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    if not 0 <= port <= 0xFFFF:
        raise ProtocolError(f"offset message id {msg_id!r} has port {port}")
    ip: int | bytes = int.from_bytes(raw[:4], "big") if ip_len == 4 else raw[:16]
    return f"{_ip_text(ip)}:{port}", offset


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """Start of the local calendar month of ``now_ms`` and of the next one, in ms, as
    ``MessageClientIDSetter.setStartTime`` computes them with a default-zone Calendar."""
    t = time.localtime(now_ms // 1000)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    end = time.mktime((t.tm_year, t.tm_mon + 1, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(end * 1000)


class UniqIdGenerator:
    """Client-side unique message ids in the ``MessageClientIDSetter`` format (upper-case hex).

    Layout: IP (4 bytes, or 16 for an IPv6 ``ip``), pid (short), a random int chosen per generator
    (where Java puts its class loader's hash), then per id the milliseconds since the start of the
    current local month (int) and a counter (short). Thread-safe.

    Uniqueness bound: the pair (time, counter) strictly increases between two ids with the same
    counter value. The time part never goes back within a month (a clock stepping back is ignored),
    and each time the 16-bit counter wraps, the time part is moved past every time value of the
    previous 65,536 ids, even if they were all made within one millisecond. So ids of one generator
    are unique within a calendar month, at any rate; the time part runs ahead of the clock by at
    most 1 ms per 65,536 ids made faster than that. Across a month boundary the time part restarts,
    as in Java.
    """

    __slots__ = ("_counter", "_last", "_lock", "_next_month", "_prefix", "_start")

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None, salt: int | None = None) -> None:
        packed = ipaddress.ip_address(ip).packed
        pid = os.getpid() if pid is None else pid
        salt = secrets.randbits(32) if salt is None else salt
        self._prefix = f"{packed.hex().upper()}{pid & 0xFFFF:04X}{salt & 0xFFFFFFFF:08X}"
        self._counter = 0
        self._last = -1
        self._lock = threading.Lock()
        self._start, self._next_month = _month_start_ms(time.time_ns() // 1_000_000)

    def next(self) -> str:
        """A new id."""
        return self.next_many(1)[0]

    def next_many(self, n: int) -> list[str]:
        """``n`` new ids, as ``n`` calls of :meth:`next` within one millisecond make them: one clock
        read and one lock for all (a writer of many rows, the Spark sink)."""
        now = time.time_ns() // 1_000_000
        prefix = self._prefix
        out: list[str] = []
        with self._lock:
            if now >= self._next_month:
                self._start, self._next_month = _month_start_ms(now)
                self._last = -1
            counter, last, diff = self._counter, self._last, now - self._start
            for _ in range(n):
                floor = last + 1 if counter == 0 else last
                last = diff if diff >= floor else floor
                out.append(f"{prefix}{last & 0xFFFFFFFF:08X}{counter:04X}")
                counter = (counter + 1) & 0xFFFF
            self._counter, self._last = counter, last
        return out


_default_gen = UniqIdGenerator()


def _reset_default_generator() -> None:  # after fork: new pid and salt, or ids would repeat
    global _default_gen
    _default_gen = UniqIdGenerator()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_default_generator)


def new_uniq_id() -> str:
    """A new unique message id from the process-wide generator (IP 127.0.0.1)."""
    return _default_gen.next()


def new_uniq_ids(n: int) -> list[str]:
    """``n`` new unique message ids from the process-wide generator, made at once."""
    return _default_gen.next_many(n)


# -- the producer's message -------------------------------------------------------------------
