"""Kafka's murmur2 key hash (32-bit), bit-exact with Kafka's Utils.murmur2.

A keyed record goes to partition `to_positive(murmur2(key)) % num_partitions`,
so a key lands in the same partition here as on a Kafka cluster with the same
partition count. murmur2_py is the pure-Python reference; `murmur2`,
`partition_for_key` and `partitions_for_keys` use the native code
(native/sl_murmur2.c) when loaded.
"""
import numpy as np

from .. import native
_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2_py(data):
    """The signed 32-bit murmur2 hash of a bytes-like key, as Kafka computes it."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(h):
    """Kafka's Utils.toPositive: clear the sign bit (not abs)."""
    return h & 0x7FFFFFFF


murmur2 = native.murmur2 if native.AVAILABLE else murmur2_py


def _partition_for_key_py(key, num_partitions):
    return to_positive(murmur2_py(key)) % num_partitions


# (key, num_partitions) -> partition, Kafka's placement of a keyed record: the C function
# itself when loaded (one call, no wrapper layer: it runs once per send()).
partition_for_key = native.key_partition if native.AVAILABLE else _partition_for_key_py


def partitions_for_keys(keys_blob, lens, num_partitions):
    """Partitions of keys laid back to back (lens: int32, -1 = null key -> -1), as numpy."""
    if native.AVAILABLE:
        return native.murmur2_partitions(keys_blob, lens, num_partitions)
    out = np.full(len(lens), -1, dtype=np.int32)
    view = memoryview(keys_blob)
    pos = 0
    for i, length in enumerate(np.asarray(lens).tolist()):
        if length >= 0:
            out[i] = to_positive(murmur2_py(view[pos:pos + length])) % num_partitions
            pos += length
    return out
