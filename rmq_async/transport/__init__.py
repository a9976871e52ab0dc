"""asyncio I/O: one :class:`Connection` per TCP link, a :class:`ConnectionPool` by address."""

from __future__ import annotations

from .connection import CLOSE_TIMEOUT as CLOSE_TIMEOUT
from .connection import Connection as Connection
from .connection import PreparedRequest as PreparedRequest
from .connection import ServerRequestHandler as ServerRequestHandler
from .connection import Signer as Signer
from .connection import Spawn as Spawn
from .connection import format_addr as format_addr
from .connection import parse_addr as parse_addr
from .connection import reads_stamped as reads_stamped
from .connection import stamp_reads as stamp_reads
from .pool import ConnectionPool as ConnectionPool

__all__ = [
    "CLOSE_TIMEOUT",
    "Connection",
    "ConnectionPool",
    "PreparedRequest",
    "ServerRequestHandler",
    "Signer",
    "Spawn",
    "format_addr",
    "parse_addr",
    "reads_stamped",
    "stamp_reads",
]
