"""Zig-zag varints as Kafka writes them in records (protobuf encoding).

A varint (int32) takes at most 5 bytes, a varlong (int64) at most 10; the
low 7-bit group comes first and the high bit of each byte says "more".
"""

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


class MalformedRecord(ValueError):
    """Bytes that do not decode; callers add the file and position and raise CorruptRecordError."""


def _zigzag(v, bits):
    return ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)


def encode_varint(v):
    return _encode_unsigned(_zigzag(v, 32))


def encode_varlong(v):
    return _encode_unsigned(_zigzag(v, 64))


def _encode_unsigned(u):
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def varint_size(v):
    return len(encode_varint(v))


def decode_varint(buf, pos, end, max_bytes=MAX_VARINT_BYTES):
    """(value, new_pos) of the zig-zag varint at buf[pos]; MalformedRecord when malformed.

    `end` bounds the read; a value of more than max_bytes groups is an error,
    as in Kafka ("varint is too long").
    """
    u = 0
    shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise MalformedRecord("record runs past the end of the batch")
        b = buf[pos + i]
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            # Bits beyond the type's width are dropped, as Kafka's readVarint does when it
            # shifts the fifth group into a 32-bit int.
            u &= (1 << (32 if max_bytes == MAX_VARINT_BYTES else 64)) - 1
            return (u >> 1) ^ -(u & 1), pos + i + 1
        shift += 7
    raise MalformedRecord("varint longer than its maximum size")


def decode_varlong(buf, pos, end):
    return decode_varint(buf, pos, end, MAX_VARLONG_BYTES)
