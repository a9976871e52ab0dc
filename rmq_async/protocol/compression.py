"""Compressed message bodies, both ways, as the Java client and broker write and read them.

Compressing (the producer): what the 5.x Java producer's ``compressType`` says: zlib at its level (5
gives its Deflater's bytes), LZ4 in the frame format as lz4-java's ``LZ4FrameOutputStream`` writes it
(4 MiB independent blocks, no checksums, no content size; the level is not used, as in Java), or ZSTD
standard frames at the level, as zstd-jni's ``ZstdOutputStream`` writes them (no content size). Both
give the Java bytes exactly (tests/fixtures/compression). :func:`compression_flag` gives the sys-flag
bits the Java producer sets for each.

Decompressing (the consumer, :func:`decompress_body`): by the type in the sys flag's bits 8-10
(``MessageSysFlag.getCompressionType``): zlib, LZ4 frames or ZSTD frames, one or more back to back;
anything else, or bytes that do not decompress, is a :class:`~rmq_async.errors.ProtocolError` naming
why (the decoder isolates that one message).

Sans-IO: no asyncio, sockets or clocks here.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Literal

import lz4.frame  # type: ignore[import-untyped]
import zstandard

from ..errors import ProtocolError
from .codes import MessageSysFlag

__all__ = [
    "COMPRESSION_TYPES",
    "CompressionType",
    "compress_body",
    "compression_flag",
    "decompress_body",
]

#: ``CompressionType`` names (``DefaultMQProducer.compressType``, 5.x; zlib is the default)
CompressionType = Literal["ZLIB", "LZ4", "ZSTD"]
COMPRESSION_TYPES: tuple[CompressionType, ...] = ("ZLIB", "LZ4", "ZSTD")
# CompressionType.getCompressionFlag: the type in sys-flag bits 8-10
_TYPE_FLAGS: dict[str, int] = {
    "LZ4": MessageSysFlag.COMPRESSION_LZ4_TYPE,
    "ZSTD": MessageSysFlag.COMPRESSION_ZSTD_TYPE,
    "ZLIB": MessageSysFlag.COMPRESSION_ZLIB_TYPE,
}


def compress_body(body: bytes, level: int = 5, compress_type: CompressionType = "ZLIB") -> bytes:
    """``body`` compressed as the Java producer's compressor of ``compress_type`` writes it: a zlib
    stream (``ZlibCompressor``, level 5 by default), an LZ4 frame (``Lz4Compressor``) or a ZSTD
    frame (``ZstdCompressor``). The producer compresses bodies of at least
    :data:`COMPRESS_THRESHOLD` bytes and sets :func:`compression_flag` (COMPRESSED|ZLIB: 769)."""
    if compress_type == "ZLIB":
        return zlib.compress(body, level)
    if compress_type == "LZ4":
        # a frame compressor, not lz4.frame.compress: that one shrinks the block size to the input's
        c = lz4.frame.LZ4FrameCompressor(
            block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False, content_checksum=False
        )
        return bytes(c.begin() + c.compress(body) + c.flush())
    if compress_type == "ZSTD":
        # ZstdOutputStream's write, flush (ends a block), close (an empty last block ends the frame)
        cobj = zstandard.ZstdCompressor(level=level, write_content_size=False).compressobj()
        return cobj.compress(body) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK) + cobj.flush()
    raise ValueError(f"unsupported compression type {compress_type!r} (ZLIB, LZ4 or ZSTD)")


def compression_flag(compress_type: CompressionType) -> int:
    """The sys-flag bits of a body compressed with ``compress_type``: COMPRESSED plus the type in
    bits 8-10, as ``DefaultMQProducerImpl.sendKernelImpl`` sets them."""
    try:
        return MessageSysFlag.COMPRESSED_FLAG | _TYPE_FLAGS[compress_type]
    except KeyError:
        raise ValueError(f"unsupported compression type {compress_type!r} (ZLIB, LZ4 or ZSTD)") from None


_ZSTD = threading.local()  # one ZstdDecompressor per thread (its context is not thread-safe; a new
# one costs ~8 us, more than decompressing a 4 KiB body)


def _unlz4(body: bytes) -> bytes:
    """LZ4 frame format (lz4-java ``LZ4FrameInputStream``, which ``Lz4Compressor`` reads): one frame or
    more back to back; anything after the last frame that is not a frame is an error."""
    data: bytes
    used: int
    data, used = lz4.frame.decompress(body, return_bytes_read=True)
    if used == len(body):
        return data  # one frame: the producer's case
    out = [data]
    view = memoryview(body)[used:]
    while view:
        data, used = lz4.frame.decompress(view, return_bytes_read=True)
        out.append(data)
        view = view[used:]
    return b"".join(out)


def _unzstd(body: bytes) -> bytes:
    """ZSTD standard frames (zstd-jni ``ZstdInputStream``, which ``ZstdCompressor`` reads), with or
    without the content size (a streaming compressor leaves it out), one or more back to back."""
    dctx = getattr(_ZSTD, "dctx", None)
    if dctx is None:
        dctx = _ZSTD.dctx = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    data = body
    while True:
        obj = dctx.decompressobj()
        out.append(obj.decompress(data))
        if not obj.eof:
            raise ValueError("the frame is truncated")
        data = obj.unused_data
        if not data:
            break
    return out[0] if len(out) == 1 else b"".join(out)


# CompressionType.findByValue: 0 (older clients, before the type bits) and 3 are zlib, 1 LZ4, 2 ZSTD
_DECOMPRESSORS: dict[int, tuple[str, Callable[[bytes], bytes]]] = {
    0: ("zlib", zlib.decompress),
    1: ("LZ4", _unlz4),
    2: ("ZSTD", _unzstd),
    3: ("zlib", zlib.decompress),
}


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body of a stored message whose sys flag has COMPRESSED set, decompressed by the type in
    its bits 8-10 (``MessageSysFlag.getCompressionType``). Raises :class:`ProtocolError` saying why
    for an unknown type or bytes that do not decompress."""
    kind = (sys_flag & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR) >> 8
    entry = _DECOMPRESSORS.get(kind)
    if entry is None:
        raise ProtocolError(f"unknown compression type {kind} (sys flag {sys_flag:#x})")
    name, fn = entry
    try:
        return fn(body)
    except (zlib.error, RuntimeError, ValueError, zstandard.ZstdError, MemoryError) as exc:
        # lz4 raises RuntimeError, zstandard ZstdError (or our ValueError for a cut frame)
        raise ProtocolError(f"{name} body does not decompress: {exc}") from None
