"""Compression codecs of the batch attributes (bits 0-2), by Kafka's ids.

none (0) and gzip (1) always work; zstd (4) needs the `zstandard` package,
lz4 (3) the `lz4` package and snappy (2) the `cramjam` package (all three in
the [test] extra, optional otherwise: `streamlog[zstd]`, `[lz4]`, `[snappy]`).
Every codec produces the stream format Kafka's Java producer does (gzip with
header, zstd frame, lz4 frame, snappy in snappy-java's xerial framing), so
batches interoperate with Kafka's tools. Snappy is read in the xerial framing
and, as Kafka's reader also accepts, as one raw snappy block (librdkafka's).

A payload a codec cannot decode is CodecError (a ValueError), whatever the
codec library's own exception type (zlib.error is not even an OSError): the
batch reader turns it into CorruptRecordError naming the file and position.
"""
import struct
import zlib

from ..errors import UnsupportedCompressionTypeError
from ..parsing import bad_value, parse_int

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
try:
    import cramjam as _cramjam
except ImportError:  # optional codec
    _cramjam = None

# snappy-java's stream header: magic, then version and compatible version (int32 BE, both 1);
# then blocks of [int32 BE compressed length][raw snappy block], each of <= 32 KiB of input.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024


class CodecError(ValueError):
    """A compressed payload that does not decode."""


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
    if cid == SNAPPY and _cramjam is None:
        raise UnsupportedCompressionTypeError(
            "snappy compression needs the 'cramjam' package: pip install 'streamlog[snappy]'")
    if cid not in NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {cid}")


# Kafka's CompressionType default levels: Deflater.DEFAULT_COMPRESSION (zlib's 6), lz4-java's
# 9 (its fast compressor, below), zstd's ZSTD_CLEVEL_DEFAULT.
DEFAULT_LEVELS = {GZIP: -1, LZ4: 9, ZSTD: 3}
# Kafka's CompressionType level ranges (GzipCompression: also Deflater's -1, its default).
_LEVEL_RANGES = {GZIP: (1, 9), LZ4: (1, 17), ZSTD: (-131072, 22)}


def parse_level(cid, label, value):
    """value as a level of codec cid (a topic's or a producer's compression.<codec>.level),
    checked against Kafka's range for it; ValueError naming label otherwise."""
    level = parse_int(label, value)
    low, high = _LEVEL_RANGES[cid]
    if not (low <= level <= high or (cid == GZIP and level == -1)):
        raise bad_value(label, value, f"an integer in [{low}, {high}]" +
                        (" or -1" if cid == GZIP else ""))
    return level


def compress(cid, data, level=None):
    """`data` compressed with codec `cid` at `level` (a topic's compression.<codec>.level, in
    Kafka's range for the codec; None: Kafka's default level; snappy has none)."""
    if level is None:
        level = DEFAULT_LEVELS.get(cid)
    if cid == GZIP:
        # wbits=31: gzip container with header and trailer, what Kafka's GZIPOutputStream writes
        c = zlib.compressobj(level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    check_available(cid)
    if cid == ZSTD:
        return _zstd.ZstdCompressor(level=level).compress(data)
    if cid == LZ4:
        # Kafka's Lz4BlockOutputStream: the default level is lz4's fast compressor (lz4.frame's
        # level 0), any other level the high-compression one at that level (lz4.frame caps
        # it at 16 and compresses 1 and 2 as the fast mode).
        return _lz4.compress(bytes(data),
                             compression_level=0 if level == DEFAULT_LEVELS[LZ4] else level)
    if cid == SNAPPY:
        return _snappy_xerial(data)
    raise UnsupportedCompressionTypeError(f"cannot compress with codec {cid}")


def decompress(cid, data):
    if cid != GZIP:
        check_available(cid)
    try:
        if cid == GZIP:
            return zlib.decompress(data, 47)  # 32 + 15: accept a gzip or zlib header
        if cid == ZSTD:
            # Frames written by some clients carry no content size: stream-decode them.
            return _zstd.ZstdDecompressor().decompressobj().decompress(bytes(data))
        if cid == LZ4:
            return _lz4.decompress(bytes(data))
        if cid == SNAPPY:
            return _snappy_unframe(bytes(data))
    except CodecError:
        raise
    except Exception as exc:  # each library has its own error types (zlib.error, ...)
        raise CodecError(f"{type(exc).__name__}: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"cannot decompress codec {cid}")


def _snappy_xerial(data):
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(_cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK_BYTES]))
        out += (struct.pack(">i", len(block)), block)
    return b"".join(out)


# A raw snappy block starts with its uncompressed length (a varint); no block expands more
# than about 21 times (a 3-byte copy element makes at most 64 bytes), so a length beyond 32
# times the block's own is corrupt. Checked before decoding: the decoder allocates that
# length first, and an absurd one (a flipped bit) must be a CodecError, not an abort.
_SNAPPY_MAX_EXPANSION = 32


def _snappy_block(block):
    length, shift = 0, 0
    for byte in block[:5]:
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        raise CodecError("snappy: block length preamble cut short or longer than 5 bytes")
    if length > _SNAPPY_MAX_EXPANSION * len(block) + 64:
        raise CodecError(f"snappy: a {len(block)}-byte block claims {length} bytes "
                         "uncompressed (corrupt)")
    return bytes(_cramjam.snappy.decompress_raw(block))


def _snappy_unframe(data):
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data)
    if len(data) < len(_XERIAL_HEADER):
        raise CodecError("snappy: xerial header cut short")
    parts = []
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CodecError(f"snappy: xerial block length cut short at byte {pos}")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CodecError(f"snappy: xerial block of {length} bytes at byte {pos} runs past "
                             f"the payload's {len(data)}")
        parts.append(_snappy_block(data[pos:pos + length]))
        pos += length
    return b"".join(parts)
