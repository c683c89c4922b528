"""Compression codecs of the batch attributes (bits 0-2), by Kafka's ids.

none (0) and gzip (1) always work; zstd (4) needs the `zstandard` package and
lz4 (3) the `lz4` package (both in the [test] extra, optional otherwise).
snappy (2) is recognised but not supported: Kafka frames it in the xerial
format, for which no well-kept package exists, so a snappy batch raises
UnsupportedCompressionTypeError naming the fix instead of returning garbage.
Every codec produces the stream format Kafka's clients do (gzip with header,
zstd frame, lz4 frame), so batches interoperate with Kafka's tools.
"""
import zlib

from ..errors import UnsupportedCompressionTypeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
IDS = {name: cid for cid, name in NAMES.items()}

try:
    import zstandard as _zstd
except ImportError:  # optional codec
    _zstd = None
try:
    import lz4.frame as _lz4
except ImportError:  # optional codec
    _lz4 = None


def codec_id(name):
    """Kafka's id for a compression.type name ('none', 'gzip', ...)."""
    try:
        cid = IDS[str(name).lower()]
    except KeyError:
        raise UnsupportedCompressionTypeError(
            f"unknown compression type {name!r}; use one of {', '.join(IDS)}") from None
    check_available(cid)
    return cid


def check_available(cid):
    if cid == ZSTD and _zstd is None:
        raise UnsupportedCompressionTypeError(
            "zstd compression needs the 'zstandard' package: pip install 'streamlog[zstd]'")
    if cid == LZ4 and _lz4 is None:
        raise UnsupportedCompressionTypeError(
            "lz4 compression needs the 'lz4' package: pip install 'streamlog[lz4]'")
    if cid == SNAPPY:
        raise UnsupportedCompressionTypeError(
            "snappy (xerial framing) is not supported; use gzip, lz4 or zstd")
    if cid not in NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {cid}")


def compress(cid, data):
    if cid == GZIP:
        # wbits=31: gzip container with header and trailer, what Kafka's GZIPOutputStream writes
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    check_available(cid)
    if cid == ZSTD:
        return _zstd.ZstdCompressor(level=3).compress(data)
    if cid == LZ4:
        return _lz4.compress(bytes(data))
    raise UnsupportedCompressionTypeError(f"cannot compress with codec {cid}")


def decompress(cid, data):
    if cid == GZIP:
        return zlib.decompress(data, 47)  # 32 + 15: accept a gzip or zlib header
    check_available(cid)
    if cid == ZSTD:
        # Frames written by some clients carry no content size: stream-decode them.
        return _zstd.ZstdDecompressor().decompressobj().decompress(bytes(data))
    if cid == LZ4:
        return _lz4.decompress(bytes(data))
    raise UnsupportedCompressionTypeError(f"cannot decompress codec {cid}")
